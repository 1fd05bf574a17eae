// notation.cpp — the one parser and printer of jomoim::Notation (jomoim/core/notation.hpp).
#include "jomoim/core/notation.hpp"

#include "jomoim/core/tensor.hpp"

namespace jomoim {

const char* notation_name(Notation n) { return n == Notation::paper ? "paper" : "3b1b"; }

Notation parse_notation(const std::string& s) {
  if (s == "paper") return Notation::paper;
  if (s == "3b1b") return Notation::col3b1b;
  throw Error("notation: expected 'paper' or '3b1b', got '" + s + "'");
}

}  // namespace jomoim
