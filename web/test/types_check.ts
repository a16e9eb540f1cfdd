// Compiled by `tsc --noEmit` (web/test/run_types.sh): code written for onnxruntime-web 1.19's training
// API, with its import changed, type-checks against edgetrain-web's declarations.
import * as ort from '../lib/index.js';

async function trainOneBatch(images: Float32Array, labels: BigInt64Array): Promise<number> {
  ort.env.wasm.numThreads = 1;
  const session = await ort.TrainingSession.create({
    checkpointState: 'artifacts/checkpoint', trainModel: 'artifacts/training_model.onnx',
    evalModel: 'artifacts/eval_model.onnx', optimizerModel: 'artifacts/optimizer_model.onnx',
  });
  const feeds = { input: new ort.Tensor('float32', images, [labels.length, 1, 28, 28]),
                  labels: new ort.Tensor('int64', labels, [labels.length]) };
  const out = await session.runTrainStep(feeds);
  await session.runOptimizerStep();
  await session.lazyResetGrad();
  const evalOut = await session.runEvalStep(feeds, [session.evalOutputNames[0]]);
  const size: number = await session.getParametersSize(true);
  const params = await session.getContiguousParameters(true);
  await session.loadParametersBuffer(new Uint8Array((params.data as Float32Array).buffer), true);
  await session.setLearningRate(1e-3);
  await session.registerLinearLRScheduler(0, 100, 1e-3);
  await session.schedulerStep();
  const checkpoint: Uint8Array = await session.saveCheckpoint(true);
  const model: Uint8Array = await session.exportModelForInference(['output']);
  await session.release();
  const loss = out[session.trainingOutputNames[0]].data[0] as number;
  return loss + (evalOut[session.evalOutputNames[0]].data[0] as number) + size + checkpoint.length + model.length;
}

function isTyped(e: unknown): string {
  return e instanceof ort.InvalidArgumentError ? e.code : e instanceof ort.EdgetrainError ? e.message : '';
}

async function misuse(session: ort.TrainingSession): Promise<void> {
  // @ts-expect-error: a string is no tensor data
  new ort.Tensor('float32', 'abc', [3]);
  // @ts-expect-error: create needs the checkpoint and the training model
  await ort.TrainingSession.create({ trainModel: 'artifacts/training_model.onnx' });
  // @ts-expect-error: the parameters buffer is bytes, not a list
  await session.loadParametersBuffer([1, 2, 3], true);
}

// The pthreads module when the page is cross-origin isolated: which one runs, and why not.
async function threads(): Promise<string> {
  ort.env.wasm.numThreads = 4;
  const info: ort.RuntimeInfo = await ort.runtimeInfo();
  // @ts-expect-error: runtimeInfo is read-only information, not a setting
  info.threaded = 'yes';
  return info.threaded ? `${info.numThreads} threads` : info.reason ?? '';
}

export { trainOneBatch, isTyped, misuse, threads };
