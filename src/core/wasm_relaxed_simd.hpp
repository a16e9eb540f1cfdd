// WebAssembly's relaxed SIMD fused multiply-add, for the GEMM micro-kernel. Emscripten 3.1.6 (LLVM 14)
// emits only the proposal's early opcodes, which browsers reject; so the one kernel that needs it is a
// tiny module of its own, built at run time where the engine validates it and called through the table.
#pragma once

#include <atomic>
#include <cstdint>

namespace edgetrain {

// For t < count (>= 1): acc[t][2][4 x f32x4] = sum over p < kc of a[2 kc t + 2p + i] * b[16p + 4j ... +3], fused
// multiply-adds in p order: `count` consecutive packed 2-row strips of A against one packed 16-column strip of B.
using WasmFmaTiles = void (*)(int32_t kc, const float* a, const float* b, float* acc, int32_t count);

#if defined(__EMSCRIPTEN__) && defined(__wasm_simd128__)
namespace wasm_relaxed_simd {
extern std::atomic<bool> allowed;
extern thread_local int kernel_index;  // this thread's table index: 0 not yet tried, -1 none
int InstallKernel();                   // tries once on this thread and sets kernel_index
}  // namespace wasm_relaxed_simd

// This thread's kernel, or null where relaxed SIMD does not validate or was switched off. Inline: the GEMM asks
// once per strip of register tiles.
inline WasmFmaTiles WasmFmaTilesKernel() {
  if (!wasm_relaxed_simd::allowed.load(std::memory_order_relaxed)) return nullptr;
  const int index =
      wasm_relaxed_simd::kernel_index ? wasm_relaxed_simd::kernel_index : wasm_relaxed_simd::InstallKernel();
  return index > 0 ? reinterpret_cast<WasmFmaTiles>(static_cast<uintptr_t>(index)) : nullptr;
}
#else
inline WasmFmaTiles WasmFmaTilesKernel() { return nullptr; }
#endif

}  // namespace edgetrain
