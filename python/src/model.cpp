// model.cpp — jomoim._jomoim._Model and _Generation: the GPT-2 runtime for Python (pybind11).
//
// The compiled half of jomoim.Model (python/jomoim/model.py holds the public class, its text
// handling, defaults and docstrings). This file only translates: a model directory becomes a
// jomoim::GptModel + jomoim::Tokenizer; Python ints and bytes become token ids and back;
// logits come back as NumPy arrays that own the engine's buffer (no copy). The rules of the
// commands (apps/jomoim/cmd_model.cpp: the prompt's ids, predict's ranking) are mirrored here
// step for step, so that the same arguments give the same numbers and ids; generation is
// jomoim::Generation (include/jomoim/model/generate.hpp), the loop `jomoim generate` runs, and
// explain() is jomoim::explain_result() itself (include/jomoim/explain/explain.hpp): its typed
// result becomes Python objects directly, the matrices NumPy arrays copied from the float32
// numbers the model computed, the rest the objects of to_json() (no JSON text in between).
//
// The GIL is released during every forward pass and while a model loads. A _Model is
// immutable after loading and may be used from several Python threads at once (each call
// makes its own KV cache); a _Generation holds its own cache and refuses a second thread that
// calls it while a step runs. jomoim::Error propagates as jomoim.Error (a ValueError).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "jomoim/explain/explain.hpp"
#include "jomoim/model/generate.hpp"
#include "jomoim/model/model.hpp"
#include "jomoim/model/sampling.hpp"
#include "jomoim/text/tokenizer.hpp"

namespace py = pybind11;

