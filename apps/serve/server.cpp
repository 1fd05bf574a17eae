// The explorer's HTTP server. See server.hpp.
#include "server.hpp"

#include <httplib.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <semaphore>
#include <system_error>

#include <sys/socket.h>

#include <nlohmann/json.hpp>

#include "static_files.hpp"

namespace jomoim::serve {
namespace {

using nlohmann::json;

constexpr const char* kJson = "application/json; charset=utf-8";

void send_json(httplib::Response& res, int status, const json& j) {
  res.status = status;
  // Token texts may be partial UTF-8 sequences: replace those bytes instead of failing.
  res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), kJson);
}

void send_error(httplib::Response& res, int status, const std::string& message) {
  send_json(res, status, {{"error", message}});
}

// A computation slot, held for the duration of one forward pass.
class Slot {
 public:
  explicit Slot(std::counting_semaphore<>& s) : s_(s) { s_.acquire(); }
  ~Slot() { s_.release(); }
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;

 private:
  std::counting_semaphore<>& s_;
};

}  // namespace

struct ExplorerServer::Impl {
  const GptModel& model;
  const Tokenizer& tokenizer;
  ServerOptions opt;
  std::filesystem::path assets;  // canonical, or empty
  httplib::Server http;
  std::counting_semaphore<> slots;
  int port = -1;

