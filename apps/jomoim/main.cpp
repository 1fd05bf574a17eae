// jomoim — the one command-line program. Subcommands live in cmd_*.cpp; this file only wires
// them together and turns every failure into one line on stderr and a non-zero exit.
#include <cstdio>
#include <exception>
#include <string>

#include "commands.hpp"
#include "jomoim/core/tensor.hpp"
#include "jomoim/version.hpp"

int main(int argc, char** argv) {
  CLI::App app{"jomoim — fast, exact, visible transformer attention on CPUs", "jomoim"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("jomoim ") + jomoim::version);
  // CLI11's own parse errors (missing or unknown options, bad values) get the same one-line
  // form as every other failure; its default adds a second line pointing at --help.
  app.failure_message(
      [](const CLI::App*, const CLI::Error& e) { return std::string("jomoim: error: ") + e.what() + "\n"; });
  jomoim::cli::add_attend_command(app);
  jomoim::cli::add_bench_command(app);
  jomoim::cli::add_model_commands(app);
  jomoim::cli::add_train_command(app);
  jomoim::cli::add_explain_command(app);
  jomoim::cli::add_serve_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const jomoim::Error& e) {
    std::fprintf(stderr, "jomoim: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "jomoim: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
