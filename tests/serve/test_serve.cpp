// jomoim serve's server, in process: every API route against a direct explain() call, every
// refusal with its status and message, static files and path traversal attempts over raw
// sockets, concurrent requests, and the request parser and path resolver on their own.
// Model: the tiny F32 checkpoint of tests/model/tiny_gpt2.py (JOMOIM_TINY_GPT2, fixture
// tiny_gpt2); the tests that need it are skipped without it.
#include <gtest/gtest.h>
#include <httplib.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "jomoim/explain/explain.hpp"
#include "jomoim/model/generate.hpp"
#include "serve/request.hpp"
#include "serve/server.hpp"
#include "serve/static_files.hpp"

namespace fs = std::filesystem;
using jomoim::serve::ExplorerServer;
using nlohmann::json;

namespace {

constexpr const char* kSecret = "TOP-SECRET-outside-the-asset-folder";

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

// A fresh folder: assets/ (what the server may serve) next to secret files it must not.
struct AssetTree {
  fs::path base, root;
  AssetTree() {
    std::random_device rd;
    base = fs::temp_directory_path() / ("jomoim-serve-test-" + std::to_string(rd()));
    root = base / "assets";
    write(root / "index.html", "<!doctype html><title>explorer</title>");
    write(root / "app.js", "export const x = 1;");
    write(root / "style.css", "body{}");
    write(root / "sub" / "notes.txt", "inside");
    write(root / ".hidden", "hidden");
    write(base / "secret.txt", kSecret);
    write(base / "outside" / "secret.txt", kSecret);
    fs::create_symlink(base / "secret.txt", root / "escape.txt");        // a link out: refused
    fs::create_directory_symlink(base / "outside", root / "outdir");     // a folder link out: refused
    fs::create_symlink(root / "sub" / "notes.txt", root / "inner.txt");  // a link inside: served
    root = fs::canonical(root);
  }
  ~AssetTree() {
    std::error_code ec;
    fs::remove_all(base, ec);
  }
};

// One raw request (no client-side normalisation or encoding): the whole response.
std::string raw_request(int port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return "";
  }
  (void)!send(fd, request.data(), request.size(), 0);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  close(fd);
  return out;
}
std::string raw_get(int port, const std::string& target) {
  return raw_request(port, "GET " + target + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
}
int status_of(const std::string& response) { return response.size() > 12 ? std::atoi(response.c_str() + 9) : -1; }

class ServeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* dir = std::getenv("JOMOIM_TINY_GPT2");
    if (!dir || !fs::exists(fs::path(dir) / "f32" / "model.safetensors")) return;
    model_dir_ = fs::path(dir) / "f32";
    tokenizer_ = std::make_unique<jomoim::Tokenizer>(jomoim::Tokenizer::load_dir(model_dir_));
    model_ = std::make_unique<jomoim::GptModel>(jomoim::GptModel::load(model_dir_));
    model_->set_threads(1);
    assets_ = std::make_unique<AssetTree>();
    jomoim::serve::ServerOptions opt;
    opt.host = "127.0.0.1";
    opt.port = 0;
    opt.assets = assets_->root;
    opt.model_name = "tiny";
    opt.compute_slots = 2;
    opt.limits.max_body_bytes = 8192;
    opt.limits.max_prompt_bytes = 1000;
    opt.limits.max_matrix_numbers = 50000;  // all 8 heads of 40 tokens (61440) are over
    server_ = std::make_unique<ExplorerServer>(*model_, *tokenizer_, opt);
    port_ = server_->bind();
    thread_ = std::thread([] { server_->run(); });
    httplib::Client c("127.0.0.1", port_);
    for (int i = 0; i < 100 && !c.Get("/api/health"); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  static void TearDownTestSuite() {
    if (server_) server_->stop();
    if (thread_.joinable()) thread_.join();
    server_.reset();
    assets_.reset();
    model_.reset();
    tokenizer_.reset();
  }
  void SetUp() override {
    if (!server_) GTEST_SKIP() << "JOMOIM_TINY_GPT2 is not set to the tiny checkpoints (fixture tiny_gpt2)";
  }
  static httplib::Result post(const std::string& path, const std::string& body) {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60);
    return c.Post(path.c_str(), body, "application/json");
  }
  // What the API must answer: explain() called directly with the same options.
  static json direct(const std::string& prompt, jomoim::ExplainOptions o = {}) {
    o.model_name = "tiny";
    return jomoim::explain(*model_, *tokenizer_, prompt, o);
  }

  static inline fs::path model_dir_;
  static inline std::unique_ptr<jomoim::Tokenizer> tokenizer_;
  static inline std::unique_ptr<jomoim::GptModel> model_;
  static inline std::unique_ptr<AssetTree> assets_;
  static inline std::unique_ptr<ExplorerServer> server_;
  static inline std::thread thread_;
  static inline int port_ = 0;
};