namespace jomoim::python {
namespace {

// A JSON value (to_json() without its arrays) as Python objects.
py::object to_py(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return py::none();
    case nlohmann::json::value_t::boolean:
      return py::bool_(j.get<bool>());
    case nlohmann::json::value_t::number_integer:
      return py::int_(j.get<std::int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return py::int_(j.get<std::uint64_t>());
    case nlohmann::json::value_t::number_float:
      return py::float_(j.get<double>());
    case nlohmann::json::value_t::string:
      return py::str(j.get_ref<const std::string&>());
    case nlohmann::json::value_t::array: {
      py::list l;
      for (const auto& x : j) l.append(to_py(x));
      return std::move(l);
    }
    case nlohmann::json::value_t::object: {
      py::dict d;
      for (const auto& [k, v] : j.items()) d[py::str(k)] = to_py(v);
      return std::move(d);
    }
    default:
      throw Error("explain: unexpected JSON value");
  }
}

// rows x cols array of f(r, c), or its transpose (3b1b).
template <class T, class F>
py::array_t<T> array2(py::ssize_t rows, py::ssize_t cols, bool transpose, F f) {
  py::array_t<T> a(transpose ? std::vector<py::ssize_t>{cols, rows} : std::vector<py::ssize_t>{rows, cols});
  auto m = a.template mutable_unchecked<2>();
  for (py::ssize_t r = 0; r < rows; ++r)
    for (py::ssize_t c = 0; c < cols; ++c) (transpose ? m(c, r) : m(r, c)) = f(r, c);
  return a;
}

template <class T>
py::array_t<T> array1(const std::vector<T>& v) {
  py::array_t<T> a(static_cast<py::ssize_t>(v.size()));
  std::copy(v.begin(), v.end(), a.mutable_data());
  return a;
}

py::array_t<double> mean_over_heads(const ExplainLastTokenAttention& a, int n_layer) {
  return array2<double>(n_layer, a.keys, false, [&](py::ssize_t l, py::ssize_t k) {
    return a.mean_over_heads[static_cast<std::size_t>(l) * a.keys + k];
  });
}

// Adds the arrays that to_json(arrays = false) left out to one prompt's objects.
void add_arrays(py::dict d, const ExplainPrompt& e, const GptConfig& c, bool col) {
  d["last_token_attention"].cast<py::dict>()["mean_over_heads"] = mean_over_heads(e.last_token_attention, c.n_layer);
  py::list layers = d["layers"].cast<py::list>();
  std::size_t n = 0;
  for (py::handle L : layers)
    for (py::handle hh : L.cast<py::dict>()["heads"].cast<py::list>()) {
      const ExplainHeadMatrices& m = e.layers[n++];
      py::dict h = hh.cast<py::dict>();
      const py::ssize_t T = m.T, D = m.D;
      auto td = [&](const std::vector<float>& x) {
        return array2<float>(T, D, col, [&](py::ssize_t t, py::ssize_t d) { return x[t * D + d]; });
      };
      auto heard = [&](py::ssize_t i, py::ssize_t j) { return m.mask[i * T + j] != 0; };
      constexpr float ninf = -std::numeric_limits<float>::infinity();
      h["q"] = td(m.q);
      h["k"] = td(m.k);
      h["v"] = td(m.v);
      h["out"] = td(m.out);
      h["weights"] = array2<float>(T, T, col, [&](py::ssize_t i, py::ssize_t j) { return m.weights[i * T + j]; });
      h["scores"] = array2<float>(
          T, T, col, [&](py::ssize_t i, py::ssize_t j) { return heard(i, j) ? m.scores[i * T + j] : ninf; });
      h["scaled"] = array2<float>(
          T, T, col, [&](py::ssize_t i, py::ssize_t j) { return heard(i, j) ? m.scores[i * T + j] * m.scale : ninf; });
      h["mask"] = array2<bool>(T, T, col, heard);
      std::vector<float> lw(m.weights.end() - T, m.weights.end());
      std::vector<double> cn(T);
      for (py::ssize_t j = 0; j < T; ++j) cn[j] = std::abs(static_cast<double>(lw[j])) * m.value_norms[j];
      py::dict lt = h["last_token"].cast<py::dict>();
      lt["weights"] = array1(lw);
      lt["value_norms"] = array1(m.value_norms);
      lt["contribution_norms"] = array1(cn);
    }
  if (!d.contains("steps")) return;
  py::list steps = d["steps"].cast<py::list>();
  for (std::size_t k = 0; k < e.steps.size(); ++k) {
    const ExplainStep& st = e.steps[k];
    py::dict s = steps[k].cast<py::dict>();
    py::array_t<float> a(
        {static_cast<py::ssize_t>(c.n_layer), static_cast<py::ssize_t>(c.n_head), static_cast<py::ssize_t>(st.keys)});
    std::copy(st.attention.begin(), st.attention.end(), a.mutable_data());
    s["attention"] = a;
    s["last_token_attention"].cast<py::dict>()["mean_over_heads"] = mean_over_heads(st.last_token_attention, c.n_layer);
  }
}

std::string type_name(py::handle obj) {
  const py::handle t = py::type::handle_of(obj);
  const std::string module = py::str(t.attr("__module__")), name = py::str(t.attr("__qualname__"));
  return module == "builtins" ? name : module + "." + name;
}

// One token id: a Python or NumPy integer within int32 (the vocabulary is the engine's to check).
std::int32_t id_of(const std::string& name, py::handle item) {
  PyObject* i = PyNumber_Index(item.ptr());  // operator.index: ints and NumPy ints, not floats
  if (!i) {
    PyErr_Clear();
    throw py::type_error(name + ": expected an integer token id, got " + type_name(item));
  }
  int overflow = 0;
  const long long n = PyLong_AsLongLongAndOverflow(i, &overflow);
  Py_DECREF(i);
  if (overflow || n < INT32_MIN || n > INT32_MAX)
    throw Error(name + ": " + std::string(py::str(item)) + " is outside the range of token ids");
  return static_cast<std::int32_t>(n);
}

// Token ids from any iterable of integers (a list, a tuple, a 1-D integer ndarray). Values
// outside int32 are refused here; the vocabulary range is the engine's to check.
std::vector<std::int32_t> ids_of(const char* name, py::handle obj) {
  if (py::isinstance<py::array>(obj)) {
    auto a = py::reinterpret_borrow<py::array>(obj);
    const char kind = a.dtype().kind();
    if (kind != 'i' && kind != 'u')
      throw py::type_error(std::string(name) + ": expected integer token ids, got an array of dtype " +
                           std::string(py::str(a.dtype())));
    if (a.ndim() != 1)
      throw Error(std::string(name) + ": expected a 1-D array of token ids, got " + std::to_string(a.ndim()) +
                  " dimensions");
  } else if (!py::isinstance<py::iterable>(obj) || py::isinstance<py::str>(obj) || py::isinstance<py::bytes>(obj)) {
    throw py::type_error(std::string(name) + ": expected a sequence of integer token ids, got " + type_name(obj));
  }
  std::vector<std::int32_t> out;
  for (py::handle item : obj) out.push_back(id_of(std::string(name) + "[" + std::to_string(out.size()) + "]", item));
  return out;
}

// A float32 NumPy array of `shape` that owns `data` (moved onto the heap; freed with the array).
py::array_t<float> owning_array(std::vector<float>&& data, std::vector<py::ssize_t> shape) {
  auto* held = new std::vector<float>(std::move(data));
  py::capsule owner(held, [](void* p) { delete static_cast<std::vector<float>*>(p); });
  return py::array_t<float>(std::move(shape), held->data(), owner);
}

py::list id_list(const std::vector<std::int32_t>& ids) {
  py::list l(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) l[i] = py::int_(ids[i]);
  return l;
}

// The loaded model and tokenizer, shared by a _Model and the generations it started.
struct Loaded {
  GptModel model;
  Tokenizer tokenizer;
};

// The prompt as ids, as the commands make them (jomoim::encode_prompt).
std::vector<std::int32_t> prompt_ids(const Loaded& m, const std::string& text) {
  const GptConfig& c = m.model.config();
  return encode_prompt(m.tokenizer, text, c.n_positions, c.vocab_size);
}

// One generation in progress: jomoim::Generation (the loop `jomoim generate` runs), one token
// per step, with the GIL released for the step (its forward pass and sampling).
class Generation {
 public:
  Generation(std::shared_ptr<const Loaded> m, std::vector<std::int32_t> prompt, const GenerateOptions& o)
      : m_(std::move(m)), g_(m_->model, std::move(prompt), o) {}

