// Boost.Asio, included in one place (g++ 12 in C++20 mode needs <utility> first).
#pragma once

#include <utility>

#include <boost/asio.hpp>

namespace gcagent::agent {
namespace asio = boost::asio;
}  // namespace gcagent::agent
