// shape_string.cpp — shapes as text, written one way for every part (jomoim/core/tensor.hpp).
#include <string>

#include "jomoim/core/tensor.hpp"

namespace jomoim {
namespace {

// Built piecewise: "[" + std::to_string(...) trips a false -Wrestrict in g++ 12.
std::string join(std::span<const std::int64_t> shape, const char* open, const char* close) {
  std::string s = open;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  s += close;
  return s;
}

}  // namespace

std::string shape_string(std::span<const std::int64_t> shape) { return join(shape, "[", "]"); }

std::string shape_tuple_string(std::span<const std::int64_t> shape) {
  return join(shape, "(", shape.size() == 1 ? ",)" : ")");
}

}  // namespace jomoim
