// The checks of the WebAssembly build, the same in Node.js and in the browser (web/test/run.mjs drives
// both): `ort` is the package (or onnxruntime-web), `read(path)` fetches bytes of a config path.
// Each set replays ORT's reference sequence (tests/ort_sequence_runner.cpp does the same natively):
// trainStep; 4 x (optimizerStep, lazyResetGrad, trainStep); evalStep; parameter sums; checkpoint.

const ARRAYS = { float32: Float32Array, int32: Int32Array, int64: BigInt64Array };

function close(a, b, rel) { return Math.abs(a - b) <= rel * Math.max(Math.abs(a), Math.abs(b), 1e-12); }
function sum(data) { let s = 0; for (let i = 0; i < data.length; ++i) s += data[i]; return s; }

async function feedsOf(ort, read, inputs) {
  const feeds = {};
  for (const spec of inputs) {
    const bytes = await read(spec.file);
    const copy = bytes.slice();  // aligned
    feeds[spec.name] = new ort.Tensor(spec.dtype, new ARRAYS[spec.dtype](copy.buffer), spec.shape);
  }
  return feeds;
}

function pick(feeds, names) { return Object.fromEntries(names.map((n) => [n, feeds[n]])); }

export async function sequence(ort, read, set, checkpointBytes) {
  const session = await ort.TrainingSession.create({
    checkpointState: checkpointBytes || await read(set.files.checkpoint),
    trainModel: await read(set.files.train),
    evalModel: set.files.eval ? await read(set.files.eval) : undefined,
    optimizerModel: set.files.optimizer ? await read(set.files.optimizer) : undefined,
  });
  try {
    if (set.lr !== undefined && session.setLearningRate) await session.setLearningRate(set.lr);
    const feeds = await feedsOf(ort, read, set.inputs);
    const r = { param_sum_initial_trainable: sum((await session.getContiguousParameters(true)).data), train_losses: [] };
    const loss = session.trainingOutputNames[0];
    for (let k = 0; k < (set.steps || 5); ++k) {
      if (k > 0) {
        if (set.files.optimizer) await session.runOptimizerStep();
        await session.lazyResetGrad();
      }
      const out = await session.runTrainStep(pick(feeds, session.trainingInputNames));
      r.train_losses.push(Number(out[loss].data[0]));
    }
    if (set.files.eval) {
      const out = await session.runEvalStep(pick(feeds, session.evalInputNames));
      r.eval_loss = Number(out[session.evalOutputNames[0]].data[0]);
      if (set.export) {  // the trained model for inference, and what the eval model computes for its output
        r.exported = await session.exportModelForInference([set.export]);
        r.eval_output = Array.from(out[set.export].data);
      }
    }
    r.param_sum_final_trainable = sum((await session.getContiguousParameters(true)).data);
    r.param_sum_final_all = sum((await session.getContiguousParameters(false)).data);
    r.params_size_trainable = await session.getParametersSize(true);
    r.params_size_all = await session.getParametersSize(false);
    if (session.saveCheckpoint) r.checkpoint = await session.saveCheckpoint(true);
    return r;
  } finally {
    await session.release();
  }
}

export function compare(check, name, ours, ref, rel) {
  check(`${name}: ${ref.train_losses.length} train losses`, ours.train_losses.length === ref.train_losses.length,
    `${ours.train_losses} vs ${ref.train_losses}`);
  ref.train_losses.forEach((b, k) => {
    const a = ours.train_losses[k];
    check(`${name}: train loss ${k + 1} ${a} vs ${b}`, close(a, b, rel));
  });
  if (ref.eval_loss !== undefined) check(`${name}: eval loss ${ours.eval_loss} vs ${ref.eval_loss}`, close(ours.eval_loss, ref.eval_loss, rel));
  for (const key of ['param_sum_final_trainable', 'param_sum_final_all', 'params_size_trainable']) {
    if (ref[key] !== undefined) check(`${name}: ${key} ${ours[key]} vs ${ref[key]}`, close(ours[key], ref[key], rel));
  }
}

// A rejection of `promise` by an error of class `errorClass` whose message contains every one of `words`.
async function rejects(check, name, promise, errorClass, words) {
  try {
    await promise;
    check(`${name}: rejected`, false, 'the promise resolved');
  } catch (e) {
    const message = String(e && e.message);
    check(`${name}: rejected with ${errorClass.name} naming ${words.join(', ')}`,
      e instanceof errorClass && words.every((w) => message.includes(w)), `${e && e.name}: ${message}`);
  }
}

