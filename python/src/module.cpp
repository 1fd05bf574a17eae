// module.cpp — jomoim._jomoim, the Python binding of the attention engine (pybind11).
//
// NumPy in, NumPy out. Inputs are float32 ndarrays of any strides: each becomes a
// jomoim::ConstTensor4 view of the array's own memory (strides converted from bytes to
// elements), so transposed and sliced views cost no copy. Outputs are new C-order arrays.
// The GIL is released while the engine runs; the input arrays stay referenced by the call's
// arguments until it returns. jomoim::Error becomes jomoim.Error, a subclass of ValueError,
// with the engine's one-line message; arguments of the wrong type raise TypeError.
//
// The Python package (python/jomoim/__init__.py) re-exports these functions; its stub file
// __init__.pyi carries the typed signatures.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "jomoim/engine/attention.hpp"
#include "jomoim/engine/quant.hpp"
#include "jomoim/engine/simd.hpp"
#include "jomoim/version.hpp"

namespace py = pybind11;

namespace jomoim::python {
void bind_model(py::module_& m);  // model.cpp: _Model and _Generation, the core of jomoim.Model
}

namespace {

using jomoim::ConstTensor4;
using Index = std::int64_t;

// "list", "numpy.float32": the type of a refused argument, as messages name it.
std::string type_name(py::handle obj) {
  const py::handle t = py::type::handle_of(obj);
  const std::string module = py::str(t.attr("__module__")), name = py::str(t.attr("__qualname__"));
  return module == "builtins" ? name : module + "." + name;
}

std::string shape_text(const py::array& a) {
  std::vector<std::int64_t> shape(a.shape(), a.shape() + a.ndim());
  return jomoim::shape_tuple_string(shape);
}

// The argument as a float32 ndarray (a borrowed reference: the caller's arguments keep it
// alive), or TypeError naming the argument.
py::array float32_array(const char* name, py::handle obj) {
  if (!py::isinstance<py::array>(obj))
    throw py::type_error(std::string(name) + ": expected a numpy.ndarray of float32, got " + type_name(obj));
  auto a = py::reinterpret_borrow<py::array>(obj);
  // PyArray_EquivTypes: float32 in native byte order only ('>f4' is refused too).
  if (!py::array_t<float>::check_(a))
    throw py::type_error(std::string(name) + ": expected dtype float32 (native byte order), got " +
                         std::string(py::str(a.dtype())));
  return a;
}

// q, k, v as float32, float16, or bfloat16 (a uint16 array of bit patterns with dtype="bf16",
// or an array whose dtype is named "bfloat16", as ml_dtypes' is), or TypeError naming the
// argument. `wanted` is the dtype keyword: None (from the arrays), "f32", "f16" or "bf16".
jomoim::Dtype input_dtype(const char* name, py::handle obj, const std::optional<std::string>& wanted) {
  if (!py::isinstance<py::array>(obj))
    throw py::type_error(std::string(name) + ": expected a numpy.ndarray of float32, float16 or bfloat16, got " +
                         type_name(obj));
  auto a = py::reinterpret_borrow<py::array>(obj);
  const std::string dt = py::str(a.dtype());
  jomoim::Dtype t;
  if (py::array_t<float>::check_(a)) {
    t = jomoim::Dtype::f32;
  } else if (py::bool_(a.dtype().attr("__eq__")(py::dtype("float16")))) {  // native byte order only
    t = jomoim::Dtype::f16;
  } else if ((dt == "bfloat16" && a.itemsize() == 2) ||
             (wanted == "bf16" && py::bool_(a.dtype().attr("__eq__")(py::dtype("uint16"))))) {
    t = jomoim::Dtype::bf16;
  } else {
    throw py::type_error(std::string(name) + ": expected dtype float32 or float16 (native byte order), " +
                         "or uint16 bfloat16 bits with dtype='bf16', got " + dt);
  }
  if (wanted && *wanted != jomoim::dtype_name(t))
    throw py::type_error(std::string(name) + ": dtype='" + *wanted + "' but the array is " + dt);
  return t;
}

// A view of `a`'s memory with `shape` (a's shape, or a broadcast of it with leading 1s) and
// its strides in elements of T (float, or std::uint16_t for 16-bit inputs). A dimension of
// extent 0 or 1 gets stride 0, whatever NumPy says.
template <class T = float>
jomoim::TensorView<const T, 4> view_of(const char* name, const py::array& a, const std::array<Index, 4>& shape) {
  constexpr py::ssize_t size = sizeof(T);
  if (reinterpret_cast<std::uintptr_t>(a.data()) % alignof(T) != 0)
    throw py::value_error(std::string(name) + ": the array's data is not aligned to " + std::to_string(size) +
                          " bytes; pass a copy (numpy.ascontiguousarray)");
  jomoim::TensorView<const T, 4> v;
  v.data = static_cast<const T*>(a.data());
  v.shape = shape;
  const py::ssize_t lead = 4 - a.ndim();
  for (py::ssize_t d = 0; d < 4; ++d) {
    v.strides[d] = 0;
    if (d < lead || shape[d] <= 1) continue;
    const py::ssize_t bytes = a.strides(d - lead);
    if (bytes % size != 0)
      throw py::value_error(std::string(name) + ": stride " + std::to_string(bytes) + " bytes of dimension " +
                            std::to_string(d - lead) + " is not a multiple of " + std::to_string(size) +
                            " (the element size); pass a copy (numpy.ascontiguousarray)");
    v.strides[d] = Index(bytes / size);
  }
  return v;
}

// q, k, v: rank 4 in the layout the notation names.
template <class T = float>
jomoim::TensorView<const T, 4> input4(const char* name, const py::array& a, const char* layout) {
  if (a.ndim() != 4)
    throw py::value_error(std::string(name) + ": expected a rank-4 array " + layout + ", got shape " + shape_text(a) +
                          " (rank " + std::to_string(a.ndim()) + ")");
  return view_of<T>(name, a, {Index(a.shape(0)), Index(a.shape(1)), Index(a.shape(2)), Index(a.shape(3))});
}

// The bias under NumPy's broadcasting rules: rank 0 to 4, aligned to the right of
// [B, Hq, Nq, Nk], missing leading dimensions count as 1. The engine checks each dimension.
ConstTensor4 bias_view(const py::array& a) {
  if (a.ndim() > 4)
    throw py::value_error("bias: expected rank 0 to 4 (broadcastable to [B, Hq, Nq, Nk]), got shape " + shape_text(a) +
                          " (rank " + std::to_string(a.ndim()) + ")");
  std::array<Index, 4> shape = {1, 1, 1, 1};
  for (py::ssize_t d = 0; d < a.ndim(); ++d) shape[std::size_t(4 - a.ndim() + d)] = Index(a.shape(d));
  return view_of("bias", a, shape);
}

// The keyword options are taken as Python objects and converted here, so that a wrong type
// gives a one-line TypeError naming the option (pybind11's own message lists the signature
// and the whole arrays).
bool flag_of(const char* name, py::handle obj) {
  if (PyBool_Check(obj.ptr())) return obj.ptr() == Py_True;
  if (type_name(obj) == "numpy.bool_") return obj.cast<py::bool_>();
  throw py::type_error(std::string(name) + ": expected True or False, got " + type_name(obj));
}

std::optional<double> scale_of(py::handle obj) {
  if (obj.is_none()) return std::nullopt;
  if (!PyNumber_Check(obj.ptr()) || PyComplex_Check(obj.ptr()))
    throw py::type_error("scale: expected a real number or None, got " + type_name(obj));
  const double x = PyFloat_AsDouble(obj.ptr());
  if (x == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    throw py::type_error("scale: expected a real number or None, got " + type_name(obj));
  }
  return x;
}

// operator.index semantics (Python and NumPy integers, not floats): false when obj is not an
// integer; *overflow when it does not fit a long long.
bool index_value(py::handle obj, long long* n, bool* overflow) {
  PyObject* i = PyNumber_Index(obj.ptr());
  if (!i) {
    PyErr_Clear();
    return false;
  }
  int over = 0;
  *n = PyLong_AsLongLongAndOverflow(i, &over);
  Py_DECREF(i);
  *overflow = over != 0;
  return true;
}

int threads_of(py::handle obj) {
  if (obj.is_none()) return 0;  // OpenMP's default
  long long n = 0;
  bool overflow = false;
  if (!index_value(obj, &n, &overflow))
    throw py::type_error("threads: expected a positive integer or None, got " + type_name(obj));
  if (overflow || n < 1 || n > 4096)
    throw py::value_error("threads: expected a positive count or None (OpenMP's default), got " +
                          std::string(py::str(obj)));
  return int(n);
}

std::string notation_of(py::handle obj) {
  if (!py::isinstance<py::str>(obj))
    throw py::type_error("notation: expected 'paper' or '3b1b', got " + type_name(obj));
  return obj.cast<std::string>();
}

// key_lengths: any iterable of integers (a list, a tuple, a 1-D integer ndarray). Values are
// checked against B and Nk by the engine.
std::vector<Index> key_lengths_of(py::handle obj) {
  if (py::isinstance<py::array>(obj)) {
    auto a = py::reinterpret_borrow<py::array>(obj);
    const char kind = a.dtype().kind();
    if (kind != 'i' && kind != 'u')
      throw py::type_error("key_lengths: expected integers, got an array of dtype " + std::string(py::str(a.dtype())));
    if (a.ndim() != 1)
      throw py::value_error("key_lengths: expected a 1-D array of B entries, got shape " + shape_text(a));
  } else if (!py::isinstance<py::iterable>(obj) || py::isinstance<py::str>(obj) || py::isinstance<py::bytes>(obj)) {
    throw py::type_error("key_lengths: expected a sequence of integers (one per batch), got " + type_name(obj));
  }
  std::vector<Index> out;
  for (py::handle item : obj) {
    long long n = 0;
    bool overflow = false;
    if (!index_value(item, &n, &overflow))
      throw py::type_error("key_lengths: entry " + std::to_string(out.size()) + " is not an integer (" +
                           type_name(item) + ")");
    if (overflow) throw py::value_error("key_lengths: entry " + std::to_string(out.size()) + " is out of range");
    out.push_back(Index(n));
  }
  return out;
}

// A scale for AttentionOptions: a double beyond float's range cannot be converted (undefined
// behaviour), so it is refused here.
float float32_scale(double scale) {
  if (!std::isfinite(scale) || std::fabs(scale) > double(std::numeric_limits<float>::max()))
    throw py::value_error("scale: expected a finite float32 number, got " + std::string(py::str(py::float_(scale))));
  return float(scale);
}

// key_lengths into `lengths` and opt.key_lengths; `batches` is q's B.
void set_key_lengths(jomoim::AttentionOptions& opt, std::vector<Index>& lengths, py::handle obj, Index batches) {
  if (obj.is_none()) return;
  lengths = key_lengths_of(obj);
  // An empty span means "no key lengths"; B = 0 with [] is the same problem, and B > 0 with []
  // must still be refused, so pass a non-null pointer to zero entries only when B == 0.
  opt.key_lengths = std::span<const Index>(lengths.data(), lengths.size());
  if (lengths.empty() && batches != 0)
    throw jomoim::Error("key_lengths: expected " + std::to_string(batches) + " entries (one per batch), got 0");
}

// The parsed arguments shared by attention() and attention_reference(). Holds the views and
// the key lengths the options point at; the arrays themselves are kept alive by the caller.
struct Call {
  ConstTensor4 q, k, v;                   // float32 inputs
  jomoim::ConstTensor4x16 q16, k16, v16;  // 16-bit inputs (half)
  bool half = false;
  jomoim::AttentionOptions opt;
  std::vector<Index> key_lengths;
  jomoim::AttentionShape shape{};
  bool col = false;
};

std::optional<std::string> dtype_of(py::handle obj) {
  if (obj.is_none()) return std::nullopt;
  if (!py::isinstance<py::str>(obj))
    throw py::type_error("dtype: expected None, 'f32', 'f16' or 'bf16', got " + type_name(obj));
  const std::string s = obj.cast<std::string>();
  const std::optional<jomoim::Dtype> t = jomoim::parse_dtype(s);
  if (!t) throw py::value_error("dtype: expected None, 'f32', 'f16' or 'bf16', got '" + s + "'");
  return std::string(jomoim::dtype_name(*t));
}

void parse(Call& c, py::handle q, py::handle k, py::handle v, py::handle causal_obj, py::handle scale_obj,
           py::handle bias, py::handle key_lengths, py::handle notation, py::handle dtype_obj) {
  c.opt.notation = jomoim::parse_notation(notation_of(notation));
  const bool causal = flag_of("causal", causal_obj);
  const std::optional<double> scale = scale_of(scale_obj);
  c.col = c.opt.notation == jomoim::Notation::col3b1b;
  const std::optional<std::string> wanted = dtype_of(dtype_obj);
  const jomoim::Dtype t = input_dtype("q", q, wanted);
  for (const auto& [name, obj] : {std::pair{"k", k}, {"v", v}})
    if (input_dtype(name, obj, wanted) != t)
      throw py::type_error(std::string(name) + ": dtype " + std::string(py::str(obj.attr("dtype"))) + ", but q's is " +
                           std::string(py::str(q.attr("dtype"))) + " (q, k and v must share one dtype)");
  const py::array qa = py::reinterpret_borrow<py::array>(q), ka = py::reinterpret_borrow<py::array>(k),
                  va = py::reinterpret_borrow<py::array>(v);
  const char* ql = c.col ? "[B, Hq, D, Nq]" : "[B, Hq, Nq, D]";
  const char* kl = c.col ? "[B, Hkv, D, Nk]" : "[B, Hkv, Nk, D]";
  const char* vl = c.col ? "[B, Hkv, Dv, Nk]" : "[B, Hkv, Nk, Dv]";
  c.half = t != jomoim::Dtype::f32;
  if (c.half) {
    c.q16 = {input4<std::uint16_t>("q", qa, ql), t};
    c.k16 = {input4<std::uint16_t>("k", ka, kl), t};
    c.v16 = {input4<std::uint16_t>("v", va, vl), t};
    c.q.shape = c.q16.bits.shape;  // the batch count for the key_lengths check below
  } else {
    c.q = input4("q", qa, ql);
    c.k = input4("k", ka, kl);
    c.v = input4("v", va, vl);
  }
  c.opt.causal = causal;
  if (scale) c.opt.scale = float32_scale(*scale);
  if (!bias.is_none()) c.opt.bias = bias_view(float32_array("bias", bias));
  set_key_lengths(c.opt, c.key_lengths, key_lengths, c.q.shape[0]);
  c.shape = c.half ? jomoim::check_attention_args(c.q16, c.k16, c.v16, nullptr, c.opt)
                   : jomoim::check_attention_args(c.q, c.k, c.v, nullptr, c.opt);
}

// out, or a tuple (out, lse, probs) of the requested ones.
py::object result(py::object out, py::object lse, py::object probs) {
  if (lse.is_none() && probs.is_none()) return out;
  py::list items;
  items.append(out);
  if (!lse.is_none()) items.append(lse);
  if (!probs.is_none()) items.append(probs);
  return py::tuple(items);
}

template <class T>
py::array_t<T> new_array(std::initializer_list<Index> shape) {
  return py::array_t<T>(std::vector<py::ssize_t>(shape.begin(), shape.end()));
}

py::object attention(py::handle q, py::handle k, py::handle v, py::handle causal, py::handle scale, py::handle bias,
                     py::handle key_lengths, py::handle notation, py::handle lse_flag, py::handle probs_flag,
                     py::handle threads, py::handle dtype) {
  Call c;
  c.opt.threads = threads_of(threads);
  const bool return_lse = flag_of("return_lse", lse_flag), return_probs = flag_of("return_probs", probs_flag);
  parse(c, q, k, v, causal, scale, bias, key_lengths, notation, dtype);
  const jomoim::AttentionShape& s = c.shape;
  // Outputs: new C-order arrays, in the caller's notation (3b1b: out is [B, Hq, Dv, Nq]).
  auto out = c.col ? new_array<float>({s.B, s.Hq, s.Dv, s.Nq}) : new_array<float>({s.B, s.Hq, s.Nq, s.Dv});
  auto out_view =
      jomoim::Tensor4::contiguous(out.mutable_data(), {out.shape(0), out.shape(1), out.shape(2), out.shape(3)});
  py::object lse = py::none(), probs = py::none();
  if (return_lse) {
    auto a = new_array<float>({s.B, s.Hq, s.Nq});
    c.opt.lse = jomoim::Tensor3::contiguous(a.mutable_data(), {s.B, s.Hq, s.Nq});
    lse = a;
  }
  if (return_probs) {
    auto a = new_array<float>({s.B, s.Hq, s.Nq, s.Nk});
    c.opt.probs = jomoim::Tensor4::contiguous(a.mutable_data(), {s.B, s.Hq, s.Nq, s.Nk});
    probs = a;
  }
  {
    py::gil_scoped_release unlocked;
    if (c.half) {
      jomoim::attention(c.q16, c.k16, c.v16, out_view, c.opt);
    } else {
      jomoim::attention(c.q, c.k, c.v, out_view, c.opt);
    }
  }
  return result(out, lse, probs);
}

// A new float64 array of `shape` filled from `src` (C order).
py::array_t<double> from_vector(const std::vector<double>& src, std::initializer_list<Index> shape) {
  auto a = new_array<double>(shape);
  if (!src.empty()) std::memcpy(a.mutable_data(), src.data(), src.size() * sizeof(double));
  return a;
}

py::object attention_reference(py::handle q, py::handle k, py::handle v, py::handle causal, py::handle scale,
                               py::handle bias, py::handle key_lengths, py::handle notation, py::handle lse_flag,
                               py::handle probs_flag, py::handle dtype) {
  Call c;
  const bool return_lse = flag_of("return_lse", lse_flag), return_probs = flag_of("return_probs", probs_flag);
  parse(c, q, k, v, causal, scale, bias, key_lengths, notation, dtype);
  const jomoim::AttentionShape& s = c.shape;
  jomoim::ReferenceResult r;
  {
    py::gil_scoped_release unlocked;
    r = c.half ? jomoim::attention_reference(c.q16, c.k16, c.v16, c.opt)
               : jomoim::attention_reference(c.q, c.k, c.v, c.opt);
  }
  py::object out = from_vector(r.out, {s.B, s.Hq, s.Nq, s.Dv});
  if (c.col) out = py::module_::import("numpy").attr("ascontiguousarray")(out.attr("swapaxes")(2, 3));
  py::object lse = return_lse ? py::object(from_vector(r.lse, {s.B, s.Hq, s.Nq})) : py::object(py::none());
  py::object probs = return_probs ? py::object(from_vector(r.probs, {s.B, s.Hq, s.Nq, s.Nk})) : py::object(py::none());
  return result(out, lse, probs);
}

// ---------------------------------------------------------------------------------------------
// The q8 format (jomoim/engine/quant.hpp): quantize_q8, dequantize_q8, attention_q8kv.

// An integer argument, or TypeError / ValueError naming it (the engine checks its value).
Index index_of(const char* name, py::handle obj) {
  long long n = 0;
  bool overflow = false;
  if (!index_value(obj, &n, &overflow))
    throw py::type_error(std::string(name) + ": expected an integer, got " + type_name(obj));
  if (overflow) throw py::value_error(std::string(name) + ": " + std::string(py::str(obj)) + " is out of range");
  return Index(n);
}

// An ndarray of exactly `dtype` (native byte order) and rank 1 to 4, or TypeError / jomoim.Error.
py::array typed_array(const char* name, py::handle obj, const char* dtype) {
  if (!py::isinstance<py::array>(obj))
    throw py::type_error(std::string(name) + ": expected a numpy.ndarray of " + dtype + ", got " + type_name(obj));
  auto a = py::reinterpret_borrow<py::array>(obj);
  if (!py::bool_(a.dtype().attr("__eq__")(py::dtype(dtype))))
    throw py::type_error(std::string(name) + ": expected dtype " + dtype + " (native byte order), got " +
                         std::string(py::str(a.dtype())));
  if (a.ndim() < 1 || a.ndim() > 4)
    throw jomoim::Error(std::string(name) + ": expected rank 1 to 4 (the last dimension holds the blocks), got shape " +
                        shape_text(a));
  return a;
}

// a's shape with leading 1s up to rank 4.
std::array<Index, 4> shape4(const py::array& a) {
  std::array<Index, 4> s = {1, 1, 1, 1};
  for (py::ssize_t d = 0; d < a.ndim(); ++d) s[std::size_t(4 - a.ndim() + d)] = Index(a.shape(d));
  return s;
}

// A C-order copy when a is not C-contiguous and aligned (q8 views carry no strides).
py::array c_order(const py::array& a) {
  if ((a.flags() & py::array::c_style) && reinterpret_cast<std::uintptr_t>(a.data()) % a.itemsize() == 0) return a;
  return py::module_::import("numpy").attr("ascontiguousarray")(a);
}

// values and scales (float32) of one quantized tensor, checked against each other: the same
// leading dimensions, scales' last = D / block, where D = per_byte * values' last (q8: int8 values,
// one a byte; q4: uint8, two a byte). The arrays are held here (C order) for views into them.
struct QuantArrays {
  py::array values, scales;
  std::array<Index, 4> shape{};  // [B, H, N, D] of the values represented
  Index block = 0;
};

QuantArrays quant_arrays(const std::string& name, py::handle values_obj, py::handle scales_obj,
                         std::optional<Index> block, int rank, const char* values_dtype, Index per_byte) {
  const std::string vn = name + " values", sn = name + " scales";
  QuantArrays r;
  r.values = c_order(typed_array(vn.c_str(), values_obj, values_dtype));
  r.scales = c_order(typed_array(sn.c_str(), scales_obj, "float32"));
  if (rank && r.values.ndim() != rank)
    throw jomoim::Error(vn + ": expected a rank-" + std::to_string(rank) + " array [B, Hkv, Nk, " +
                        (per_byte == 1 ? "D" : "D / 2") + "], got shape " + shape_text(r.values));
  if (r.scales.ndim() != r.values.ndim())
    throw jomoim::Error(sn + ": shape " + shape_text(r.scales) + " does not match the values' " + shape_text(r.values) +
                        " (expected the same leading dimensions and D / block last)");
  std::array<Index, 4> vs = shape4(r.values);
  vs[3] *= per_byte;
  const std::array<Index, 4> ss = shape4(r.scales);
  const Index D = vs[3], nb = ss[3];
  if (!block && (nb == 0 ? D != 0 : D % nb != 0))
    throw jomoim::Error(sn + ": " + std::to_string(nb) + " blocks a row do not divide D = " + std::to_string(D) +
                        " of the values' shape " + shape_text(r.values));
  const Index b = block.value_or(nb > 0 ? D / nb : 32);
  bool ok = vs[0] == ss[0] && vs[1] == ss[1] && vs[2] == ss[2];
  if (b > 0 && D % b == 0) ok = ok && nb == D / b;
  if (!ok)
    throw jomoim::Error(sn + ": shape " + shape_text(r.scales) + " does not match the values' " + shape_text(r.values) +
                        " with blocks of " + std::to_string(b) + " (expected the same leading " +
                        "dimensions and D / block last)");
  r.shape = vs;
  r.block = b;
  return r;
}

struct Q8Arg {
  QuantArrays arrays;
  jomoim::ConstQ8Tensor4 view;
};
struct Q4Arg {
  QuantArrays arrays;
  jomoim::ConstQ4Tensor4 view;
};

Q8Arg q8_arg(const std::string& name, py::handle values_obj, py::handle scales_obj, std::optional<Index> block,
             int rank) {
  Q8Arg r{quant_arrays(name, values_obj, scales_obj, block, rank, "int8", 1), {}};
  r.view = {r.arrays.shape, r.arrays.block, static_cast<const std::int8_t*>(r.arrays.values.data()),
            static_cast<const float*>(r.arrays.scales.data())};
  return r;
}

Q4Arg q4_arg(const std::string& name, py::handle values_obj, py::handle scales_obj, std::optional<Index> block,
             int rank) {
  Q4Arg r{quant_arrays(name, values_obj, scales_obj, block, rank, "uint8", 2), {}};
  r.view = {r.arrays.shape, r.arrays.block, static_cast<const std::uint8_t*>(r.arrays.values.data()),
            static_cast<const float*>(r.arrays.scales.data())};
  return r;
}

py::tuple quantize_q8(py::handle x_obj, py::handle block_obj) {
  const py::array x = typed_array("x", x_obj, "float32");
  const Index block = index_of("block", block_obj);
  const jomoim::ConstTensor4 xv = view_of("x", x, shape4(x));
  jomoim::Q8Buffer buf;
  {
    py::gil_scoped_release unlocked;
    buf = jomoim::quantize_q8(xv, block);
  }
  std::vector<py::ssize_t> shape(x.shape(), x.shape() + x.ndim());
  py::array_t<std::int8_t> values(shape);
  shape.back() = py::ssize_t(buf.shape[3] / buf.block);
  py::array_t<float> scales(shape);
  if (!buf.values.empty()) std::memcpy(values.mutable_data(), buf.values.data(), buf.values.size());
  if (!buf.scales.empty()) std::memcpy(scales.mutable_data(), buf.scales.data(), buf.scales.size() * sizeof(float));
  return py::make_tuple(values, scales);
}

py::array dequantize_q8(py::handle values, py::handle scales, py::handle block_obj) {
  const std::optional<Index> block =
      block_obj.is_none() ? std::nullopt : std::optional<Index>(index_of("block", block_obj));
  const Q8Arg a = q8_arg("q8", values, scales, block, 0);
  py::array_t<float> out(
      std::vector<py::ssize_t>(a.arrays.values.shape(), a.arrays.values.shape() + a.arrays.values.ndim()));
  const jomoim::Tensor4 ov = jomoim::Tensor4::contiguous(out.mutable_data(), a.view.shape);
  {
    py::gil_scoped_release unlocked;
    jomoim::dequantize_q8(a.view, ov);
  }
  return out;
}

// k or v: a (values, scales) pair, as quantize_q8 (quantize_q4) returns it.
template <class Arg>
Arg quant_pair(const char* name, py::handle obj) {
  constexpr bool q4 = std::is_same_v<Arg, Q4Arg>;
  const char* from = q4 ? "quantize_q4" : "quantize_q8";
  if (!py::isinstance<py::tuple>(obj) && !py::isinstance<py::list>(obj))
    throw py::type_error(std::string(name) + ": expected a (values, scales) pair from " + from + ", got " +
                         type_name(obj));
  const py::sequence s = py::reinterpret_borrow<py::sequence>(obj);
  if (s.size() != 2)
    throw py::type_error(std::string(name) + ": expected a (values, scales) pair from " + from + ", got " +
                         std::to_string(s.size()) + " items");
  if constexpr (q4)
    return q4_arg(name, s[0], s[1], std::nullopt, 4);
  else
    return q8_arg(name, s[0], s[1], std::nullopt, 4);
}

// attention_q8kv and attention_q4kv (Arg: Q8Arg or Q4Arg).
template <class Arg>
py::object attention_quantized(py::handle q, py::handle k, py::handle v, py::handle causal, py::handle scale_obj,
                               py::handle bias, py::handle key_lengths, py::handle notation, py::handle lse_flag,
                               py::handle threads) {
  jomoim::AttentionOptions opt;
  opt.threads = threads_of(threads);
  const bool return_lse = flag_of("return_lse", lse_flag);
  opt.notation = jomoim::parse_notation(notation_of(notation));
  opt.causal = flag_of("causal", causal);
  const bool col = opt.notation == jomoim::Notation::col3b1b;
  const std::optional<double> scale = scale_of(scale_obj);
  if (scale) opt.scale = float32_scale(*scale);
  const py::array qa = float32_array("q", q);
  const ConstTensor4 qv = input4("q", qa, col ? "[B, Hq, D, Nq]" : "[B, Hq, Nq, D]");
  const Arg ka = quant_pair<Arg>("k", k), va = quant_pair<Arg>("v", v);
  if (!bias.is_none()) opt.bias = bias_view(float32_array("bias", bias));
  std::vector<Index> lengths;
  set_key_lengths(opt, lengths, key_lengths, qv.shape[0]);
  const Index B = qv.shape[0], Hq = qv.shape[1], Nq = col ? qv.shape[3] : qv.shape[2], Dv = va.view.shape[3];
  auto out = col ? new_array<float>({B, Hq, Dv, Nq}) : new_array<float>({B, Hq, Nq, Dv});
  const jomoim::Tensor4 ov =
      jomoim::Tensor4::contiguous(out.mutable_data(), {out.shape(0), out.shape(1), out.shape(2), out.shape(3)});
  py::object lse = py::none();
  if (return_lse) {
    auto a = new_array<float>({B, Hq, Nq});
    opt.lse = jomoim::Tensor3::contiguous(a.mutable_data(), {B, Hq, Nq});
    lse = a;
  }
  {
    py::gil_scoped_release unlocked;
    if constexpr (std::is_same_v<Arg, Q4Arg>)
      jomoim::attention_q4kv(qv, ka.view, va.view, ov, opt);
    else
      jomoim::attention_q8kv(qv, ka.view, va.view, ov, opt);
  }
  return result(out, lse, py::none());
}

py::tuple quantize_q4(py::handle x_obj, py::handle block_obj) {
  const py::array x = typed_array("x", x_obj, "float32");
  const Index block = index_of("block", block_obj);
  const jomoim::ConstTensor4 xv = view_of("x", x, shape4(x));
  jomoim::Q4Buffer buf;
  {
    py::gil_scoped_release unlocked;
    buf = jomoim::quantize_q4(xv, block);
  }
  std::vector<py::ssize_t> shape(x.shape(), x.shape() + x.ndim());
  shape.back() /= 2;
  py::array_t<std::uint8_t> values(shape);
  shape.back() = py::ssize_t(buf.shape[3] / buf.block);
  py::array_t<float> scales(shape);
  if (!buf.values.empty()) std::memcpy(values.mutable_data(), buf.values.data(), buf.values.size());
  if (!buf.scales.empty()) std::memcpy(scales.mutable_data(), buf.scales.data(), buf.scales.size() * sizeof(float));
  return py::make_tuple(values, scales);
}

py::array dequantize_q4(py::handle values, py::handle scales, py::handle block_obj) {
  const std::optional<Index> block =
      block_obj.is_none() ? std::nullopt : std::optional<Index>(index_of("block", block_obj));
  const Q4Arg a = q4_arg("q4", values, scales, block, 0);
  std::vector<py::ssize_t> shape(a.arrays.values.shape(), a.arrays.values.shape() + a.arrays.values.ndim());
  shape.back() *= 2;
  py::array_t<float> out(shape);
  const jomoim::Tensor4 ov = jomoim::Tensor4::contiguous(out.mutable_data(), a.view.shape);
  {
    py::gil_scoped_release unlocked;
    jomoim::dequantize_q4(a.view, ov);
  }
  return out;
}

// pybind11's generated signatures would show the arguments as "handle": each docstring starts
// with the signature as Python users write it instead.
const char* kAttentionDoc =
    R"doc(attention(q, k, v, *, causal=False, scale=None, bias=None, key_lengths=None, notation='paper')doc"
    R"doc(, return_lse=False, return_probs=False, threads=None, dtype=None) -> out | (out, lse) | (out, probs) | (out, lse, probs)

Exact scaled dot-product attention on the CPU (float32).

