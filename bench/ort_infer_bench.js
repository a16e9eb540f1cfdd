#!/usr/bin/env node
// ONNX Runtime's native CPU inference (npm onnxruntime-node) on one model: median latency of a run.
//   node ort_infer_bench.js MODEL.onnx --shape D0,D1,... [--threads T]
//                           [--warmup W --min-steps N --max-steps M --budget-s S]
// The model's single float input gets seeded values of that shape.
'use strict';
const path = require('path');
const { PEERS_DIR, packageVersion, parseArgs, timeCalls, runMain } = require('./timing');

runMain(async () => {
  const o = parseArgs(process.argv.slice(2));
  const model = o.positional[0];
  if (!model || !o.shape) throw new Error('usage: node ort_infer_bench.js MODEL.onnx --shape D0,D1,... [--threads T]');
  const ort = require(path.join(PEERS_DIR, 'node_modules', 'onnxruntime-node'));
  const loadStart = performance.now();
  const session = await ort.InferenceSession.create(model, {
    intraOpNumThreads: o.threads, interOpNumThreads: 1, executionMode: 'sequential', graphOptimizationLevel: 'all',
  });
  const loadMs = performance.now() - loadStart;
  if (session.inputNames.length !== 1) {
    throw new Error(`${model}: expected one input, got ${session.inputNames.join(', ')}`);
  }
  const dims = String(o.shape).split(',').map(Number);
  const data = new Float32Array(dims.reduce((a, b) => a * b, 1));
  let seed = 42;  // a 32-bit LCG: values in [0, 1)
  for (let i = 0; i < data.length; i++) data[i] = (seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 4294967296;
  const feeds = { [session.inputNames[0]]: new ort.Tensor('float32', data, dims) };
  const timing = await timeCalls(o, () => session.run(feeds));
  return { ...timing, load_ms: loadMs, threads: o.threads,
           runtime: 'onnxruntime-node ' + packageVersion('onnxruntime-node') };
});
