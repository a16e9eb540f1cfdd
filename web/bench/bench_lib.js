// One artifact set timed in each package (same API): create a session, warm up, then `steps` groups of
// training steps (runTrainStep + runOptimizerStep + lazyResetGrad) on the set's reference batch; the median
// per-step time in ms, or the error's first line when a package cannot load the set.
const ARRAYS = { float32: Float32Array, int32: Int32Array, int64: BigInt64Array };

async function timeOne(ort, read, set, steps) {
  const session = await ort.TrainingSession.create({
    checkpointState: await read(set.files.checkpoint), trainModel: await read(set.files.train),
    evalModel: set.files.eval ? await read(set.files.eval) : undefined,
    optimizerModel: set.files.optimizer ? await read(set.files.optimizer) : undefined });
  try {
    const feeds = {};
    for (const spec of set.inputs) {
      if (!session.trainingInputNames.includes(spec.name)) continue;
      const bytes = (await read(spec.file)).slice();
      feeds[spec.name] = new ort.Tensor(spec.dtype, new ARRAYS[spec.dtype](bytes.buffer), spec.shape);
    }
    const step = async () => {
      await session.runTrainStep(feeds);
      if (set.files.optimizer) await session.runOptimizerStep();
      await session.lazyResetGrad();
    };
    // Steps are timed in groups long enough (>= 20 ms) for a browser's coarse performance.now().
    let group = 1;
    for (;;) {
      const t0 = performance.now();
      for (let k = 0; k < group; ++k) await step();
      if (performance.now() - t0 >= 20 || group >= 4096) break;
      group *= 2;
    }
    // Then a second of steps: the engine compiles hot WebAssembly functions with its optimizing tier in the
    // background (dynamic tiering), and a set whose steps take a few ms would otherwise be timed on baseline code.
    for (const t0 = performance.now(); performance.now() - t0 < 1000;) for (let k = 0; k < group; ++k) await step();
    const times = [];
    for (let g = 0; g < steps; ++g) {
      const t0 = performance.now();
      for (let k = 0; k < group; ++k) await step();
      times.push((performance.now() - t0) / group);
    }
    times.sort((a, b) => a - b);
    return times[Math.floor(times.length / 2)];
  } finally {
    await session.release();
  }
}

// set.filesOf[package], when present: each package's own artifacts of the same forward model.
export async function benchSet(packages, read, set, steps) {
  const row = {};
  for (const [name, ort] of Object.entries(packages)) {
    try {
      row[name] = await timeOne(ort, read, set.filesOf ? { ...set, files: set.filesOf[name] } : set, steps);
    } catch (e) {
      row[name] = String((e && e.message) || e).split('\n')[0].slice(0, 120);
    }
  }
  return row;
}
