#include "metrics/read.h"

namespace gcagent::metrics {

Reading read(const prometheus::Registry& registry, std::string_view name,
             const std::map<std::string, std::string>& labels) {
  Reading out;
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const prometheus::ClientMetric& m : family.metric) {
      bool match = true;
      for (const auto& [k, v] : labels) {
        bool found = false;
        for (const auto& l : m.label)
          if (l.name == k && l.value == v) found = true;
        match = match && found;
      }
      if (!match) continue;
      ++out.series;
      switch (family.type) {
        case prometheus::MetricType::Counter: out.value += m.counter.value; break;
        case prometheus::MetricType::Gauge: out.value += m.gauge.value; break;
        case prometheus::MetricType::Histogram:
          out.value += static_cast<double>(m.histogram.sample_count);
          out.sum += m.histogram.sample_sum;
          break;
        default: break;
      }
    }
  }
  return out;
}

}  // namespace gcagent::metrics
