// test_attention_refusals.cpp — every invalid argument of jomoim::attention and
// attention_reference is refused with jomoim::Error (no other type, no crash), a one-line message
// naming the argument, and nothing written. Helpers: attention_test_util.hpp.

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <set>
#include <string>
#include <typeinfo>
#include <vector>

#include "attention_test_util.hpp"

namespace {

using namespace attn_test;
namespace L = attn_test::layouts;
using jomoim::Notation;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// =============================================================================================
// Refusals: jomoim::Error (no other type, no crash), a one-line message naming the argument, and
// nothing written: out, lse and probs keep their poison.

struct Args {
  Dims n{2, 4, 2, 5, 7, 8, 6};
  Stored<4> q, k, v, out, bias, probs;
  Stored<3> lse;
  std::vector<I64> kl{7, 3};
  std::vector<float> arena;  // for cases that place views inside one shared buffer
  jomoim::ConstTensor4 qv, kv, vv;
  jomoim::Tensor4 ov;
  jomoim::AttentionOptions o;

  Args() {
    Rng rng(seed_of("refusal"));
    q = store<4>({n.B, n.Hq, n.Nq, n.D}, L::contig());
    k = store<4>({n.B, n.Hkv, n.Nk, n.D}, L::contig());
    v = store<4>({n.B, n.Hkv, n.Nk, n.Dv}, L::contig());
    bias = store<4>({n.B, n.Hq, n.Nq, n.Nk}, L::contig());
    out = store<4>({n.B, n.Hq, n.Nq, n.Dv}, L::contig());
    lse = store<3>({n.B, n.Hq, n.Nq}, L::contig());
    probs = store<4>({n.B, n.Hq, n.Nq, n.Nk}, L::contig());
    for (Stored<4>* s : {&q, &k, &v, &bias}) fill_uniform(*s, rng, 1.f);
    arena.assign(8192, poison());
    qv = q.cview();
    kv = k.cview();
    vv = v.cview();
    ov = out.view();
    o.bias = bias.cview();
    o.key_lengths = kl;
    o.lse = lse.view();
    o.probs = probs.view();
    o.causal = true;
  }
  // Copies an input into the arena at `at` (C order) and returns a view of it there.
  jomoim::ConstTensor4 input_in_arena(const Stored<4>& s, I64 at) {
    const std::vector<float> x = logical(s);
    std::copy(x.begin(), x.end(), arena.begin() + at);
    return jomoim::ConstTensor4::contiguous(arena.data() + at, s.shape);
  }
  template <std::size_t R>
  jomoim::TensorView<float, R> output_in_arena(const std::array<I64, R>& shape, I64 at) {
    return jomoim::TensorView<float, R>::contiguous(arena.data() + at, shape);
  }
};

struct Refusal {
  std::string name;
  std::string word;  // the argument the message must name (as a whole word)
  std::function<void(Args&)> mutate;
  bool also_reference = true;  // the reference validates inputs too (it ignores out)
};
void PrintTo(const Refusal& r, std::ostream* os) { *os << r.name; }

bool contains_word(const std::string& msg, const std::string& w) {
  auto ident = [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; };
  for (std::size_t p = msg.find(w); p != std::string::npos; p = msg.find(w, p + 1)) {
    const bool left = p == 0 || !ident(msg[p - 1]);
    const bool right = p + w.size() >= msg.size() || !ident(msg[p + w.size()]);
    if (left && right) return true;
  }
  return false;
}

std::vector<Refusal> refusals() {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<Refusal> r;
  auto add = [&](std::string name, std::string word, std::function<void(Args&)> f, bool ref = true) {
    r.push_back({std::move(name), std::move(word), std::move(f), ref});
  };
  // Shapes.
  add("k_wrong_D", "k", [](Args& a) { a.kv.shape[3] = 7; });
  add("k_wrong_batch", "k", [](Args& a) { a.kv.shape[0] = 1; });
  add("k_no_heads", "k", [](Args& a) {
    a.kv.shape[1] = 0;
    a.vv.shape[1] = 0;
  });
  add("v_wrong_Nk", "v", [](Args& a) { a.vv.shape[2] = 6; });
  add("v_wrong_heads", "v", [](Args& a) { a.vv.shape[1] = 1; });
  add("q_negative_dim", "q", [](Args& a) { a.qv.shape[2] = -1; });
  add("Hq_not_multiple_of_Hkv", "Hq", [](Args& a) {
    a.qv.shape[1] = 3;
    a.ov.shape[1] = 3;
    a.o.bias->shape[1] = 3;
    a.o.lse->shape[1] = 3;
    a.o.probs->shape[1] = 3;
  });
  add("D_zero", "D", [](Args& a) {
    a.qv.shape[3] = 0;
    a.kv.shape[3] = 0;
  });
  add("notation_3b1b_shapes_disagree", "k", [](Args& a) { a.o.notation = Notation::col3b1b; });
  add(
      "out_wrong_shape", "out", [](Args& a) { a.ov.shape[3] = 5; }, false);
  add(
      "out_wrong_heads", "out", [](Args& a) { a.ov.shape[1] = 2; }, false);
  // Bias.
  add("bias_not_broadcastable_rows", "bias", [](Args& a) { a.o.bias->shape[2] = 2; });
  add("bias_not_broadcastable_keys", "bias", [](Args& a) { a.o.bias->shape[3] = 3; });
  add("bias_not_broadcastable_batch", "bias", [](Args& a) {
    a.o.bias->shape[0] = 3;
    a.o.bias->strides[0] = 0;
  });
  add("bias_null", "bias", [](Args& a) { a.o.bias->data = nullptr; });
  // Key lengths.
  add("key_lengths_too_few", "key_lengths", [](Args& a) {
    a.kl = {7};
    a.o.key_lengths = a.kl;
  });
  add("key_lengths_too_many", "key_lengths", [](Args& a) {
    a.kl = {7, 3, 1};
    a.o.key_lengths = a.kl;
  });
  add("key_lengths_negative", "key_lengths", [](Args& a) {
    a.kl = {-1, 3};
    a.o.key_lengths = a.kl;
  });
  add("key_lengths_above_Nk", "key_lengths", [](Args& a) {
    a.kl = {7, 8};
    a.o.key_lengths = a.kl;
  });
  // Scale.
  add("scale_nan", "scale", [nan](Args& a) { a.o.scale = nan; });
  add("scale_inf", "scale", [inf](Args& a) { a.o.scale = inf; });
  add("scale_minus_inf", "scale", [inf](Args& a) { a.o.scale = -inf; });
  // Null data.
  add("q_null", "q", [](Args& a) { a.qv.data = nullptr; });
  add("k_null", "k", [](Args& a) { a.kv.data = nullptr; });
  add("v_null", "v", [](Args& a) { a.vv.data = nullptr; });
  add(
      "out_null", "out", [](Args& a) { a.ov.data = nullptr; }, false);
  add("lse_null", "lse", [](Args& a) { a.o.lse->data = nullptr; });
  add("probs_null", "probs", [](Args& a) { a.o.probs->data = nullptr; });
  // Output strides.
  add(
      "out_zero_stride", "out", [](Args& a) { a.ov.strides[2] = 0; }, false);
  add(
      "out_zero_stride_heads", "out", [](Args& a) { a.ov.strides[1] = 0; }, false);
  add(
      "out_interleaved_rows", "out", [](Args& a) { a.ov.strides[2] = 2; }, false);
  add("lse_zero_stride", "lse", [](Args& a) { a.o.lse->strides[2] = 0; });
  add("probs_zero_stride", "probs", [](Args& a) { a.o.probs->strides[3] = 0; });
  add("lse_wrong_shape", "lse", [](Args& a) { a.o.lse->shape[2] = 4; });
  add("probs_wrong_shape", "probs", [](Args& a) { a.o.probs->shape[3] = 6; });
  // Overlaps (inside one arena so that no view leaves its memory).
  add(
      "out_overlaps_q", "out",
      [](Args& a) {
        a.qv = a.input_in_arena(a.q, 100);
        a.ov = a.output_in_arena<4>(a.out.shape, 300);
      },
      false);
  add(
      "out_overlaps_k", "out",
      [](Args& a) {
        a.kv = a.input_in_arena(a.k, 1000);
        a.ov = a.output_in_arena<4>(a.out.shape, 800);
      },
      false);
  add(
      "out_overlaps_v", "out",
      [](Args& a) {
        a.vv = a.input_in_arena(a.v, 100);
        a.ov = a.output_in_arena<4>(a.out.shape, 150);
      },
      false);
  add(
      "out_overlaps_bias", "out",
      [](Args& a) {
        a.o.bias = a.input_in_arena(a.bias, 2000);
        a.ov = a.output_in_arena<4>(a.out.shape, 2100);
      },
      false);
  add("lse_overlaps_q", "lse", [](Args& a) {
    a.qv = a.input_in_arena(a.q, 100);
    a.o.lse = a.output_in_arena<3>(a.lse.shape, 200);
  });
  add("probs_overlaps_k", "probs", [](Args& a) {
    a.kv = a.input_in_arena(a.k, 100);
    a.o.probs = a.output_in_arena<4>(a.probs.shape, 300);
  });
  add(
      "lse_overlaps_out", "lse",
      [](Args& a) {
        a.ov = a.output_in_arena<4>(a.out.shape, 100);
        a.o.lse = a.output_in_arena<3>(a.lse.shape, 200);
      },
      false);
  add(
      "probs_overlaps_out", "probs",
      [](Args& a) {
        a.ov = a.output_in_arena<4>(a.out.shape, 100);
        a.o.probs = a.output_in_arena<4>(a.probs.shape, 120);
      },
      false);
  add("probs_overlaps_lse", "probs", [](Args& a) {
    a.o.lse = a.output_in_arena<3>(a.lse.shape, 100);
    a.o.probs = a.output_in_arena<4>(a.probs.shape, 130);
  });
  return r;
}

class Refused : public ::testing::TestWithParam<Refusal> {};

// Calls f; passes iff it throws jomoim::Error whose one-line message names `word`.
::testing::AssertionResult throws_error_naming(const std::function<void()>& f, const std::string& word) {
  try {
    f();
  } catch (const jomoim::Error& e) {
    const std::string msg = e.what();
    if (!contains_word(msg, word))
      return ::testing::AssertionFailure() << "message does not name '" << word << "': " << msg;
    if (msg.find('\n') != std::string::npos) return ::testing::AssertionFailure() << "message is not one line: " << msg;
    return ::testing::AssertionSuccess() << msg;
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw " << typeid(e).name() << " instead of jomoim::Error: " << e.what();
  } catch (...) {
    return ::testing::AssertionFailure() << "threw a non-std exception instead of jomoim::Error";
  }
  return ::testing::AssertionFailure() << "did not throw";
}

TEST_P(Refused, ThrowsErrorNamingTheArgumentAndWritesNothing) {
  const Refusal& r = GetParam();
  Args a;
  r.mutate(a);
  const std::vector<float> arena = a.arena, q = a.q.buf, k = a.k.buf, v = a.v.buf, bias = a.bias.buf;
  a.o.threads = 2;
  EXPECT_TRUE(throws_error_naming([&] { jomoim::attention(a.qv, a.kv, a.vv, a.ov, a.o); }, r.word));
  if (r.also_reference) {
    EXPECT_TRUE(throws_error_naming([&] { (void)jomoim::attention_reference(a.qv, a.kv, a.vv, a.o); }, r.word))
        << "(attention_reference)";
  }
  for (const auto* s : {&a.out.buf, &a.probs.buf, &a.lse.buf})
    EXPECT_TRUE(std::all_of(s->begin(), s->end(), is_poison)) << "an output was written before refusing";
  const auto same = [](const std::vector<float>& x, const std::vector<float>& y) {
    return std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
  };
  EXPECT_TRUE(same(arena, a.arena) && same(q, a.q.buf) && same(k, a.k.buf) && same(v, a.v.buf) &&
              same(bias, a.bias.buf))
      << "memory was written before refusing";
}

INSTANTIATE_TEST_SUITE_P(Attention, Refused, ::testing::ValuesIn(refusals()),
                         [](const ::testing::TestParamInfo<Refusal>& info) { return info.param.name; });

TEST(Refusals, TheValidArgumentsOfTheRefusalTableAreAccepted) {
  Args a;
  EXPECT_NO_THROW(jomoim::attention(a.qv, a.kv, a.vv, a.ov, a.o));
  EXPECT_FALSE(std::all_of(a.out.buf.begin(), a.out.buf.end(), is_poison));
}

TEST(Refusals, UnknownNotationName) {
  EXPECT_TRUE(throws_error_naming([] { (void)jomoim::parse_notation("columns"); }, "notation"));
  EXPECT_EQ(jomoim::parse_notation("3b1b"), Notation::col3b1b);
  EXPECT_EQ(jomoim::parse_notation("paper"), Notation::paper);
}

}  // namespace