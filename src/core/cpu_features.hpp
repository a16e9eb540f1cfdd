// What the CPU running the process can execute. Kernels are compiled for baseline x86-64 and carry
// clones for wider instruction sets (target attributes); these pick a clone at run time.
#pragma once

namespace edgetrain {

#if defined(__GNUC__) && defined(__x86_64__)
inline bool CpuHasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
inline bool CpuHasAvx2Fma() {
  static const bool has = CpuHasAvx2() && __builtin_cpu_supports("fma");
  return has;
}
inline bool CpuHasAvx512() {
  static const bool has = CpuHasAvx2Fma() && __builtin_cpu_supports("avx512f");
  return has;
}
#else
inline bool CpuHasAvx2() { return false; }
inline bool CpuHasAvx512() { return false; }
inline bool CpuHasAvx2Fma() { return false; }
#endif

}  // namespace edgetrain
