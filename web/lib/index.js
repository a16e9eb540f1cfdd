// edgetrain-web: onnxruntime-web 1.19's training API (TrainingSession, Tensor, env) over edgetrain's
// C ABI (include/edgetrain/edgetrain.h) compiled to WebAssembly. Works in browsers and in Node.js.

const isNode = typeof process === 'object' && !!(process.versions && process.versions.node);

// ---- errors: one class per et_error_code, each message naming the file, input or parameter ----

export class EdgetrainError extends Error {
  constructor(code, message) {
    super(message);
    this.name = new.target.name;
    this.code = code;
  }
}
export class InvalidArgumentError extends EdgetrainError {}
export class InvalidModelError extends EdgetrainError {}
export class NotImplementedError extends EdgetrainError {}
export class OutOfRangeError extends EdgetrainError {}
export class IoError extends EdgetrainError {}
export class ResourceExhaustedError extends EdgetrainError {}
export class InternalError extends EdgetrainError {}

const ERROR_CLASSES = [null, InvalidArgumentError, InvalidModelError, NotImplementedError, OutOfRangeError, IoError,
  ResourceExhaustedError, InternalError];
const ERROR_CODES = [null, 'InvalidArgument', 'InvalidModel', 'NotImplemented', 'OutOfRange', 'IoError',
  'ResourceExhausted', 'Internal'];

function makeError(codeNumber, message) {
  const Class = ERROR_CLASSES[codeNumber] || InternalError;
  return new Class(ERROR_CODES[codeNumber] || 'Internal', message);
}
const invalidArgument = (message) => makeError(1, message);

// ---- tensors: the shape of onnxruntime-web's Tensor (type, data, dims, size, location) ----

const TYPES = {
  float32: { array: Float32Array, code: 1 }, uint8: { array: Uint8Array, code: 2 }, int8: { array: Int8Array, code: 3 },
  uint16: { array: Uint16Array, code: 4 }, int16: { array: Int16Array, code: 5 }, int32: { array: Int32Array, code: 6 },
  int64: { array: BigInt64Array, code: 7 }, bool: { array: Uint8Array, code: 9 }, float16: { array: Uint16Array, code: 10 },
  float64: { array: Float64Array, code: 11 }, uint32: { array: Uint32Array, code: 12 },
  uint64: { array: BigUint64Array, code: 13 },
};
const TYPE_OF_CODE = Object.fromEntries(Object.entries(TYPES).map(([name, t]) => [t.code, name]));

function typeOfArray(data) {
  if (data instanceof Float32Array) return 'float32';
  if (data instanceof Int32Array) return 'int32';
  if (data instanceof BigInt64Array) return 'int64';
  if (data instanceof Uint8Array) return 'uint8';
  if (data instanceof Int8Array) return 'int8';
  if (data instanceof Uint16Array) return 'uint16';
  if (data instanceof Int16Array) return 'int16';
  if (data instanceof Float64Array) return 'float64';
  if (data instanceof Uint32Array) return 'uint32';
  if (data instanceof BigUint64Array) return 'uint64';
  if (Array.isArray(data) && data.length && typeof data[0] === 'boolean') return 'bool';
  throw new TypeError('Tensor: cannot infer the element type of the data; pass the type first');
}