async function badInputs(ort, read, check, set) {
  ort.env.wasm.relaxedSimd = 'yes';
  await rejects(check, 'env.wasm.relaxedSimd = "yes"', ort.runtimeInfo(), ort.InvalidArgumentError, ['env.wasm.relaxedSimd']);
  ort.env.wasm.relaxedSimd = true;
  const session = await ort.TrainingSession.create({
    checkpointState: await read(set.files.checkpoint), trainModel: await read(set.files.train),
    evalModel: await read(set.files.eval), optimizerModel: await read(set.files.optimizer) });
  const feeds = pick(await feedsOf(ort, read, set.inputs), session.trainingInputNames);
  const [image, label] = session.trainingInputNames;
  const intLabel = feeds[label].type !== 'float32';
  const evalLoss = async () => (await session.runEvalStep(pick(feeds, session.evalInputNames)))[session.evalOutputNames[0]].data[0];
  const lossBefore = await evalLoss();
  await rejects(check, 'missing input', session.runTrainStep({ [image]: feeds[image] }), ort.InvalidArgumentError, [label]);
  const wrongType = intLabel ? new ort.Tensor('float32', new Float32Array(feeds[label].size), feeds[label].dims)
    : new ort.Tensor('int32', new Int32Array(feeds[label].size), feeds[label].dims);
  await rejects(check, 'wrong dtype', session.runTrainStep({ ...feeds, [label]: wrongType }), ort.InvalidArgumentError, [label]);
  const dims = feeds[image].dims, last = dims[dims.length - 1];  // a fixed dimension one short
  const wrongDims = [...dims.slice(0, -1), last - 1];
  const wrongShape = new ort.Tensor('float32', new Float32Array(feeds[image].size / last * (last - 1)), wrongDims);
  await rejects(check, 'wrong shape', session.runTrainStep({ ...feeds, [image]: wrongShape }), ort.InvalidArgumentError, [image]);
  await rejects(check, 'wrong eval input', session.runEvalStep({ [label]: feeds[label] }), ort.InvalidArgumentError, [image]);
  const lossAfter = await evalLoss();  // the rejected calls left the reused argument memory and the session as they were
  check(`eval loss after the rejected calls ${lossAfter} equals the one before ${lossBefore}`, lossAfter === lossBefore);
  await rejects(check, 'wrong parameter buffer size', session.loadParametersBuffer(new Uint8Array(12), true),
    ort.InvalidArgumentError, ['getParametersSize']);
  await session.setLearningRate(5e-4);
  check('setLearningRate', Math.abs(await session.getLearningRate() - 5e-4) < 1e-10, await session.getLearningRate());
  await session.registerLinearLRScheduler(2, 6, 2e-3);
  check('linear scheduler at step 0 of a warmup of 2', (await session.getLearningRate()) === 0, await session.getLearningRate());
  await session.runTrainStep(feeds);
  await session.runOptimizerStep();
  await session.schedulerStep();
  check('linear scheduler after 1 step: 1e-3', Math.abs(await session.getLearningRate() - 1e-3) < 1e-10, await session.getLearningRate());
  await session.registerStepLRScheduler(1, 0.5, 2e-3);
  check('step scheduler after 1 step: 1e-3', Math.abs(await session.getLearningRate() - 1e-3) < 1e-10, await session.getLearningRate());
  await session.registerCosineLRScheduler(0, 2, 2e-3, 1e-3);
  check('cosine scheduler halfway: 1.5e-3', Math.abs(await session.getLearningRate() - 1.5e-3) < 1e-9, await session.getLearningRate());
  await rejects(check, 'step scheduler with step size 0', session.registerStepLRScheduler(0, 0.5, 1e-3), ort.InvalidArgumentError, ['step_size']);
  await session.addProperty('epoch', 3);
  await session.addProperty('note', 'browser');
  check('checkpoint properties', (await session.getProperty('epoch')) === 3 && (await session.getProperty('note')) === 'browser');
  await rejects(check, 'unknown property', session.getProperty('missing'), ort.EdgetrainError, ['missing']);
  await rejects(check, 'export of an unknown output', session.exportModelForInference(['no_such_output']), ort.EdgetrainError, ['no_such_output']);
  const params = await session.getContiguousParameters(true);
  await session.loadParametersBuffer(new Uint8Array(new Float32Array(params.size).buffer), true);
  const zeroLoss = (await session.runEvalStep(pick(feeds, session.evalInputNames)))[session.evalOutputNames[0]].data[0];
  check(`zero weights from loadParametersBuffer: eval loss ln(10) (${zeroLoss})`, Math.abs(zeroLoss - Math.log(10)) < 1e-5);
  await session.loadParametersBuffer(new Uint8Array(params.data.buffer), true);
  const out = await session.runTrainStep(feeds);
  check('a train step after the rejected ones still runs', Number.isFinite(out[session.trainingOutputNames[0]].data[0]));
  await session.release();
  await rejects(check, 'released session', session.runTrainStep(feeds), ort.InvalidArgumentError, ['released']);

  const checkpoint = await read(set.files.checkpoint);
  const train = await read(set.files.train);
  const truncated = checkpoint.slice(0, Math.floor(checkpoint.length / 2));
  await rejects(check, 'truncated checkpoint bytes', ort.TrainingSession.create({ checkpointState: truncated, trainModel: train }),
    ort.InvalidModelError, ['checkpoint']);
  const garbage = new Uint8Array(1000).map((_, i) => (i * 37 + 11) & 255);
  await rejects(check, 'corrupt checkpoint bytes', ort.TrainingSession.create({ checkpointState: garbage, trainModel: train }),
    ort.InvalidModelError, ['checkpoint']);
  await rejects(check, 'corrupt model bytes', ort.TrainingSession.create({ checkpointState: checkpoint, trainModel: garbage }),
    ort.InvalidModelError, ['training model']);
}

