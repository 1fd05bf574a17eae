// The subcommands of the `jomoim` program. Each registers itself on the CLI11 app; its
// callback does the work and throws on failure (main turns that into one line and exit 1).
#pragma once

#include <CLI/CLI.hpp>

namespace jomoim::cli {

void add_attend_command(CLI::App& app);   // cmd_attend.cpp
void add_bench_command(CLI::App& app);    // cmd_bench.cpp
void add_model_commands(CLI::App& app);   // cmd_model.cpp: tokenize, predict, generate, bench-model
void add_train_command(CLI::App& app);    // cmd_train.cpp
void add_explain_command(CLI::App& app);  // cmd_explain.cpp: explain, heads
void add_serve_command(CLI::App& app);    // cmd_serve.cpp: the explorer in the browser

}  // namespace jomoim::cli
