#!/usr/bin/env node
// The WebAssembly build against the native one and ORT's reference numbers, in Node.js or in headless
// Chromium (Debian's, driven by playwright-core):
//   node web/test/run.mjs --runner build/tests/ort_sequence_runner --mlp-artifacts DIR --sets ../shared/ort-artifacts
//                         --work DIR [--browser /usr/bin/chromium]
// Checks (web/test/suite.js): the MLP's 5 losses, eval loss and parameter sums equal the native build's on
// the same artifacts and batch (1e-4 relative); ORT's artifact sets reproduce their reference.json
// (1e-4); checkpoints round-trip: one saved by WASM trains natively as WASM trains it, and one saved
// natively trains in WASM as natively; bad inputs reject with typed errors naming the input.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const WEB = path.resolve(HERE, '..');

function parseArgs(argv) {
  const o = {};
  for (let i = 0; i < argv.length; i += 2) o[argv[i].replace(/^--/, '')] = argv[i + 1];
  for (const k of ['runner', 'mlp-artifacts', 'sets', 'work']) if (!o[k]) throw new Error(`--${k} is required`);
  return o;
}

function mulberry32(a) {
  return () => {
    a |= 0; a = (a + 0x6D2B79F5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function close(a, b, rel) { return Math.abs(a - b) <= rel * Math.max(Math.abs(a), Math.abs(b), 1e-12); }

const args = parseArgs(process.argv.slice(2));
const work = path.resolve(args.work), sets = path.resolve(args.sets), mlp = path.resolve(args['mlp-artifacts']);
fs.mkdirSync(work, { recursive: true });
// Config paths are logical: work/..., sets/..., mlp/... (files here, URLs under the server in the page).
const roots = { work, sets, mlp };
const real = (p) => path.join(roots[p.split('/')[0]], p.split('/').slice(1).join('/'));

function runner(set, checkpoint, save) {
  const a = ['--train', real(set.files.train), '--checkpoint', real(checkpoint || set.files.checkpoint)];
  if (set.files.eval) a.push('--eval', real(set.files.eval));
  if (set.files.optimizer) a.push('--optimizer', real(set.files.optimizer));
  for (const i of set.inputs) a.push('--input', `${i.name}=${i.dtype}:${i.shape.join(',')}:${real(i.file)}`);
  if (set.lr !== undefined) a.push('--lr', String(set.lr));
  if (save) a.push('--save', save);
  return JSON.parse(execFileSync(path.resolve(args.runner), a, { encoding: 'utf8' }));
}

// The MLP (models/mlp.onnx through generate-artifacts): a seeded batch of 8, native numbers, a native checkpoint.
const rng = mulberry32(42);
const images = Float32Array.from({ length: 8 * 784 }, rng);
const labels = BigInt64Array.from({ length: 8 }, (_, i) => BigInt(i % 10));
fs.writeFileSync(path.join(work, 'mlp_input.bin'), Buffer.from(images.buffer));
fs.writeFileSync(path.join(work, 'mlp_labels.bin'), Buffer.from(labels.buffer));
const mlpSet = {
  name: 'mlp', lr: 0.001, resume: true, export: 'output',
  files: { train: 'mlp/training_model.onnx', eval: 'mlp/eval_model.onnx', optimizer: 'mlp/optimizer_model.onnx', checkpoint: 'mlp/checkpoint' },
  inputs: [{ name: 'input', dtype: 'float32', shape: [8, 1, 28, 28], file: 'work/mlp_input.bin' },
           { name: 'labels', dtype: 'int64', shape: [8], file: 'work/mlp_labels.bin' }],
};
mlpSet.expected = runner(mlpSet, null, path.join(work, 'native.ckpt'));
const fromNative = { ...mlpSet, name: 'mlp from a native checkpoint', resume: false, lr: undefined,
  files: { ...mlpSet.files, checkpoint: 'work/native.ckpt' } };
fromNative.expected = runner(fromNative);

// ORT's artifact sets with ORT's numbers (the version-1 checkpoint set against ORT 1.17.3's).
const ortSets = [['training_api', 'reference.json'], ['ort_format', 'reference.json'], ['lenet_cnn', 'reference.json'],
  ['eeg_cnn', 'reference.json'], ['mnist_webdemo_v1', 'reference_i1.17.3.json']].map(([name, refFile]) => {
  const ref = JSON.parse(fs.readFileSync(path.join(sets, name, refFile), 'utf8'));
  const files = Object.fromEntries(Object.entries(ref.files).filter(([, f]) => f).map(([k, f]) => [k, `sets/${name}/${f}`]));
  return { name, files, lr: ref.learning_rate, expected: ref,
    inputs: ref.inputs.map((i) => ({ name: i.name, dtype: i.dtype, shape: i.shape, file: `sets/${name}/${ref.inputs_dir || 'ref_inputs'}/${i.file}` })) };
});
// Chromium has relaxed SIMD (since 114): there the sets run the GEMM's fused multiply-add; Node.js 20 has it only
// behind a flag, so web_node checks the plain SIMD128 path.
const config = { sets: [mlpSet, fromNative, ...ortSets], bad_inputs: mlpSet, require_relaxed_simd: !!args.browser,
  custom_ops: { train: 'sets/custom_ops/training_model.onnx', checkpoint: 'sets/custom_ops/checkpoint' } };

let report;
const t0 = Date.now();
if (!args.browser) {
  const ort = await import(pathToFileURL(path.join(WEB, 'lib', 'index.js')).href);
  const { runSuite } = await import(pathToFileURL(path.join(HERE, 'suite.js')).href);
  report = await runSuite(ort, async (p) => new Uint8Array(fs.readFileSync(real(p))), config, console.log);
} else {
  const { chromium } = await import(pathToFileURL(path.join(WEB, 'node_modules', 'playwright-core', 'index.mjs')).href);
  const { startServer } = await import(pathToFileURL(path.join(WEB, 'tools', 'serve.mjs')).href);
  const server = await startServer({ mounts: { '/work': work, '/sets': sets, '/mlp': mlp } });
  const browser = await chromium.launch({ executablePath: args.browser, args: ['--no-sandbox'] });
  try {
    const page = await browser.newPage();
    page.on('console', (m) => console.log(`[page] ${m.text()}`));
    page.on('pageerror', (e) => console.log(`[page error] ${e.message}`));
    await page.goto(`http://127.0.0.1:${server.address().port}/web/test/page.html`);
    report = await page.evaluate((cfg) => window.runBrowserSuite(cfg), config);
    for (const v of Object.values(report.results)) {  // bytes come back as base64 (web/test/page.html)
      if (v && v.checkpoint) v.checkpoint = new Uint8Array(Buffer.from(v.checkpoint, 'base64'));
      if (v && v.exported) v.exported = new Uint8Array(Buffer.from(v.exported, 'base64'));
    }
  } finally {
    await browser.close();
    server.close();
  }
}

// WASM -> native: the checkpoint the WASM run saved trains natively exactly as WASM trained it.
const checks = report.checks;
const check = (name, ok, detail = '') => { checks.push({ name, ok: !!ok, detail }); console.log(`${ok ? 'ok  ' : 'FAIL'} ${name}${ok ? '' : ` (${detail})`}`); };
const wasmMlp = report.results.mlp;
if (wasmMlp && wasmMlp.checkpoint) {
  fs.writeFileSync(path.join(work, 'wasm.ckpt'), wasmMlp.checkpoint);
  const native = runner({ ...mlpSet, lr: undefined }, 'work/wasm.ckpt');
  const wasm = report.results['mlp/resumed'];
  native.train_losses.forEach((b, k) => check(`checkpoint saved by WASM, native train loss ${k + 1} ${b} vs WASM ${wasm.train_losses[k]}`,
    close(wasm.train_losses[k], b, 1e-4)));
  check(`checkpoint saved by WASM, native eval loss ${native.eval_loss} vs WASM ${wasm.eval_loss}`, close(wasm.eval_loss, native.eval_loss, 1e-4));
} else {
  check('the WASM run saved a checkpoint', false, 'no checkpoint');
}
// The model exported in WASM computes, in ONNX Runtime's native inference build (onnxruntime-node, a peer),
// what the eval model computed in WASM.
if (wasmMlp && wasmMlp.exported) {
  const peers = process.env.EDGETRAIN_PEERS_DIR || path.join(process.env.HOME, '.cache', 'edgetrain-peers');
  try {
    const ortNode = (await import(pathToFileURL(path.join(peers, 'node_modules', 'onnxruntime-node', 'dist', 'index.js')).href)).default;
    const session = await ortNode.InferenceSession.create(Buffer.from(wasmMlp.exported));
    const out = await session.run({ input: new ortNode.Tensor('float32', images, [8, 1, 28, 28]) });
    const got = Array.from(out[session.outputNames[0]].data), want = wasmMlp.eval_output;
    const worst = Math.max(...got.map((v, i) => Math.abs(v - want[i])));
    check(`exported model in onnxruntime-node: ${got.length} logits within 1e-4 of the WASM eval model's (worst ${worst.toExponential(2)})`,
      got.length === want.length && worst <= 1e-4);
  } catch (e) {
    check('exported model runs in onnxruntime-node', false, e.message);
  }
} else {
  check('the WASM run exported a model', false, 'no model');
}

// An app written for onnxruntime-web 1.19 (ORT's reference script, ../shared/peers/ort_train_reference.js) with
// its import pointed at this package reproduces ORT's numbers.
if (!args.browser) {
  for (const name of ['training_api', 'lenet_cnn']) {
    const copy = path.join(work, `ort_app_${name}`);
    fs.rmSync(copy, { recursive: true, force: true });
    fs.cpSync(path.join(sets, name), copy, { recursive: true });
    fs.chmodSync(copy, 0o755);
    const ref = JSON.parse(fs.readFileSync(path.join(sets, name, 'reference.json'), 'utf8'));
    let ours = {};
    try {
      // require() of the package directory: its CommonJS entry (dist/index.cjs), so also on Node.js 18;
      // where Node.js could require() an ES module, that is turned off to check the same.
      const noRequireEsm = process.allowedNodeEnvironmentFlags.has('--no-experimental-require-module') ? ['--no-experimental-require-module'] : [];
      execFileSync(process.execPath, [...noRequireEsm, path.join(sets, '..', 'peers', 'ort_train_reference.js'), copy, '--batch', String(ref.batch_size),
        '--ort', WEB, '--out', 'ours.json'], { encoding: 'utf8', stdio: 'pipe' });
      ours = JSON.parse(fs.readFileSync(path.join(copy, 'ours.json'), 'utf8'));
    } catch (e) {
      ours = { error: String(e.stderr || e.message).slice(-500) };
    }
    check(`ORT's reference app on ${name} runs on edgetrain-web`, ours.loaded === true && !ours.error, ours.error);
    if (ours.train_losses) {
      ref.train_losses.forEach((b, k) => check(`ORT app ${name}: train loss ${k + 1} ${ours.train_losses[k]} vs ORT ${b}`,
        close(ours.train_losses[k], b, 1e-4)));
      check(`ORT app ${name}: final parameter sum ${ours.param_sum_final_trainable} vs ORT ${ref.param_sum_final_trainable}`,
        close(ours.param_sum_final_trainable, ref.param_sum_final_trainable, 1e-4));
    }
  }
}

const failed = checks.filter((c) => !c.ok);
console.log(`web ${args.browser ? 'browser (chromium)' : 'node'}: ${checks.length - failed.length}/${checks.length} checks passed ` +
  `in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
for (const [name, r] of Object.entries(report.results)) if (r && r.ms !== undefined) console.log(`  ${name}: ${r.ms} ms for the sequence`);
process.exit(failed.length || checks.length < 20 ? 1 : 0);
