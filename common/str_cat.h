// Builds a message from mixed values: strCat("codec '", name, "': ", n, " bytes").
// For error and log paths only; never on a per-element path.
#pragma once

#include <sstream>
#include <string>

namespace gcagent {

template <class... Args>
std::string strCat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

}  // namespace gcagent
