// cmd_explain.cpp — `jomoim explain`: the explorer in the terminal.
//
// A thin front end over jomoim::explain() (include/jomoim/explain/explain.hpp): --json prints its JSON
// (schema "jomoim.explain/1", docs/explain.md); otherwise the same JSON is rendered as text, so
// every number on the screen is a number of that object, i.e. of the model's real pass.
// Without --layer/--head the view first asks for the summary only (no matrices), then for
// the matrices of the most focused head.
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "jomoim/engine/threads.hpp"
#include "jomoim/explain/explain.hpp"
#include "jomoim/model/generate.hpp"
#include "jomoim/model/model.hpp"
#include "jomoim/text/tokenizer.hpp"
#include "model_dir.hpp"

namespace jomoim::cli {
namespace {

using nlohmann::json;

struct ExplainArgs {
  std::string model, prompt, notation = "paper", color = "auto";
  std::optional<std::string> compare, target, contrast;
  std::optional<int> layer, head;
  std::vector<int> silence;
  bool swap_qk = false, json_out = false;
  int top = 10, threads = 0;
  std::string kv_cache = "f32";
  std::string weights = "f32";
  std::string matmul = "f32";
  std::optional<int> generate;
  float temperature = 0.0f, top_p = 0.95f;
  int top_k = 40;
  std::optional<std::uint64_t> seed;
  bool ignore_eos = false;
  std::vector<std::string> sampling_given;  // the sampling options on the command line
};

// ---------------------------------------------------------------------------------------------
// Text helpers

// Code points in a UTF-8 string (the texts from explain() are valid UTF-8).
std::size_t width(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// s cut or padded to exactly w columns (one per code point); "~" marks a cut.
std::string fit(const std::string& s, std::size_t w, bool left = true) {
  std::string out;
  std::size_t n = 0;
  for (std::size_t i = 0; i < s.size();) {
    std::size_t len = 1;
    while (i + len < s.size() && (static_cast<unsigned char>(s[i + len]) & 0xC0) == 0x80) ++len;
    if (n + 1 > w || (n + 1 == w && i + len < s.size())) {
      if (w > 0) out += "~", ++n;
      break;
    }
    out.append(s, i, len);
    ++n;
    i += len;
  }
  const std::string pad(w > n ? w - n : 0, ' ');
  return left ? out + pad : pad + out;
}

std::string quoted(const json& t) { return "\"" + t.get<std::string>() + "\""; }

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

std::string bar(double fraction, int w) {
  const int n = static_cast<int>(std::lround(std::clamp(fraction, 0.0, 1.0) * w));
  return std::string(static_cast<std::size_t>(n), '#') + std::string(static_cast<std::size_t>(w - n), ' ');
}

// Wraps plain words to the terminal width, indented by two spaces.
void say(const std::string& text, int cols) {
  const std::size_t w = static_cast<std::size_t>(std::max(40, cols) - 2);
  std::string line;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t sp = text.find(' ', pos);
    if (sp == std::string::npos) sp = text.size();
    const std::string word = text.substr(pos, sp - pos);
    if (!line.empty() && width(line) + 1 + width(word) > w) {
      std::printf("  %s\n", line.c_str());
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
    pos = sp + 1;
  }
  if (!line.empty()) std::printf("  %s\n", line.c_str());
}

void section(const std::string& title) { std::printf("\n== %s ==\n", title.c_str()); }

int terminal_columns() {
  if (const char* c = std::getenv("COLUMNS"); c && std::atoi(c) > 0) return std::atoi(c);
  winsize ws{};
  if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 100;
}

// ---------------------------------------------------------------------------------------------
// Heatmaps

struct Style {
  bool color = false;
  int cols = 100;
};

// 16 steps from black through red to pale yellow (xterm 256-colour indices).
constexpr int kHot[16] = {16, 52, 88, 124, 160, 196, 202, 208, 214, 220, 226, 227, 228, 229, 230, 231};
// Plain characters, lowest to highest; a masked cell is blank.
constexpr char kRamp[] = ".:-=+*#%@";

int level(double x, double lo, double hi, int levels) {
  if (!(hi > lo)) return levels - 1;
  const int l = static_cast<int>((x - lo) / (hi - lo) * levels);
  return std::clamp(l, 0, levels - 1);
}

// One heatmap cell: 2 characters, or 9 with the number in it (numbers_fit).
std::string cell(const json& v, double lo, double hi, bool numbers, const Style& st) {
  const double x = v.is_boolean() ? (v.get<bool>() ? 1.0 : 0.0) : v.is_number() ? v.get<double>() : NAN;
  if (std::isnan(x)) return std::string(numbers ? 9 : 2, ' ');
  std::string text = "  ";
  if (numbers) {
    text = v.is_boolean() ? std::string("   hears") : fmt(std::abs(x) < 1000 ? "%8.3f" : "%8.1e", x);
    text += ' ';
  }
  if (st.color) {
    const int c = kHot[level(x, lo, hi, 16)];
    const int fg = c >= 208 || c == 202 ? 16 : 231;  // black text on the light end
    return "\x1b[48;5;" + std::to_string(c) + "m\x1b[38;5;" + std::to_string(fg) + "m" + text + "\x1b[0m";
  }
  const char ch = kRamp[level(x, lo, hi, 9)];
  if (!numbers) return std::string(2, ch);
  if (v.is_boolean()) return text;
  text.back() = ch;
  return text;
}

// A T x T matrix (rows and columns both tokens), the last `window` tokens of it.
// `rows_are` / `cols_are`: "query" / "key" as the notation lays them out.
// Cells where `mask` (same layout) is false are blank.
void heatmap(const std::string& title, const json& m, const json& mask, const json& tokens, const std::string& rows_are,
             const std::string& cols_are, bool unit_range, const Style& st) {
  const int T = static_cast<int>(m.size());
  const int label_w = 16;
  const bool numbers_fit = label_w + 9 * T + 2 <= st.cols;
  const int cell_w = numbers_fit ? 9 : 2;
  const int window = std::max(1, std::min(T, (st.cols - label_w - 2) / cell_w));
  const int first = T - window;
  double lo = unit_range ? 0.0 : INFINITY, hi = unit_range ? 1.0 : -INFINITY;
  if (!unit_range) {
    for (const auto& row : m)
      for (const auto& v : row)
        if (v.is_number()) lo = std::min(lo, v.get<double>()), hi = std::max(hi, v.get<double>());
    if (!std::isfinite(lo)) lo = hi = 0;
  }
  std::printf("\n%s  (rows: %s, columns: %s)\n", title.c_str(), rows_are.c_str(), cols_are.c_str());
  if (first > 0)
    std::printf(
        "  [showing the last %d of %d tokens (%d..%d): the terminal is %d columns wide; "
        "--json has every entry]\n",
        window, T, first, T - 1, st.cols);
  std::string head(label_w, ' ');
  for (int c = first; c < T; ++c) {
    const std::string idx = std::to_string(c);
    if (cell_w == 9)
      head += " " + fit(idx + ":" + tokens[c]["text"].get<std::string>(), 8);
    else
      head += fit(std::to_string(c % 100), 2, false);
  }
  std::printf("%s\n", head.c_str());
  for (int r = first; r < T; ++r) {
    std::string line = fit(std::to_string(r), 4, false) + " " + fit(quoted(tokens[r]["text"]), label_w - 6) + " ";
    for (int c = first; c < T; ++c)
      line += mask[r][c].get<bool>() ? cell(m[r][c], lo, hi, cell_w == 9, st) : std::string(cell_w, ' ');
    std::printf("%s\n", line.c_str());
  }
  if (!m.empty() && m[0][0].is_boolean())
    std::printf("  %s = hears, blank = masked\n", st.color ? "coloured" : "filled");
  else if (st.color)
    std::printf("  dark = %.3g ... pale yellow = %.3g; blank = masked\n", lo, hi);
  else
    std::printf("  '.' = %.3g ... '@' = %.3g; blank = masked\n", lo, hi);
}

// ---------------------------------------------------------------------------------------------
// Views

void print_tokens(const json& j, const Style& st) {
  section("the meeting: " + std::to_string(j["tokens"].size()) + " tokens");
  say("The tokens hold a meeting to decide the next token. Each one enters as an embedding: its token part "
      "(what it is) plus its position part (where it sits). Norms of each part:",
      st.cols);
  std::printf("%5s  %7s  %-18s %10s %10s %10s\n", "index", "id", "text", "|token|", "|position|", "|sum|");
  for (const auto& t : j["tokens"]) {
    std::printf("%5d  %7d  %s %10.3f %10.3f %10.3f%s\n", t["index"].get<int>(), t["id"].get<int>(),
                fit(quoted(t["text"]), 18).c_str(), t["token_embedding_norm"].get<double>(),
                t["position_embedding_norm"].get<double>(), t["embedding_norm"].get<double>(),
                t["silenced"].get<bool>() ? "  (silenced)" : "");
  }
}

void print_top(const json& pred, const std::string& title) {
  std::printf("%s (entropy %.3f nats)\n", title.c_str(), pred["entropy"].get<double>());
  int r = 0;
  for (const auto& t : pred["top"]) {
    const double p = t["probability"].get<double>();
    std::printf("%4d  %7d  %s %7.4f  %s\n", ++r, t["id"].get<int>(), fit(quoted(t["text"]), 18).c_str(), p,
                bar(p, 30).c_str());
  }
}

void print_shift(const json& shift, const char* a, const char* b, const std::string& la, const std::string& lb) {
  std::printf("%7s  %-18s %9s %9s %9s\n", "id", "text", la.c_str(), lb.c_str(), "change");
  for (const auto& s : shift) {
    const double d = s["delta"].get<double>();
    const int n = static_cast<int>(std::lround(std::min(1.0, std::abs(d)) * 20));
    std::printf("%7d  %s %9.4f %9.4f %+9.4f  %s\n", s["id"].get<int>(), fit(quoted(s["text"]), 18).c_str(),
                s[a].get<double>(), s[b].get<double>(), d,
                std::string(static_cast<std::size_t>(n), d < 0 ? '-' : '+').c_str());
  }
}

void print_prediction(const json& j, const ExplainArgs& a, const Style& st) {
  section("the decision: next token");
  say("What the meeting concludes: the probability of each next token after the last one.", st.cols);
  if (j["baseline"].is_null()) {
    print_top(j["prediction"], "top " + std::to_string(j["prediction"]["top"].size()));
    return;
  }
  std::string what;
  if (!a.silence.empty()) {
    what = "silencing token";
    for (int s : j["options"]["silence"]) what += " " + std::to_string(s);
    if (a.swap_qk) what += " and ";
  }
  if (a.swap_qk) what += "swapping Q and K (each layer's W_K makes questions, W_Q offered answers)";
  print_top(j["baseline"], "baseline, the plain pass");
  std::printf("\n");
  print_top(j["prediction"], "with " + what);
  std::printf("\nhow the distribution moved:\n");
  print_shift(j["baseline"]["shift"], "p_baseline", "p", "baseline", "now");
  if (!a.silence.empty())
    say("Silenced tokens keep asking their own questions, but nobody hears their answers: their keys are masked "
        "in every layer and head, so every weight on them is 0.",
        st.cols);
  if (a.swap_qk)
    say("The seed asks whether Q and K could trade places. Q_i . K_j = K_j . Q_i, but the softmax runs over the "
        "keys of one question and the values travel with the keys, so swapping the projections changes who "
        "asks and who answers, and the trained model's prediction with it.",
        st.cols);
}

// A role score as 5 columns ("-" when absent).
std::string score(const json& x) { return x.is_null() ? std::string("    -") : fmt("%5.2f", x.get<double>()); }

// A head's labels as the terminal spells them: "induction", "prev-token", "self", "sink".
std::string role_text(const json& labels) {
  std::string r;
  for (const auto& l : labels) {
    const std::string s = l.get<std::string>();
    r += (r.empty() ? "" : "+") + (s == "previous_token" ? std::string("prev-token")
                                   : s == "first_token"  ? std::string("sink")
                                                         : s);
  }
  return r.empty() ? "-" : r;
}

void say_roles(const json& roles, const Style& st) {
  const json& th = roles["thresholds"];
  std::string probe = "no probe: the context is too short";
  if (!roles["probe"].is_null()) {
    const int R = roles["probe"]["length"].get<int>();
    probe = std::to_string(R) + " random distinct tokens (seed " + std::to_string(roles["probe"]["seed"].get<int>()) +
            ") repeated twice" + (roles["probe"]["bos"].get<bool>() ? " after <|endoftext|>" : "");
  }
  say(std::string("Roles: prev, sink and self are the mean weight a token (after the first) gives to the token "
                  "just before it, to the first token, and to itself, on the ") +
          (roles["measured_on"] == "probe" ? "probe" : "prompt") +
          "; ind (induction) is the mean weight a token of the second copy of the probe (" + probe +
          ") gives to the token after its own earlier occurrence. A head is labelled induction at ind >= " +
          fmt("%g", th["induction"].get<double>()) + ", prev-token at prev >= " +
          fmt("%g", th["previous_token"].get<double>()) + ", self at self >= " + fmt("%g", th["self"].get<double>()) +
          ", sink at sink >= " + fmt("%g", th["first_token"].get<double>()) + ".",
      st.cols);
}

void print_heads(const json& j, const Style& st, std::size_t limit) {
  const json& heads = j["heads"];
  const json& roles = j["head_roles"];
  const int H = j["model"]["n_head"].get<int>();
  section("the heads: " + std::to_string(heads.size()) + " separate meetings, most focused first");
  say("Every head holds its own meeting with its own questions (W_Q), offered answers (W_K) and actual answers "
      "(W_V). Focus is the mean over tokens (after the first, which can only hear itself) of the largest weight "
      "a token gives: 1 means each token listens to exactly one other. Entropy (nats) is the same spread seen "
      "the other way: 0 is one voice, log(n) is everyone equally.",
      st.cols);
  say_roles(roles, st);
  std::printf("%5s %5s %7s %8s %5s %5s %5s %5s  %-16s %s\n", "layer", "head", "focus", "entropy", "prev", "sink",
              "self", "ind", "role", "last token listens most to");
  const json& tokens = j["tokens"];
  for (std::size_t i = 0; i < heads.size() && i < limit; ++i) {
    const json& h = heads[i];
    const json& r = roles["heads"][h["layer"].get<int>() * H + h["head"].get<int>()];
    std::string to = "nobody (every key silenced)";
    if (!h["last_token_attends_to"].is_null()) {
      const int k = h["last_token_attends_to"].get<int>();
      to = std::to_string(k) + " " + quoted(tokens[k]["text"]) + " (" +
           fmt("%.3f", h["last_token_weight"].get<double>()) + ")";
    }
    std::printf("%5d %5d %7.3f %8.3f %s %s %s %s  %s %s\n", h["layer"].get<int>(), h["head"].get<int>(),
                h["focus"].get<double>(), h["entropy"].get<double>(), score(r["previous_token"]).c_str(),
                score(r["first_token"]).c_str(), score(r["self"]).c_str(), score(r["induction"]).c_str(),
                fit(role_text(r["labels"]), 16).c_str(), to.c_str());
  }
  if (heads.size() > limit)
    std::printf(
        "  ... %zu more heads (--json lists all; --layer/--head show any of them; jomoim heads lists every "
        "head's role)\n",
        heads.size() - limit);
}

// `jomoim heads`: every head's role scores in (layer, head) order.
void print_roles(const json& j, const Style& st) {
  const json& roles = j["head_roles"];
  const int nl = j["model"]["n_layer"].get<int>(), nh = j["model"]["n_head"].get<int>();
  std::printf("jomoim heads: %s (%d layer%s x %d head%s)%s\n", j["model"]["name"].get<std::string>().c_str(), nl,
              nl == 1 ? "" : "s", nh, nh == 1 ? "" : "s",
              j["prompt"].is_null() ? "" : (", on \"" + j["prompt"].get<std::string>() + "\"").c_str());
  say_roles(roles, st);
  std::printf("%5s %5s %5s %5s %5s %5s  %s\n", "layer", "head", "prev", "sink", "self", "ind", "role");
  int labelled = 0;
  for (const auto& r : roles["heads"]) {
    labelled += !r["labels"].empty();
    std::printf("%5d %5d %s %s %s %s  %s\n", r["layer"].get<int>(), r["head"].get<int>(),
                score(r["previous_token"]).c_str(), score(r["first_token"]).c_str(), score(r["self"]).c_str(),
                score(r["induction"]).c_str(), role_text(r["labels"]).c_str());
  }
  std::printf("%d of %zu heads have a role\n", labelled, roles["heads"].size());
}

void print_last_token(const json& head, const json& tokens, const Style& st) {
  const json& lt = head["last_token"];
  const int last = lt["index"].get<int>();
  std::printf("\nthe last token %d %s: whom it listens to, and how much each answer moves its result\n", last,
              quoted(tokens[last]["text"]).c_str());
  say("Its result is sum_j w_j V_j. w_j is how much it listens to token j; |V_j| is how big j's actual answer is; "
      "|w_j V_j| = w_j |V_j| is how far that answer moves the result. A large weight on a small value says "
      "little.",
      st.cols);
  double wmax = 0, cmax = 0;
  for (std::size_t k = 0; k < lt["weights"].size(); ++k) {
    wmax = std::max(wmax, lt["weights"][k].get<double>());
    cmax = std::max(cmax, lt["contribution_norms"][k].get<double>());
  }
  std::printf("%5s  %-16s %8s %-20s %8s %9s %-20s\n", "key", "text", "w_j", "", "|V_j|", "|w_j V_j|", "");
  const std::size_t T = lt["weights"].size();
  const std::size_t first = T > 40 ? T - 40 : 0;
  if (first > 0) std::printf("  [the last 40 of %zu keys; --json has all]\n", T);
  for (std::size_t k = first; k < T; ++k) {
    const double w = lt["weights"][k].get<double>(), c = lt["contribution_norms"][k].get<double>();
    std::printf("%5zu  %s %8.4f %s %8.3f %9.4f %s\n", k, fit(quoted(tokens[k]["text"]), 16).c_str(), w,
                bar(wmax > 0 ? w / wmax : 0, 20).c_str(), lt["value_norms"][k].get<double>(), c,
                bar(cmax > 0 ? c / cmax : 0, 20).c_str());
  }
}

void print_head(const json& j, int layer, const json& head, const Style& st) {
  const json& tokens = j["tokens"];
  const bool col = j["notation"] == "3b1b";
  const std::string rows = col ? "keys j" : "queries i", cols = col ? "queries i" : "keys j";
  section("layer " + std::to_string(layer) + ", head " + std::to_string(head["head"].get<int>()) +
          (col ? " (3Blue1Brown notation, shown instead of the paper's)" : " (the paper's notation)"));
  if (col)
    say("3Blue1Brown writes vectors as columns: the same numbers as the paper's, transposed. Columns are the "
        "tokens asking (queries), rows the tokens answering (keys); softmax runs down each column; the result is "
        "V softmax(K^T Q / sqrt(d)).",
        st.cols);
  else
    say("The paper writes vectors as rows: rows are the tokens asking (queries), columns the tokens answering "
        "(keys); softmax runs along each row; the result is softmax(Q K^T / sqrt(d)) V.",
        st.cols);
  say("Each token asks a question (its query Q_i = E_i W_Q), offers the kind of answer it can give (its key "
      "K_j = E_j W_K) and holds an actual answer (its value V_j = E_j W_V).",
      st.cols);
  heatmap("raw scores Q_i . K_j", head["scores"], head["mask"], tokens, rows, cols, false, st);
  say("How well token j's offered answer fits token i's question: a large dot product is a good fit.", st.cols);
  heatmap("scaled scores Q_i . K_j / sqrt(d)  (x " + fmt("%.4g", head["scale"].get<double>()) + ")", head["scaled"],
          head["mask"], tokens, rows, cols, false, st);
  say("Divided by sqrt(d), d = " + std::to_string(j["model"]["head_dim"].get<int>()) +
          ", so that long vectors do not push the softmax to all-or-nothing.",
      st.cols);
  heatmap("causal mask", head["mask"], head["mask"], tokens, rows, cols, true, st);
  say("A token hears only itself and the tokens before it; a silenced token is heard by nobody.", st.cols);
  heatmap("softmax weights", head["weights"], head["mask"], tokens, rows, cols, true, st);
  say(std::string("Softmax turns each question's scores into weights between 0 and 1 that sum to 1 (each ") +
          (col ? "column" : "row") + "): how much token i listens to token j.",
      st.cols);
  print_last_token(head, tokens, st);
}

void print_compare(const json& j, const Style& st) {
  const json& c = j["compare"];
  section("two meetings: \"" + j["prompt"].get<std::string>() + "\" vs \"" + c["prompt"].get<std::string>() + "\"");
  say("The same last tokens, with different company. In the seed's example, \"I have a lot\" alone may end "
      "with a full stop; after \"Cash or credit card?\" the earlier tokens have something to say, and \"of\" "
      "becomes likelier.",
      st.cols);
  print_top(j["prediction"], "first prompt, top " + std::to_string(j["prediction"]["top"].size()));
  std::printf("\n");
  print_top(c["prediction"], "second prompt, top " + std::to_string(c["prediction"]["top"].size()));
  std::printf("\nhow the next-token distribution shifts (first -> second):\n");
  print_shift(c["shift"], "p", "p_compare", "first", "second");

  auto where = [&](const json& p, const std::string& title) {
    const json& m = p["last_token_attention"]["mean_over_heads"];
    const json& last = m[m.size() - 1];
    const json& tokens = p["tokens"];
    const int li = p["last_token_attention"]["index"].get<int>();
    std::printf("\n%s: where the last token %s listens in the last layer (mean over heads)\n", title.c_str(),
                quoted(tokens[li]["text"]).c_str());
    const std::size_t T = last.size(), first = T > 40 ? T - 40 : 0;
    if (first > 0) std::printf("  [the last 40 of %zu tokens]\n", T);
    for (std::size_t k = first; k < T; ++k)
      std::printf("%5zu  %s %7.4f %s\n", k, fit(quoted(tokens[k]["text"]), 16).c_str(), last[k].get<double>(),
                  bar(last[k].get<double>(), 30).c_str());
  };
  where(j, "first prompt");
  where(c, "second prompt");
  say("Attention is shared: softmax makes the weights sum to 1, so when more tokens have something to say, "
      "each one's voice (including the last token's own) gets relatively weaker.",
      st.cols);
}

// "attribution": who argued for the target (docs/explain.md).
void print_attribution(const json& p, const Style& st) {
  const json& a = p["attribution"];
  const json& tokens = p["tokens"];
  const bool vs = !a["contrast"].is_null();
  const std::string what = quoted(a["target"]["text"]) + (vs ? " over " + quoted(a["contrast"]["text"]) : "");
  const double logit = a["target"]["logit"].get<double>() - (vs ? a["contrast"]["logit"].get<double>() : 0.0);
  section("who argued for " + what);
  say(std::string("The ") + (vs ? "logit difference " : "logit ") + fmt("%.4f", logit) + " of " + what +
          ", split into what each part wrote into the last token's residual stream. " + a["note"].get<std::string>() +
          " Positive argues for, negative against.",
      st.cols);
  const std::size_t T = tokens.size();
  std::vector<double> by(T, 0.0);
  for (const auto& h : a["heads"])
    for (std::size_t j = 0; j < T; ++j) by[j] += h["by_source"][j].get<double>();
  std::vector<std::size_t> order(T);
  for (std::size_t j = 0; j < T; ++j) order[j] = j;
  std::stable_sort(order.begin(), order.end(), [&](auto x, auto y) { return std::abs(by[x]) > std::abs(by[y]); });
  double mx = 1e-30;
  for (double v : by) mx = std::max(mx, std::abs(v));
  std::printf("through attention, by source token (summed over heads):\n");
  for (std::size_t r = 0; r < order.size() && r < 12; ++r) {
    const std::size_t j = order[r];
    std::printf(
        "%5zu  %s %+9.4f  %s\n", j, fit(quoted(tokens[j]["text"]), 16).c_str(), by[j],
        std::string(static_cast<std::size_t>(std::lround(std::abs(by[j]) / mx * 20)), by[j] < 0 ? '-' : '+').c_str());
  }
  if (T > 12) std::printf("  ... %zu more tokens (--json has all)\n", T - 12);
  std::vector<const json*> heads;
  for (const auto& h : a["heads"]) heads.push_back(&h);
  std::stable_sort(heads.begin(), heads.end(), [](const json* x, const json* y) {
    return std::abs((*x)["total"].get<double>()) > std::abs((*y)["total"].get<double>());
  });
  std::printf("\ntop heads:\n");
  for (std::size_t i = 0; i < heads.size() && i < 8; ++i)
    std::printf("  layer %2d head %2d %+9.4f\n", (*heads[i])["layer"].get<int>(), (*heads[i])["head"].get<int>(),
                (*heads[i])["total"].get<double>());
  std::printf("\nMLPs:");
  int l = 0;
  for (const auto& m : a["mlps"]) std::printf("%s %d: %+.4f", l ? "," : "", l, m.get<double>()), ++l;
  std::printf("\nembeddings: token %+.4f, position %+.4f; biases %+.4f\n", a["embeddings"]["token"].get<double>(),
              a["embeddings"]["position"].get<double>(), a["biases"].get<double>());
  std::printf("sum of the parts %.6f vs the model's %s %.6f\n", a["sum"].get<double>(),
              vs ? "logit difference" : "logit", logit);
}

// The two prompts' attributions part by part (--compare): which parts argue differently when
// the context changes. Heads are listed by the largest |change|.
void print_attribution_side_by_side(const json& j, const Style& st) {
  const json& a = j["attribution"];
  const json& b = j["compare"]["attribution"];
  const bool vs = !a["contrast"].is_null();
  const bool same =
      a["target"]["id"] == b["target"]["id"] &&
      (vs ? !b["contrast"].is_null() && a["contrast"]["id"] == b["contrast"]["id"] : b["contrast"].is_null());
  section("who argued, side by side: first prompt vs second");
  say(same ? "The same quantity (" + quoted(a["target"]["text"]) +
                 (vs ? " over " + quoted(a["contrast"]["text"]) : std::string()) +
                 ") in both prompts, part by part; change = second - first. The source tokens differ between "
                 "the prompts, so each head is its sum over them."
           : std::string("Each prompt attributes its own prediction (pass --target to compare one token); change = "
                         "second - first."),
      st.cols);
  struct Row {
    std::string name;
    double x, y;
  };
  std::vector<Row> rows;
  rows.push_back({"token embedding", a["embeddings"]["token"].get<double>(), b["embeddings"]["token"].get<double>()});
  rows.push_back(
      {"position embedding", a["embeddings"]["position"].get<double>(), b["embeddings"]["position"].get<double>()});
  double ta = 0, tb = 0;
  std::vector<Row> heads;
  for (std::size_t n = 0; n < a["heads"].size(); ++n) {
    const double x = a["heads"][n]["total"].get<double>(), y = b["heads"][n]["total"].get<double>();
    ta += x;
    tb += y;
    heads.push_back({"layer " + std::to_string(a["heads"][n]["layer"].get<int>()) + " head " +
                         std::to_string(a["heads"][n]["head"].get<int>()),
                     x, y});
  }
  std::stable_sort(heads.begin(), heads.end(),
                   [](const Row& p, const Row& q) { return std::abs(p.y - p.x) > std::abs(q.y - q.x); });
  rows.push_back({"attention (all heads)", ta, tb});
  for (std::size_t n = 0; n < heads.size() && n < 6; ++n)
    rows.push_back({"  " + heads[n].name, heads[n].x, heads[n].y});
  for (std::size_t l = 0; l < a["mlps"].size(); ++l)
    rows.push_back({"MLP " + std::to_string(l), a["mlps"][l].get<double>(), b["mlps"][l].get<double>()});
  rows.push_back({"biases", a["biases"].get<double>(), b["biases"].get<double>()});
  rows.push_back({"sum", a["sum"].get<double>(), b["sum"].get<double>()});
  std::printf("%-24s %10s %10s %10s\n", "part", "first", "second", "change");
  for (const Row& r : rows) std::printf("%-24s %+10.4f %+10.4f %+10.4f\n", r.name.c_str(), r.x, r.y, r.y - r.x);
  if (heads.size() > 6) std::printf("  (%zu more heads: --json has all)\n", heads.size() - 6);
}

void print_logit_lens(const json& p, const Style& st) {
  section("logit lens: the last token's guess after each layer");
  say("The residual stream of the last token read through the final LayerNorm and the unembedding after the "
      "embeddings and after each layer: what the model would say if it stopped there.",
      st.cols);
  for (const auto& e : p["logit_lens"]) {
    std::string line = fit(e["after"].get<std::string>(), 12);
    int n = 0;
    for (const auto& t : e["top"]) {
      if (n++ == 3) break;
      line += " " + fit(quoted(t["text"]), 16) + fmt(" %.3f ", t["probability"].get<double>());
    }
    std::printf("  %s\n", line.c_str());
  }
}

// "generation" and "steps": each new token with the pass that predicted it.
void print_steps(const json& j, const Style& st) {
  const json& g = j["generation"];
  const json& steps = j["steps"];
  const json& tokens = j["tokens"];
  const double t = g["temperature"].get<double>();
  section("generation: " + std::to_string(steps.size()) + " new token" + (steps.size() == 1 ? "" : "s") +
          " (stop: " + g["stop"].get<std::string>() + ")");
  const std::string how =
      t == 0
          ? std::string("greedy (the most likely token each time)")
          : "sampled at temperature " + fmt("%g", t) + ", top-k " + std::to_string(g["top_k"].get<int>()) + ", top-p " +
                fmt("%g", g["top_p"].get<double>()) + ", seed " + std::to_string(g["seed"].get<std::uint64_t>());
  say("The prompt continued " + how +
          ", as jomoim generate does with the same options; each step is the meeting "
          "of the last token so far, whom it listened to and who argued for the token it chose.",
      st.cols);
  std::printf("  \"%s\" + \"%s\"\n", j["prompt"].get<std::string>().c_str(), g["text"].get<std::string>().c_str());
  auto name = [&](int pos) {
    const int T = static_cast<int>(tokens.size());
    return quoted(pos < T ? tokens[pos]["text"] : steps[pos - T]["text"]);
  };
  for (const auto& s : steps) {
    const int pos = s["position"].get<int>();
    std::printf("\nstep %d: after %d %s -> %s (p %.4f, logit %.4f)\n", s["step"].get<int>(), pos, name(pos).c_str(),
                quoted(s["text"]).c_str(), s["probability"].get<double>(), s["logit"].get<double>());
    std::string line = "  predicted:";
    int n = 0;
    for (const auto& c : s["prediction"]["top"]) {
      if (n++ == 3) break;
      line += " " + quoted(c["text"]) + fmt(" %.3f", c["probability"].get<double>());
    }
    std::printf("%s\n", line.c_str());
    // Whom it listened to: the last layer, mean over heads, the 3 largest weights.
    const json& m = s["last_token_attention"]["mean_over_heads"];
    const json& last = m[m.size() - 1];
    std::vector<int> order(last.size());
    for (std::size_t k = 0; k < order.size(); ++k) order[k] = static_cast<int>(k);
    std::stable_sort(order.begin(), order.end(),
                     [&](int x, int y) { return last[x].get<double>() > last[y].get<double>(); });
    line = "  listened to (last layer, mean over heads):";
    for (std::size_t r = 0; r < order.size() && r < 3; ++r)
      line += " " + std::to_string(order[r]) + " " + name(order[r]) + fmt(" %.3f", last[order[r]].get<double>());
    std::printf("%s\n", line.c_str());
    // Who argued for it: per source token, summed over heads, the 3 largest |parts|.
    const json& a = s["attribution"];
    std::vector<double> by(last.size(), 0.0);
    for (const auto& h : a["heads"])
      for (std::size_t k = 0; k < by.size(); ++k) by[k] += h["by_source"][k].get<double>();
    std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return std::abs(by[x]) > std::abs(by[y]); });
    line = "  argued for it (attention, by source):";
    for (std::size_t r = 0; r < order.size() && r < 3; ++r)
      line += " " + std::to_string(order[r]) + " " + name(order[r]) + fmt(" %+.3f", by[order[r]]);
    std::printf("%s\n", line.c_str());
    std::printf("  sum of the parts %.4f vs the logit %.4f\n", a["sum"].get<double>(), s["logit"].get<double>());
  }
}

void run_explain(const ExplainArgs& a) {
  if (a.top < 1) throw Error("--top must be at least 1, got " + std::to_string(a.top));
  if (!a.generate && !a.sampling_given.empty()) throw Error(a.sampling_given[0] + " needs --generate N");
  if (a.generate) {
    if (*a.generate < 1 || *a.generate > kMaxExplainSteps)
      throw Error("--generate must be in 1.." + std::to_string(kMaxExplainSteps) + ", got " +
                  std::to_string(*a.generate));
    if (a.compare) throw Error("--generate cannot be combined with --compare");
    if (!a.silence.empty() || a.swap_qk)
      throw Error("--generate cannot be combined with --silence or --swap-qk: the generation is the plain model's");
  }
  const ModelDir dir = resolve_model_dir(a.model);
  const Tokenizer tok = Tokenizer::load_dir(dir.path);
  GptModel model = load_model(dir.path, a.weights, a.matmul);
  model.set_threads(a.threads);
  apply_kv_cache(model, a.kv_cache);

  ExplainOptions o;
  o.notation = parse_notation(a.notation);
  o.layer = a.layer;
  o.head = a.head;
  o.silence = a.silence;
  o.swap_qk = a.swap_qk;
  o.top = a.top;
  o.compare = a.compare;
  o.target = a.target;
  o.contrast = a.contrast;
  o.model_name = dir.path.string();
  o.generate = a.generate.value_or(0);
  o.temperature = a.temperature;
  o.top_k = a.top_k;
  o.top_p = a.top_p;
  o.seed = a.seed ? *a.seed : fresh_seed();  // drawn here, so the two passes below share it
  o.stop_at_eos = !a.ignore_eos;
  if (a.json_out) {
    std::printf("%s\n", explain(model, tok, a.prompt, o).dump().c_str());
    return;
  }
  Style st;
  st.cols = terminal_columns();
  st.color = a.color == "always" || (a.color == "auto" && isatty(STDOUT_FILENO) && !std::getenv("NO_COLOR"));
  const bool chosen = a.layer || a.head;
  if (!chosen) {
    // The summary first (no matrices), then the matrices of the most focused head.
    ExplainOptions s = o;
    s.matrices = false;
    s.compare.reset();
    s.generate = 0;
    const json summary = explain(model, tok, a.prompt, s);
    o.layer = summary["heads"][0]["layer"].get<int>();
    o.head = summary["heads"][0]["head"].get<int>();
  }
  const json j = explain(model, tok, a.prompt, o);

  const int nl = j["model"]["n_layer"].get<int>(), nh = j["model"]["n_head"].get<int>();
  std::printf("jomoim explain: \"%s\" with %s (%d layer%s x %d head%s, head_dim %d)\n",
              j["prompt"].get<std::string>().c_str(), j["model"]["name"].get<std::string>().c_str(), nl,
              nl == 1 ? "" : "s", nh, nh == 1 ? "" : "s", j["model"]["head_dim"].get<int>());
  print_tokens(j, st);
  print_prediction(j, a, st);
  print_attribution(j, st);
  print_logit_lens(j, st);
  print_heads(j, st, chosen ? 8 : 12);
  if (!chosen)
    std::printf("\nthe most focused head is layer %d, head %d; --layer L --head H shows any other.\n", *o.layer,
                *o.head);
  for (const auto& L : j["layers"])
    for (const auto& h : L["heads"]) print_head(j, L["layer"].get<int>(), h, st);
  if (!j["compare"].is_null()) {
    print_compare(j, st);
    std::printf("\nthe second prompt:\n");
    print_attribution(j["compare"], st);
    print_logit_lens(j["compare"], st);
    print_attribution_side_by_side(j, st);
  }
  if (!j["generation"].is_null()) print_steps(j, st);
}

struct HeadsArgs {
  std::string model;
  std::optional<std::string> prompt;
  bool swap_qk = false, json_out = false;
  int threads = 0;
};

void run_heads(const HeadsArgs& a) {
  const ModelDir dir = resolve_model_dir(a.model);
  const Tokenizer tok = Tokenizer::load_dir(dir.path);
  GptModel model = GptModel::load(dir.path);
  model.set_threads(a.threads);
  const json j = head_roles(model, tok, a.prompt, a.swap_qk, dir.path.string());
  if (a.json_out) {
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  Style st;
  st.cols = terminal_columns();
  print_roles(j, st);
}

}  // namespace

void add_explain_command(CLI::App& app) {
  {
    auto a = std::make_shared<HeadsArgs>();
    CLI::App* sub = app.add_subcommand(
        "heads", "Measure every head's role: previous-token, first-token (sink), self and induction scores");
    sub->add_option("prompt", a->prompt,
                    "measure previous-token, first-token and self on this prompt (default: on the induction probe)");
    sub->add_option(
        "--model", a->model,
        "model directory (config.json, model.safetensors, vocab.json, merges.txt); default: " + default_model_help());
    sub->add_flag("--swap-qk", a->swap_qk, "measure the model with queries made by W_K and keys by W_Q");
    sub->add_flag("--json", a->json_out, "print the scores as JSON (schema jomoim.heads/1, docs/explain.md)");
    sub->add_option("--threads", a->threads, threads_help)->capture_default_str();
    sub->callback([a] { run_heads(*a); });
  }

  auto a = std::make_shared<ExplainArgs>();
  CLI::App* sub = app.add_subcommand(
      "explain", "Show the attention \"meeting\" of a prompt: tokens, Q.K scores, weights, the next token");
  sub->add_option("prompt", a->prompt, "prompt")->required();
  sub->add_option(
      "--model", a->model,
      "model directory (config.json, model.safetensors, vocab.json, merges.txt); default: " + default_model_help());
  sub->add_option("--compare", a->compare, "a second prompt: how the prediction and the last token's attention shift");
  sub->add_option("--target", a->target,
                  "the token whose logit is attributed to the parts of the model (default: the prediction); "
                  "exactly one token");
  sub->add_option("--contrast", a->contrast, "attribute logit(target) - logit(this token) instead (needs --target)");
  sub->add_option("--layer", a->layer, "show this layer's heads (all heads, or --head's)");
  sub->add_option("--head", a->head, "show this head (in --layer, or in every layer)");
  sub->add_option("--notation", a->notation,
                  "paper: rows are tokens, softmax(QK^T/sqrt(d))V; 3b1b: the same numbers transposed, "
                  "V softmax(K^T Q/sqrt(d))")
      ->check(CLI::IsMember({"paper", "3b1b"}))
      ->capture_default_str();
  sub->add_option("--silence", a->silence, "token indices whose keys nobody hears (every layer and head)");
  sub->add_flag("--swap-qk", a->swap_qk, "make queries with W_K and keys with W_Q, and show what changes");
  sub->add_flag("--json", a->json_out, "print every number as JSON (schema jomoim.explain/1, docs/explain.md)");
  sub->add_option("--top", a->top, "next-token candidates to list")->capture_default_str();
  sub->add_option("--color", a->color, "colour heatmaps: auto (when stdout is a terminal), always, never")
      ->check(CLI::IsMember({"auto", "always", "never"}))
      ->capture_default_str();
  sub->add_option("--generate", a->generate,
                  "continue the prompt by up to N tokens (1.." + std::to_string(kMaxExplainSteps) +
                      ") and show each new token's attention, prediction and attribution");
  sub->add_option("--temperature", a->temperature, "with --generate: sampling temperature; 0 is greedy")
      ->capture_default_str();
  sub->add_option("--top-k", a->top_k, "with --generate: sample among the k most likely tokens; 0: all")
      ->capture_default_str();
  sub->add_option("--top-p", a->top_p,
                  "with --generate: sample among the most likely tokens whose probability reaches p")
      ->capture_default_str();
  sub->add_option("--seed", a->seed, "with --generate: random seed (default: a fresh one, in the output)");
  sub->add_flag("--ignore-eos", a->ignore_eos, "with --generate: keep going after <|endoftext|>");
  sub->add_option("--threads", a->threads, threads_help)->capture_default_str();
  add_kv_cache_option(sub, a->kv_cache);
  add_weights_option(sub, a->weights);
  add_matmul_option(sub, a->matmul);
  sub->callback([a, sub] {
    a->sampling_given.clear();
    for (const char* name : {"--temperature", "--top-k", "--top-p", "--seed", "--ignore-eos"})
      if (sub->count(name) > 0) a->sampling_given.push_back(name);
    run_explain(*a);
  });
}

}  // namespace jomoim::cli