export class Tensor {
  // new Tensor(type, data, dims?) or new Tensor(typedArray, dims?), as onnxruntime-web's Tensor.
  constructor(arg0, arg1, arg2) {
    let type, data, dims;
    if (typeof arg0 === 'string') {
      type = arg0; data = arg1; dims = arg2;
      const spec = TYPES[type];
      if (!spec) throw new TypeError(`Tensor: unsupported type '${type}'`);
      if (Array.isArray(data)) {
        data = type === 'int64' || type === 'uint64' ? spec.array.from(data, (v) => BigInt(v))
          : type === 'bool' ? Uint8Array.from(data, (v) => (v ? 1 : 0)) : spec.array.from(data);
      } else if (!(data instanceof spec.array)) {
        throw new TypeError(`Tensor: data of a '${type}' tensor must be a ${spec.array.name}`);
      }
    } else {
      data = arg0; dims = arg1; type = typeOfArray(data);
      if (type === 'bool') data = Uint8Array.from(data, (v) => (v ? 1 : 0));
    }
    dims = dims === undefined ? [data.length] : Array.from(dims);
    const size = dims.reduce((a, b) => a * b, 1);
    if (!dims.every((d) => Number.isInteger(d) && d >= 0)) throw new RangeError(`Tensor: invalid dims [${dims}]`);
    if (size !== data.length) throw new RangeError(`Tensor: dims [${dims}] hold ${size} elements but the data has ${data.length}`);
    this.type = type;
    this.data = data;
    this.dims = dims;
    this.size = size;
    this.location = 'cpu';
  }
  async getData() { return this.data; }
  dispose() {}
  reshape(dims) { return new Tensor(this.type, this.data, dims); }
}

// ---- environment and module loading ----

export const env = {
  wasm: {
    // Threads, as in onnxruntime-web: 0 picks them (in a cross-origin isolated page min(4, half the
    // cores), else 1), 1 is the single-threaded module, n > 1 the pthreads module with n threads. A page
    // that is not cross-origin isolated has no SharedArrayBuffer: it falls back to 1 (runtimeInfo()
    // says why). Read when the module loads (the first TrainingSession.create).
    numThreads: 0,
    simd: true,
    // edgetrain's own: the GEMM's fused multiply-add from relaxed SIMD where the engine has it (false: plain
    // SIMD128 multiplies and adds). Read when the module loads; runtimeInfo().relaxedSimd says which runs.
    relaxedSimd: true,
    // Where edgetrain.mjs/.wasm live: a URL prefix (string), or undefined for the package's dist/.
    wasmPaths: undefined,
  },
  logLevel: 'warning',
  versions: { web: '0.1.0' },
};

const MAX_THREADS = 64;
const SESSION_OPTIONS_BYTES = 64; // room for et_session_options; create() checks its struct_size
let modulePromise = null;
let runtime = null;

function distUrl(file) {
  if (typeof env.wasm.wasmPaths === 'string') return new URL(file, new URL(env.wasm.wasmPaths, isNode ? `file://${process.cwd()}/` : globalThis.location.href));
  return new URL(`../dist/${file}`, import.meta.url);
}

async function readUrl(url) {
  if (isNode && url.protocol === 'file:') {
    const fs = await import('node:fs/promises');
    return new Uint8Array(await fs.readFile(url));
  }
  const response = await fetch(url);
  if (!response.ok) throw new IoError('IoError', `${url}: HTTP ${response.status} ${response.statusText}`);
  return new Uint8Array(await response.arrayBuffer());
}

// Which module env.wasm.numThreads asks for here: {threads, reason} (reason: why fewer than asked).
function askedThreads() {
  const asked = env.wasm.numThreads === undefined ? 0 : env.wasm.numThreads;
  if (!Number.isInteger(asked) || asked < 0 || asked > MAX_THREADS) {
    throw invalidArgument(`env.wasm.numThreads must be an integer from 0 (automatic) to ${MAX_THREADS}, not ${JSON.stringify(asked)}`);
  }
  return asked;
}

function chooseThreads() {
  const asked = askedThreads();
  const isolated = isNode || globalThis.crossOriginIsolated === true;
  if (asked === 0) {
    if (isNode || !isolated) return { threads: 1, reason: isNode ? 'automatic: Node.js' : 'automatic: the page is not cross-origin isolated' };
    const cores = globalThis.navigator && navigator.hardwareConcurrency ? navigator.hardwareConcurrency : 1;
    return { threads: Math.min(4, Math.ceil(cores / 2)), reason: null };
  }
  if (asked > 1 && typeof SharedArrayBuffer === 'undefined' || asked > 1 && !isolated) {
    return { threads: 1, reason: `env.wasm.numThreads = ${asked}, but the page is not cross-origin isolated ` +
      '(no SharedArrayBuffer; serve it with Cross-Origin-Opener-Policy: same-origin and ' +
      'Cross-Origin-Embedder-Policy: require-corp): running single-threaded' };
  }
  return { threads: asked, reason: null };
}