TEST_F(ServeTest, HealthAndModel) {
  httplib::Client c("127.0.0.1", port_);
  auto h = c.Get("/api/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(h->get_header_value("Content-Type"), "application/json; charset=utf-8");
  EXPECT_EQ(json::parse(h->body)["status"], "ok");
  auto m = c.Get("/api/model");
  ASSERT_TRUE(m);
  ASSERT_EQ(m->status, 200);
  const json j = json::parse(m->body);
  const auto& cfg = model_->config();
  EXPECT_EQ(j["name"], "tiny");
  EXPECT_EQ(j["n_layer"], cfg.n_layer);
  EXPECT_EQ(j["n_head"], cfg.n_head);
  EXPECT_EQ(j["n_embd"], cfg.n_embd);
  EXPECT_EQ(j["head_dim"], cfg.head_dim());
  EXPECT_EQ(j["n_positions"], cfg.n_positions);
  EXPECT_EQ(j["vocab_size"], cfg.vocab_size);
  EXPECT_EQ(j["limits"]["max_tokens"], cfg.n_positions);
  EXPECT_EQ(j["limits"]["max_body_bytes"], 8192);
  EXPECT_EQ(j["limits"]["max_prompt_bytes"], 1000);
  EXPECT_EQ(j["limits"]["max_matrix_numbers"], 50000);
}

TEST_F(ServeTest, TokenizeMatchesTheTokenizer) {
  for (const std::string prompt : {"I have a lot", "", "Cash or credit card? I have a lot", "\xc3\xa9t\xc3\xa9 \n x"}) {
    auto r = post("/api/tokenize", json{{"prompt", prompt}}.dump());
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json j = json::parse(r->body);
    const auto ids = tokenizer_->encode(prompt);
    EXPECT_EQ(j["ids"].get<std::vector<std::int32_t>>(), ids);
    EXPECT_EQ(j["count"], ids.size());
    EXPECT_EQ(j["context"], model_->config().n_positions);
    ASSERT_EQ(j["tokens"].size(), ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) {
      EXPECT_EQ(j["tokens"][i]["index"], i);
      EXPECT_EQ(j["tokens"][i]["token"], tokenizer_->token_string(ids[i]));
    }
  }
}

// E_i: the rows of wte and wpe the pass adds (explain's trace records the same rows), exact.
TEST_F(ServeTest, EmbeddingIsTheTracedTokenAndPositionRows) {
  for (const std::string prompt : {"I have a lot", ""}) {
    const json want = direct(prompt);
    const int T = static_cast<int>(want["tokens"].size());
    const auto ids = prompt.empty() ? std::vector<std::int32_t>{*tokenizer_->eos_id()} : tokenizer_->encode(prompt);
    jomoim::KvCache cache(model_->config(), T);
    jomoim::ForwardTrace tr;
    jomoim::ForwardOptions fo;
    fo.trace = &tr;
    model_->forward(ids, cache, fo);
    const int C = model_->config().n_embd;
    for (int i = 0; i < T; ++i) {
      auto r = post("/api/embedding", json{{"prompt", prompt}, {"index", i}}.dump());
      ASSERT_TRUE(r);
      ASSERT_EQ(r->status, 200) << r->body;
      const json j = json::parse(r->body);
      EXPECT_EQ(j["index"], i);
      EXPECT_EQ(j["id"], want["tokens"][i]["id"]);
      EXPECT_EQ(j["text"], want["tokens"][i]["text"]);
      ASSERT_EQ(j["token_embedding"].size(), static_cast<std::size_t>(C));
      double tn = 0, pn = 0, en = 0;
      for (int c = 0; c < C; ++c) {
        const float te = j["token_embedding"][c].get<float>(), pe = j["position_embedding"][c].get<float>();
        ASSERT_EQ(te, tr.token_embedding[static_cast<std::size_t>(i) * C + c]);
        ASSERT_EQ(pe, tr.position_embedding[static_cast<std::size_t>(i) * C + c]);
        ASSERT_EQ(j["embedding"][c].get<float>(), te + pe);
        tn += double(te) * te;
        pn += double(pe) * pe;
        en += double(te + pe) * (te + pe);
      }
      EXPECT_NEAR(std::sqrt(tn), want["tokens"][i]["token_embedding_norm"].get<double>(), 1e-9);
      EXPECT_NEAR(std::sqrt(pn), want["tokens"][i]["position_embedding_norm"].get<double>(), 1e-9);
      EXPECT_NEAR(std::sqrt(en), want["tokens"][i]["embedding_norm"].get<double>(), 1e-9);
    }
  }
  for (const auto& [body, needle] : std::vector<std::pair<std::string, std::string>>{
           {R"({"prompt": "I have a lot", "index": 4})", "past the prompt's 4 tokens"},
           {R"({"prompt": "I have a lot"})", "\"index\" is required"},
           {R"({"prompt": "I have a lot", "index": -1})", "index"},
           {R"({"prompt": "I have a lot", "index": 1.5})", "must be an integer"},
           {R"({"prompt": "I have a lot", "index": 0, "layer": 1})", "unknown field \"layer\""},
           {R"({"index": 0})", "\"prompt\" is required"},
           {R"([1])", ""}}) {
    auto r = post("/api/embedding", body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << body;
    EXPECT_NE(json::parse(r->body)["error"].get<std::string>().find(needle), std::string::npos) << r->body;
  }
}

TEST_F(ServeTest, ExplainEqualsADirectCall) {
  auto r = post("/api/explain", R"({"prompt": "I have a lot"})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/json; charset=utf-8");
  EXPECT_EQ(json::parse(r->body), direct("I have a lot"));
}

TEST_F(ServeTest, ExplainPassesEveryOption) {
  jomoim::ExplainOptions o;
  o.layer = 1;
  o.head = 2;
  o.notation = jomoim::ExplainNotation::col3b1b;
  o.silence = {0, 2};
  o.swap_qk = true;
  o.top = 3;
  o.compare = "Cash or credit card? I have a lot";
  o.target = " lot";
  o.contrast = " a";
  auto r = post("/api/explain", R"({"prompt": "I have a lot", "layer": 1, "head": 2, "notation": "3b1b",
      "silence": [0, 2], "swap_qk": true, "top": 3, "compare": "Cash or credit card? I have a lot",
      "target": " lot", "contrast": " a"})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json got = json::parse(r->body);
  EXPECT_EQ(got, direct("I have a lot", o));
  EXPECT_NE(got, direct("I have a lot"));  // the options did change the answer
  auto n = post("/api/explain", R"({"prompt": "I have a lot", "matrices": false, "compare": null, "layer": null})");
  ASSERT_TRUE(n);
  ASSERT_EQ(n->status, 200) << n->body;
  jomoim::ExplainOptions summary;
  summary.matrices = false;
  EXPECT_EQ(json::parse(n->body), direct("I have a lot", summary));
}

TEST_F(ServeTest, ExplainGeneratesAsADirectCallAndAsGenerate) {
  jomoim::ExplainOptions o;
  o.generate = 5;
  o.temperature = 0.8f;
  o.top_k = 0;
  o.top_p = 0.9f;
  o.seed = 18446744073709551615ull;
  o.stop_at_eos = false;
  o.matrices = false;
  auto r = post("/api/explain", R"({"prompt": "I have a lot", "generate": 5, "temperature": 0.8, "top_k": 0,
      "top_p": 0.9, "seed": 18446744073709551615, "ignore_eos": true, "matrices": false})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json got = json::parse(r->body);
  EXPECT_EQ(got, direct("I have a lot", o));
  jomoim::GenerateOptions go;
  go.max_tokens = 5;
  go.sampling = {0.8f, 0, 0.9f, 18446744073709551615ull};
  const std::vector<std::int32_t> ids = tokenizer_->encode("I have a lot");
  EXPECT_EQ(got["generation"]["ids"].get<std::vector<std::int32_t>>(), jomoim::generate(*model_, ids, go).ids);
  EXPECT_EQ(got["steps"].size(), 5u);
  // Greedy by default; without a seed the server's answer carries the one it drew.
  auto g = post("/api/explain", R"({"prompt": "I have a lot", "generate": 3, "matrices": false})");
  ASSERT_TRUE(g);
  ASSERT_EQ(g->status, 200) << g->body;
  const json gj = json::parse(g->body);
  EXPECT_EQ(gj["generation"]["temperature"], 0.0);
  EXPECT_TRUE(gj["generation"]["seed"].is_number_unsigned());
  go.max_tokens = 3;
  go.sampling.temperature = 0;
  go.eos = tokenizer_->eos_id();
  EXPECT_EQ(gj["generation"]["ids"].get<std::vector<std::int32_t>>(), jomoim::generate(*model_, ids, go).ids);
}

