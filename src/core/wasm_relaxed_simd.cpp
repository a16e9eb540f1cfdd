#include "core/wasm_relaxed_simd.hpp"

#if defined(__EMSCRIPTEN__) && defined(__wasm_simd128__)
#include <emscripten.h>

// Builds the kernel's module (memory imported from this one, shared in the pthreads build), validates it,
// instantiates it on the calling thread and puts its function into that thread's table: its index, or 0.
// Locals: 0 kc, 1 a, 2 b, 3 acc (params); 4-11 the accumulators, 12-15 a row of B, 16-17 A's two values.
EM_JS(int, et_wasm_install_fma_tile, (), {
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
  var LOCAL_GET = 32, LOCAL_SET = 33, LOCAL_TEE = 34, V128_LOAD = 0, V128_STORE = 11, F32X4_SPLAT = 19;
  var F32X4_RELAXED_MADD = 261;
  var body = [3, 64];
  for (var j = 0; j < 4; ++j) body = body.concat([LOCAL_GET, 2], simd(V128_LOAD), [4], leb(16 * j), [LOCAL_SET, 12 + j]);
  for (var i = 0; i < 2; ++i) body = body.concat([LOCAL_GET, 1, 42, 2], leb(4 * i), simd(F32X4_SPLAT), [LOCAL_SET, 16 + i]);
  for (var i = 0; i < 2; ++i)
    for (var j = 0; j < 4; ++j)
      body = body.concat([LOCAL_GET, 16 + i, LOCAL_GET, 12 + j, LOCAL_GET, 4 + 4 * i + j], simd(F32X4_RELAXED_MADD),
                         [LOCAL_SET, 4 + 4 * i + j]);
  body = body.concat([LOCAL_GET, 1, 65, 8, 106, LOCAL_SET, 1, LOCAL_GET, 2, 65, 192, 0, 106, LOCAL_SET, 2]);
  body = body.concat([LOCAL_GET, 0, 65, 1, 107, LOCAL_TEE, 0, 13, 0, 11]);
  for (var k = 0; k < 8; ++k) body = body.concat([LOCAL_GET, 3, LOCAL_GET, 4 + k], simd(V128_STORE), [4], leb(16 * k));
  body.push(11);
  var func = [1, 14, 123].concat(body);
  var shared = typeof SharedArrayBuffer !== "undefined" && wasmMemory.buffer instanceof SharedArrayBuffer;
  var memory = shared ? [3, 0].concat(leb(65536)) : [0, 0];
  var bytes = [0, 97, 115, 109, 1, 0, 0, 0].concat(
    section(1, [1, 96, 4, 127, 127, 127, 127, 0]),
    section(2, [1].concat(name("env"), name("memory"), [2], memory)),
    section(3, [1, 0]),
    section(7, [1].concat(name("tile"), [0, 0])),
    section(10, [1].concat(leb(func.length), func)));
  var binary = new Uint8Array(bytes);
  if (!WebAssembly.validate(binary)) return 0;
  try {
    var instance = new WebAssembly.Instance(new WebAssembly.Module(binary), {env: {memory: wasmMemory}});
    var index = wasmTable.grow(1);
    wasmTable.set(index, instance.exports.tile);
    return index;
  } catch (e) {
    return 0;
  }
});

namespace edgetrain::wasm_relaxed_simd {

std::atomic<bool> allowed{true};
thread_local int tile_index = 0;

int InstallTile() {
  const int index = et_wasm_install_fma_tile();
  tile_index = index > 0 ? index : -1;
  return tile_index;
}

}  // namespace edgetrain::wasm_relaxed_simd

// For the JS package (env.wasm.relaxedSimd): switches the kernel on or off for every thread; whether it
// runs on the calling thread now.
extern "C" EMSCRIPTEN_KEEPALIVE int et_wasm_use_relaxed_simd(int on) {
  edgetrain::wasm_relaxed_simd::allowed.store(on != 0, std::memory_order_relaxed);
  return edgetrain::WasmFmaTileKernel() != nullptr;
}
#endif