  Impl(const GptModel& m, const Tokenizer& t, ServerOptions o)
      : model(m), tokenizer(t), opt(std::move(o)), slots(std::max(1, opt.compute_slots)) {
    if (!opt.assets.empty()) {
      std::error_code ec;
      assets = std::filesystem::canonical(opt.assets, ec);
      if (ec || !std::filesystem::is_directory(assets))
        throw Error("--assets " + opt.assets.string() + ": not a directory");
    }
    if (opt.http_threads < 1) throw Error("http_threads must be at least 1");
    const int threads = opt.http_threads;
    http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<std::size_t>(threads)); };
    // httplib's default socket options add SO_REUSEPORT, which lets a second server bind the
    // same port and silently share its connections; keep only SO_REUSEADDR (quick restarts).
    http.set_socket_options([](socket_t sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    http.set_payload_max_length(opt.limits.max_body_bytes);
    http.set_keep_alive_timeout(2);
    http.set_read_timeout(10);
    http.set_write_timeout(30);
    http.set_default_headers(
        {{"X-Content-Type-Options", "nosniff"},
         {"Cache-Control", "no-store"},
         {"Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:"}});
    routes();
  }

  ModelShape shape() const {
    const GptConfig& c = model.config();
    return {c.n_layer, c.n_head, c.n_positions, c.vocab_size};
  }

  // The prompt's token count, refused (400) when it exceeds the context.
  std::size_t check_length(const std::string& field, const std::string& prompt) const {
    const std::size_t n = std::max<std::size_t>(1, tokenizer.encode(prompt).size());  // "" is <|endoftext|>
    const int ctx = model.config().n_positions;
    if (n > static_cast<std::size_t>(ctx))
      throw RequestError(400, "\"" + field + "\" has " + std::to_string(n) + " tokens; the model's context is " +
                                  std::to_string(ctx) + " tokens");
    return n;
  }

  // Refuses (400) an answer whose matrices would exceed limits.max_matrix_numbers.
  // The steps of "generate" count too: per step n_layer * (2 n_head + 1) rows of up to t1 + N numbers.
  void check_size(const ExplainRequest& r, std::size_t t1, std::size_t t2) const {
    const GptConfig& c = model.config();
    if (r.options.generate > 0) {
      const std::size_t n = static_cast<std::size_t>(r.options.generate);
      const std::size_t steps = n * static_cast<std::size_t>(c.n_layer) * (2 * c.n_head + 1) * (t1 + n);
      if (steps > opt.limits.max_matrix_numbers)
        throw RequestError(400, "the answer's steps would hold " + std::to_string(steps) + " numbers; the limit is " +
                                    std::to_string(opt.limits.max_matrix_numbers) + " (ask for fewer \"generate\")");
    }
    if (!r.options.matrices) return;
    const std::size_t heads = static_cast<std::size_t>(r.options.layer ? 1 : c.n_layer) *
                              static_cast<std::size_t>(r.options.head ? 1 : c.n_head);
    const std::size_t d = static_cast<std::size_t>(c.head_dim());
    std::size_t numbers = 0;
    for (const std::size_t t : {t1, t2}) numbers += heads * (4 * t * d + 4 * t * t);
    if (numbers > opt.limits.max_matrix_numbers)
      throw RequestError(400, "the answer would hold " + std::to_string(numbers) + " matrix numbers; the limit is " +
                                  std::to_string(opt.limits.max_matrix_numbers) +
                                  " (choose a \"layer\" and \"head\", or set \"matrices\": false)");
  }

  // Runs fn, turning its exceptions into JSON error answers.
  template <class Fn>
  void guarded(httplib::Response& res, Fn&& fn) {
    try {
      fn();
    } catch (const RequestError& e) {
      send_error(res, e.status(), e.what());
    } catch (const Error& e) {  // explain()'s refusals of the request (indices past the prompt ...)
      send_error(res, 400, e.what());
    } catch (const std::bad_alloc&) {
      send_error(res, 503, "out of memory for this request");
    } catch (const std::exception& e) {
      send_error(res, 500, std::string("internal error: ") + e.what());
    }
  }

  json model_summary() const {
    const GptConfig& c = model.config();
    return {{"name", opt.model_name},
            {"kv_cache", kv_format_name(model.kv_format())},
            {"weights", weight_format_name(model.weight_format())},
            {"matmul", matmul_precision_name(model.matmul())},
            {"n_layer", c.n_layer},
            {"n_head", c.n_head},
            {"n_embd", c.n_embd},
            {"head_dim", c.head_dim()},
            {"n_positions", c.n_positions},
            {"vocab_size", c.vocab_size},
            {"parameters", c.parameter_count()},
            {"limits",
             {{"max_body_bytes", opt.limits.max_body_bytes},
              {"max_prompt_bytes", opt.limits.max_prompt_bytes},
              {"max_tokens", c.n_positions},
              {"max_top", std::min(opt.limits.max_top, c.vocab_size)},
              {"max_matrix_numbers", opt.limits.max_matrix_numbers},
              {"max_generate", std::min(opt.limits.max_generate, kMaxExplainSteps)}}}};
  }

  void routes() {
    http.Get("/api/health", [](const httplib::Request&, httplib::Response& res) {
      send_json(res, 200, {{"status", "ok"}});
    });
    http.Get("/api/model",
             [this](const httplib::Request&, httplib::Response& res) { send_json(res, 200, model_summary()); });
    http.Post("/api/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
      guarded(res, [&] {
        const std::string prompt = parse_tokenize_request(req.body, opt.limits);
        std::vector<std::int32_t> ids;
        {
          Slot slot(slots);
          ids = tokenizer.encode(prompt);
        }
        json tokens = json::array();
        for (std::size_t i = 0; i < ids.size(); ++i)
          tokens.push_back({{"index", i},
                            {"id", ids[i]},
                            {"text", tokenizer.token_bytes(ids[i])},
                            {"token", tokenizer.token_string(ids[i])}});
        send_json(res, 200,
                  {{"prompt", prompt},
                   {"ids", ids},
                   {"tokens", tokens},
                   {"count", ids.size()},
                   {"context", model.config().n_positions}});
      });
    });
    // E_i of one token: its token and position parts (rows of wte and wpe, the numbers the
    // model's first layer adds) and their float32 sum, for the page's Q/K/V panel.
    http.Post("/api/embedding", [this](const httplib::Request& req, httplib::Response& res) {
      guarded(res, [&] {
        const EmbeddingRequest r = parse_embedding_request(req.body, shape(), opt.limits);
        check_length("prompt", r.prompt);
        send_json(res, 200, embedding_json(model, tokenizer, r.prompt, r.index));
      });
    });
    http.Post("/api/explain", [this](const httplib::Request& req, httplib::Response& res) {
      guarded(res, [&] {
        ExplainRequest r = parse_explain_request(req.body, shape(), opt.limits);
        r.options.model_name = opt.model_name;
        const std::size_t t1 = check_length("prompt", r.prompt);
        const std::size_t t2 = r.options.compare ? check_length("compare", *r.options.compare) : 0;
        check_size(r, t1, t2);
        json out;
        {
          Slot slot(slots);
          out = explain(model, tokenizer, r.prompt, r.options);
        }
        send_json(res, 200, out);
      });
    });
    // The API's POST routes answer other methods with 405, not with a file lookup.
    for (const char* path : {"/api/tokenize", "/api/explain", "/api/embedding"})
      http.Get(path, [](const httplib::Request&, httplib::Response& res) {
        res.set_header("Allow", "POST");
        send_error(res, 405, "use POST with a JSON body");
      });
    for (const char* path : {"/api/health", "/api/model"})
      http.Post(path, [](const httplib::Request&, httplib::Response& res) {
        res.set_header("Allow", "GET");
        send_error(res, 405, "use GET");
      });
    http.Get(".*", [this](const httplib::Request& req, httplib::Response& res) { serve_file(req, res); });
    // Anything else: 404 for unknown POST paths, 405 for methods the server never takes.
    http.Post(".*", [](const httplib::Request& req, httplib::Response& res) {
      send_error(res, 404, "no API route " + req.path.substr(0, 200));
    });
    const auto not_allowed = [](const httplib::Request&, httplib::Response& res) {
      res.set_header("Allow", "GET, POST");
      send_error(res, 405, "method not allowed");
    };
    http.Put(".*", not_allowed);
    http.Patch(".*", not_allowed);
    http.Delete(".*", not_allowed);
    http.Options(".*", not_allowed);
    // Answers httplib makes itself (404 for unrouted methods, 413, 400 for malformed requests)
    // get a JSON body too; handlers that wrote their own body keep it.
    http.set_error_handler(httplib::Server::HandlerWithResponse(
        [limit = opt.limits.max_body_bytes](const httplib::Request&, httplib::Response& res) {
          if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
          const std::string what = res.status == 404 ? "not found"
                                   : res.status == 413
                                       ? "the request body is over the limit of " + std::to_string(limit) + " bytes"
                                   : res.status == 405 ? "method not allowed"
                                                       : "bad request (HTTP " + std::to_string(res.status) + ")";
          send_error(res, res.status, what);
          return httplib::Server::HandlerResponse::Handled;
        }));
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
      send_error(res, 500, "internal error");
    });
  }

  void serve_file(const httplib::Request& req, httplib::Response& res) {
    if (req.path.rfind("/api/", 0) == 0 || req.path == "/api") {
      send_error(res, 404, "no API route " + req.path.substr(0, 200));
      return;
    }
    std::optional<std::filesystem::path> file;
    if (!assets.empty()) file = resolve_asset(assets, req.path);
    if (!file) {
      send_error(res, 404, "not found");
      return;
    }
    std::ifstream in(*file, std::ios::binary);
    std::string body((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      send_error(res, 404, "not found");
      return;
    }
    res.status = 200;
    res.set_content(std::move(body), content_type_for(*file).c_str());
  }
};

