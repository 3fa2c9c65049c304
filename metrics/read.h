// Reads stats back by name from a registry, as a scrape would see them: for tests and
// for the progress summary, so both read exactly what Prometheus reads.
#pragma once

#include <prometheus/registry.h>

#include <cstddef>
#include <map>
#include <string>
#include <string_view>

namespace gcagent::metrics {

struct Reading {
  double value = 0;   // summed over the matching series; a histogram's sample count
  double sum = 0;     // a histogram's sum of observations
  size_t series = 0;  // how many series matched (0: no such stat or labels)
};

// Every series of `name` (the full name, gcagent_ prefix included) whose labels include
// `labels`.
Reading read(const prometheus::Registry& registry, std::string_view name,
             const std::map<std::string, std::string>& labels = {});

}  // namespace gcagent::metrics