struct Refusal {
  const char* name;
  std::string body;
  int status;
  const char* message;  // a part of the one-line error
};

TEST_F(ServeTest, BadRequestsGet4xxWithAMessage) {
  const int ctx = model_->config().n_positions;
  std::string many_tokens, forty_tokens;
  for (int i = 0; i <= ctx; ++i) many_tokens += " lot";
  for (int i = 0; i < 40; ++i) forty_tokens += " lot";
  ASSERT_EQ(tokenizer_->encode(forty_tokens).size(), 40u);
  const std::vector<Refusal> cases = {
      {"oversized body", json{{"prompt", std::string(9000, 'a')}}.dump(), 413, "limit of 8192 bytes"},
      {"not JSON", "{\"prompt\": ", 400, "not valid JSON"},
      {"not an object", "[\"I have a lot\"]", 400, "must be a JSON object"},
      {"empty body", "", 400, "not valid JSON"},
      {"no prompt", R"({"top": 3})", 400, "\"prompt\" is required"},
      {"unknown field", R"({"prompt": "a", "tempo": 1})", 400, "unknown field \"tempo\""},
      {"generate over the limit", R"({"prompt": "a", "generate": 33})", 400, "\"generate\" must be in 0..32"},
      {"generate negative", R"({"prompt": "a", "generate": -1})", 400, "\"generate\" must be in 0..32"},
      {"generate float", R"({"prompt": "a", "generate": 2.0})", 400, "\"generate\" must be an integer"},
      {"generate with compare", R"({"prompt": "a", "generate": 2, "compare": "b"})", 400,
       "generate cannot be combined with compare"},
      {"generate with silence", R"({"prompt": "a b", "generate": 2, "silence": [0]})", 400,
       "generate cannot be combined with silence"},
      {"temperature not a number", R"({"prompt": "a", "generate": 2, "temperature": "hot"})", 400,
       "\"temperature\" must be a number"},
      {"temperature negative", R"({"prompt": "a", "generate": 2, "temperature": -1})", 400,
       "temperature must be a finite number >= 0"},
      {"temperature huge", R"({"prompt": "a", "generate": 2, "temperature": 1e300})", 400,
       "\"temperature\" must be a float32 number"},
      {"top_p zero", R"({"prompt": "a", "generate": 2, "top_p": 0})", 400, "top-p must be in (0, 1]"},
      {"top_k negative", R"({"prompt": "a", "generate": 2, "top_k": -1})", 400, "\"top_k\" must be in 0.."},
      {"seed negative", R"({"prompt": "a", "generate": 2, "seed": -1})", 400, "\"seed\" must be an integer"},
      {"seed float", R"({"prompt": "a", "generate": 2, "seed": 1.5})", 400, "\"seed\" must be an integer"},
      {"ignore_eos not a bool", R"({"prompt": "a", "generate": 2, "ignore_eos": 1})", 400,
       "\"ignore_eos\" must be true or false"},
      {"prompt not a string", R"({"prompt": 42})", 400, "\"prompt\" must be a string"},
      {"target of two tokens", R"({"prompt": "a", "target": "ab"})", 400, "target \"ab\" encodes to 2 tokens"},
      {"target not a string", R"({"prompt": "a", "target": 3})", 400, "\"target\" must be a string"},
      {"contrast equal to target", R"({"prompt": "a", "target": " lot", "contrast": " lot"})", 400,
       "contrast is the same token as the target"},
      {"prompt over the byte limit", json{{"prompt", std::string(1001, 'a')}}.dump(), 400, "limit is 1000"},
      {"prompt over the context", json{{"prompt", many_tokens}}.dump(), 400, "the model's context is "},
      {"compare over the context", json{{"prompt", "a"}, {"compare", many_tokens}}.dump(), 400, "\"compare\" has"},
      {"layer out of range", R"({"prompt": "a", "layer": 2})", 400, "\"layer\" must be in 0..1"},
      {"negative head", R"({"prompt": "a", "head": -1})", 400, "\"head\" must be in 0..3"},
      {"huge head", R"({"prompt": "a", "head": 18446744073709551615})", 400, "\"head\" must be in"},
      {"top zero", R"({"prompt": "a", "top": 0})", 400, "\"top\" must be in 1.."},
      {"top float", R"({"prompt": "a", "top": 1.5})", 400, "\"top\" must be an integer"},
      {"top string", R"({"prompt": "a", "top": "3"})", 400, "\"top\" must be an integer"},
      {"bad notation", R"({"prompt": "a", "notation": "rows"})", 400, "\"notation\" must be"},
      {"silence not a list", R"({"prompt": "a", "silence": 1})", 400, "\"silence\" must be an array"},
      {"silence repeated", R"({"prompt": "a b c", "silence": [1, 1]})", 400, "repeats token index 1"},
      {"silence past the context", R"({"prompt": "a", "silence": [999]})", 400, "\"silence\"[0] must be in"},
      {"silence past the prompt", R"({"prompt": "I have a lot", "silence": [10]})", 400, "silence"},
      {"swap_qk not a bool", R"({"prompt": "a", "swap_qk": "yes"})", 400, "\"swap_qk\" must be true or false"},
      {"matrices over the limit", json{{"prompt", forty_tokens}}.dump(), 400, "the limit is 50000"},
      {"invalid UTF-8", std::string("{\"prompt\": \"\xff\xfe\"}"), 400, "not valid JSON"},
  };
  for (const Refusal& c : cases) {
    SCOPED_TRACE(c.name);
    auto r = post("/api/explain", c.body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, c.status) << r->body;
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/json; charset=utf-8");
    const json j = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r->body;
    const std::string msg = j["error"];
    EXPECT_NE(msg.find(c.message), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line";
  }
  // The same prompt is fine with one head selected, or without matrices.
  for (const json& ok : {json{{"prompt", forty_tokens}, {"layer", 0}, {"head", 1}},
                         json{{"prompt", forty_tokens}, {"matrices", false}}}) {
    auto r = post("/api/explain", ok.dump());
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << ok.dump() << r->body.substr(0, 200);
  }
  auto t = post("/api/tokenize", R"({"text": "a"})");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->status, 400);
  EXPECT_NE(t->body.find("unknown field"), std::string::npos);
}

