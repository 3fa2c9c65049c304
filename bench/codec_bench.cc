// Codec throughput against this machine's memory bandwidth, measured in the same run.
//
//   gcagent_codec_bench [--quick] [--mt] [--isa=generic|avx2] [--elements=N[,N...]]
//                       [--benchmark_* flags]
//
// For every codec in the registry: encode (its error-feedback state kept across iterations,
// as in training, the step number advancing) and decodeAdd, at 1M and 64M fp32 elements on
// one thread, or at the sizes --elements lists (40000 is the agent's default slice). Rates
// are GB/s of fp32 input: 4n bytes per call, whatever the codec writes.
//
// The baseline is a streaming copy of the same bytes: memcpy of the n input floats into
// another buffer (the C library's fastest copy, non-temporal stores at 64M). A read-modify-
// write pass (acc[i] += g[i], what decodeAdd of an fp32 buffer must do) is shown next to it.
// The closing table divides every rate by the copy rate at the same n; with repetitions it
// uses the best repetition of each (the machine is shared: the best is the least disturbed).
//
// --quick runs 1M only (also GCAGENT_BENCH_QUICK=1); --mt adds encode and decodeAdd over a
// pool of all cores; --isa picks the CPU loops (default: as the codecs would choose).
// Defaults, each overridable: --benchmark_min_time=0.1 --benchmark_repetitions=3
// --benchmark_enable_random_interleaving=true. The console shows the median repetition.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/thread_pool.h"
#include "compress/cpu/isa.h"
#include "compress/registry.h"

namespace gcagent::bench {
namespace {

using compress::Codec;
using compress::CodecEnv;

// ---- Memory: 64-byte aligned like framework tensors, and touched once at allocation so
// page faults never land in a timed loop.

template <class T>
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t n) : n_(n) {
    const size_t bytes = (std::max<size_t>(n, 1) * sizeof(T) + 63) / 64 * 64;
    p_.reset(static_cast<T*>(std::aligned_alloc(64, bytes)));
    if (!p_) {
      std::fprintf(stderr, "cannot allocate %zu bytes\n", bytes);
      std::exit(1);
    }
    std::memset(static_cast<void*>(p_.get()), 0, bytes);
  }
  T* data() const { return p_.get(); }
  size_t size() const { return n_; }
  std::span<T> span() const { return {p_.get(), n_}; }
  // At least n elements, zeroed: reuses the allocation when it is big enough.
  std::span<T> zeroed(size_t n) {
    if (n > n_ || !p_) *this = Buffer(n);
    std::memset(static_cast<void*>(p_.get()), 0, n * sizeof(T));
    return {p_.get(), n};
  }

 private:
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  size_t n_ = 0;
  std::unique_ptr<T, Free> p_;
};

// Everything the benchmarks of one size share, allocated once per size.
struct Workspace {
  explicit Workspace(size_t n) : n(n), g(n), copy(n), acc(n) { fillGradient(); }

  // Gaussian gradients, stddev 0.5: with 2bit's default threshold 0.5 and the residual
  // carried over, a realistic share of elements is sent. One 1M block repeated keeps the
  // set-up of 64M fast.
  void fillGradient() {
    const size_t block = std::min<size_t>(n, size_t{1} << 20);
    std::mt19937_64 rng(42);
    std::normal_distribution<float> dist(0.0f, 0.5f);
    for (size_t i = 0; i < block; ++i) g.data()[i] = dist(rng);
    for (size_t i = block; i < n; i += block)
      std::memcpy(g.data() + i, g.data(), std::min(block, n - i) * sizeof(float));
  }

  size_t n;
  Buffer<float> g, copy, acc;
  Buffer<float> state;    // one codec's state at a time
  Buffer<std::byte> out;  // one codec's encoding at a time
};

// ---- What a run measured, for the closing table.

struct Label {
  std::string codec;  // "baseline" for the references
  std::string op;
  size_t n = 0;
  size_t threads = 1;
};

struct Row {
  Label label;
  double best_gbps = 0;
  std::string error;
};

// Prints as the console reporter does and keeps the best rate of every benchmark.
class TableReporter : public benchmark::ConsoleReporter {
 public:
  TableReporter() : ConsoleReporter(OO_Tabular) {}

  // Rows appear in the table in the order their benchmarks were registered, whatever order
  // --benchmark_enable_random_interleaving runs them in.
  void expect(const std::string& name, const Label& label) {
    labels_[name] = rows_.size();
    rows_.push_back(Row{label, 0, ""});
  }

