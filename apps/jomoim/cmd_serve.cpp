// cmd_serve.cpp — `jomoim serve`: the explorer in the browser.
//
// Loads the model once and serves the page (share/jomoim/web beside the program, or --assets DIR) and the
// JSON API of apps/serve/server.hpp until Ctrl-C (SIGINT) or SIGTERM, which stop it cleanly:
// the signal handler only sets a flag (OpenMP and oneDNN start threads before we could
// block signals in them, so any thread may take the signal); a waiting thread sees the flag
// and stops the server, which lets requests in progress finish.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include "commands.hpp"
#include "jomoim/engine/threads.hpp"
#include "jomoim/model/model.hpp"
#include "jomoim/text/tokenizer.hpp"
#include "model_dir.hpp"
#include "serve/server.hpp"

namespace jomoim::cli {
namespace {

struct ServeArgs {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string assets = shared_data_path("web").string();  // the page, beside the program
  int threads = 1;
  std::string kv_cache = "f32";
  std::string weights = "f32";
  std::string matmul = "f32";
  int workers = 2;
  std::size_t max_prompt_bytes = 4096;
};

volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int) { g_stop_signal = 1; }

bool is_loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

void run_serve(const ServeArgs& a) {
  resolve_threads(a.threads, "--threads");  // refuses negative counts; 0 is OpenMP's default
  if (a.workers < 1) throw Error("--workers must be at least 1, got " + std::to_string(a.workers));
  if (a.max_prompt_bytes < 1) throw Error("--max-prompt-bytes must be at least 1");
  const ModelDir dir = resolve_model_dir(a.model);
  const Tokenizer tok = Tokenizer::load_dir(dir.path);
  GptModel model = load_model(dir.path, a.weights, a.matmul);
  model.set_threads(a.threads);
  apply_kv_cache(model, a.kv_cache);

  serve::ServerOptions opt;
  opt.host = a.host;
  opt.port = a.port;
  opt.assets = a.assets;
  opt.model_name = dir.path.string();
  opt.compute_slots = a.workers;
  opt.limits.max_prompt_bytes = a.max_prompt_bytes;

  g_stop_signal = 0;
  struct sigaction sa = {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int = {}, old_term = {};
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);

  serve::ExplorerServer server(model, tok, opt);
  server.bind();
  if (!is_loopback(a.host))
    std::fprintf(stderr, "jomoim serve: warning: listening on %s, reachable from other machines\n", a.host.c_str());
  const GptConfig& c = model.config();
  std::printf("jomoim serve: %s  (model %s: %d layers x %d heads, context %d; Ctrl-C stops)\n", server.url().c_str(),
              dir.path.string().c_str(), c.n_layer, c.n_head, c.n_positions);
  std::fflush(stdout);

  std::atomic<bool> done{false};
  std::thread waiter([&] {
    bool told = false;
    while (!done.load()) {
      if (g_stop_signal) {
        if (!told) std::printf("jomoim serve: stopping\n"), std::fflush(stdout);
        told = true;
        server.stop();  // again until run() returns: a stop before it started listening is lost
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  server.run();
  done = true;
  waiter.join();
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "The explorer in the browser: the page and a JSON API over explain");
  cmd->add_option("--model", args->model, "GPT-2 model directory (default: " + default_model_help() + ")");
  cmd->add_option("--host", args->host, "address to listen on (loopback by default)")->capture_default_str();
  cmd->add_option("--port", args->port, "port (0: any free port; the URL is printed)")->capture_default_str();
  cmd->add_option("--assets", args->assets, "folder of the page's files")->capture_default_str();
  cmd->add_option("--threads", args->threads,
                  std::string(threads_help) + " per forward pass (attention and the linear layers)")
      ->capture_default_str();
  add_kv_cache_option(cmd, args->kv_cache);
  add_weights_option(cmd, args->weights);
  add_matmul_option(cmd, args->matmul);
  cmd->add_option("--workers", args->workers, "forward passes at once; more requests wait")->capture_default_str();
  cmd->add_option("--max-prompt-bytes", args->max_prompt_bytes, "longest prompt accepted, in UTF-8 bytes")
      ->capture_default_str();
  cmd->callback([args] { run_serve(*args); });
}

}  // namespace jomoim::cli