TEST_F(ServeTest, UnknownPathsAndWrongMethods) {
  httplib::Client c("127.0.0.1", port_);
  struct Case {
    std::string method, path;
    int status;
  };
  for (const Case& k : std::vector<Case>{{"GET", "/api/explain", 405},
                                         {"GET", "/api/tokenize", 405},
                                         {"POST", "/api/health", 405},
                                         {"POST", "/api/model", 405},
                                         {"POST", "/api/nope", 404},
                                         {"GET", "/api/nope", 404},
                                         {"GET", "/api", 404},
                                         {"GET", "/nope.html", 404},
                                         {"POST", "/index.html", 404},
                                         {"DELETE", "/", 405},
                                         {"PUT", "/api/explain", 405}}) {
    SCOPED_TRACE(k.method + " " + k.path);
    httplib::Result r = k.method == "GET"    ? c.Get(k.path.c_str())
                        : k.method == "POST" ? c.Post(k.path.c_str(), "{}", "application/json")
                        : k.method == "PUT"  ? c.Put(k.path.c_str(), "{}", "application/json")
                                             : c.Delete(k.path.c_str());
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, k.status);
    const json j = json::parse(r->body, nullptr, false);
    EXPECT_TRUE(j.is_object() && j.contains("error")) << r->body;
  }
}

