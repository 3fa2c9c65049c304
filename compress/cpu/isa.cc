#include "compress/cpu/isa.h"

#include <atomic>
#include <cstdlib>

#if defined(__clang__) && __clang_major__ < 15
#include <cpuid.h>
#endif

#include "common/log.h"
#include "common/str_cat.h"

namespace gcagent::compress::cpu {
namespace {

bool detectAvx2() {
#if GC_CPU_X86
  // libgcc's detection also checks that the OS saves the YMM registers (XGETBV).
  __builtin_cpu_init();
#if defined(__clang__) && __clang_major__ < 15
  // clang 14 (the fuzz build) does not know "f16c" here: CPUID leaf 1, ECX bit 29.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
#else
  const bool f16c = __builtin_cpu_supports("f16c");
#endif
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
#else
  return false;
#endif
}

bool avx2Supported() {
  static const bool supported = detectAvx2();
  return supported;
}

// Resolves GCAGENT_CPU_ISA once; a request that cannot be honoured is logged, not fatal,
// because the generic loops give the same results.
Isa initialIsa() {
  const char* request = std::getenv("GCAGENT_CPU_ISA");
  Result<Isa> isa = isaForRequest(request, avx2Supported());
  if (isa.ok()) return *isa;
  GC_LOG(kError, "compress", isa.status().message(), "; using ", isaName(bestIsa()));
  return bestIsa();
}

std::atomic<Isa>& activeSlot() {
  static std::atomic<Isa> slot{initialIsa()};
  return slot;
}

}  // namespace

std::string_view isaName(Isa isa) {
  switch (isa) {
    case Isa::kGeneric: return "generic";
    case Isa::kAvx2: return "avx2";
  }
  return "?";
}

Result<Isa> parseIsa(std::string_view name) {
  if (name == "generic") return Isa::kGeneric;
  if (name == "avx2") return Isa::kAvx2;
  return Status::invalidArgument(strCat("unknown CPU ISA '", name, "' (known: generic, avx2)"));
}

bool cpuSupports(Isa isa) { return isa == Isa::kGeneric || avx2Supported(); }

Isa bestIsa() { return avx2Supported() ? Isa::kAvx2 : Isa::kGeneric; }

Result<Isa> isaForRequest(const char* request, bool avx2_supported) {
  if (request == nullptr || *request == '\0') return avx2_supported ? Isa::kAvx2 : Isa::kGeneric;
  Result<Isa> isa = parseIsa(request);
  if (!isa.ok())
    return Status::invalidArgument(strCat("GCAGENT_CPU_ISA: ", isa.status().message()));
  if (*isa == Isa::kAvx2 && !avx2_supported)
    return Status::failedPrecondition(
        "GCAGENT_CPU_ISA=avx2 but this CPU (or build) lacks AVX2, FMA or F16C");
  return isa;
}

Isa activeIsa() { return activeSlot().load(std::memory_order_relaxed); }

Status setActiveIsa(Isa isa) {
  if (!cpuSupports(isa))
    return Status::failedPrecondition(
        strCat("cannot use CPU ISA ", isaName(isa), ": this CPU (or build) lacks it"));
  activeSlot().store(isa, std::memory_order_relaxed);
  return {};
}

}  // namespace gcagent::compress::cpu