// The pthreads module's memory is a growable SharedArrayBuffer: views are rebuilt when it has grown.
function liveHeapViews(mod) {
  const memory = mod.wasmMemory, views = {};
  for (const [name, View] of [['HEAPU8', Uint8Array], ['HEAP32', Int32Array], ['HEAPU32', Uint32Array], ['HEAPF32', Float32Array]]) {
    Object.defineProperty(mod, name, {
      configurable: true,
      get() {
        const buffer = memory.buffer;
        if (!views[name] || views[name].byteLength !== buffer.byteLength) views[name] = new View(buffer);
        return views[name];
      },
      set() {},
    });
  }
}

// The emscripten glue of the pthreads module is also Node.js code that calls require(): give it one.
async function nodeGlobalsForThreads(glue) {
  if (typeof globalThis.require === 'undefined') {
    const { createRequire } = await import('node:module');
    globalThis.require = createRequire(glue);
  }
  if (typeof globalThis.__dirname === 'undefined') {
    const { fileURLToPath } = await import('node:url');
    globalThis.__filename = fileURLToPath(glue);
    globalThis.__dirname = fileURLToPath(new URL('.', glue));
  }
}

async function loadModule() {
  askedThreads();  // a bad value rejects even once a module has loaded (a good one then changes nothing)
  if (typeof env.wasm.relaxedSimd !== 'boolean') {
    throw invalidArgument(`env.wasm.relaxedSimd must be true or false, not ${JSON.stringify(env.wasm.relaxedSimd)}`);
  }
  if (!modulePromise) {
    modulePromise = (async () => {
      const { threads, reason } = chooseThreads();
      if (reason && !reason.startsWith('automatic') && ['verbose', 'info', 'warning'].includes(env.logLevel)) console.warn(`edgetrain-web: ${reason}`);
      const name = threads > 1 ? 'edgetrain-mt' : 'edgetrain';
      const glue = distUrl(`${name}.mjs`);
      if (threads > 1 && isNode) await nodeGlobalsForThreads(glue);
      const factory = (await import(/* @vite-ignore */ glue.href)).default;
      const wasmBinary = await readUrl(distUrl(`${name}.wasm`));
      const mod = await factory({ wasmBinary, etPoolSize: threads - 1, mainScriptUrlOrBlob: glue.href,
        print: () => {}, printErr: () => {} });
      if (threads > 1) liveHeapViews(mod);
      // Every worker thread exists once loaded (none is started later); idle, they must not keep Node.js running.
      if (threads > 1 && isNode) for (const w of [...mod.PThread.unusedWorkers, ...mod.PThread.runningWorkers]) w.unref();
      const relaxedSimd = mod._et_wasm_use_relaxed_simd(env.wasm.relaxedSimd ? 1 : 0) === 1;
      runtime = { threaded: threads > 1, numThreads: threads, module: `${name}.wasm`, reason, relaxedSimd };
      return mod;
    })();
    modulePromise.catch(() => { modulePromise = null; });
  }
  return modulePromise;
}

// Which module runs: {threaded, numThreads, module, reason, relaxedSimd} (reason: why single-threaded, or
// null; relaxedSimd: whether the GEMM runs relaxed SIMD's fused multiply-add).
export async function runtimeInfo() {
  await loadModule();
  return { ...runtime };
}

