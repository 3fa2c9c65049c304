#include "agent/config/environment.h"

#include <algorithm>

#include "common/str_cat.h"

namespace gcagent::agent {
namespace {

constexpr std::string_view kPrefix = "GCAGENT_";

size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

const std::vector<std::string_view>& otherGcagentVariables() {
  static const std::vector<std::string_view> names = {
      // the client library and the shims (clients/)
      "GCAGENT_SOCKET", "GCAGENT_JOB", "GCAGENT_CODEC", "GCAGENT_CODEC_PARAMS", "GCAGENT_LOCAL_RANK",
      "GCAGENT_LOCAL_SIZE", "GCAGENT_CLIENT_LIB", "GCAGENT_WAIT_FOR_AGENT",
      // the launcher (gcagent-run)
      "GCAGENT_BINARY", "GCAGENT_NODE_METRICS",
      // logging and the codecs' kernels, in every process
      "GCAGENT_LOG_LEVEL", "GCAGENT_LOG_SUBSYS", "GCAGENT_CPU_ISA",
      // the build, test, benchmark and demo scripts
      "GCAGENT_BUILD_DIR", "GCAGENT_BUILD_JOBS", "GCAGENT_CACHE", "GCAGENT_VENVS", "GCAGENT_BENCH_PYTHON",
      "GCAGENT_BENCH_QUICK", "GCAGENT_FUZZ_BUILD_DIR", "GCAGENT_FUZZ_TARGETS", "GCAGENT_TEST_TRAINER",
      "GCAGENT_TORCH_PYTHON", "GCAGENT_IMAGE", "GCAGENT_WHEEL"};
  return names;
}

Status checkGcagentVariables(const std::vector<std::string>& names, const std::vector<std::string>& config_names) {
  std::vector<std::string_view> known(config_names.begin(), config_names.end());
  known.insert(known.end(), otherGcagentVariables().begin(), otherGcagentVariables().end());
  for (const std::string& name : names) {
    if (!name.starts_with(kPrefix) || std::find(known.begin(), known.end(), name) != known.end()) continue;
    const auto nearest = std::min_element(known.begin(), known.end(), [&](std::string_view a, std::string_view b) {
      return editDistance(name, a) < editDistance(name, b);
    });
    return Status::invalidArgument(strCat(name, ": unknown variable (did you mean ", *nearest,
                                          "?); every GCAGENT_ variable is checked, see gcagent --print-config"));
  }
  return {};
}

}  // namespace gcagent::agent