  // Each size is one RunSpecifiedBenchmarks call: print the machine context only once.
  bool ReportContext(const Context& context) override {
    printed_header_ = false;
    if (context_printed_) {
      name_field_width_ = context.name_field_width;
      return true;
    }
    context_printed_ = true;
    return ConsoleReporter::ReportContext(context);
  }

  // With repetitions the console shows one line per benchmark, the median; the table keeps
  // the best repetition and --benchmark_out files get every run.
  void ReportRuns(const std::vector<Run>& runs) override {
    std::vector<Run> shown;
    for (const Run& run : runs) {
      record(run);
      if (run.repetitions <= 1 || run.error_occurred || run.aggregate_name == "median")
        shown.push_back(run);
    }
    if (!shown.empty()) ConsoleReporter::ReportRuns(shown);
  }

  void printTable(std::FILE* f) const;

 private:
  void record(const Run& run) {
    if (run.run_type != Run::RT_Iteration) return;
    auto it = labels_.find(run.run_name.function_name);
    if (it == labels_.end()) return;
    Row& row = rows_[it->second];
    if (run.error_occurred) {
      row.error = run.error_message;
      return;
    }
    const double bytes =
        4.0 * static_cast<double>(row.label.n) * static_cast<double>(run.iterations);
    row.best_gbps = std::max(row.best_gbps, bytes / run.real_accumulated_time / 1e9);
  }

  double copyRate(size_t n) const {
    for (const Row& row : rows_)
      if (row.label.codec == "baseline" && row.label.op == "copy" && row.label.n == n)
        return row.best_gbps;
    return 0;
  }

  std::map<std::string, size_t> labels_;  // benchmark name -> index in rows_
  std::vector<Row> rows_;
  bool context_printed_ = false;
};

std::string sizeName(size_t n) {
  if (n % (size_t{1} << 20) == 0) return std::to_string(n >> 20) + "M";
  if (n % 1024 == 0) return std::to_string(n >> 10) + "K";
  return std::to_string(n);
}

void TableReporter::printTable(std::FILE* f) const {
  std::fprintf(f,
               "\nGB/s of fp32 input (4 bytes per element), best run; x copy = rate / memcpy "
               "rate at the same n (1 thread). CPU loops: %s.\n",
               std::string(compress::cpu::isaName(compress::cpu::activeIsa())).c_str());
  std::fprintf(f, "%-10s %-12s %6s %7s %9s %8s\n", "codec", "op", "n", "threads", "GB/s", "x copy");
  for (const Row& row : rows_) {
    const Label& l = row.label;
    if (row.best_gbps == 0) {  // never ran (filtered out), or skipped with an error
      if (!row.error.empty())
        std::fprintf(f, "%-10s %-12s %6s %7zu   skipped: %s\n", l.codec.c_str(), l.op.c_str(),
                     sizeName(l.n).c_str(), l.threads, row.error.c_str());
      continue;
    }
    const double copy = copyRate(l.n);
    std::fprintf(f, "%-10s %-12s %6s %7zu %9.2f ", l.codec.c_str(), l.op.c_str(),
                 sizeName(l.n).c_str(), l.threads, row.best_gbps);
    if (copy > 0)
      std::fprintf(f, "%8.2f\n", row.best_gbps / copy);
    else
      std::fprintf(f, "%8s\n", "-");
  }
}

// ---- The benchmarks.

void finish(benchmark::State& st, size_t n) {
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * static_cast<int64_t>(4 * n));
}

void copyBaseline(benchmark::State& st, Workspace& ws) {
  for (auto _ : st) {
    std::memcpy(ws.copy.data(), ws.g.data(), ws.n * sizeof(float));
    benchmark::ClobberMemory();
  }
  finish(st, ws.n);
}

void addBaseline(benchmark::State& st, Workspace& ws) {
  float* acc = ws.acc.data();
  const float* g = ws.g.data();
  for (auto _ : st) {
    for (size_t i = 0; i < ws.n; ++i) acc[i] += g[i];
    benchmark::ClobberMemory();
  }
  finish(st, ws.n);
}

// Builds a codec for a given pool (a registry row, or one with other parameters).
using Factory = std::function<Result<std::unique_ptr<Codec>>(const CodecEnv&)>;

std::unique_ptr<Codec> makeOrSkip(benchmark::State& st, const Factory& make, const CodecEnv& env) {
  auto codec = make(env);
  if (!codec.ok()) {
    st.SkipWithError(codec.status().toString().c_str());
    return nullptr;
  }
  return std::move(codec).value();
}

