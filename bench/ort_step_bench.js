#!/usr/bin/env node
// ONNX Runtime's training runtime (onnxruntime-web 1.19.2, wasm CPU, single thread) on one artifact
// set: session creation, then train step + optimizer step + lazy reset over one fixed batch.
//   node ort_step_bench.js SET_DIR --input NAME=DTYPE:D0,D1:FILE ...
//                          [--warmup W --min-steps N --max-steps M --budget-s S]
'use strict';
const fs = require('fs');
const path = require('path');
const { PEERS_DIR, packageVersion, parseArgs, readInputSpec, timeCalls, runMain } = require('./timing');

const findFile = (dir, names) => names.map((n) => path.join(dir, n)).find((p) => fs.existsSync(p)) || null;

runMain(async () => {
  const o = parseArgs(process.argv.slice(2), ['input']);
  const dir = o.positional[0];
  if (!dir) throw new Error('usage: node ort_step_bench.js SET_DIR --input NAME=DTYPE:D0,D1:FILE ...');
  const ort = require(path.join(PEERS_DIR, 'node_modules', 'onnxruntime-web', 'dist', 'ort.training.wasm.min.js'));
  ort.env.wasm.numThreads = 1;
  ort.env.wasm.simd = true;
  ort.env.logLevel = 'error';
  const files = {
    trainModel: findFile(dir, ['training_model.onnx', 'training_model.ort']),
    evalModel: findFile(dir, ['eval_model.onnx', 'eval_model.ort']),
    optimizerModel: findFile(dir, ['optimizer_model.onnx', 'optimizer_model.ort', 'adamw.onnx']),
    checkpointState: findFile(dir, ['checkpoint', 'checkpoint.ckpt']),
  };
  const createOptions = {};
  for (const [key, file] of Object.entries(files)) if (file) createOptions[key] = new Uint8Array(fs.readFileSync(file));

  const createStart = performance.now();
  const session = await ort.TrainingSession.create(createOptions);
  const createMs = performance.now() - createStart;
  const given = Object.fromEntries(o.input.map(readInputSpec));
  const feeds = {};
  for (const name of session.trainingInputNames) {
    if (!given[name]) throw new Error(`no --input for training input '${name}'`);
    feeds[name] = new ort.Tensor(given[name].dtype, given[name].data, given[name].dims);
  }
  const losses = [];
  const timing = await timeCalls(o, async () => {
    const out = await session.runTrainStep(feeds);
    if (files.optimizerModel) await session.runOptimizerStep();
    await session.lazyResetGrad();
    losses.push(Number(out[session.trainingOutputNames[0]].data[0]));
  });
  await session.release();
  return { ...timing, create_ms: createMs, first_loss: losses[0], last_loss: losses[losses.length - 1],
           runtime: 'onnxruntime-web ' + packageVersion('onnxruntime-web') };
});
