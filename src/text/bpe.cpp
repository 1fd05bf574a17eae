// bpe.cpp — the byte-level BPE itself: building the tables, encode, decode (see
// jomoim/text/tokenizer.hpp). Files are read and written in vocab_files.cpp.
//
// Encoding a piece: its bytes become byte tokens in a linked list; every adjacent pair that has
// a merge goes into a min-heap keyed by (rank, position). GPT-2 merges the lowest-ranked pair
// everywhere in the word in one left-to-right pass before it looks at the pairs that pass
// created, so each step takes *all* heap entries of the lowest rank (one rank is one pair),
// applies them in position order, skipping entries made stale by an earlier merge, and only
// then lets the new pairs compete. That is exactly GPT-2's result even for merge lists whose
// ranks are not in training order, in O(n log n) for a piece of n bytes instead of GPT-2's
// O(n^2) rescans, so a megabyte without spaces is as fine as a word.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "byte_alphabet.hpp"
#include "jomoim/text/tokenizer.hpp"
#include "jomoim/text/utf8.hpp"
#include "pretokenize.hpp"
#include "tokenizer_impl.hpp"

namespace jomoim {
namespace text {

std::string quote(std::string_view s) {
  constexpr std::size_t kMax = 40;
  const bool clipped = s.size() > kMax;
  std::string_view head = s.substr(0, kMax);
  // Do not cut a UTF-8 sequence in two.
  while (clipped && !head.empty() && (static_cast<unsigned char>(s[head.size()]) & 0xC0) == 0x80) head.remove_suffix(1);
  std::string q = nlohmann::json(std::string(head)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (clipped) q.insert(q.size() - 1, "...");
  return q;
}

namespace {

std::string merge_where(const Origin& origin, std::size_t i) {
  if (origin.merges_file.empty()) return "Tokenizer: merge " + std::to_string(i);
  return origin.merges_file + " line " + std::to_string(i + origin.merge_line_offset);
}

}  // namespace

std::shared_ptr<const Tokenizer::Impl> build_tokenizer(std::vector<std::string> tokens,
                                                       std::vector<std::pair<std::string, std::string>> merges,
                                                       const Origin& origin) {
  auto impl = std::make_shared<Tokenizer::Impl>();
  if (tokens.size() > std::size_t(std::numeric_limits<std::int32_t>::max()))
    throw Error(origin.vocab + ": " + std::to_string(tokens.size()) + " tokens is more than ids can number");
  if (merges.size() > std::size_t(std::numeric_limits<std::uint32_t>::max() - 1))
    throw Error(origin.vocab + ": too many merges (" + std::to_string(merges.size()) + ")");

  impl->ids.reserve(tokens.size());
  impl->bytes.resize(tokens.size());
  for (std::size_t id = 0; id < tokens.size(); ++id) {
    const std::string& t = tokens[id];
    const std::string where = origin.vocab + ": token " + std::to_string(id);
    if (t.empty()) throw Error(where + " is the empty string");
    if (!is_valid_utf8(t)) throw Error(where + " " + quote(t) + " is not valid UTF-8");
    const auto [it, fresh] = impl->ids.emplace(t, std::int32_t(id));
    if (!fresh) throw Error(where + " " + quote(t) + " repeats token " + std::to_string(it->second));
    // A token outside the byte alphabet (a special token such as "<pad> x") stands for its
    // own UTF-8 bytes, as Hugging Face's byte-level decoder treats it.
    if (!unicode_to_bytes_into(t, impl->bytes[id])) impl->bytes[id] = t;
  }
  for (unsigned b = 0; b < 256; ++b) {
    const auto it = impl->ids.find(byte_token(static_cast<unsigned char>(b)));
    if (it == impl->ids.end()) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      throw Error(origin.vocab + ": no token for byte " + hex + " (" +
                  quote(byte_token(static_cast<unsigned char>(b))) + "); a byte-level BPE needs all 256 byte tokens");
    }
    impl->byte_id[b] = it->second;
  }

  impl->merge_of.reserve(merges.size());
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& left = merges[rank].first;
    const std::string& right = merges[rank].second;
    const auto problem = [&](const std::string& what) {
      return Error(merge_where(origin, rank) + ": merge " + quote(left + " " + right) + ": " + what);
    };
    for (const std::string* part : {&left, &right}) {
      if (part->empty()) throw problem("a part is empty");
      if (part->find_first_of(" \n\r") != std::string::npos)
        throw problem("part " + quote(*part) + " contains a space or line break (merges.txt cannot hold it)");
      if (!impl->ids.contains(*part)) throw problem("token " + quote(*part) + " is not in the vocabulary");
    }
    const auto result = impl->ids.find(left + right);
    if (result == impl->ids.end()) throw problem("its result " + quote(left + right) + " is not in the vocabulary");
    const std::uint64_t key = Tokenizer::Impl::pair_key(impl->ids.find(left)->second, impl->ids.find(right)->second);
    const auto [it, fresh] = impl->merge_of.emplace(key, Tokenizer::Impl::Merge{std::uint32_t(rank), result->second});
    if (!fresh) throw problem("repeats the merge of rank " + std::to_string(it->second.rank));
  }
  impl->tokens = std::move(tokens);
  impl->merges = std::move(merges);
  if (const auto it = impl->ids.find(std::string_view("<|endoftext|>")); it != impl->ids.end()) impl->eos = it->second;
  return impl;
}

}  // namespace text