// Checkpoints and models: bytes, a path (Node.js) or a URL (fetched).
async function readSource(source, what) {
  if (source instanceof Uint8Array) return source;
  if (source instanceof ArrayBuffer) return new Uint8Array(source);
  if (ArrayBuffer.isView(source)) return new Uint8Array(source.buffer, source.byteOffset, source.byteLength);
  if (typeof source === 'string' || source instanceof URL) {
    const text = String(source);
    try {
      if (isNode && !/^(https?|data|blob):/.test(text)) {
        const fs = await import('node:fs/promises');
        return new Uint8Array(await fs.readFile(text.startsWith('file:') ? new URL(text) : text));
      }
      const base = isNode ? undefined : globalThis.location && globalThis.location.href;
      return await readUrl(new URL(text, base));
    } catch (e) {
      if (e instanceof EdgetrainError) throw e;
      throw new IoError('IoError', `${what} '${text}': ${e && e.message ? e.message : e}`);
    }
  }
  throw invalidArgument(`${what} must be a Uint8Array, an ArrayBuffer, a path or a URL`);
}

// A session's threads: intraOpNumThreads (a positive integer; at most the module's threads) or all.
function sessionThreads(asked) {
  if (asked === undefined) return runtime.numThreads;
  if (!Number.isInteger(asked) || asked < 1 || asked > MAX_THREADS) {
    throw invalidArgument(`sessionOptions.intraOpNumThreads must be an integer from 1 to ${MAX_THREADS}, not ${JSON.stringify(asked)}`);
  }
  return Math.min(asked, runtime.numThreads);
}

// ---- calls into the C ABI ----

const SCRATCH_MAX = 1 << 20;  // bytes a Wasm keeps between calls for their small arguments

class Wasm {
  constructor(m) {
    this.m = m;
    this.scratch = 0;      // a heap block reused by the outermost withHeap, so that a step calls no malloc
    this.scratchSize = 0;
    this.inHeap = false;
  }

  // Throws the typed error of an et_error* (and frees it).
  check(errorPtr) {
    if (!errorPtr) return;
    const m = this.m;
    const code = m._et_error_get_code(errorPtr);
    const message = m.UTF8ToString(m._et_error_get_message(errorPtr));
    m._et_error_free(errorPtr);
    throw makeError(code, message);
  }

  // Runs fn(alloc) where alloc(bytes) returns heap memory (16-byte aligned) valid until fn returns: the outermost
  // call's from the scratch block while it fits (the block grows to what a call needed, up to SCRATCH_MAX).
  withHeap(fn) {
    const m = this.m, pointers = [], outer = !this.inHeap;
    let used = 0;
    const alloc = (bytes) => {
      const size = (Math.max(bytes, 8) + 15) & ~15;
      if (outer && used + size <= this.scratchSize) {
        used += size;
        return this.scratch + used - size;
      }
      if (outer) used += size;
      const p = m._malloc(size);
      if (!p) throw new ResourceExhaustedError('ResourceExhausted', `out of WebAssembly memory allocating ${bytes} bytes`);
      pointers.push(p);
      return p;
    };
    this.inHeap = true;
    try {
      return fn(alloc);
    } catch (e) {
      if (e instanceof EdgetrainError || e instanceof TypeError || e instanceof RangeError) throw e;
      throw new InternalError('Internal', `WebAssembly trap: ${e && e.message ? e.message : e}`);
    } finally {
      for (const p of pointers) m._free(p);
      if (outer) {
        this.inHeap = false;
        if (used > this.scratchSize && used <= SCRATCH_MAX) {
          m._free(this.scratch);
          this.scratch = m._malloc(used);
          this.scratchSize = this.scratch ? used : 0;
        }
      }
    }
  }

  string(alloc, text) {
    const m = this.m, n = m.lengthBytesUTF8(text) + 1, p = alloc(n);
    m.stringToUTF8(text, p, n);
    return p;
  }

  bytes(alloc, data) {
    const p = alloc(data.byteLength);
    this.m.HEAPU8.set(data, p);
    return p;
  }

  readPointer(p) { return this.m.HEAPU32[p >> 2]; }

  readSize(p) { return this.m.HEAPU32[p >> 2]; }