    out = softmax(q @ k^T * scale + bias, masked) @ v       (notation="paper")

Shapes (paper notation; docs/design.md):
    q [B, Hq, Nq, D]   k [B, Hkv, Nk, D]   v [B, Hkv, Nk, Dv]   ->  out [B, Hq, Nq, Dv]
With notation="3b1b" (3Blue1Brown's column matrices) q, k, v and out are [B, H, D, N]
instead; bias, lse and probs keep the shapes below.

Arguments:
    q, k, v       numpy.ndarray, any strides (transposed or sliced views are read in place,
                  without a copy; strides must be multiples of the element size), all three of
                  one dtype: float32, float16, or bfloat16 (an array whose dtype is named
                  "bfloat16", e.g. ml_dtypes', or uint16 bit patterns with dtype="bf16").
                  16-bit inputs are widened exactly; scores, softmax and sums are float32.
    causal        mask aligned bottom-right: query i sees key j iff j <= i + (L - Nq), L = Nk
                  or key_lengths[b].
    scale         multiplies q @ k^T; default 1 / sqrt(D). Must be a finite float32.
    bias          float32 array broadcastable (NumPy rules) to [B, Hq, Nq, Nk], added to the
                  scaled scores; -inf masks a key.
    key_lengths   B integers in [0, Nk]: batch b sees only keys j < key_lengths[b].
    notation      "paper" or "3b1b".
    return_lse    also return the natural-log log-sum-exp of each row's scores, [B, Hq, Nq].
    return_probs  also return the softmax weights, [B, Hq, Nq, Nk] (the only N x N memory).
    threads       OpenMP threads for this call; None: OpenMP's default (OMP_NUM_THREADS).
    dtype         None (from the arrays), "f32", "f16" or "bf16" (the only way to pass bfloat16
                  as uint16 bits).

Returns:
    out (a new C-order float32 array, whatever the inputs' dtype) when neither return_lse nor return_probs is set;
    otherwise a tuple: (out, lse), (out, probs) or (out, lse, probs).
    Query heads h read key/value head h // (Hq // Hkv) (grouped-query; Hq % Hkv == 0). A row
    whose keys are all masked gives zeros and lse = -inf; Nk = 0 is allowed.

Raises:
    TypeError     an argument of the wrong type (not an ndarray, dtype not float32).
    jomoim.Error  (a ValueError) the engine's one-line message: wrong rank, mismatched shapes,
                  Hq not a multiple of Hkv, bad key_lengths, bad notation, non-finite scale ...
    MemoryError   the outputs do not fit in memory.

The GIL is released during the computation, so Python threads can run attention at the same
time; nothing is written to the inputs. Results are bitwise identical between calls with the
same thread count.)doc";

const char* kReferenceDoc =
    R"doc(attention_reference(q, k, v, *, causal=False, scale=None, bias=None, key_lengths=None, notation='paper')doc"
    R"doc(, return_lse=False, return_probs=False, dtype=None) -> out | (out, lse) | (out, probs) | (out, lse, probs)

The float64 oracle of attention(): plain loops, no tiling, no SIMD, one thread.

Same arguments, rules and errors as attention() (without threads); the inputs (float32, or
16-bit widened) are read exactly and every result is a new C-order float64 array: out (in the caller's notation), and
per the flags (out, lse), (out, probs) or (out, lse, probs). Meant for tests and checks: it
allocates Nk doubles plus its results, and is far slower than attention().)doc";

const char* kQuantizeDoc =
    R"doc(quantize_q8(x, *, block=32) -> (values, scales)

The q8 format of keys and values (docs/design.md; jomoim/engine/quant.hpp): the last dimension
D is cut into blocks of `block` values (a multiple of 16 that divides D; 32 is ggml's Q8_0
block, block=D one scale per row). Each block stores d = max|x| / 127 and
q = round_half_even(x / d) in [-127, 127], and represents x ~ d * q (|x - d q| <= d / 2).

Arguments:
    x       numpy.ndarray of float32, rank 1 to 4, any strides; every value finite.
    block   values per scale.

Returns (values, scales): new C-order arrays, values int8 of x's shape and scales float32 of
x's shape with D / block last: 1 + 4 / block bytes a value (1.125 at block 32).

Raises TypeError for a dtype other than float32, jomoim.Error naming the problem for a block
size that is not a multiple of 16 or does not divide D, a wrong rank, or a NaN or infinity
(with its index; nothing is returned).)doc";

const char* kDequantizeDoc =
    R"doc(dequantize_q8(values, scales, *, block=None) -> x

x = d * q, element by element: the float32 values a q8 tensor stands for (exactly what
attention_q8kv reads). values int8 and scales float32 as quantize_q8 returns them (rank 1 to 4,
the same leading dimensions, D / block scales last); block None: D / scales.shape[-1].
Returns a new C-order float32 array of values' shape. Raises TypeError for wrong dtypes,
jomoim.Error for shapes that do not match or a bad block size.)doc";

const char* kAttentionQ8Doc =
    R"doc(attention_q8kv(q, k, v, *, causal=False, scale=None, bias=None, key_lengths=None, notation='paper')doc"
    R"doc(, return_lse=False, threads=None) -> out | (out, lse)

attention() with keys and values in the q8 format: k and v are (values, scales) pairs from
quantize_q8, C order [B, Hkv, Nk, D] and [B, Hkv, Nk, Dv] (the blocks along D; notation applies
to q and out only). The result is that of the float64 formula on the dequantized k and v
(attention_reference(q, dequantize_q8(*k), dequantize_q8(*v)) is its oracle): scores, softmax and
sums in float32, each block widened in registers, never stored wider, so K and V move 1.125
bytes a value instead of 4. Made for decode (few query rows, many keys) but correct for any Nq.

Arguments as attention() for q (float32, any strides), causal, scale, bias, key_lengths,
notation, return_lse and threads (probabilities are not offered). Returns out (a new C-order
float32 array), or (out, lse) with return_lse. Raises TypeError for wrong types, jomoim.Error
(a ValueError) for invalid arguments. The GIL is released while it runs.)doc";

