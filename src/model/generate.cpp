// The generation loop. See include/jomoim/model/generate.hpp.
#include "jomoim/model/generate.hpp"

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <utility>

namespace jomoim {

std::uint64_t fresh_seed() { return std::random_device{}(); }

void GenerateOptions::validate() const {
  if (max_tokens < 0) throw Error("max_tokens must be >= 0, got " + std::to_string(max_tokens));
  sampling.validate();
}

const char* stop_name(StopReason reason) {
  switch (reason) {
    case StopReason::none:
      return "";
    case StopReason::length:
      return "length";
    case StopReason::eos:
      return "eos";
    case StopReason::context:
      return "context";
    case StopReason::stopped:
      return "stopped";
    case StopReason::error:
      return "error";
  }
  return "";
}

namespace {
const GenerateOptions& checked(const GenerateOptions& o) {
  o.validate();
  return o;
}
}  // namespace

Generation::Generation(const GptModel& model, std::vector<std::int32_t> prompt, const GenerateOptions& options)
    : model_(&model),
      prompt_(std::move(prompt)),
      max_tokens_(checked(options).max_tokens),
      eos_(options.eos),
      sampler_(options.sampling),
      seed_(options.sampling.seed) {
  if (prompt_.empty()) throw Error("generate: no prompt tokens");
  const GptConfig& c = model.config();
  // Room for prompt + max_tokens, at most the context (a longer prompt is the forward's to refuse).
  const std::size_t want = prompt_.size() + static_cast<std::size_t>(max_tokens_);
  cache_ = model.make_cache(static_cast<int>(std::min<std::size_t>(want, static_cast<std::size_t>(c.n_positions))));
}

void Generation::prefill() {
  if (prefilled_ || stop_ != StopReason::none) return;
  try {
    logits_ = model_->forward(prompt_, cache_);
  } catch (...) {
    stop_ = StopReason::error;
    throw;
  }
  prefilled_ = true;
}

std::optional<std::int32_t> Generation::next() {
  if (stop_ != StopReason::none) return std::nullopt;
  try {
    return step();
  } catch (...) {
    stop_ = StopReason::error;
    throw;
  }
}

void Generation::cancel() {
  if (stop_ == StopReason::none) stop_ = StopReason::stopped;
}

std::optional<std::int32_t> Generation::step() {
  const auto n_positions = static_cast<std::size_t>(model_->config().n_positions);
  prefill();
  const int i = static_cast<int>(out_.size());
  if (i >= max_tokens_) {
    stop_ = StopReason::length;
    return std::nullopt;
  }
  if (pending_) {  // feed the previous token only now that another one is wanted
    const std::int32_t one[1] = {*pending_};
    pending_.reset();
    logits_ = model_->forward(one, cache_);
  }
  // The sequence (prompt + generated) never grows past the model's context.
  if (sequence_length() >= n_positions) {
    stop_ = StopReason::context;
    return std::nullopt;
  }
  const std::int32_t id = sampler_.sample(logits_);
  if (eos_ && id == *eos_) {
    stop_ = StopReason::eos;
    return std::nullopt;
  }
  out_.push_back(id);
  // Fed to the model only when a further token will be sampled from its logits: not after the
  // last one (max_tokens reached, or the context full; the next step reports which).
  if (i + 1 < max_tokens_ && sequence_length() < n_positions) pending_ = id;
  return id;
}

GenerateResult generate(const GptModel& model, std::span<const std::int32_t> prompt, const GenerateOptions& options,
                        const std::function<bool(std::int32_t)>& on_token) {
  using Clock = std::chrono::steady_clock;
  auto ms_since = [](Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  Generation g(model, {prompt.begin(), prompt.end()}, options);
  GenerateResult r;
  auto t0 = Clock::now();
  g.prefill();
  r.prefill_ms = ms_since(t0);
  t0 = Clock::now();
  while (const auto id = g.next()) {
    if (on_token && !on_token(*id)) {
      g.cancel();
      break;
    }
  }
  r.decode_ms = ms_since(t0);
  r.ids = g.ids();
  r.stop = g.stop();
  return r;
}

}  // namespace jomoim
