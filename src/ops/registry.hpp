// Registration functions, one per operator family (one .cpp each under src/ops/).
#pragma once

#include "ops/kernel.hpp"
#include "ops/op_config.hpp"

namespace edgetrain {

void RegisterElementwiseOps(OpRegistry& r);    // elementwise.cpp: unary/binary math, compare, logic, Cast, Where, Clip
void RegisterActivationOps(OpRegistry& r);     // activation.cpp: Relu, Sigmoid, Elu, Selu, HardSwish, PRelu, ...
void RegisterReductionOps(OpRegistry& r);      // reduction.cpp: Reduce*, ArgMax/ArgMin, CumSum, TopK
void RegisterSoftmaxOps(OpRegistry& r);        // softmax.cpp: Softmax, LogSoftmax, Hardmax
void RegisterLossOps(OpRegistry& r);           // loss.cpp: SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss
void RegisterShapeOps(OpRegistry& r);          // shape.cpp: Reshape, Transpose, Concat, Split, Slice, Pad, ...
void RegisterIndexingOps(OpRegistry& r);       // indexing.cpp: Gather*, Scatter*, OneHot, NonZero, Trilu, Resize, ...
void RegisterMatMulOps(OpRegistry& r);         // matmul.cpp: MatMul, Gemm, Einsum
void RegisterConvOps(OpRegistry& r);           // conv.cpp: Conv, ConvTranspose, ConvReluMaxPool
void RegisterPoolOps(OpRegistry& r);           // pool.cpp: MaxPool, AveragePool, Global*Pool
void RegisterNormalizationOps(OpRegistry& r);  // normalization.cpp: BatchNorm, InstanceNorm, LayerNorm, LpNorm, MVN
void RegisterRandomOps(OpRegistry& r);         // random.cpp: Dropout, RandomNormal, RandomUniform, ...
void RegisterSequenceOps(OpRegistry& r);       // sequence.cpp: Sequence*, SplitToSequence, ConcatFromSequence
void RegisterControlFlowOps(OpRegistry& r);    // control_flow.cpp: Identity, Constant, If, Loop
void RegisterOptimizerOps(OpRegistry& r);      // optimizer.cpp: fused AdamWUpdate, SGDUpdate, SGDMomentumUpdate
// ONNX Runtime's training operators (com.microsoft, plus the few ORT registers in the ONNX domain).
void RegisterOrtGradientOps(OpRegistry& r);     // ort_gradients.cpp: *Grad, InPlaceAccumulatorV2, dropout, losses
void RegisterOrtFusedOps(OpRegistry& r);        // ort_fused.cpp: FusedMatMul/Gemm/Conv, BatchNormInternal, optimizers
void RegisterOrtContribOps(OpRegistry& r);      // ort_contrib.cpp: com.microsoft Gelu family, layer norms, ConcatTraining
void RegisterRecurrentOps(OpRegistry& r);       // recurrent.cpp: RNN, GRU, LSTM and their fused backward ops
void RegisterSpectralOps(OpRegistry& r);        // spectral.cpp: DFT, STFT, MelWeightMatrix and their fused backward ops
void RegisterQuantizeOps(OpRegistry& r);        // quantize.cpp: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, FakeQuantize
// Issue 19: ONNX's training operators and the operators of the node suite's rest.
void RegisterOnnxTrainingOps(OpRegistry& r);    // onnx_training.cpp: ai.onnx.preview.training Adagrad, Momentum, Adam
void RegisterVisionOps(OpRegistry& r);          // vision.cpp: GridSample, RoiAlign, NonMaxSuppression
void RegisterLinalgSetOps(OpRegistry& r);       // linalg_set.cpp: Det, Unique
void RegisterOptionalOps(OpRegistry& r);        // optional.cpp: Optional, OptionalHasElement, OptionalGetElement

}  // namespace edgetrain

// Registers the default-domain kernel for op_type (named once), compiled in only when the build includes it;
// yields the entry, e.g. ET_REGISTER_ONNX(r, "Relu", Relu).in_place = true;
#define ET_REGISTER_ONNX(r, op_type, ...) ET_IF_BUILT("", op_type)::edgetrain::RegisterOnnx(r, op_type, __VA_ARGS__)
