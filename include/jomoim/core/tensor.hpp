// jomoim/core/tensor.hpp — non-owning strided views of float32 tensors, and the one error type.
//
// A view is a pointer, a shape and strides counted in elements (not bytes). Strides may be
// anything the caller's memory allows: transposed and sliced views cost no copy, and a stride
// of 0 broadcasts a dimension (allowed for inputs, refused for outputs). Views never own or
// free memory; the caller keeps the memory alive for the duration of a call.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>

namespace jomoim {

// The single exception type of the library. Its message is one line that names the offending
// argument and what was expected, e.g. "k: expected rank-4 [B, Hkv, Nk, D], got [2, 3, 4]".
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class T, std::size_t R>
struct TensorView {
  static constexpr std::size_t rank = R;
  using Index = std::int64_t;

  T* data = nullptr;
  std::array<Index, R> shape{};
  std::array<Index, R> strides{};  // in elements

  // A C-order (row-major, densely packed) view of `data` with the given shape.
  static TensorView contiguous(T* data, const std::array<Index, R>& shape) {
    TensorView v;
    v.data = data;
    v.shape = shape;
    Index s = 1;
    for (std::size_t i = R; i-- > 0;) {
      v.strides[i] = s;
      s *= shape[i];
    }
    return v;
  }

  // The same memory with dimensions a and b exchanged (no copy).
  TensorView transposed(std::size_t a, std::size_t b) const {
    TensorView v = *this;
    std::swap(v.shape[a], v.shape[b]);
    std::swap(v.strides[a], v.strides[b]);
    return v;
  }

  Index numel() const {
    Index n = 1;
    for (Index s : shape) n *= s;
    return n;
  }

  // Element access by full index; no bounds checks (the library validates at its boundary).
  template <class... I>
  T& operator()(I... idx) const {
    static_assert(sizeof...(I) == R, "one index per dimension");
    const Index is[] = {static_cast<Index>(idx)...};
    Index off = 0;
    for (std::size_t d = 0; d < R; ++d) off += is[d] * strides[d];
    return data[off];
  }

  // A read-only view of the same memory.
  operator TensorView<const T, R>() const { return {data, shape, strides}; }
};

using Tensor3 = TensorView<float, 3>;
using Tensor4 = TensorView<float, 4>;
using ConstTensor3 = TensorView<const float, 3>;
using ConstTensor4 = TensorView<const float, 4>;

// "[2, 3, 4]": the one way shapes (and strides) are written in error messages.
std::string shape_string(std::span<const std::int64_t> shape);
// "(2, 3, 4)", "(5,)", "()": NumPy's way, for messages about arrays that came from Python.
std::string shape_tuple_string(std::span<const std::int64_t> shape);

template <class T, std::size_t R>
std::string shape_string(const TensorView<T, R>& v) {
  return shape_string(std::span<const std::int64_t>(v.shape));
}

}  // namespace jomoim
