// WebAssembly's relaxed SIMD fused multiply-add, for the GEMM micro-kernel. Emscripten 3.1.6 (LLVM 14)
// emits only the proposal's early opcodes, which browsers reject; so the one kernel that needs it is a
// tiny module of its own, built at run time where the engine validates it and called through the table.
#pragma once

#include <cstdint>

namespace edgetrain {

// acc[2][4 x f32x4] = sum over p < kc of a[2p + i] * b[16p + 4j ... +3], with fused multiply-adds in p order.
using WasmFmaTile = void (*)(int32_t kc, const float* a, const float* b, float* acc);

#if defined(__EMSCRIPTEN__) && defined(__wasm_simd128__)
// This thread's kernel, or null where relaxed SIMD does not validate or was switched off.
WasmFmaTile WasmFmaTileKernel();
#else
inline WasmFmaTile WasmFmaTileKernel() { return nullptr; }
#endif

}  // namespace edgetrain
