// Shared by the node benchmarks: option parsing, raw input files and the timing loop of
// train_step_bench.cpp (warm-up calls, then as many timed calls as fit the budget at the last warm-up call's pace,
// within [min, max]).
'use strict';
const fs = require('fs');
const path = require('path');
const os = require('os');

const PEERS_DIR = process.env.EDGETRAIN_PEERS_DIR || path.join(os.homedir(), '.cache', 'edgetrain-peers');
const ARRAYS = { float32: Float32Array, int64: BigInt64Array, int32: Int32Array };

// --key value options (repeatable ones collect into arrays) and positional arguments.
function parseArgs(argv, repeatable = []) {
  const o = { positional: [], warmup: 3, 'min-steps': 20, 'max-steps': 200, 'budget-s': 4, threads: 1 };
  for (const k of repeatable) o[k] = [];
  for (let i = 0; i < argv.length; i++) {
    if (!argv[i].startsWith('--')) { o.positional.push(argv[i]); continue; }
    const key = argv[i].slice(2);
    if (i + 1 >= argv.length) throw new Error(`option --${key} needs a value`);
    const value = argv[++i];
    if (repeatable.includes(key)) o[key].push(value);
    else o[key] = isNaN(Number(value)) ? value : Number(value);
  }
  return o;
}

// NAME=DTYPE:D0,D1:FILE -> [name, {dtype, data, dims}]
function readInputSpec(spec) {
  const m = /^([^=]+)=([a-z0-9]+):([0-9,]+):(.+)$/.exec(spec);
  if (!m) throw new Error(`--input '${spec}' must be NAME=DTYPE:D0,D1:FILE`);
  const [, name, dtype, dims, file] = m;
  if (!ARRAYS[dtype]) throw new Error(`--input '${spec}': unsupported dtype ${dtype}`);
  const bytes = fs.readFileSync(file);
  const data = new ARRAYS[dtype](bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length));
  return [name, { dtype, data, dims: dims.split(',').map(Number) }];
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
};

async function timeCalls(o, call) {
  let perCall = 0;  // the last warm-up call's (the first ones pay one-time costs)
  for (let i = 0; i < o.warmup; i++) {
    const start = performance.now();
    await call();
    perCall = performance.now() - start;
  }
  let steps = perCall > 0 ? Math.floor((o['budget-s'] * 1e3) / perCall) : o['max-steps'];
  steps = Math.min(Math.max(steps, o['min-steps']), o['max-steps']);
  const times = [];
  for (let i = 0; i < steps; i++) {
    const start = performance.now();
    await call();
    times.push(performance.now() - start);
  }
  return { median_ms: median(times), min_ms: Math.min(...times), steps };
}

const packageVersion = (name) => require(path.join(PEERS_DIR, 'node_modules', name, 'package.json')).version;

function firstLine(e) {
  if (typeof e === 'number') return `C++ exception from the wasm module (exception ptr ${e})`;
  return String(e && e.message ? e.message : e).split('\n')[0].slice(0, 400);
}

// Runs main() and prints its result as one JSON line; on failure {"error": ...} and exit status 1.
function runMain(main) {
  main().then((r) => console.log(JSON.stringify(r)), (e) => {
    console.log(JSON.stringify({ error: firstLine(e) }));
    process.exit(1);
  });
}

module.exports = { PEERS_DIR, packageVersion, parseArgs, readInputSpec, timeCalls, runMain };