namespace {

// Scratch for encoding one piece after another, reused within one encode() call.
struct Workspace {
  struct Candidate {
    std::uint32_t rank;
    std::uint32_t pos;  // index of the left symbol
    std::int32_t left, right, result;
    // Min-heap order for std::*_heap (which keep the largest first).
    bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<std::int32_t> id;    // symbol -> token id, -1 once merged into its left neighbour
  std::vector<std::int32_t> prev;  // linked list of live symbols, -1 at the ends
  std::vector<std::int32_t> next;
  std::vector<Candidate> heap;
  std::vector<Candidate> pass;
};

void encode_piece(const Tokenizer::Impl& t, std::string_view piece, Workspace& w, std::vector<std::int32_t>& out) {
  const std::size_t n = piece.size();
  if (n == 1) {
    out.push_back(t.byte_id[static_cast<unsigned char>(piece[0])]);
    return;
  }
  w.id.resize(n);
  w.prev.resize(n);
  w.next.resize(n);
  w.heap.clear();
  for (std::size_t k = 0; k < n; ++k) {
    w.id[k] = t.byte_id[static_cast<unsigned char>(piece[k])];
    w.prev[k] = std::int32_t(k) - 1;
    w.next[k] = k + 1 < n ? std::int32_t(k + 1) : -1;
  }
  const auto consider = [&](std::int32_t pos) {  // the pair (pos, next[pos]), if it merges
    if (pos < 0) return;
    const std::int32_t nx = w.next[pos];
    if (nx < 0) return;
    const auto it = t.merge_of.find(Tokenizer::Impl::pair_key(w.id[pos], w.id[nx]));
    if (it == t.merge_of.end()) return;
    w.heap.push_back({it->second.rank, std::uint32_t(pos), w.id[pos], w.id[nx], it->second.result});
    std::push_heap(w.heap.begin(), w.heap.end());
  };
  for (std::size_t k = 0; k + 1 < n; ++k) consider(std::int32_t(k));

  while (!w.heap.empty()) {
    // All entries of the lowest rank (they all name the same pair), in position order.
    const std::uint32_t rank = w.heap.front().rank;
    w.pass.clear();
    while (!w.heap.empty() && w.heap.front().rank == rank) {
      std::pop_heap(w.heap.begin(), w.heap.end());
      w.pass.push_back(w.heap.back());
      w.heap.pop_back();
    }
    for (const auto& c : w.pass) {
      // Stale when an earlier merge consumed either symbol: token strings only grow, so a
      // position that still holds the same ids on both sides still holds the same pair.
      const auto pos = std::int32_t(c.pos);
      const std::int32_t nx = w.next[pos];
      if (w.id[pos] != c.left || nx < 0 || w.id[nx] != c.right) continue;
      w.id[pos] = c.result;
      w.id[nx] = -1;
      w.next[pos] = w.next[nx];
      if (w.next[nx] >= 0) w.prev[w.next[nx]] = pos;
      // New pairs have other ranks than this pass's (they contain the longer token), so
      // pushing them now cannot make this pass merge them.
      consider(w.prev[pos]);
      consider(pos);
    }
  }
  for (std::int32_t k = 0; k >= 0; k = w.next[k]) out.push_back(w.id[k]);
}

}  // namespace

const std::string& Tokenizer::Impl::checked_token(std::int32_t id, const char* what) const {
  if (id < 0 || std::size_t(id) >= tokens.size())
    throw Error(std::string(what) + ": token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                std::to_string(tokens.size() - 1) + ")");
  return tokens[std::size_t(id)];
}

Tokenizer::Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

Tokenizer::Tokenizer(std::vector<std::string> tokens, std::vector<std::pair<std::string, std::string>> merges)
    : impl_(text::build_tokenizer(std::move(tokens), std::move(merges), text::Origin{})) {}

std::vector<std::int32_t> Tokenizer::encode(std::string_view utf8) const {
  std::vector<std::pair<std::size_t, std::size_t>> pieces;
  text::pretokenize(utf8, pieces);
  std::vector<std::int32_t> out;
  out.reserve(utf8.size() / 3 + 1);
  Workspace w;
  for (const auto& [offset, length] : pieces) encode_piece(*impl_, utf8.substr(offset, length), w, out);
  return out;
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids) const {
  std::size_t total = 0;
  for (const std::int32_t id : ids) {
    impl_->checked_token(id, "decode");
    total += impl_->bytes[std::size_t(id)].size();
  }
  std::string out;
  out.reserve(total);
  for (const std::int32_t id : ids) out += impl_->bytes[std::size_t(id)];
  return out;
}

std::string Tokenizer::token_bytes(std::int32_t id) const {
  impl_->checked_token(id, "token_bytes");
  return impl_->bytes[std::size_t(id)];
}

const std::string& Tokenizer::token_string(std::int32_t id) const { return impl_->checked_token(id, "token_string"); }

std::optional<std::int32_t> Tokenizer::id_of(std::string_view token_string) const {
  const auto it = impl_->ids.find(token_string);
  if (it == impl_->ids.end()) return std::nullopt;
  return it->second;
}

std::size_t Tokenizer::vocab_size() const { return impl_->tokens.size(); }

std::optional<std::int32_t> Tokenizer::eos_id() const { return impl_->eos; }

std::vector<std::pair<std::size_t, std::size_t>> Tokenizer::pretokenize_spans(std::string_view utf8) const {
  std::vector<std::pair<std::size_t, std::size_t>> pieces;
  text::pretokenize(utf8, pieces);
  return pieces;
}

std::vector<std::string> Tokenizer::pretokenize(std::string_view utf8) const {
  std::vector<std::string> out;
  for (const auto& [offset, length] : pretokenize_spans(utf8)) out.emplace_back(utf8.substr(offset, length));
  return out;
}

const std::vector<std::pair<std::string, std::string>>& Tokenizer::merges() const { return impl_->merges; }

std::vector<std::int32_t> encode_prompt(const Tokenizer& tok, std::string_view text, int context, int vocab_size,
                                        std::string_view what) {
  std::vector<std::int32_t> ids = tok.encode(text);
  if (ids.empty()) {
    if (auto eos = tok.eos_id())
      ids.push_back(*eos);
    else
      throw Error(std::string(what) + " is empty and the vocabulary has no <|endoftext|> token to start from");
  }
  if (static_cast<std::int64_t>(ids.size()) > context)
    throw Error(std::string(what) + " has " + std::to_string(ids.size()) +
                " tokens, more than the model's context of " + std::to_string(context));
  for (auto id : ids)
    if (id < 0 || id >= vocab_size)
      throw Error("the tokenizer produced id " + std::to_string(id) + " but the model's vocabulary has " +
                  std::to_string(vocab_size) + " entries (vocab.json does not match config.json)");
  return ids;
}

}  // namespace jomoim
