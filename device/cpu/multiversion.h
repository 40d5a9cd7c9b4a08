// GC_CPU_CLONES: compile a hot CPU-reference loop for several x86-64 levels
// and pick one at load time (GCC/clang target_clones), so the reference runs
// at vector speed on the machine it is on without a -march build flag.
// Clones are by feature (the resolver tests CPU features; "arch=" clones test
// the CPU model, which virtual machines often do not report).
// Results do not depend on the clone: the device/cpu sources are compiled
// with -ffp-contract=off (no fused multiply-add), and every loop under it is
// element-wise or reduces with exact operations (max, integer counts).
#pragma once

// Sanitizer builds define GRADCOMP_NO_CLONES (one code path, no ifuncs).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(GRADCOMP_NO_CLONES)
#define GC_CPU_CLONES __attribute__((target_clones("default", "avx2", "avx512f")))
#define GC_HAVE_AVX512DQ_PATH 1
#else
#define GC_CPU_CLONES
#define GC_HAVE_AVX512DQ_PATH 0
#endif

// For loops whose vector form needs 64-bit integer multiplies and
// int64 <-> double conversions (AVX-512 DQ; the counter-based random numbers
// of stochastic rounding): a function compiled for that target, called when
// avx512DqAvailable(), else the default one; both inline the same body.
#if GC_HAVE_AVX512DQ_PATH
#define GC_AVX512DQ __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx2,popcnt")))
inline bool avx512DqAvailable() {
  static const bool yes = __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  return yes;
}
#else
#define GC_AVX512DQ
inline bool avx512DqAvailable() { return false; }
#endif
