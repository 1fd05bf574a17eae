// The KV cache in its three formats (see KvCache and KvFormat in jomoim/model/model.hpp).
#include <algorithm>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "jomoim/core/half.hpp"
#include "jomoim/engine/elementwise.hpp"
#include "jomoim/engine/quant.hpp"
#include "jomoim/engine/threads.hpp"
#include "jomoim/model/model.hpp"

namespace jomoim {

const char* kv_format_name(KvFormat f) {
  switch (f) {
    case KvFormat::f32:
      return "f32";
    case KvFormat::bf16:
      return "bf16";
    case KvFormat::q8:
      return "q8";
    case KvFormat::q4:
      return "q4";
  }
  return "?";
}

std::optional<KvFormat> parse_kv_format(std::string_view s) {
  if (s == "f32" || s == "float32") return KvFormat::f32;
  if (s == "bf16" || s == "bfloat16") return KvFormat::bf16;
  if (s == "q8") return KvFormat::q8;
  if (s == "q4") return KvFormat::q4;
  return std::nullopt;
}

namespace {
// The q8 block of a head_dim: 32 (ggml's Q8_0) where it divides D, else 16; 0 when neither does.
int q8_block_for(int head_dim) { return head_dim % 32 == 0 ? 32 : head_dim % 16 == 0 ? 16 : 0; }
}  // namespace

KvCache::KvCache(const GptConfig& config, int capacity, KvFormat format)
    : format_(format), n_layer_(config.n_layer), n_embd_(config.n_embd), n_head_(config.n_head), capacity_(capacity) {
  if (capacity <= 0) throw Error("KV cache: capacity must be positive, got " + std::to_string(capacity));
  const std::size_t n = static_cast<std::size_t>(n_layer_) * 2 * capacity_ * n_embd_;
  switch (format) {
    case KvFormat::f32:
      data_.assign(n, 0.0f);
      break;
    case KvFormat::bf16:
      data16_.assign(n, 0);
      break;
    case KvFormat::q8:
      q8_block_ = q8_block_for(config.head_dim());
      if (q8_block_ == 0)
        throw Error("KV cache: q8 needs a head_dim that is a multiple of 16, the model's is " +
                    std::to_string(config.head_dim()));
      q8_values_.assign(n, 0);
      q8_scales_.assign(n / q8_block_, 0.0f);
      break;
    case KvFormat::q4:
      if (config.head_dim() % 32 != 0)
        throw Error("KV cache: q4 needs a head_dim that is a multiple of 32, the model's is " +
                    std::to_string(config.head_dim()));
      q8_block_ = 32;
      q4_values_.assign(n / 2, 0);
      q8_scales_.assign(n / q8_block_, 0.0f);
      break;
  }
}

void KvCache::truncate(int n) {
  if (n < 0 || n > size_)
    throw Error("KV cache: cannot truncate to " + std::to_string(n) + " tokens (holds " + std::to_string(size_) + ")");
  size_ = n;
}

namespace {
[[noreturn]] void not_f32(KvFormat f) {
  throw Error(std::string("KV cache: float32 rows exist only in an f32 cache, this one is ") + kv_format_name(f) +
              " (read_rows widens any format)");
}
}  // namespace

float* KvCache::keys(int layer) {
  if (format_ != KvFormat::f32) not_f32(format_);
  return data_.data() + layer_offset(layer);
}
float* KvCache::values(int layer) { return keys(layer) + plane(); }
const float* KvCache::keys(int layer) const {
  if (format_ != KvFormat::f32) not_f32(format_);
  return data_.data() + layer_offset(layer);
}
const float* KvCache::values(int layer) const { return keys(layer) + plane(); }

std::size_t KvCache::bytes() const {
  return data_.size() * sizeof(float) + data16_.size() * sizeof(std::uint16_t) + q8_values_.size() + q4_values_.size() +
         q8_scales_.size() * sizeof(float);
}

void KvCache::write_rows(int layer, int pos, int n, const float* k, const float* v, std::int64_t stride, int threads) {
  const int C = n_embd_, H = n_head_, D = C / H;
  const std::size_t base = layer_offset(layer);
  // Row (h, j) of a [H, capacity, D] plane.
  auto at = [&](int h, int j) { return static_cast<std::size_t>(h) * capacity_ * D + static_cast<std::size_t>(j) * D; };
  // One task per (K or V, head), on the threads for a prompt's rows (a decode step's row is not
  // worth a parallel region). A q8 or q4 task refuses a non-finite value before writing its rows; the
  // first refusal in task order is the one reported.
  const int tasks = 2 * H;
  auto task = [&](int i) {
    const int which = i / H, h = i % H;
    const float* src = (which ? v : k) + h * D;
    const std::size_t plane0 = base + (which ? plane() : 0);
    if (format_ == KvFormat::f32) {
      for (int t = 0; t < n; ++t)
        std::memcpy(&data_[plane0 + at(h, pos + t)], src + t * stride, sizeof(float) * static_cast<std::size_t>(D));
      return;
    }
    if (format_ == KvFormat::bf16) {
      for (int t = 0; t < n; ++t)
        elementwise::round_to_bf16(src + t * stride, &data16_[plane0 + at(h, pos + t)], static_cast<std::size_t>(D));
      return;
    }
    const int nb = D / q8_block_;
    ConstTensor4 x{src, {1, 1, n, D}, {0, 0, stride, 1}};
    const std::size_t row0 = static_cast<std::size_t>(h) * capacity_ + pos;  // in [H, capacity]
    float* scales = &q8_scales_[plane0 / q8_block_ + row0 * nb];
    if (format_ == KvFormat::q4) {
      quantize_q4(x, Q4Tensor4{{1, 1, n, D}, q8_block_, &q4_values_[(plane0 + row0 * D) / 2], scales});
      return;
    }
    Q8Tensor4 dst{{1, 1, n, D}, q8_block_, &q8_values_[plane0 + row0 * D], scales};
    quantize_q8(x, dst);  // throws (naming the value) on a non-finite one
  };
  const int nt = n >= 16 ? std::min(resolve_threads(threads), tasks) : 1;
  if (nt == 1) {
    for (int i = 0; i < tasks; ++i) task(i);
    return;
  }
  std::vector<std::exception_ptr> failed(static_cast<std::size_t>(tasks));
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int i = 0; i < tasks; ++i) {
    try {
      task(i);
    } catch (...) {
      failed[static_cast<std::size_t>(i)] = std::current_exception();
    }
  }
  for (const auto& e : failed)
    if (e) std::rethrow_exception(e);
}

