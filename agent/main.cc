// gcagent: the per-node gradient-communication sidecar.
//   gcagent [--config FILE] [--section.key=value ...] [--print-config] [--validate]
#include <malloc.h>
#include <unistd.h>
#include <pthread.h>

#include <csignal>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "agent/agent.h"
#include "agent/config/config.h"
#include "common/build_commit.h"
#include "common/build_config.h"
#include "compress/codec_reference.h"
#include "metrics/stats.h"
#include "transport/ucx/ucx_transport.h"

namespace {

// SIGINT and SIGTERM wait until Agent::run() handles them (it unblocks them in its loop's
// thread), so no thread takes a stop signal with the default action, which kills at once.
// Blocked before the libraries' constructors run, not in main(): UCX 1.22's spend about
// 0.4 s patching memory hooks, and a stop asked then (a launcher giving up at once) killed
// the agent with an empty log. Every thread started later inherits the mask.
void blockStopSignals(int, char**, char**) {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
}
__attribute__((section(".preinit_array"), used)) void (*const kBlockStopSignals)(int, char**, char**) =
    blockStopSignals;

void usage() {
  std::fputs(
      "usage: gcagent [--config FILE] [--section.key=value ...] [--print-config] [--validate]\n"
      "       gcagent --list-metrics | --list-codecs | --config-reference | --version\n"
      "  --config FILE     TOML configuration (overridden by GCAGENT_<SECTION>_<KEY>, then by flags)\n"
      "  --print-config    print every key with its value, source, default and help, then exit\n"
      "  --validate        check the configuration and the codecs, then exit\n"
      "  --list-metrics    print every exported stat: name, type, labels, help\n"
      "  --list-codecs     print every codec's parameters: type, default, range, meaning (markdown)\n"
      "  --version         print the version and what this build holds\n"
      "  --config-reference  print the configuration reference (markdown) of docs/operator.md\n",
      stdout);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gcagent::agent;
  // Slice buffers (about 160 KB each) come and go thousands of times an iteration. With
  // glibc's defaults each one is a fresh mmap or lands past the trim threshold, so every
  // slice paid page faults and kernel zeroing: a tenth of the agent's CPU. Keep them in the
  // heap and keep freed heap for reuse.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  ConfigInputs inputs;
  inputs.getenv = [](const char* name) { return std::getenv(name); };
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    inputs.environment_names.emplace_back(entry.substr(0, entry.find('=')));
  }
  bool print = false, validate = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      usage();
      return 0;
    }
    if (arg == "--list-metrics") {
      std::fputs(gcagent::metrics::formatStatList().c_str(), stdout);
      return 0;
    }
    if (arg == "--list-codecs") {
      std::fputs(gcagent::compress::codecReferenceMarkdown().c_str(), stdout);
      return 0;
    }
    if (arg == "--version") {
      std::printf("gcagent %s (commit %s, UCX %s, CUDA %s)\n", GCAGENT_VERSION, GCAGENT_GIT_COMMIT,
                  gcagent::transport::ucxVersion().c_str(), GCAGENT_HAVE_CUDA ? "built in" : "not built in");
      return 0;
    }
    if (arg == "--config-reference") {
      std::fputs(configReferenceMarkdown().c_str(), stdout);
      return 0;
    }
    if (arg == "--print-config") {
      print = true;
    } else if (arg == "--validate") {
      validate = true;
    } else if (arg == "--config" && i + 1 < argc) {
      inputs.file_path = argv[++i];
    } else if (arg.rfind("--config=", 0) == 0) {
      inputs.file_path = arg.substr(9);
    } else if (arg.rfind("--", 0) == 0 && arg.find('.') != std::string::npos) {
      // --section.key=value or --section.key value
      std::string flag = arg.substr(2);
      if (flag.find('=') == std::string::npos) {
        if (i + 1 >= argc) {
          std::fprintf(stderr, "gcagent: %s needs a value\n", arg.c_str());
          return 2;
        }
        // Appended in two steps: "=" + std::string(...) trips GCC 12's -Wrestrict at -O3.
        flag += '=';
        flag += argv[++i];
      }
      inputs.overrides.push_back(flag);
    } else {
      std::fprintf(stderr, "gcagent: unknown argument '%s' (see --help)\n", arg.c_str());
      return 2;
    }
  }
  auto loaded = loadConfig(inputs);
  if (!loaded.ok()) {
    std::fprintf(stderr, "gcagent: %s\n", loaded.status().message().c_str());
    return 2;
  }
  if (print) {
    std::fputs(printConfig(*loaded).c_str(), stdout);
    return 0;
  }
  auto agent = Agent::create(loaded->config);
  if (!agent.ok()) {
    std::fprintf(stderr, "gcagent: %s\n", agent.status().message().c_str());
    return 2;
  }
  if (validate) {
    std::puts("gcagent: configuration is valid");
    return 0;
  }
  gcagent::Status status = (*agent)->run();
  if (!status.ok()) {
    std::fprintf(stderr, "gcagent: %s\n", status.message().c_str());
    return 1;
  }
  return 0;
}
