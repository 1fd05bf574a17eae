#include "commands.hpp"
namespace jomoim::cli { void add_attend_command(CLI::App& app) { app.add_subcommand("attend", "(being written)"); } }