  // An et_values* as {name: Tensor}, freeing it. `names`: the values' names when the caller knows them.
  takeValues(valuesPtr, names) {
    const m = this.m, result = {};
    try {
      const count = m._et_values_count(valuesPtr);
      for (let i = 0; i < count; ++i) {
        const name = names && names.length === count ? names[i] : m.UTF8ToString(m._et_values_name(valuesPtr, i));
        const type = TYPE_OF_CODE[m._et_values_dtype(valuesPtr, i)];
        if (!type) { result[name] = null; continue; }
        const rank = m._et_values_rank(valuesPtr, i), shapePtr = m._et_values_shape(valuesPtr, i);
        const dims = [];
        for (let d = 0; d < rank; ++d) dims.push(Number(m.HEAP32[(shapePtr >> 2) + 2 * d]));
        const nbytes = m._et_values_nbytes(valuesPtr, i), dataPtr = m._et_values_data(valuesPtr, i);
        const raw = m.HEAPU8.slice(dataPtr, dataPtr + nbytes);
        result[name] = new Tensor(type, new TYPES[type].array(raw.buffer, 0, nbytes / TYPES[type].array.BYTES_PER_ELEMENT), dims);
      }
    } finally {
      m._et_values_free(valuesPtr);
    }
    return result;
  }

  names(session, kind, input) {
    const m = this.m;
    return this.withHeap((alloc) => {
      const out = alloc(4);
      this.check((input ? m._et_training_session_input_count : m._et_training_session_output_count)(session, kind, out));
      const count = this.readSize(out), names = [];
      for (let i = 0; i < count; ++i) {
        this.check((input ? m._et_training_session_input_name : m._et_training_session_output_name)(session, kind, i, out));
        names.push(m.UTF8ToString(this.readPointer(out)));
      }
      return names;
    });
  }

  readFile(path) {
    const data = this.m.FS.readFile(path);
    this.m.FS.unlink(path);
    return data;
  }
}

let fileCounter = 0;
const TRAINING = 0, EVAL = 1;

// Feeds (by input name) as an et_tensor_view array; the checks name the input.
function writeFeeds(w, alloc, names, feeds, model) {
  if (typeof feeds !== 'object' || feeds === null || Array.isArray(feeds) || feeds instanceof Tensor) {
    throw new TypeError("'feeds' must be an object that uses input names as keys and tensors as values.");
  }
  const m = w.m, views = alloc(16 * names.length);
  names.forEach((name, i) => {
    const t = feeds[name];
    if (t === undefined || t === null) throw invalidArgument(`${model} model: input '${name}' is missing in 'feeds'`);
    const spec = TYPES[t.type];
    if (!spec || !t.data || !ArrayBuffer.isView(t.data)) {
      throw invalidArgument(`${model} model: input '${name}' has unsupported type '${t.type}'`);
    }
    const dims = Array.from(t.dims || []);
    const count = dims.reduce((a, b) => a * b, 1);
    if (count !== t.data.length) {
      throw invalidArgument(`${model} model: input '${name}' has dims [${dims}] (${count} elements) but ${t.data.length} data elements`);
    }
    const shape = alloc(8 * dims.length);
    dims.forEach((d, k) => { m.HEAP32[(shape >> 2) + 2 * k] = d; m.HEAP32[(shape >> 2) + 2 * k + 1] = 0; });
    const data = w.bytes(alloc, new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength));
    const v = views >> 2;
    m.HEAP32[v + 4 * i] = spec.code;
    m.HEAPU32[v + 4 * i + 1] = shape;
    m.HEAPU32[v + 4 * i + 2] = dims.length;
    m.HEAPU32[v + 4 * i + 3] = data;
  });
  return views;
}

// ORT's fetches argument: a list of output names or an object whose keys name outputs.
function selectFetches(outputs, outputNames, arg1) {
  if (arg1 === undefined || arg1 === null || typeof arg1 !== 'object') return outputs;
  let wanted = null;
  if (Array.isArray(arg1)) {
    if (arg1.length === 0) throw new TypeError("'fetches' cannot be an empty array.");
    wanted = arg1;
  } else {
    const keys = Object.keys(arg1).filter((k) => outputNames.includes(k));
    if (keys.length) wanted = keys;
  }
  if (!wanted) return outputs;
  const result = {};
  for (const name of wanted) {
    if (!outputNames.includes(name)) throw new RangeError(`'fetches' contains invalid output name: ${name}.`);
    result[name] = outputs[name];
  }
  return result;
}

