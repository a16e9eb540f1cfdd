// Types of edgetrain-web: onnxruntime-web 1.19's training API (TrainingSession, Tensor, env) plus
// checkpoint saving, inference export and learning-rate control.

export declare namespace Tensor {
  interface DataTypeMap {
    float32: Float32Array; uint8: Uint8Array; int8: Int8Array; uint16: Uint16Array; int16: Int16Array;
    int32: Int32Array; int64: BigInt64Array; bool: Uint8Array; float16: Uint16Array; float64: Float64Array;
    uint32: Uint32Array; uint64: BigUint64Array;
  }
  type Type = keyof DataTypeMap;
  type DataType = DataTypeMap[Type];
}

/** A CPU tensor, interchangeable with onnxruntime-web's (type, data, dims). */
export declare class Tensor {
  constructor(type: Tensor.Type, data: Tensor.DataType | readonly number[] | readonly bigint[] | readonly boolean[],
              dims?: readonly number[]);
  constructor(data: Tensor.DataType, dims?: readonly number[]);
  readonly type: Tensor.Type;
  readonly data: Tensor.DataType;
  readonly dims: readonly number[];
  readonly size: number;
  readonly location: 'cpu';
  getData(): Promise<Tensor.DataType>;
  dispose(): void;
  reshape(dims: readonly number[]): Tensor;
}

/** What runTrainStep/runEvalStep accept per input: our Tensor or any {type, data, dims}, onnxruntime-web's included. */
export interface TensorLike { readonly type: string; readonly data: ArrayBufferView; readonly dims: readonly number[]; }

export declare namespace TrainingSession {
  type UriOrBuffer = string | URL | Uint8Array | ArrayBuffer;
  type FeedsType = { readonly [name: string]: TensorLike };
  type FetchesType = readonly string[] | { readonly [name: string]: TensorLike | null };
  type ReturnType = { readonly [name: string]: Tensor };
  interface SessionOptions { intraOpNumThreads?: number; seed?: number | bigint; [key: string]: unknown; }
  interface RunOptions { [key: string]: unknown; }
}

export interface TrainingSessionCreateOptions {
  checkpointState: TrainingSession.UriOrBuffer;
  trainModel: TrainingSession.UriOrBuffer;
  optimizerModel?: TrainingSession.UriOrBuffer;
  evalModel?: TrainingSession.UriOrBuffer;
}

export declare class TrainingSession {
  static create(trainingOptions: TrainingSessionCreateOptions,
                sessionOptions?: TrainingSession.SessionOptions): Promise<TrainingSession>;
  readonly trainingInputNames: readonly string[];
  readonly trainingOutputNames: readonly string[];
  readonly evalInputNames: readonly string[];
  readonly evalOutputNames: readonly string[];
  lazyResetGrad(): Promise<void>;
  runTrainStep(feeds: TrainingSession.FeedsType, options?: TrainingSession.RunOptions): Promise<TrainingSession.ReturnType>;
  runTrainStep(feeds: TrainingSession.FeedsType, fetches: TrainingSession.FetchesType,
               options?: TrainingSession.RunOptions): Promise<TrainingSession.ReturnType>;
  runOptimizerStep(options?: TrainingSession.RunOptions): Promise<void>;
  runEvalStep(feeds: TrainingSession.FeedsType, options?: TrainingSession.RunOptions): Promise<TrainingSession.ReturnType>;
  runEvalStep(feeds: TrainingSession.FeedsType, fetches: TrainingSession.FetchesType,
              options?: TrainingSession.RunOptions): Promise<TrainingSession.ReturnType>;
  getParametersSize(trainableOnly?: boolean): Promise<number>;
  /** The parameters' float32 values as bytes (length 4 * getParametersSize(trainableOnly)). */
  loadParametersBuffer(buffer: Uint8Array | Float32Array, trainableOnly?: boolean): Promise<void>;
  getContiguousParameters(trainableOnly?: boolean): Promise<Tensor>;
  release(): Promise<void>;

  /** The checkpoint in ORT's format, loadable by edgetrain everywhere and by ONNX Runtime. */
  saveCheckpoint(includeOptimizerState?: boolean): Promise<Uint8Array>;
  /** An inference-only ONNX model with the current weights computing `outputNames` of the eval model. */
  exportModelForInference(outputNames?: readonly string[]): Promise<Uint8Array>;
  getLearningRate(): Promise<number>;
  setLearningRate(learningRate: number): Promise<void>;
  /** ORT's LinearLRScheduler: warmup to initialLr, then linear decay to 0 at totalSteps. */
  registerLinearLRScheduler(warmupSteps: number, totalSteps: number, initialLr: number): Promise<void>;
  /** Cosine decay to minLr at totalSteps after a linear warmup. */
  registerCosineLRScheduler(warmupSteps: number, totalSteps: number, initialLr: number, minLr?: number): Promise<void>;
  /** initialLr * gamma^floor(step / stepSize). */
  registerStepLRScheduler(stepSize: number, gamma: number, initialLr: number): Promise<void>;
  /** Sets the learning rate from the registered scheduler at the current optimizer step. */
  schedulerStep(): Promise<void>;
  setSeed(seed: number | bigint): Promise<void>;
  addProperty(name: string, value: number | bigint | string): Promise<void>;
  getProperty(name: string): Promise<number | string>;
}

export declare const env: {
  wasm: { numThreads: number; simd: boolean; relaxedSimd: boolean; wasmPaths?: string };
  logLevel: 'verbose' | 'info' | 'warning' | 'error' | 'fatal';
  versions: { web: string };
};

export declare function version(): Promise<string>;

/** The module that runs: the pthreads one (`edgetrain-mt.wasm`) or not, its threads, and why fewer. */
export interface RuntimeInfo {
  threaded: boolean; numThreads: number; module: string; reason: string | null;
  /** Whether the GEMM runs relaxed SIMD's fused multiply-add (env.wasm.relaxedSimd and the engine allowing). */
  relaxedSimd: boolean;
}
export declare function runtimeInfo(): Promise<RuntimeInfo>;

/** Every failure of the C ABI, typed by its code; the message names the file, input or parameter. */
export declare class EdgetrainError extends Error {
  readonly code: 'InvalidArgument' | 'InvalidModel' | 'NotImplemented' | 'OutOfRange' | 'IoError' |
    'ResourceExhausted' | 'Internal';
}
export declare class InvalidArgumentError extends EdgetrainError {}
export declare class InvalidModelError extends EdgetrainError {}
export declare class NotImplementedError extends EdgetrainError {}
export declare class OutOfRangeError extends EdgetrainError {}
export declare class IoError extends EdgetrainError {}
export declare class ResourceExhaustedError extends EdgetrainError {}
export declare class InternalError extends EdgetrainError {}

declare const _default: { Tensor: typeof Tensor; TrainingSession: typeof TrainingSession; env: typeof env;
  version: typeof version; runtimeInfo: typeof runtimeInfo };
export default _default;
