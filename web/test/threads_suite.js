// The threading checks, the same in Node.js and in the page (web/test/threads.mjs drives them): which
// module loaded for env.wasm.numThreads, the sets' losses against the native build's, bad thread counts.
import { relaxedSimdCheck, sequence } from './suite.js';

function close(a, b, rel) { return Math.abs(a - b) <= rel * Math.max(Math.abs(a), Math.abs(b), 1e-12); }

async function rejects(promise, Class, pattern) {
  try {
    await promise;
    return 'resolved';
  } catch (e) {
    return e instanceof Class && pattern.test(e.message) ? null : `${e && e.name}: ${e && e.message}`;
  }
}

// config: {numThreads, expectThreaded, reasonPattern?, relaxedSimd?, requireRelaxedSimd?,
//          sets: [{name, expected: native numbers, ...}]}
export async function threadChecks(ort, read, config, log) {
  const checks = [];
  const check = (name, ok, detail = '') => { checks.push({ name, ok: !!ok, detail }); log(`${ok ? 'ok  ' : 'FAIL'} ${name}${ok ? '' : ` (${detail})`}`); };
  for (const bad of [-1, 2.5, 65, 'four']) {  // rejected before the module loads, and after
    ort.env.wasm.numThreads = bad;
    const error = await rejects(ort.runtimeInfo(), ort.InvalidArgumentError, /env\.wasm\.numThreads/);
    check(`env.wasm.numThreads = ${JSON.stringify(bad)} rejects with InvalidArgumentError naming it`, !error, error);
  }
  ort.env.wasm.numThreads = config.numThreads;
  ort.env.wasm.relaxedSimd = config.relaxedSimd !== false;
  const info = await ort.runtimeInfo();
  log(`runtime: ${JSON.stringify(info)}`);
  check(`numThreads ${config.numThreads}: ${config.expectThreaded ? 'the pthreads module' : 'the single-threaded module'} ` +
        `(${info.module}, ${info.numThreads} threads)`, info.threaded === config.expectThreaded &&
        info.numThreads === (config.expectThreaded ? config.numThreads : 1));
  if (config.reasonPattern) check(`the fallback says why: ${info.reason}`, new RegExp(config.reasonPattern).test(info.reason || ''));
  await relaxedSimdCheck(ort, check, config.requireRelaxedSimd);
  ort.env.wasm.numThreads = 65;
  const after = await rejects(ort.runtimeInfo(), ort.InvalidArgumentError, /env\.wasm\.numThreads/);
  check('a bad env.wasm.numThreads after the module loaded still rejects', !after, after);
  ort.env.wasm.numThreads = config.numThreads;
  const mlp = config.sets[0];
  for (const bad of [0, -2, 1.5, 65]) {
    const error = await rejects(ort.TrainingSession.create({ checkpointState: await read(mlp.files.checkpoint),
      trainModel: await read(mlp.files.train) }, { intraOpNumThreads: bad }), ort.InvalidArgumentError, /intraOpNumThreads/);
    check(`intraOpNumThreads ${bad} rejects with InvalidArgumentError naming it`, !error, error);
  }
  const results = {};
  for (const set of config.sets) {
    const t0 = Date.now();
    const r = await sequence(ort, read, set);
    results[set.name] = { ms: Date.now() - t0, train_losses: r.train_losses };
    const e = set.expected;
    r.train_losses.forEach((a, k) => check(`${set.name} (${info.numThreads} threads): train loss ${k + 1} ${a} vs native ${e.train_losses[k]}`,
      close(a, e.train_losses[k], set.tolerance)));
    if (e.eval_loss !== undefined) check(`${set.name}: eval loss ${r.eval_loss} vs native ${e.eval_loss}`, close(r.eval_loss, e.eval_loss, set.tolerance));
    check(`${set.name}: parameter sum ${r.param_sum_final_trainable} vs native ${e.param_sum_final_trainable}`,
      close(r.param_sum_final_trainable, e.param_sum_final_trainable, set.paramTolerance));
  }
  return { checks, results, info };
}