TEST_F(ServeTest, ServesTheAssetsWithTheirTypes) {
  struct Case {
    const char* path;
    const char* type;
    const char* body;
  };
  for (const Case& k : std::vector<Case>{{"/", "text/html; charset=utf-8", "<!doctype html>"},
                                         {"/index.html", "text/html; charset=utf-8", "<!doctype html>"},
                                         {"/app.js", "text/javascript; charset=utf-8", "export const"},
                                         {"/style.css", "text/css; charset=utf-8", "body{}"},
                                         {"/sub/notes.txt", "text/plain; charset=utf-8", "inside"},
                                         {"/inner.txt", "text/plain; charset=utf-8", "inside"}}) {
    SCOPED_TRACE(k.path);
    const std::string res = raw_get(port_, k.path);
    EXPECT_EQ(status_of(res), 200) << res;
    EXPECT_NE(res.find(std::string("Content-Type: ") + k.type), std::string::npos) << res;
    EXPECT_NE(res.find("X-Content-Type-Options: nosniff"), std::string::npos);
    EXPECT_NE(res.find(k.body), std::string::npos);
  }
}

TEST_F(ServeTest, NoFileOutsideTheAssetFolder) {
  for (const std::string& target :
       std::vector<std::string>{"/../secret.txt",
                                "/../../secret.txt",
                                "/%2e%2e/secret.txt",
                                "/%2E%2E/secret.txt",
                                "/..%2fsecret.txt",
                                "/%2e%2e%2fsecret.txt",
                                "/sub/../../secret.txt",
                                "/sub/%2e%2e/%2e%2e/secret.txt",
                                "/%252e%252e/secret.txt",
                                "/..%5csecret.txt",
                                "/sub\\..\\..\\secret.txt",
                                "/escape.txt",
                                "/outdir/secret.txt",
                                "/.hidden",
                                "/./index.html",
                                "//secret.txt",
                                "/index.html%00.txt",
                                "/sub/",
                                std::string("/") + assets_->base.string() + "/secret.txt",
                                "/" + fs::relative(assets_->base / "secret.txt", "/").string()}) {
    SCOPED_TRACE(target);
    const std::string res = raw_get(port_, target);
    const int status = status_of(res);
    EXPECT_TRUE(status == 404 || status == 400) << res;
    EXPECT_EQ(res.find(kSecret), std::string::npos) << res;
  }
}