  // The next id, or nullopt when the generation has stopped (stop() says why).
  std::optional<std::int32_t> next() {
    if (busy_) throw Error("this generation is already running in another thread");
    busy_ = true;
    try {
      std::optional<std::int32_t> id;
      {
        py::gil_scoped_release unlocked;
        id = g_.next();
      }
      busy_ = false;
      return id;
    } catch (...) {
      busy_ = false;
      throw;
    }
  }

  const std::vector<std::int32_t>& prompt() const { return g_.prompt(); }
  const std::vector<std::int32_t>& ids() const { return g_.ids(); }
  std::optional<std::string> stop() const {
    if (g_.stop() == StopReason::none) return std::nullopt;
    return std::string(stop_name(g_.stop()));
  }
  std::uint64_t seed() const { return g_.seed(); }

 private:
  std::shared_ptr<const Loaded> m_;  // keeps the model alive for g_
  jomoim::Generation g_;
  bool busy_ = false;  // read and written with the GIL held
};

class Model {
 public:
  Model(const std::string& dir, int threads, const std::string& kv_cache, const std::string& weights,
        const std::string& matmul) {
    if (threads < 0) throw Error("threads: expected a positive count or None, got " + std::to_string(threads));
    const std::optional<KvFormat> kv = parse_kv_format(kv_cache);
    if (!kv) throw Error("kv_cache: expected 'f32', 'bf16', 'q8' or 'q4', got '" + kv_cache + "'");
    const std::optional<WeightFormat> wf = parse_weight_format(weights);
    if (!wf) throw Error("weights: expected 'f32', 'bf16' or 'q8', got '" + weights + "'");
    const std::optional<MatmulPrecision> mp = parse_matmul_precision(matmul);
    if (!mp) throw Error("matmul: expected 'f32' or 'bf16', got '" + matmul + "'");
    py::gil_scoped_release unlocked;
    // The tokenizer first, as the commands do: a directory without vocab.json says so.
    Tokenizer tok = Tokenizer::load_dir(dir);
    GptModel model = GptModel::load(dir, *wf);
    model.set_threads(threads);
    model.set_kv_format(*kv);
    model.set_matmul(*mp);
    m_ = std::make_shared<const Loaded>(Loaded{std::move(model), std::move(tok)});
  }

