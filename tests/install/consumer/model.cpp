// Uses the installed model and tokenizer: loads a GPT-2 model directory (argv[1]) and prints
// the most likely next token after argv[2].
#include <jomoim/model/model.hpp>
#include <jomoim/text/tokenizer.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: consumer_model MODEL_DIR PROMPT\n");
    return 2;
  }
  try {
    const jomoim::Tokenizer tok = jomoim::Tokenizer::load_dir(argv[1]);
    const jomoim::GptModel model = jomoim::GptModel::load(argv[1]);
    const auto ids = jomoim::encode_prompt(tok, argv[2], model.config().n_positions, model.config().vocab_size);
    const std::vector<float> logits = model.logits(ids);
    const std::size_t V = static_cast<std::size_t>(model.config().vocab_size);
    const auto last = logits.end() - static_cast<std::ptrdiff_t>(V);
    const auto best = static_cast<std::int32_t>(std::max_element(last, logits.end()) - last);
    std::printf("%s\n", tok.decode(std::vector<std::int32_t>{best}).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer_model: %s\n", e.what());
    return 1;
  }
  return 0;
}