ExplorerServer::ExplorerServer(const GptModel& model, const Tokenizer& tokenizer, ServerOptions options)
    : impl_(std::make_unique<Impl>(model, tokenizer, std::move(options))) {}

ExplorerServer::~ExplorerServer() { stop(); }

int ExplorerServer::bind() {
  Impl& d = *impl_;
  if (d.opt.port < 0 || d.opt.port > 65535)
    throw Error("--port must be in 0..65535, got " + std::to_string(d.opt.port));
  if (d.opt.port == 0) {
    d.port = d.http.bind_to_any_port(d.opt.host);
    if (d.port < 0) throw Error("cannot listen on " + d.opt.host + " (any port)");
  } else {
    if (!d.http.bind_to_port(d.opt.host, d.opt.port))
      throw Error("cannot listen on " + d.opt.host + ":" + std::to_string(d.opt.port) +
                  " (in use, or not an address of this machine)");
    d.port = d.opt.port;
  }
  return d.port;
}

void ExplorerServer::run() {
  if (impl_->port < 0) throw Error("ExplorerServer::run: bind() first");
  impl_->http.listen_after_bind();
}

void ExplorerServer::stop() {
  if (impl_) impl_->http.stop();
}

std::string ExplorerServer::url() const {
  const std::string& h = impl_->opt.host;
  const bool v6 = h.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + h + "]" : h) + ":" + std::to_string(impl_->port) + "/";
}

}  // namespace jomoim::serve
