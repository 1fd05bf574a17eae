// jomoim/core/notation.hpp — the two ways of writing attention, named once for every part.
//
//   paper   rows are tokens: tensors [B, H, N, D]; softmax over each row (over keys)
//   3b1b    columns are tokens (3Blue1Brown's notation): tensors [B, H, D, N]; softmax over
//           each column. The same computation transposed (docs/design.md).
#pragma once

#include <string>

namespace jomoim {

enum class Notation {
  paper,    // rows are tokens: [B, H, N, D]
  col3b1b,  // columns are tokens: [B, H, D, N], softmax per column
};

// "paper" or "3b1b".
const char* notation_name(Notation n);
// The inverse of notation_name; throws Error ("notation: expected 'paper' or '3b1b', got 'x'")
// for anything else.
Notation parse_notation(const std::string& s);

}  // namespace jomoim