const char* kQuantize4Doc =
    R"doc(quantize_q4(x, *, block=32) -> (values, scales)

The q4 format of keys and values (docs/design.md; jomoim/engine/quant.hpp): blocks of `block`
values along the last dimension D (a multiple of 32 that divides D), each storing
d = max|x| / 7 and q = round_half_even(x / d) in [-7, 7], representing x ~ d * q
(|x - d q| <= d / 2). A row's D / 2 bytes hold q + 8: byte i has value i in its low nibble and
value i + D / 2 in its high nibble.

Arguments:
    x       numpy.ndarray of float32, rank 1 to 4, any strides; every value finite.
    block   values per scale.

Returns (values, scales): new C-order arrays, values uint8 of x's shape with D / 2 last, scales
float32 of x's shape with D / block last: 0.5 + 4 / block bytes a value (0.625 at block 32).

Raises TypeError for a dtype other than float32, jomoim.Error naming the problem for a block
size that is not a multiple of 32 or does not divide D, a wrong rank, or a NaN or infinity
(with its index; nothing is returned).)doc";

const char* kDequantize4Doc =
    R"doc(dequantize_q4(values, scales, *, block=None) -> x

x = d * q, element by element: the float32 values a q4 tensor stands for (exactly what
attention_q4kv reads). values uint8 and scales float32 as quantize_q4 returns them (rank 1 to 4,
the same leading dimensions; D = 2 * values.shape[-1]); block None: D / scales.shape[-1].
Returns a new C-order float32 array with D last. Raises TypeError for wrong dtypes, jomoim.Error
for shapes that do not match or a bad block size.)doc";

