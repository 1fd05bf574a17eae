// serve/server.hpp — the explorer's HTTP server behind `jomoim serve` (cpp-httplib).
//
// Routes (every API answer is JSON; every refusal is a 4xx with {"error": "one line"}):
//   GET  /api/health    {"status": "ok"}
//   GET  /api/model     the model's sizes, its name and the request limits
//   POST /api/tokenize  {"prompt"} -> the tokens (index, id, text, token) and the context size
//   POST /api/explain   the explain() options (serve/request.hpp) -> jomoim.explain/1 JSON
//   GET  /...           files of the asset folder (serve/static_files.hpp), "/" is index.html
// Unknown paths get 404; a known API path with the wrong method 405; a body over the limit
// 413; a bad body or a prompt longer than the model's context 400, naming the field and limit.
//
// Concurrency: connections are served by a fixed pool of http_threads; at most compute_slots
// explain/tokenize computations run at once (the others wait for a slot), each with the
// model's own thread setting (GptModel::set_threads before constructing; the command uses 1).
// The model and tokenizer are only read (their const methods are thread-safe); they must
// outlive the server.
// Errors: the constructor and bind() throw jomoim::Error (bad asset folder, port in use).
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "jomoim/model/model.hpp"
#include "jomoim/text/tokenizer.hpp"
#include "request.hpp"

namespace jomoim::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";  // loopback unless asked otherwise
  int port = 8080;                 // 0: any free port (bind() says which)
  std::filesystem::path assets;    // the page's folder; empty: API only (every other path 404)
  std::string model_name;          // shown in /api/model and the explain JSON
  int http_threads = 16;           // connections at once (a browser keeps ~6 open)
  int compute_slots = 2;           // forward passes at once
  RequestLimits limits;
};

class ExplorerServer {
 public:
  ExplorerServer(const GptModel& model, const Tokenizer& tokenizer, ServerOptions options);
  ~ExplorerServer();
  ExplorerServer(const ExplorerServer&) = delete;
  ExplorerServer& operator=(const ExplorerServer&) = delete;

  // Binds the listening socket; returns the port. Throws Error if the address can't be bound.
  int bind();
  // Serves until stop() (blocks). bind() first.
  void run();
  // Stops run() from any thread; connections in progress finish. Safe to call more than once.
  void stop();
  // "http://HOST:PORT/" once bound.
  std::string url() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace jomoim::serve