void encodeBench(benchmark::State& st, Workspace& ws, const Factory& make, CodecEnv env) {
  auto codec = makeOrSkip(st, make, env);
  if (!codec) return;
  auto state = ws.state.zeroed(codec->stateElements(ws.n));
  auto out = ws.out.zeroed(codec->maxEncodedBytes(ws.n));
  compress::SliceId id{1, 0, 0};
  for (auto _ : st) {
    auto written = codec->encode(ws.g.span(), state, out, id);
    if (!written.ok()) {
      st.SkipWithError(written.status().toString().c_str());
      break;
    }
    ++id.step;
  }
  finish(st, ws.n);
}

void decodeBench(benchmark::State& st, Workspace& ws, const Factory& make, CodecEnv env) {
  auto codec = makeOrSkip(st, make, env);
  if (!codec) return;
  auto state = ws.state.zeroed(codec->stateElements(ws.n));
  auto out = ws.out.zeroed(codec->maxEncodedBytes(ws.n));
  const compress::SliceId id{1, 0, 0};
  auto written = codec->encode(ws.g.span(), state, out, id);
  if (!written.ok()) {
    st.SkipWithError(written.status().toString().c_str());
    return;
  }
  auto bytes = out.first(*written);
  auto acc = ws.acc.zeroed(ws.n);
  for (auto _ : st) {
    Status s = codec->decodeAdd(bytes, acc, id);
    if (!s.ok()) {
      st.SkipWithError(s.toString().c_str());
      break;
    }
  }
  finish(st, ws.n);
}

// ---- Registration, one size at a time.

template <class Fn>
void add(TableReporter& reporter, Label label, Fn&& fn) {
  std::string name = label.codec + "/" + label.op + "/" + sizeName(label.n);
  reporter.expect(name, label);
  benchmark::RegisterBenchmark(name.c_str(), std::forward<Fn>(fn))
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

void registerBaselines(TableReporter& reporter, Workspace& ws) {
  add(reporter, {"baseline", "copy", ws.n}, [&ws](benchmark::State& st) { copyBaseline(st, ws); });
  add(reporter, {"baseline", "add", ws.n}, [&ws](benchmark::State& st) { addBaseline(st, ws); });
}

void registerCodec(TableReporter& reporter, Workspace& ws, ThreadPool* pool, const std::string& name,
                   const Factory& make) {
  add(reporter, {name, "encode", ws.n}, [&ws, make](benchmark::State& st) { encodeBench(st, ws, make, {}); });
  add(reporter, {name, "decode_add", ws.n}, [&ws, make](benchmark::State& st) { decodeBench(st, ws, make, {}); });
  if (pool == nullptr) return;
  const CodecEnv env{pool};
  const std::string t = std::to_string(pool->size());
  add(reporter, {name, "encode_mt" + t, ws.n, pool->size()},
      [&ws, make, env](benchmark::State& st) { encodeBench(st, ws, make, env); });
  add(reporter, {name, "decode_mt" + t, ws.n, pool->size()},
      [&ws, make, env](benchmark::State& st) { decodeBench(st, ws, make, env); });
}

void registerCodecs(TableReporter& reporter, Workspace& ws, ThreadPool* pool) {
  for (const auto& info : compress::codecList()) {
    const std::string name(info.name);
    registerCodec(reporter, ws, pool, name,
                  [name](const CodecEnv& env) { return compress::makeCodec(name, {}, env); });
  }
  // dgc after its sparsity warm-up (the registry's row encodes the first steps of a slice,
  // 25% of it sent at the first): what a training run spends nearly all its steps in.
  registerCodec(reporter, ws, pool, "dgc-steady",
                [](const CodecEnv& env) { return compress::makeCodec("dgc", {{"warmup_steps", "0"}}, env); });
}

// ---- Flags.

struct Options {
  bool quick = false;
  bool multi_thread = false;
  std::string isa;     // empty: as the codecs choose
  std::vector<size_t> elements;  // --elements; empty: 1M, and 64M unless quick
  std::string filter;  // --benchmark_filter, also left for the library to see
};

// "40000,1048576" -> {40000, 1048576}; exits on anything but positive integers.
std::vector<size_t> parseSizes(std::string_view list) {
  std::vector<size_t> sizes;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    const std::string item(list.substr(0, comma));
    char* end = nullptr;
    const unsigned long long n = std::strtoull(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || n == 0) {
      std::fprintf(stderr, "--elements: '%s' is not a positive element count\n", item.c_str());
      std::exit(1);
    }
    sizes.push_back(static_cast<size_t>(n));
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
  }
  return sizes;
}