export class TrainingSession {
  constructor(w, session, state, hasEval, hasOptimizer) {
    this._w = w;
    this._session = session;
    this._state = state;
    this._hasEval = hasEval;
    this._hasOptimizer = hasOptimizer;
    this.trainingInputNames = w.names(session, TRAINING, true);
    this.trainingOutputNames = w.names(session, TRAINING, false);
    this._trainingOutputNames = [...this.trainingOutputNames];  // the steps' own copy: the public list is the caller's
    this._evalInputNames = hasEval ? w.names(session, EVAL, true) : [];
    this._evalOutputNames = hasEval ? w.names(session, EVAL, false) : [];
  }

  get evalInputNames() {
    if (!this._hasEval) throw new Error('This training session has no evalModel loaded.');
    return this._evalInputNames;
  }

  get evalOutputNames() {
    if (!this._hasEval) throw new Error('This training session has no evalModel loaded.');
    return this._evalOutputNames;
  }

  // TrainingSession.create({checkpointState, trainModel, evalModel?, optimizerModel?}, sessionOptions?)
  static async create(artifacts, sessionOptions = {}) {
    if (!artifacts || typeof artifacts !== 'object') throw invalidArgument('TrainingSession.create needs {checkpointState, trainModel, ...}');
    if (!artifacts.checkpointState) throw invalidArgument("TrainingSession.create: 'checkpointState' is missing");
    if (!artifacts.trainModel) throw invalidArgument("TrainingSession.create: 'trainModel' is missing");
    const [checkpoint, train, evalModel, optimizer] = await Promise.all([
      readSource(artifacts.checkpointState, 'checkpointState'), readSource(artifacts.trainModel, 'trainModel'),
      artifacts.evalModel ? readSource(artifacts.evalModel, 'evalModel') : null,
      artifacts.optimizerModel ? readSource(artifacts.optimizerModel, 'optimizerModel') : null]);
    const w = new Wasm(await loadModule());
    const m = w.m;
    return w.withHeap((alloc) => {
      const out = alloc(4);
      w.check(m._et_checkpoint_load_from_buffer(w.bytes(alloc, checkpoint), checkpoint.byteLength, out));
      const state = w.readPointer(out);
      try {
        const options = alloc(SESSION_OPTIONS_BYTES);
        m._et_session_options_init(options);
        if (m.HEAPU32[options >> 2] > SESSION_OPTIONS_BYTES) throw new Error('et_session_options outgrew SESSION_OPTIONS_BYTES');
        w.check(m._et_session_options_set_num_threads(options, sessionThreads(sessionOptions.intraOpNumThreads)));
        if (sessionOptions.seed !== undefined) {
          w.check(m._et_session_options_set_seed(options, BigInt.asUintN(64, BigInt(sessionOptions.seed))));
        }
        w.check(m._et_training_session_create_from_buffers(state, w.bytes(alloc, train), train.byteLength,
          evalModel ? w.bytes(alloc, evalModel) : 0, evalModel ? evalModel.byteLength : 0,
          optimizer ? w.bytes(alloc, optimizer) : 0, optimizer ? optimizer.byteLength : 0, options, out));
      } catch (e) {
        m._et_checkpoint_free(state);
        throw e;
      }
      return new TrainingSession(w, w.readPointer(out), state, !!evalModel, !!optimizer);
    });
  }

  _live() {
    if (!this._session) throw invalidArgument('the training session was released');
    return this._session;
  }