void KvCache::read_rows(int layer, bool values, int first, int n, float* out) const {
  if (first < 0 || n < 0 || first + n > capacity_)
    throw Error("KV cache: rows [" + std::to_string(first) + ", " + std::to_string(first + n) +
                ") are outside the capacity of " + std::to_string(capacity_));
  const int C = n_embd_, H = n_head_, D = C / H;
  const std::size_t base = layer_offset(layer) + (values ? plane() : 0);
  switch (format_) {
    case KvFormat::f32:
      for (int t = 0; t < n; ++t)
        for (int h = 0; h < H; ++h)
          std::memcpy(out + static_cast<std::size_t>(t) * C + h * D,
                      &data_[base + (static_cast<std::size_t>(h) * capacity_ + first + t) * D], sizeof(float) * D);
      return;
    case KvFormat::bf16:
      for (int t = 0; t < n; ++t)
        for (int h = 0; h < H; ++h) {
          const std::uint16_t* src = &data16_[base + (static_cast<std::size_t>(h) * capacity_ + first + t) * D];
          float* dst = out + static_cast<std::size_t>(t) * C + h * D;
          for (int i = 0; i < D; ++i) dst[i] = bf16_to_float(src[i]);
        }
      return;
    case KvFormat::q8: {
      const int nb = D / q8_block_;
      for (int h = 0; h < H; ++h) {
        const std::size_t row0 = static_cast<std::size_t>(h) * capacity_ + first;
        ConstQ8Tensor4 src{
            {1, 1, n, D}, q8_block_, &q8_values_[base + row0 * D], &q8_scales_[base / q8_block_ + row0 * nb]};
        dequantize_q8(src, Tensor4{out + h * D, {1, 1, n, D}, {0, 0, C, 1}});
      }
      return;
    }
    case KvFormat::q4: {
      const int nb = D / q8_block_;
      for (int h = 0; h < H; ++h) {
        const std::size_t row0 = static_cast<std::size_t>(h) * capacity_ + first;
        ConstQ4Tensor4 src{
            {1, 1, n, D}, q8_block_, &q4_values_[(base + row0 * D) / 2], &q8_scales_[base / q8_block_ + row0 * nb]};
        dequantize_q4(src, Tensor4{out + h * D, {1, 1, n, D}, {0, 0, C, 1}});
      }
      return;
    }
  }
}

}  // namespace jomoim
