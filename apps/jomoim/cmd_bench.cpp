#include "commands.hpp"
namespace jomoim::cli { void add_bench_command(CLI::App& app) { app.add_subcommand("bench", "(being written)"); } }