  py::dict config() const {
    const GptConfig& c = m_->model.config();
    py::dict d;
    d["n_layer"] = c.n_layer;
    d["n_head"] = c.n_head;
    d["n_embd"] = c.n_embd;
    d["n_positions"] = c.n_positions;
    d["vocab_size"] = c.vocab_size;
    d["n_inner"] = c.n_inner > 0 ? py::object(py::int_(c.n_inner)) : py::object(py::none());
    d["layer_norm_epsilon"] = c.layer_norm_epsilon;
    d["activation_function"] = c.activation_function;
    d["head_dim"] = c.head_dim();
    return d;
  }
  std::int64_t parameter_count() const { return m_->model.config().parameter_count(); }
  int threads() const { return m_->model.threads(); }
  std::string kv_cache() const { return kv_format_name(m_->model.kv_format()); }
  std::string weights() const { return weight_format_name(m_->model.weight_format()); }
  std::string matmul() const { return matmul_precision_name(m_->model.matmul()); }
  std::size_t weight_bytes() const { return m_->model.weight_bytes(); }
  std::size_t tokenizer_size() const { return m_->tokenizer.vocab_size(); }
  std::optional<std::int32_t> eos_id() const { return m_->tokenizer.eos_id(); }

  py::list tokenize(const std::string& text) const {
    std::vector<std::int32_t> ids;
    {
      py::gil_scoped_release unlocked;
      ids = m_->tokenizer.encode(text);
    }
    return id_list(ids);
  }
  py::bytes decode(py::handle ids) const { return py::bytes(m_->tokenizer.decode(ids_of("ids", ids))); }
  py::bytes token_bytes(py::handle id) const { return py::bytes(m_->tokenizer.token_bytes(id_of("id", id))); }
  py::list prompt(const std::string& text) const { return id_list(prompt_ids(*m_, text)); }

  py::array_t<float> logits(py::handle ids_obj) const {
    const std::vector<std::int32_t> ids = ids_of("ids", ids_obj);
    std::vector<float> l;
    {
      py::gil_scoped_release unlocked;
      l = m_->model.logits(ids);
    }
    const py::ssize_t V = m_->model.config().vocab_size;
    return owning_array(std::move(l), {static_cast<py::ssize_t>(ids.size()), V});
  }

  // `jomoim predict`: (prompt ids, [(id, probability, logit)] best first).
  py::tuple predict(const std::string& text, int top) const {
    if (top < 1) throw Error("top must be at least 1, got " + std::to_string(top));
    const std::vector<std::int32_t> ids = prompt_ids(*m_, text);
    std::vector<float> logits;
    std::vector<double> p;
    std::vector<std::int32_t> best;
    {
      py::gil_scoped_release unlocked;
      KvCache cache = m_->model.make_cache(static_cast<int>(ids.size()));
      logits = m_->model.forward(ids, cache);
      p = softmax(logits);
      best = top_ids(logits, top);
    }
    py::list rows;
    for (auto id : best) rows.append(py::make_tuple(id, p[id], logits[id]));
    return py::make_tuple(id_list(ids), rows);
  }

  // jomoim::explain_result() as the objects of `jomoim explain --json`, the matrices as NumPy.
  py::dict explain(const std::string& prompt, const std::string& notation, std::optional<int> layer,
                   std::optional<int> head, const std::vector<int>& silence, bool swap_qk, int top,
                   std::optional<std::string> compare, const std::string& model_name, bool matrices,
                   std::optional<std::string> target, std::optional<std::string> contrast, int generate,
                   float temperature, int top_k, float top_p, std::optional<std::uint64_t> seed,
                   bool stop_at_eos) const {
    ExplainOptions o;
    o.generate = generate;
    o.temperature = temperature;
    o.top_k = top_k;
    o.top_p = top_p;
    o.seed = seed;
    o.stop_at_eos = stop_at_eos;
    o.notation = parse_notation(notation);
    o.layer = layer;
    o.head = head;
    o.silence = silence;
    o.swap_qk = swap_qk;
    o.top = top;
    o.compare = std::move(compare);
    o.model_name = model_name;
    o.matrices = matrices;
    o.target = std::move(target);
    o.contrast = std::move(contrast);
    Explanation e;
    nlohmann::json j;
    {
      py::gil_scoped_release unlocked;
      e = explain_result(m_->model, m_->tokenizer, prompt, o);
      ExplainJsonOptions jo;
      jo.arrays = false;
      j = to_json(e, jo);
    }
    py::dict d = to_py(j).cast<py::dict>();
    const bool col = o.notation == ExplainNotation::col3b1b;
    add_arrays(d, e.main, e.config, col);
    if (e.compare) add_arrays(d["compare"].cast<py::dict>(), *e.compare, e.config, col);
    return d;
  }

