#include "core/wasm_relaxed_simd.hpp"

#if defined(__EMSCRIPTEN__) && defined(__wasm_simd128__)
#include <emscripten.h>

// Builds the kernel's module (memory imported from this one, shared in the pthreads build), validates it,
// instantiates it on the calling thread and puts its function into that thread's table: its index, or 0.
// Locals: 0 kc, 1 a, 2 b, 3 acc, 4 count (params); 5-12 the accumulators, 13-16 a row of B, 17-18 A's two values,
// 19 the depth left, 20 the B strip's cursor.
EM_JS(int, et_wasm_install_fma_tiles, (), {
  var leb = function(n) {
    var out = [];
    do {
      var low = n & 127;
      n = Math.floor(n / 128);
      out.push(n ? low | 128 : low);
    } while (n);
    return out;
  };
  var simd = function(op) { return [253].concat(leb(op)); };
  var section = function(id, body) { return [id].concat(leb(body.length), body); };
  var name = function(text) { return leb(text.length).concat(Array.from(text, function(c) { return c.charCodeAt(0); })); };
  var LOCAL_GET = 32, LOCAL_SET = 33, LOCAL_TEE = 34, I32_CONST = 65, I32_ADD = 106, I32_SUB = 107, LOOP = 3, BR_IF = 13;
  var END = 11, V128_LOAD = 0, V128_STORE = 11, V128_CONST = 12, F32X4_SPLAT = 19, F32X4_RELAXED_MADD = 261;
  var ACC = 5, B = 13, A = 17, DEPTH = 19, CURSOR = 20;
  var body = [LOOP, 64];  // over the tiles
  for (var k = 0; k < 8; ++k) body = body.concat(simd(V128_CONST), new Array(16).fill(0), [LOCAL_SET, ACC + k]);
  body = body.concat([LOCAL_GET, 2, LOCAL_SET, CURSOR, LOCAL_GET, 0, LOCAL_SET, DEPTH, LOOP, 64]);  // over the depth
  for (var j = 0; j < 4; ++j) body = body.concat([LOCAL_GET, CURSOR], simd(V128_LOAD), [4], leb(16 * j), [LOCAL_SET, B + j]);
  for (var i = 0; i < 2; ++i) body = body.concat([LOCAL_GET, 1, 42, 2], leb(4 * i), simd(F32X4_SPLAT), [LOCAL_SET, A + i]);
  for (var i = 0; i < 2; ++i)
    for (var j = 0; j < 4; ++j)
      body = body.concat([LOCAL_GET, A + i, LOCAL_GET, B + j, LOCAL_GET, ACC + 4 * i + j], simd(F32X4_RELAXED_MADD),
                         [LOCAL_SET, ACC + 4 * i + j]);
  body = body.concat([LOCAL_GET, 1, I32_CONST, 8, I32_ADD, LOCAL_SET, 1, LOCAL_GET, CURSOR, I32_CONST, 192, 0, I32_ADD,
                      LOCAL_SET, CURSOR]);
  body = body.concat([LOCAL_GET, DEPTH, I32_CONST, 1, I32_SUB, LOCAL_TEE, DEPTH, BR_IF, 0, END]);
  for (var k = 0; k < 8; ++k) body = body.concat([LOCAL_GET, 3, LOCAL_GET, ACC + k], simd(V128_STORE), [4], leb(16 * k));
  body = body.concat([LOCAL_GET, 3, I32_CONST, 128, 1, I32_ADD, LOCAL_SET, 3]);
  body = body.concat([LOCAL_GET, 4, I32_CONST, 1, I32_SUB, LOCAL_TEE, 4, BR_IF, 0, END, END]);
  var func = [2, 14, 123, 2, 127].concat(body);
  var shared = typeof SharedArrayBuffer !== "undefined" && wasmMemory.buffer instanceof SharedArrayBuffer;
  var memory = shared ? [3, 0].concat(leb(65536)) : [0, 0];
  var bytes = [0, 97, 115, 109, 1, 0, 0, 0].concat(
    section(1, [1, 96, 5, 127, 127, 127, 127, 127, 0]),
    section(2, [1].concat(name("env"), name("memory"), [2], memory)),
    section(3, [1, 0]),
    section(7, [1].concat(name("tiles"), [0, 0])),
    section(10, [1].concat(leb(func.length), func)));
  var binary = new Uint8Array(bytes);
  if (!WebAssembly.validate(binary)) return 0;
  try {
    var instance = new WebAssembly.Instance(new WebAssembly.Module(binary), {env: {memory: wasmMemory}});
    var index = wasmTable.grow(1);
    wasmTable.set(index, instance.exports.tiles);
    return index;
  } catch (e) {
    return 0;
  }
});

namespace edgetrain::wasm_relaxed_simd {

std::atomic<bool> allowed{true};
thread_local int kernel_index = 0;

int InstallKernel() {
  const int index = et_wasm_install_fma_tiles();
  kernel_index = index > 0 ? index : -1;
  return kernel_index;
}

}  // namespace edgetrain::wasm_relaxed_simd

// For the JS package (env.wasm.relaxedSimd): switches the kernel on or off for every thread; whether it
// runs on the calling thread now.
extern "C" EMSCRIPTEN_KEEPALIVE int et_wasm_use_relaxed_simd(int on) {
  edgetrain::wasm_relaxed_simd::allowed.store(on != 0, std::memory_order_relaxed);
  return edgetrain::WasmFmaTilesKernel() != nullptr;
}
#endif