// Whether this JS engine validates relaxed SIMD's f32x4.relaxed_madd (opcode 0xfd 0x105): a function returning
// relaxed_madd of three zero vectors, probed independently of the package.
export function relaxedSimdValidates() {
  const zeros = () => [0xfd, 0x0c, ...new Array(16).fill(0)];
  const body = [0, ...zeros(), ...zeros(), ...zeros(), 0xfd, 0x85, 0x02, 0x0b];
  return WebAssembly.validate(new Uint8Array([0, 0x61, 0x73, 0x6d, 1, 0, 0, 0, 1, 5, 1, 0x60, 0, 1, 0x7b, 3, 2, 1, 0,
    10, body.length + 2, 1, body.length, ...body]));
}

// The GEMM runs relaxed SIMD's fused multiply-add exactly where the engine validates it and
// env.wasm.relaxedSimd allows it; `required`: the engine must (the losses then check that path).
export async function relaxedSimdCheck(ort, check, required) {
  const info = await ort.runtimeInfo(), probe = relaxedSimdValidates(), allowed = ort.env.wasm.relaxedSimd;
  check(`relaxed SIMD: the GEMM's fused multiply-add runs (${info.relaxedSimd}) where this engine validates it (${probe})` +
    ` and env.wasm.relaxedSimd (${allowed}) allows it${required ? '; required here' : ''}`,
    info.relaxedSimd === (probe && allowed) && (!required || probe), JSON.stringify(info));
}

// config: {sets: [{name, files, inputs, lr?, steps?, expected?, rel?, resume?}], bad_inputs: set, custom_ops?: files,
//          require_relaxed_simd?}
export async function runSuite(ort, read, config, log = () => {}) {
  const checks = [], results = {};
  const check = (name, ok, detail = '') => { checks.push({ name, ok: !!ok, detail: ok ? '' : String(detail) }); log(`${ok ? 'ok  ' : 'FAIL'} ${name}${ok ? '' : ` (${detail})`}`); };
  const t0 = Date.now();
  await relaxedSimdCheck(ort, check, config.require_relaxed_simd);
  for (const set of config.sets) {
    try {
      const start = Date.now();
      const ours = await sequence(ort, read, set);
      ours.ms = Date.now() - start;
      if (set.expected) compare(check, set.name, ours, set.expected, set.rel || 1e-4);
      if (set.resume && ours.checkpoint) {  // its own checkpoint, loaded back: the native run repeats this
        const again = await sequence(ort, read, { ...set, lr: undefined }, ours.checkpoint);
        results[`${set.name}/resumed`] = { ...again, checkpoint: undefined };
      }
      results[set.name] = { ...ours, checkpoint: set.resume ? ours.checkpoint : undefined };
    } catch (e) {
      check(`${set.name}: runs`, false, `${e && e.name}: ${e && e.message}`);
    }
  }
  if (config.custom_ops) {
    const f = config.custom_ops;
    await rejects(check, 'custom_ops: session creation', ort.TrainingSession.create({ checkpointState: await read(f.checkpoint),
      trainModel: await read(f.train) }), ort.NotImplementedError, ['CustomOpOne', 'CustomOpTwo']);
  }
  if (config.bad_inputs) {
    try {
      await badInputs(ort, read, check, config.bad_inputs);
    } catch (e) {
      check('bad inputs: runs', false, `${e && e.name}: ${e && e.message}`);
    }
  }
  return { checks, results, ms: Date.now() - t0 };
}