  // jomoim::head_roles() as the objects of `jomoim heads --json`.
  py::object head_roles(std::optional<std::string> prompt, bool swap_qk, const std::string& model_name) const {
    nlohmann::json j;
    {
      py::gil_scoped_release unlocked;
      j = jomoim::head_roles(m_->model, m_->tokenizer, prompt, swap_qk, model_name);
    }
    return to_py(j);
  }

  std::unique_ptr<Generation> generate(const std::string& text, int n, float temperature, int top_k, float top_p,
                                       std::optional<std::uint64_t> seed, bool stop_at_eos) const {
    if (n < 0) throw Error("n must be >= 0, got " + std::to_string(n));
    GenerateOptions o;
    o.max_tokens = n;
    o.sampling.temperature = temperature;
    o.sampling.top_k = top_k;
    o.sampling.top_p = top_p;
    o.sampling.seed = seed ? *seed : fresh_seed();
    o.validate();
    if (stop_at_eos) o.eos = m_->tokenizer.eos_id();
    return std::make_unique<Generation>(m_, prompt_ids(*m_, text), o);
  }

 private:
  std::shared_ptr<const Loaded> m_;
};

}  // namespace

void bind_model(py::module_& m) {
  // Where the repository's default model is (the source tree this module was built from).
  py::class_<Model>(m, "_Model",
                    "The compiled core of jomoim.Model (see python/jomoim/model.py); text arguments are UTF-8 bytes.")
      .def(py::init<const std::string&, int, const std::string&, const std::string&, const std::string&>(),
           py::arg("path"), py::arg("threads"), py::arg("kv_cache"), py::arg("weights"), py::arg("matmul"))
      .def_property_readonly("config", &Model::config)
      .def_property_readonly("parameter_count", &Model::parameter_count)
      .def_property_readonly("threads", &Model::threads)
      .def_property_readonly("kv_cache", &Model::kv_cache)
      .def_property_readonly("weights", &Model::weights)
      .def_property_readonly("matmul", &Model::matmul)
      .def_property_readonly("weight_bytes", &Model::weight_bytes)
      .def_property_readonly("tokenizer_size", &Model::tokenizer_size)
      .def_property_readonly("eos_id", &Model::eos_id)
      .def("tokenize", &Model::tokenize, py::arg("text"))
      .def("decode", &Model::decode, py::arg("ids"))
      .def("token_bytes", &Model::token_bytes, py::arg("id"))
      .def("prompt", &Model::prompt, py::arg("text"))
      .def("logits", &Model::logits, py::arg("ids"))
      .def("predict", &Model::predict, py::arg("text"), py::arg("top"))
      .def("explain", &Model::explain, py::arg("prompt"), py::arg("notation"), py::arg("layer"), py::arg("head"),
           py::arg("silence"), py::arg("swap_qk"), py::arg("top"), py::arg("compare"), py::arg("model_name"),
           py::arg("matrices"), py::arg("target") = py::none(), py::arg("contrast") = py::none(),
           py::arg("generate") = 0, py::arg("temperature") = 0.0f, py::arg("top_k") = 40, py::arg("top_p") = 0.95f,
           py::arg("seed") = py::none(), py::arg("stop_at_eos") = true)
      .def("head_roles", &Model::head_roles, py::arg("prompt"), py::arg("swap_qk"), py::arg("model_name"))
      .def("generate", &Model::generate, py::arg("text"), py::arg("n"), py::arg("temperature"), py::arg("top_k"),
           py::arg("top_p"), py::arg("seed"), py::arg("stop_at_eos"));

  py::class_<Generation>(m, "_Generation", "One generation in progress: iterate for the next token ids.")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__",
           [](Generation& g) -> std::int32_t {
             auto id = g.next();
             if (!id) throw py::stop_iteration();
             return *id;
           })
      .def_property_readonly("prompt_ids", [](const Generation& g) { return id_list(g.prompt()); })
      .def_property_readonly("ids", [](const Generation& g) { return id_list(g.ids()); })
      .def_property_readonly("stop", &Generation::stop)
      .def_property_readonly("seed", &Generation::seed);
}

}  // namespace jomoim::python