TEST_F(ServeTest, ConcurrentRequestsGetCorrectIdenticalAnswers) {
  const std::vector<std::string> prompts = {"I have a lot", "Cash or credit card? I have a lot"};
  const json want[2] = {direct(prompts[0]), direct(prompts[1])};
  constexpr int kClients = 8;
  std::vector<std::string> got(kClients);
  std::vector<int> status(kClients, -1);
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i)
    clients.emplace_back([&, i] {
      auto r = post("/api/explain", json{{"prompt", prompts[i % 2]}}.dump());
      if (r) {
        status[i] = r->status;
        got[i] = r->body;
      }
    });
  for (auto& t : clients) t.join();
  for (int i = 0; i < kClients; ++i) {
    SCOPED_TRACE(i);
    ASSERT_EQ(status[i], 200) << got[i];
    EXPECT_EQ(json::parse(got[i]), want[i % 2]);
    EXPECT_EQ(got[i], got[i % 2]) << "byte-identical answers for the same request";
  }
}

// The parts on their own.

TEST(ServeRequest, DefaultsAndEveryField) {
  const jomoim::serve::ModelShape shape{2, 4, 48, 270};
  auto r = jomoim::serve::parse_explain_request(R"({"prompt": "x"})", shape);
  EXPECT_EQ(r.prompt, "x");
  EXPECT_FALSE(r.options.layer || r.options.head || r.options.compare);
  EXPECT_EQ(r.options.notation, jomoim::ExplainNotation::paper);
  EXPECT_TRUE(r.options.silence.empty());
  EXPECT_FALSE(r.options.swap_qk);
  EXPECT_EQ(r.options.top, jomoim::ExplainOptions{}.top);
  EXPECT_EQ(r.options.generate, 0);
  EXPECT_EQ(r.options.temperature, 0.0f);
  EXPECT_FALSE(r.options.seed);
  EXPECT_TRUE(r.options.stop_at_eos);
  r = jomoim::serve::parse_explain_request(
      R"({"prompt": "x", "generate": 32, "temperature": 1, "top_k": 7, "top_p": 0.5, "seed": 12, "ignore_eos": true})",
      shape);
  EXPECT_EQ(r.options.generate, 32);
  EXPECT_EQ(r.options.temperature, 1.0f);
  EXPECT_EQ(r.options.top_k, 7);
  EXPECT_EQ(r.options.top_p, 0.5f);
  EXPECT_EQ(r.options.seed, 12u);
  EXPECT_FALSE(r.options.stop_at_eos);
  r = jomoim::serve::parse_explain_request(
      R"({"prompt": "", "compare": "y", "layer": 1, "head": 3, "notation": "3b1b", "silence": [47, 0],
          "swap_qk": true, "top": 100, "matrices": false, "target": " of", "contrast": null})",
      shape);
  EXPECT_EQ(r.options.target, " of");
  EXPECT_FALSE(r.options.contrast);
  EXPECT_EQ(r.prompt, "");
  EXPECT_EQ(r.options.compare, "y");
  EXPECT_EQ(r.options.layer, 1);
  EXPECT_EQ(r.options.head, 3);
  EXPECT_EQ(r.options.notation, jomoim::ExplainNotation::col3b1b);
  EXPECT_EQ(r.options.silence, (std::vector<int>{47, 0}));
  EXPECT_TRUE(r.options.swap_qk);
  EXPECT_EQ(r.options.top, 100);
  EXPECT_FALSE(r.options.matrices);
  // top is capped by the vocabulary of a small model.
  EXPECT_THROW(jomoim::serve::parse_explain_request(R"({"prompt": "x", "top": 11})", {1, 1, 4, 10}),
               jomoim::serve::RequestError);
  EXPECT_EQ(jomoim::serve::parse_explain_request(R"({"prompt": "x", "top": 10})", {1, 1, 4, 10}).options.top, 10);
}