const char* kAttentionQ4Doc =
    R"doc(attention_q4kv(q, k, v, *, causal=False, scale=None, bias=None, key_lengths=None, notation='paper')doc"
    R"doc(, return_lse=False, threads=None) -> out | (out, lse)

attention_q8kv with keys and values in the q4 format: k and v are (values, scales) pairs from
quantize_q4 (values [B, Hkv, Nk, D / 2], scales [B, Hkv, Nk, D / block]). The result is that of
the float64 formula on the dequantized k and v (attention_reference(q, dequantize_q4(*k),
dequantize_q4(*v)) is its oracle), in float32. K and V take 0.625 bytes a value in memory
(against 1.125 in q8), widened in registers as q8's are, at about attention_q8kv's speed: a
format for memory, not for speed. Arguments, results and errors as attention_q8kv.)doc";
}  // namespace

PYBIND11_MODULE(_jomoim, m) {
  m.doc() = "jomoim's attention engine for NumPy (the compiled part of the jomoim package).";
  py::register_exception<jomoim::Error>(m, "Error", PyExc_ValueError);
  m.attr("__version__") = jomoim::version;
  py::options options;
  options.disable_function_signatures();

  m.def("attention", &attention, kAttentionDoc, py::arg("q"), py::arg("k"), py::arg("v"), py::kw_only(),
        py::arg("causal") = py::bool_(false), py::arg("scale") = py::none(), py::arg("bias") = py::none(),
        py::arg("key_lengths") = py::none(), py::arg("notation") = py::str("paper"),
        py::arg("return_lse") = py::bool_(false), py::arg("return_probs") = py::bool_(false),
        py::arg("threads") = py::none(), py::arg("dtype") = py::none());
  m.def("attention_reference", &attention_reference, kReferenceDoc, py::arg("q"), py::arg("k"), py::arg("v"),
        py::kw_only(), py::arg("causal") = py::bool_(false), py::arg("scale") = py::none(),
        py::arg("bias") = py::none(), py::arg("key_lengths") = py::none(), py::arg("notation") = py::str("paper"),
        py::arg("return_lse") = py::bool_(false), py::arg("return_probs") = py::bool_(false),
        py::arg("dtype") = py::none());
  m.def("quantize_q8", &quantize_q8, kQuantizeDoc, py::arg("x"), py::kw_only(), py::arg("block") = py::int_(32));
  m.def("dequantize_q8", &dequantize_q8, kDequantizeDoc, py::arg("values"), py::arg("scales"), py::kw_only(),
        py::arg("block") = py::none());
  m.def("quantize_q4", &quantize_q4, kQuantize4Doc, py::arg("x"), py::kw_only(), py::arg("block") = py::int_(32));
  m.def("dequantize_q4", &dequantize_q4, kDequantize4Doc, py::arg("values"), py::arg("scales"), py::kw_only(),
        py::arg("block") = py::none());
  m.def("attention_q4kv", &attention_quantized<Q4Arg>, kAttentionQ4Doc, py::arg("q"), py::arg("k"), py::arg("v"),
        py::kw_only(), py::arg("causal") = py::bool_(false), py::arg("scale") = py::none(),
        py::arg("bias") = py::none(), py::arg("key_lengths") = py::none(), py::arg("notation") = py::str("paper"),
        py::arg("return_lse") = py::bool_(false), py::arg("threads") = py::none());
  m.def("attention_q8kv", &attention_quantized<Q8Arg>, kAttentionQ8Doc, py::arg("q"), py::arg("k"), py::arg("v"),
        py::kw_only(), py::arg("causal") = py::bool_(false), py::arg("scale") = py::none(),
        py::arg("bias") = py::none(), py::arg("key_lengths") = py::none(), py::arg("notation") = py::str("paper"),
        py::arg("return_lse") = py::bool_(false), py::arg("threads") = py::none());
  m.def("simd_targets", &jomoim::simd_targets,
        "simd_targets() -> list[str]\n\nSIMD targets compiled into the engine that this CPU can run, best first (e.g. "
        "['AVX3', 'AVX2', ...]).");
  m.def("active_simd_target", &jomoim::active_simd_target,
        "active_simd_target() -> str\n\nThe SIMD target the kernels dispatch to now.");
  m.def("set_simd_target", &jomoim::set_simd_target, py::arg("name"),
        "set_simd_target(name: str) -> None\n\nRestricts dispatch to one of simd_targets(); '' restores the default. "
        "Raises jomoim.Error for an\n"
        "unknown name. Not thread-safe: call it while no attention call is running (tests use it to\n"
        "check every code path on one machine).");
  m.def(
      "_noop", [](py::handle, py::handle, py::handle) {}, py::arg("q"), py::arg("k"), py::arg("v"),
      "_noop(q, k, v) -> None\n\nDoes nothing: the floor of a pybind11 call, for bench/python_bench.py.");
  jomoim::python::bind_model(m);
}