  _step(fn, names, outputNames, feeds, model) {
    const session = this._live(), w = this._w;
    return w.withHeap((alloc) => {
      const views = writeFeeds(w, alloc, names, feeds, model);
      const out = alloc(4);
      w.check(fn(session, views, names.length, out));
      return w.takeValues(w.readPointer(out), outputNames);
    });
  }

  async runTrainStep(feeds, arg1, _arg2) {
    const outputs = this._step(this._w.m._et_training_session_train_step, this.trainingInputNames,
      this._trainingOutputNames, feeds, 'training');
    return selectFetches(outputs, this.trainingOutputNames, arg1);
  }

  async runEvalStep(feeds, arg1, _arg2) {
    if (!this._hasEval) throw invalidArgument('This training session has no evalModel loaded.');
    const outputs = this._step(this._w.m._et_training_session_eval_step, this._evalInputNames, this._evalOutputNames,
      feeds, 'eval');
    return selectFetches(outputs, this._evalOutputNames, arg1);
  }

  async runOptimizerStep(_options) {
    if (!this._hasOptimizer) throw invalidArgument('This training session has no optimizerModel loaded.');
    this._w.check(this._w.m._et_training_session_optimizer_step(this._live()));
  }

  async lazyResetGrad() {
    this._w.check(this._w.m._et_training_session_lazy_reset_grad(this._live()));
  }

  async getParametersSize(trainableOnly = true) {
    const w = this._w;
    return w.withHeap((alloc) => {
      const out = alloc(4);
      w.check(w.m._et_training_session_get_parameters_size(this._live(), !!trainableOnly, out));
      return w.readSize(out);
    });
  }

  async getContiguousParameters(trainableOnly = true) {
    const size = await this.getParametersSize(trainableOnly), w = this._w;
    return w.withHeap((alloc) => {
      const buffer = alloc(4 * size);
      w.check(w.m._et_training_session_copy_parameters_to_buffer(this._live(), buffer, size, !!trainableOnly));
      return new Tensor('float32', w.m.HEAPF32.slice(buffer >> 2, (buffer >> 2) + size), [size]);
    });
  }

  // `buffer`: the parameters' float32 bytes, as onnxruntime-web takes them (a Float32Array is accepted too).
  async loadParametersBuffer(buffer, trainableOnly = true) {
    const size = await this.getParametersSize(trainableOnly), w = this._w;
    const bytes = buffer instanceof Uint8Array ? buffer
      : ArrayBuffer.isView(buffer) ? new Uint8Array(buffer.buffer, buffer.byteOffset, buffer.byteLength) : null;
    if (!bytes) throw invalidArgument('loadParametersBuffer: the buffer must be a Uint8Array');
    if (bytes.byteLength !== 4 * size) {
      throw invalidArgument(`loadParametersBuffer: the buffer holds ${bytes.byteLength} bytes but the ${size} ` +
        `${trainableOnly ? 'trainable ' : ''}parameters need ${4 * size}; see getParametersSize`);
    }
    w.withHeap((alloc) => {
      const p = w.bytes(alloc, bytes);
      w.check(w.m._et_training_session_copy_buffer_to_parameters(this._live(), p, size, !!trainableOnly));
    });
  }

  // ---- beyond onnxruntime-web 1.19 ----

  async getLearningRate() {
    const w = this._w;
    return w.withHeap((alloc) => {
      const out = alloc(4);
      w.check(w.m._et_training_session_get_learning_rate(this._live(), out));
      return w.m.HEAPF32[out >> 2];
    });
  }

  async setLearningRate(learningRate) {
    this._w.check(this._w.m._et_training_session_set_learning_rate(this._live(), learningRate));
  }

  // ORT's LinearLRScheduler (warmup then linear decay to 0 at totalSteps); schedulerStep() applies it.
  async registerLinearLRScheduler(warmupSteps, totalSteps, initialLr) {
    this._w.check(this._w.m._et_training_session_register_linear_lr_scheduler(this._live(), BigInt(warmupSteps),
      BigInt(totalSteps), initialLr));
  }

