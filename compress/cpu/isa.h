// Which instruction set the CPU codec loops run with, chosen once at run time. Every
// vectorised loop has a portable twin compiled for the baseline ISA, and the two produce
// bit-identical bytes and residuals, so the choice changes speed only.
//
// The choice is the best ISA the CPU supports, unless GCAGENT_CPU_ISA=generic|avx2 asks for
// another; a request the CPU cannot honour is logged and ignored. Tests and benchmarks
// switch it with setActiveIsa().
#pragma once

#include <string_view>

#include "common/status.h"

#if defined(__x86_64__) || defined(__i386__)
#define GC_CPU_X86 1
// Marks a function compiled for AVX2 (with F16C). Only call it when activeIsa() is kAvx2.
// FMA is deliberately left out of the code generation (though required by the detection):
// a fused multiply-add rounds differently, and the kernels must match the scalar math bit
// for bit, so the compiler must never be allowed to contract a*b+c.
#define GC_TARGET_AVX2 __attribute__((target("avx2,f16c")))
#else
#define GC_CPU_X86 0
#endif

namespace gcagent::compress::cpu {

enum class Isa {
  kGeneric,  // the baseline of the build (SSE2 on x86-64): always available
  kAvx2,     // AVX2 + FMA + F16C (x86-64-v3 class CPUs)
};

std::string_view isaName(Isa isa);  // "generic", "avx2"
Result<Isa> parseIsa(std::string_view name);

// Whether this CPU (and this build) can run `isa`.
bool cpuSupports(Isa isa);

// The best ISA this CPU supports.
Isa bestIsa();

// What a GCAGENT_CPU_ISA value (null or empty when unset) selects on a CPU with or without
// AVX2: the ISA, or an error saying why the request cannot be honoured.
Result<Isa> isaForRequest(const char* request, bool avx2_supported);

// The ISA the codecs use now: resolved from the CPU and GCAGENT_CPU_ISA at the first call.
// One relaxed atomic load, cheap enough to ask on every encode.
Isa activeIsa();

// Switches the ISA for every codec (tests, benchmarks). Refuses one the CPU lacks.
Status setActiveIsa(Isa isa);

inline bool useAvx2() { return activeIsa() == Isa::kAvx2; }

}  // namespace gcagent::compress::cpu