// Takes this program's own flags out of argv; the rest goes to the benchmark library.
Options takeOwnFlags(int& argc, char** argv) {
  Options opt;
  const char* quick_env = std::getenv("GCAGENT_BENCH_QUICK");
  opt.quick = quick_env != nullptr && std::string_view(quick_env) == "1";
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--quick") {
      opt.quick = true;
    } else if (arg == "--mt") {
      opt.multi_thread = true;
    } else if (arg.starts_with("--isa=")) {
      opt.isa = arg.substr(6);
    } else if (arg.starts_with("--elements=")) {
      opt.elements = parseSizes(arg.substr(11));
    } else {
      if (arg.starts_with("--benchmark_filter=")) opt.filter = arg.substr(19);
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  return opt;
}

// argv with this program's defaults for the flags the user did not give: three
// repetitions, interleaved so that a burst of load on a shared machine hits the baseline
// and the codecs alike, each at least 0.1 s (a 64M call takes tens of milliseconds).
std::vector<char*> withDefaults(int argc, char** argv) {
  static char min_time[] = "--benchmark_min_time=0.1";
  static char repetitions[] = "--benchmark_repetitions=3";
  static char interleave[] = "--benchmark_enable_random_interleaving=true";
  std::vector<char*> args(argv, argv + argc);
  for (char* flag : {min_time, repetitions, interleave}) {
    const std::string_view key =
        std::string_view(flag).substr(0, std::string_view(flag).find('=') + 1);
    const bool given = std::any_of(args.begin() + 1, args.end(), [&](const char* a) {
      return std::string_view(a).starts_with(key);
    });
    if (!given) args.insert(args.begin() + 1, flag);
  }
  args.push_back(nullptr);
  return args;
}

// Runs what --benchmark_filter selects plus the baselines, which the table always needs,
// in one call so that interleaved repetitions mix them.
void runWithBaselines(TableReporter& reporter, const std::string& filter) {
  if (filter.empty() || filter == "." || filter == "all") {
    benchmark::RunSpecifiedBenchmarks(&reporter, ".");
  } else if (filter[0] == '-') {  // a negative filter cannot be joined with an alternative
    benchmark::RunSpecifiedBenchmarks(&reporter, "^baseline/");
    benchmark::RunSpecifiedBenchmarks(&reporter, filter);
  } else {
    benchmark::RunSpecifiedBenchmarks(&reporter, "^baseline/|" + filter);
  }
}

int run(int argc, char** argv) {
  const Options opt = takeOwnFlags(argc, argv);
  std::vector<char*> args = withDefaults(argc, argv);
  int bench_argc = static_cast<int>(args.size()) - 1;
  benchmark::Initialize(&bench_argc, args.data());
  if (benchmark::ReportUnrecognizedArguments(bench_argc, args.data())) return 1;
  if (!opt.isa.empty()) {
    auto isa = compress::cpu::parseIsa(opt.isa);
    Status s = isa.ok() ? compress::cpu::setActiveIsa(*isa) : isa.status();
    if (!s.ok()) {
      std::fprintf(stderr, "--isa: %s\n", s.toString().c_str());
      return 1;
    }
  }
  benchmark::AddCustomContext("gcagent_cpu_isa",
                              std::string(compress::cpu::isaName(compress::cpu::activeIsa())));

  std::unique_ptr<ThreadPool> pool;
  if (opt.multi_thread) pool = std::make_unique<ThreadPool>(0);
  std::vector<size_t> sizes = opt.elements;
  if (sizes.empty()) {
    sizes.push_back(size_t{1} << 20);
    if (!opt.quick) sizes.push_back(size_t{64} << 20);
  }

  TableReporter reporter;
  for (size_t n : sizes) {
    Workspace ws(n);
    registerBaselines(reporter, ws);
    registerCodecs(reporter, ws, pool.get());
    runWithBaselines(reporter, opt.filter);
    benchmark::ClearRegisteredBenchmarks();
  }
  reporter.printTable(stdout);
  benchmark::Shutdown();
  return 0;
}

}  // namespace
}  // namespace gcagent::bench

int main(int argc, char** argv) { return gcagent::bench::run(argc, argv); }