  // Cosine decay to minLr at totalSteps after a linear warmup.
  async registerCosineLRScheduler(warmupSteps, totalSteps, initialLr, minLr = 0) {
    this._w.check(this._w.m._et_training_session_register_cosine_lr_scheduler(this._live(), BigInt(warmupSteps),
      BigInt(totalSteps), initialLr, minLr));
  }

  // initialLr * gamma^floor(step / stepSize).
  async registerStepLRScheduler(stepSize, gamma, initialLr) {
    this._w.check(this._w.m._et_training_session_register_step_lr_scheduler(this._live(), BigInt(stepSize), gamma, initialLr));
  }

  async schedulerStep() {
    this._w.check(this._w.m._et_training_session_scheduler_step(this._live()));
  }

  async setSeed(seed) {
    this._w.check(this._w.m._et_training_session_set_seed(this._live(), BigInt(seed)));
  }

  // The checkpoint (ORT's format) with the current parameters and, by default, the optimizer state.
  async saveCheckpoint(includeOptimizerState = true) {
    this._live();
    const w = this._w, path = `/tmp/edgetrain-checkpoint-${++fileCounter}`;
    w.withHeap((alloc) => w.check(w.m._et_checkpoint_save(this._state, w.string(alloc, path), !!includeOptimizerState)));
    return w.readFile(path);
  }

  // An inference-only ONNX model with the trained weights, computing `outputNames` of the eval model
  // (default: every eval output other than the loss).
  async exportModelForInference(outputNames = []) {
    const session = this._live(), w = this._w, path = `/tmp/edgetrain-export-${++fileCounter}.onnx`;
    w.withHeap((alloc) => {
      const names = alloc(4 * outputNames.length);
      outputNames.forEach((n, i) => { w.m.HEAPU32[(names >> 2) + i] = w.string(alloc, String(n)); });
      w.check(w.m._et_training_session_export_model_for_inference(session, w.string(alloc, path), names, outputNames.length));
    });
    return w.readFile(path);
  }

  // Checkpoint properties (int as bigint or integer number, float, string), saved with the checkpoint.
  async addProperty(name, value) {
    const w = this._w, m = w.m;
    w.withHeap((alloc) => {
      const n = w.string(alloc, name);
      if (typeof value === 'string') w.check(m._et_checkpoint_add_string_property(this._state, n, w.string(alloc, value)));
      else if (typeof value === 'bigint') w.check(m._et_checkpoint_add_int_property(this._state, n, value));
      else if (Number.isInteger(value)) w.check(m._et_checkpoint_add_int_property(this._state, n, BigInt(value)));
      else if (typeof value === 'number') w.check(m._et_checkpoint_add_float_property(this._state, n, value));
      else throw invalidArgument(`property '${name}': the value must be a number, a bigint or a string`);
    });
  }

  async getProperty(name) {
    const w = this._w, m = w.m;
    return w.withHeap((alloc) => {
      const n = w.string(alloc, name), out = alloc(8);
      w.check(m._et_checkpoint_get_property_type(this._state, n, out));
      const type = m.HEAP32[out >> 2];
      if (type === 0) {
        w.check(m._et_checkpoint_get_int_property(this._state, n, out));
        return m.HEAPU32[out >> 2] + m.HEAP32[(out >> 2) + 1] * 4294967296;
      }
      if (type === 1) {
        w.check(m._et_checkpoint_get_float_property(this._state, n, out));
        return m.HEAPF32[out >> 2];
      }
      w.check(m._et_checkpoint_get_string_property(this._state, n, out));
      return m.UTF8ToString(w.readPointer(out));
    });
  }

  async release() {
    if (!this._session) return;
    this._w.m._et_training_session_free(this._session);
    this._w.m._et_checkpoint_free(this._state);
    this._session = 0;
    this._state = 0;
  }
}

// The C ABI's version string, e.g. "0.1.0".
export async function version() {
  const m = await loadModule();
  return m.UTF8ToString(m._et_version());
}

export default { Tensor, TrainingSession, env, version, runtimeInfo };