TEST(ServeRequest, ErrorsCarryTheirStatus) {
  jomoim::serve::RequestLimits small;
  small.max_body_bytes = 10;
  try {
    jomoim::serve::parse_tokenize_request(R"({"prompt": "hello"})", small);
    FAIL() << "no throw";
  } catch (const jomoim::serve::RequestError& e) {
    EXPECT_EQ(e.status(), 413);
  }
  try {
    jomoim::serve::parse_tokenize_request("nope");
    FAIL() << "no throw";
  } catch (const jomoim::serve::RequestError& e) {
    EXPECT_EQ(e.status(), 400);
  }
  // A long unknown field name is cut short in the message.
  try {
    jomoim::serve::parse_tokenize_request(json{{std::string(500, 'k'), 1}, {"prompt", "x"}}.dump());
    FAIL() << "no throw";
  } catch (const jomoim::serve::RequestError& e) {
    EXPECT_LT(std::string(e.what()).size(), 120u);
  }
}

TEST(ServeStaticFiles, ResolvesOnlyPlainPathsInside) {
  AssetTree t;
  using jomoim::serve::resolve_asset;
  EXPECT_EQ(resolve_asset(t.root, "/"), t.root / "index.html");
  EXPECT_EQ(resolve_asset(t.root, "/app.js"), t.root / "app.js");
  EXPECT_EQ(resolve_asset(t.root, "/inner.txt"), t.root / "sub" / "notes.txt");
  for (const char* bad :
       {"", "app.js", "/..", "/../secret.txt", "/sub/../app.js", "/./app.js", "//app.js", "/sub//notes.txt", "/.hidden",
        "/escape.txt", "/outdir/secret.txt", "/sub", "/missing", "/sub\\notes.txt"})
    EXPECT_FALSE(resolve_asset(t.root, bad)) << bad;
  EXPECT_FALSE(resolve_asset(t.root, std::string_view("/app.js\0x", 9)));
  EXPECT_EQ(jomoim::serve::content_type_for("a/B.JS"), "text/javascript; charset=utf-8");
  EXPECT_EQ(jomoim::serve::content_type_for("x.png"), "image/png");
  EXPECT_EQ(jomoim::serve::content_type_for("x"), "application/octet-stream");
}

TEST(ServeServer, RefusesABadAssetFolderAndABusyPort) {
  const char* dir = std::getenv("JOMOIM_TINY_GPT2");
  if (!dir || !fs::exists(fs::path(dir) / "f32")) GTEST_SKIP() << "no tiny checkpoints";
  const auto model = jomoim::GptModel::load(fs::path(dir) / "f32");
  const auto tok = jomoim::Tokenizer::load_dir(fs::path(dir) / "f32");
  jomoim::serve::ServerOptions o;
  o.assets = "/nonexistent/jomoim-web";
  EXPECT_THROW(ExplorerServer(model, tok, o), jomoim::Error);
  o.assets.clear();
  o.port = 0;
  ExplorerServer a(model, tok, o);
  const int port = a.bind();
  EXPECT_GT(port, 0);
  EXPECT_EQ(a.url(), "http://127.0.0.1:" + std::to_string(port) + "/");
  o.port = port;
  ExplorerServer b(model, tok, o);
  EXPECT_THROW(b.bind(), jomoim::Error);
  o.port = 70000;
  ExplorerServer c(model, tok, o);
  EXPECT_THROW(c.bind(), jomoim::Error);
}

}  // namespace
