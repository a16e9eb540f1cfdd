#!/usr/bin/env node
// The pthreads module (web/dist/edgetrain-mt.*) against the native build: the MLP and the LeNet-BN CNN
// train 5 steps with the native build's losses, in Node.js (asked for with env.wasm.numThreads) and in a
// cross-origin isolated Chromium page; a page that is not isolated falls back to the single-threaded
// module and still trains; bad thread counts reject with typed errors (web/test/threads_suite.js).
//   node web/test/threads.mjs --runner build/tests/ort_sequence_runner --edgetrain build/edgetrain
//                             --mlp-artifacts DIR --work DIR [--browser /usr/bin/chromium] [--threads 4]
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const WEB = path.resolve(HERE, '..'), ROOT = path.resolve(WEB, '..');
const args = {};
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
for (const k of ['runner', 'edgetrain', 'mlp-artifacts', 'work']) if (!args[k]) throw new Error(`--${k} is required`);
const threads = parseInt(args.threads || '4', 10);
const work = path.resolve(args.work);
fs.mkdirSync(work, { recursive: true });
const roots = { work, mlp: path.resolve(args['mlp-artifacts']) };
const real = (p) => path.join(roots[p.split('/')[0]], p.split('/').slice(1).join('/'));

// A seeded batch (mulberry32), its native numbers from tests/ort_sequence_runner.
function batch(name, shape, classes, seed) {
  let a = seed;
  const rng = () => {
    a |= 0; a = (a + 0x6D2B79F5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const n = shape.reduce((x, y) => x * y, 1);
  fs.writeFileSync(path.join(work, `${name}_input.bin`), Buffer.from(Float32Array.from({ length: n }, rng).buffer));
  fs.writeFileSync(path.join(work, `${name}_labels.bin`), Buffer.from(BigInt64Array.from({ length: shape[0] }, (_, i) => BigInt(i % classes)).buffer));
  return [{ name: 'input', dtype: 'float32', shape, file: `work/${name}_input.bin` },
          { name: 'labels', dtype: 'int64', shape: [shape[0]], file: `work/${name}_labels.bin` }];
}
function native(set) {
  const a = ['--train', real(set.files.train), '--checkpoint', real(set.files.checkpoint), '--eval', real(set.files.eval),
    '--optimizer', real(set.files.optimizer), '--lr', String(set.lr)];
  for (const i of set.inputs) a.push('--input', `${i.name}=${i.dtype}:${i.shape.join(',')}:${real(i.file)}`);
  return JSON.parse(execFileSync(path.resolve(args.runner), a, { encoding: 'utf8' }));
}
const files = (dir) => ({ train: `${dir}/training_model.onnx`, eval: `${dir}/eval_model.onnx`,
  optimizer: `${dir}/optimizer_model.onnx`, checkpoint: `${dir}/checkpoint` });
execFileSync(path.resolve(args.edgetrain), ['generate-artifacts', path.join(ROOT, 'models', 'lenet_bn.onnx'), '-o', path.join(work, 'cnn')]);
// 1e-4 relative, as the single-threaded checks: threads change only how sums are split (the chunked
// GEMM/convolution loops sum each output in one thread; reductions add chunk partials in another order),
// float32 rounding of a few hundred terms per sum, far below 1e-4 after 5 steps. The parameter sum within
// 1e-3: AdamW moves a parameter by about lr whatever the size of its gradient, so one whose gradient is
// rounding noise (a dead ReLU's) can move +lr in one build and -lr in the other.
const sets = [
  { name: 'mlp', lr: 0.001, tolerance: 1e-4, paramTolerance: 1e-3, files: files('mlp'), inputs: batch('mlp', [8, 1, 28, 28], 10, 42) },
  { name: 'lenet_bn cnn', lr: 0.001, tolerance: 1e-4, paramTolerance: 1e-3, files: files('work/cnn'), inputs: batch('cnn', [16, 1, 28, 28], 10, 7) },
];
for (const set of sets) set.expected = native(set);

const { threadChecks } = await import(pathToFileURL(path.join(HERE, 'threads_suite.js')).href);
const t0 = Date.now();
const runs = [];
if (!args.browser) {
  const ort = await import(pathToFileURL(path.join(WEB, 'lib', 'index.js')).href);
  ort.env.logLevel = 'error';
  const read = async (p) => new Uint8Array(fs.readFileSync(real(p)));
  runs.push(['node', await threadChecks(ort, read, { numThreads: threads, expectThreaded: true, sets }, console.log)]);
} else {
  const { chromium } = await import(pathToFileURL(path.join(WEB, 'node_modules', 'playwright-core', 'index.mjs')).href);
  const { startServer } = await import(pathToFileURL(path.join(WEB, 'tools', 'serve.mjs')).href);
  const browser = await chromium.launch({ executablePath: args.browser, args: ['--no-sandbox'] });
  try {
    for (const isolated of [true, false]) {
      const server = await startServer({ mounts: { '/work': work, '/mlp': roots.mlp }, isolated });
      try {
        const page = await browser.newPage();
        page.on('console', (m) => console.log(`[page${isolated ? ', isolated' : ''}] ${m.text()}`));
        page.on('pageerror', (e) => console.log(`[page error] ${e.message}`));
        await page.goto(`http://127.0.0.1:${server.address().port}/web/test/threads.html`);
        const isolatedHere = await page.evaluate(() => globalThis.crossOriginIsolated);
        // The isolated page runs the GEMM's relaxed SIMD fused multiply-add (Chromium has it), the other one the
        // plain SIMD128 multiplies and adds (env.wasm.relaxedSimd = false): both to the native losses.
        const config = isolated ? { numThreads: threads, expectThreaded: true, requireRelaxedSimd: true, sets }
          : { numThreads: threads, expectThreaded: false, reasonPattern: 'not cross-origin isolated', relaxedSimd: false,
              sets: sets.slice(0, 1) };
        const report = await page.evaluate((cfg) => window.runThreads(cfg), config);
        report.checks.unshift({ name: `page crossOriginIsolated is ${isolated}`, ok: isolatedHere === isolated });
        runs.push([isolated ? 'chromium, isolated' : 'chromium, not isolated', report]);
        await page.close();
      } finally {
        server.close();
      }
    }
  } finally {
    await browser.close();
  }
}
let total = 0, failed = 0;
for (const [where, report] of runs) {
  total += report.checks.length;
  for (const c of report.checks) if (!c.ok) { failed += 1; console.log(`FAIL [${where}] ${c.name} ${c.detail || ''}`); }
  for (const [name, r] of Object.entries(report.results)) console.log(`  [${where}] ${name}: ${r.ms} ms for the sequence`);
}
console.log(`web threads ${args.browser ? 'browser (chromium)' : 'node'}: ${total - failed}/${total} checks passed in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
process.exit(failed || total < (args.browser ? 46 : 25) ? 1 : 0);  // every check ran
