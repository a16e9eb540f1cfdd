#!/usr/bin/env node
// edgetrain-web and onnxruntime-web 1.19.2 side by side on the same artifact sets: the median time of a
// training step (runTrainStep + runOptimizerStep + lazyResetGrad) on one batch, in Node.js or in Debian's
// headless Chromium (both packages in the same page), single-threaded. --models DIR (web/bench/models.py
// makes it) adds our three benchmark models, each package on its own generator's artifacts of the same
// forward model, and in the browser a row of the CNN with --threads N threads (a cross-origin isolated page).
//   node web/bench/bench.mjs --sets ../shared/ort-artifacts [--models build/web-bench] [--threads 2]
//                            [--steps 15] [--browser /usr/bin/chromium] [--relaxed-simd false] [--only SET,...]
// (--relaxed-simd false: edgetrain-web's GEMM on plain SIMD128 multiplies and adds, not relaxed SIMD's fused ones)
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { fileURLToPath, pathToFileURL } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const WEB = path.resolve(HERE, '..');
const args = {};
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
const sets = path.resolve(args.sets || path.join(WEB, '..', '..', 'shared', 'ort-artifacts'));
const steps = parseInt(args.steps || '15', 10);
const threads = parseInt(args.threads || '2', 10);
const relaxedSimd = args['relaxed-simd'] !== 'false';
const peers = process.env.EDGETRAIN_PEERS_DIR || path.join(process.env.HOME, '.cache', 'edgetrain-peers');
const ortDist = path.join(peers, 'node_modules', 'onnxruntime-web', 'dist');

const config = ['training_api', 'ort_format', 'lenet_cnn', 'eeg_cnn'].map((name) => {
  const ref = JSON.parse(fs.readFileSync(path.join(sets, name, 'reference.json'), 'utf8'));
  const files = Object.fromEntries(Object.entries(ref.files).filter(([, f]) => f).map(([k, f]) => [k, `sets/${name}/${f}`]));
  return { name, files, inputs: ref.inputs.map((i) => ({ ...i, file: `sets/${name}/${ref.inputs_dir || 'ref_inputs'}/${i.file}` })) };
});
const models = args.models ? path.resolve(args.models) : null;
if (models) {
  const files = (dir) => ({ train: `models/${dir}/training_model.onnx`, optimizer: `models/${dir}/optimizer_model.onnx`,
    checkpoint: `models/${dir}/checkpoint` });
  for (const m of JSON.parse(fs.readFileSync(path.join(models, 'models.json'), 'utf8'))) {
    config.push({ name: `${m.name} (ours: batch ${m.batch})`, model: m.name, filesOf: { edgetrain: files(`${m.name}/edgetrain`),
      'onnxruntime-web': files(`${m.name}/ort`) }, inputs: m.inputs.map((i) => ({ ...i, file: `models/${i.file}` })) });
  }
}
const readLocal = async (p) => {
  const [root, ...rest] = p.split('/');
  return new Uint8Array(fs.readFileSync(path.join(root === 'sets' ? sets : models, ...rest)));
};

if (args.only) {  // --only a,b: just those sets (a model row matches by its model's name)
  const only = args.only.split(',');
  config.splice(0, config.length, ...config.filter((c) => only.includes(c.name) || only.includes(c.model)));
}
const { benchSet } = await import(pathToFileURL(path.join(HERE, 'bench_lib.js')).href);
let rows;
if (!args.browser) {
  const require = (await import('node:module')).createRequire(import.meta.url);
  const ortWeb = require(path.join(ortDist, 'ort.training.wasm.min.js'));
  ortWeb.env.wasm.numThreads = 1;
  ortWeb.env.logLevel = 'error';
  const ours = await import(pathToFileURL(path.join(WEB, 'lib', 'index.js')).href);
  ours.env.wasm.relaxedSimd = relaxedSimd;
  rows = [];
  for (const set of config) rows.push({ set: set.name, ...(await benchSet({ edgetrain: ours, 'onnxruntime-web': ortWeb }, readLocal, set, steps)) });
} else {
  const { chromium } = await import(pathToFileURL(path.join(WEB, 'node_modules', 'playwright-core', 'index.mjs')).href);
  const { startServer } = await import(pathToFileURL(path.join(WEB, 'tools', 'serve.mjs')).href);
  const browser = await chromium.launch({ executablePath: args.browser, args: ['--no-sandbox'] });
  const page = async (cfg, n) => {  // n > 1: a cross-origin isolated page (SharedArrayBuffer), n threads each
    const server = await startServer({ mounts: { '/sets': sets, '/ort': ortDist, ...(models ? { '/models': models } : {}) }, isolated: n > 1 });
    try {
      const p = await browser.newPage();
      p.on('console', (m) => console.log(`[page] ${m.text()}`));
      await p.goto(`http://127.0.0.1:${server.address().port}/web/bench/page.html?threads=${n}&relaxedSimd=${relaxedSimd}`);
      return await p.evaluate(({ c, k }) => window.runBench(c, k), { c: cfg, k: steps });
    } finally {
      server.close();
    }
  };
  try {
    rows = await page(config, 1);
    const cnn = config.filter((c) => c.model === 'cnn');
    if (cnn.length && threads > 1) for (const r of await page(cnn, threads)) rows.push({ ...r, set: `${r.set}, ${threads} threads` });
  } finally {
    await browser.close();
  }
}

const gz = (f) => zlib.gzipSync(fs.readFileSync(f), { level: 9 }).length;
const ourWasm = path.join(WEB, 'dist', 'edgetrain.wasm'), ortWasm = path.join(ortDist, 'ort-training-wasm-simd-threaded.wasm');
console.log(`${args.browser ? 'Chromium (headless)' : `Node.js ${process.version}`}, 1 thread unless a row says, median step time of ${steps} timed groups (ms)` +
  `${relaxedSimd ? '' : ', edgetrain-web with env.wasm.relaxedSimd = false'}:`);
console.log('| set | edgetrain-web | onnxruntime-web 1.19.2 | ratio |');
console.log('|---|---|---|---|');
for (const r of rows) {
  const a = r.edgetrain, b = r['onnxruntime-web'];
  const cell = (x) => (typeof x === 'number' ? (x < 0.1 ? x.toPrecision(2) : x.toFixed(2)) : `fails: ${x}`);
  console.log(`| ${r.set} | ${cell(a)} | ${cell(b)} | ${typeof a === 'number' && typeof b === 'number' ? (a / b).toFixed(2) + 'x' : '-'} |`);
}
console.log(`| .wasm, gzipped | ${(gz(ourWasm) / 1048576).toFixed(2)} MiB | ${(gz(ortWasm) / 1048576).toFixed(2)} MiB | ${(gz(ourWasm) / gz(ortWasm)).toFixed(2)}x |`);
const ourMt = path.join(WEB, 'dist', 'edgetrain-mt.wasm');
if (fs.existsSync(ourMt)) console.log(`| .wasm with threads, gzipped | ${(gz(ourMt) / 1048576).toFixed(2)} MiB | ${(gz(ortWasm) / 1048576).toFixed(2)} MiB | ${(gz(ourMt) / gz(ortWasm)).toFixed(2)}x |`);
