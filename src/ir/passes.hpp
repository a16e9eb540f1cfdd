// Graph-level passes over our IR.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ir/graph.hpp"

namespace edgetrain {

// Removes nodes none of whose outputs reach `keep` (default: the graph outputs).
void EliminateDeadNodes(Graph& graph, const std::vector<std::string>& keep = {});

// Replaces each Identity node that copies an initializer by an initializer of its own holding a
// copy. Exporters emit such nodes when they deduplicate equal tensors (PyTorch shares BatchNorm's
// initial weight and running variance, both all ones); for training they are distinct variables.
void MaterializeInitializerCopies(Graph& graph);

// Evaluates a node on constant inputs; returns its outputs (one per node output), or nullopt when
// they cannot be stored as constants (sequences).
using NodeEvaluator =
    std::function<std::optional<std::vector<Tensor>>(const Node&, const std::vector<Tensor>&)>;

// Replaces every node whose inputs are all constant (initializers that are not also graph inputs)
// and for which `can_fold(node)` holds by initializers holding its outputs. Returns the count.
size_t FoldConstants(Graph& graph, const NodeEvaluator& evaluate, const std::function<bool(const Node&)>& can_fold);

// Graph fusions for execution, each a pattern rewrite that changes no result beyond float rounding.
// A value counts as read by a node anywhere in the graph (subgraphs included) or as a graph output.

// Folds BatchNormalization(Conv(X, W, B)) into the Conv when the BatchNormalization is in inference
// form (one output, not training_mode, spatial) with constant float32 scale, bias, mean and variance,
// the Conv's W (and B, if any) are constant float32 initializers and nothing but the BatchNormalization
// reads the Conv's output. W' = W * s, B' = (B - mean) * s + bias with s = scale / sqrt(var + epsilon),
// computed in double, become new initializers. Returns the number of folds.
size_t FoldBatchNormIntoConv(Graph& graph);

// Replaces MaxPool(Relu(Conv(X, W, B))) by ai.edgetrain ConvReluMaxPool (MaxPool's attributes
// named "pool_<attribute>") when nothing but the Relu reads the Conv's output, nothing but the
// MaxPool reads the Relu's, and nothing reads the MaxPool's Indices. Returns the number of fusions.
size_t FuseConvReluMaxPool(Graph& graph);

// Replaces Relu(Conv(...)) by com.microsoft FusedConv and Relu(Gemm(...)) by com.microsoft FusedGemm,
// each with activation "Relu" (ONNX Runtime's contrib operators), when nothing but the Relu reads
// the Conv's or Gemm's output (each kind only when asked). Returns the number of fusions.
size_t FuseReluIntoProducers(Graph& graph, bool into_conv = true, bool into_gemm = true);

// Replaces Mul(X, Sigmoid(X)) (SiLU as PyTorch exports it; either input order) by ai.edgetrain Silu(X) when
// nothing but the Mul reads the Sigmoid's output. Returns the number of fusions.
size_t FuseSilu(Graph& graph);

// Replaces Relu(Y), Clip(Y, min, max) (opset 11+: bounds as inputs, each absent or an input or initializer of
// the graph) and, with `silu_kernel`, ai.edgetrain Silu(Y) of the Y of a BatchNormalization (spatial, with a
// training_mode attribute or one output, at most three outputs) that nothing else reads by ai.edgetrain
// BatchNormalizationRelu / BatchNormalizationClip (Clip's bounds its inputs 5 and 6) / BatchNormalizationSilu: the
// activation is applied as the normalized values are written. Returns the count.
size_t FuseBatchNormActivation(Graph& graph, bool silu_kernel = true);

// A training-mode BatchNormalization (or its Relu, Clip and Silu forms) that a later copy of it recomputes (the same
// X, scale, B and epsilon; the copy's running statistics unread, as generate-artifacts' recompute writes it) gains
// output 5, the affine map it applied before its activation, and the copy becomes ai.edgetrain.ChannelAffine of X
// and that map with the copy's own activation (and bounds): the same bits without the copy's statistics pass.
// Returns how many copies were replaced.
size_t ShareBatchNormAffine(Graph& graph);

// ai.edgetrain BatchNormalizationGrad(ReluGrad(dY, Y) or ClipGrad(dY, Y, min, max), X, scale), where only it reads
// the activation's gradient and Y is ChannelAffine(X, affine) with that activation (and those bounds), becomes
// ai.edgetrain.BatchNormalizationActivationGrad(dY, X, scale, affine[, min, max]): the activation's mask is taken
// from X and the map, without a pass of its own. The same for SiluGrad(dY, V), V = ChannelAffine(X, affine) without
// an activation (SiLU's gradient reads its input). Returns the count.
size_t FuseActivationGradIntoBatchNormGrad(Graph& graph);

// ai.edgetrain Silu(V), V = ChannelAffine(X, affine) without an activation read only by it, becomes
// ChannelAffine(X, affine) with activation "Silu": one pass instead of two. Returns the count.
size_t FuseSiluIntoChannelAffine(Graph& graph);

// Sum(Mul(A, B), Expand(C, shape)) (either order), where only the Sum reads the Mul's and the Expand's outputs, becomes
// ai.edgetrain.MulAdd(A, B, C, shape): one pass, with no expanded copy of C (the gradient at a squeeze-excitation
// block's input: dY times the channel scale, plus the pooled branch's gradient). Returns the count.
size_t FuseMulAdd(Graph& graph);

// Dropout that drops nothing (ratio a constant 0, or training_mode absent or a constant false; no seed) becomes
// Identity, and so does each ai.edgetrain DropoutGrad of its mask that drops nothing; not when anything else reads
// the mask. The results are the same bits (X * 1 / (1 - 0) is X). Returns the number of nodes replaced.
size_t RemoveDropoutsThatDropNothing(Graph& graph);

// Grouped convolutions (depthwise: the direct kernels) read a training BatchNormalization's output through its map:
// ai.edgetrain ConvGrad(dY, ChannelAffine(X, affine[, min, max]), W), where only it reads the mapped X, becomes
// ai.edgetrain.ChannelAffineConvGrad(dY, X, W, affine[, min, max]); Conv(Y, W[, B]), where Y is output 0 of a
// training-mode BatchNormalization (or its Relu/Clip/Silu form) and only the Conv reads Y, becomes
// ai.edgetrain.ChannelAffineConv(X, W, B, affine[, min, max]) of the BatchNormalization's map output 5 (added where
// it has none: a forward alone, as a frozen backbone's) and Y is no longer computed. The kernels apply the map as
// they read X. Returns the count.
size_t FoldChannelAffineIntoDepthwiseConv(Graph& graph);

// Replaces Sum(SliceGrad(dY_1, ...), ..., SliceGrad(dY_n, ...)) by Concat(dY...) along the sliced axis when
// the SliceGrads (ai.edgetrain or com.microsoft) take constant step-1 slices of one axis of one constant
// shape that tile it without gaps or overlap, and nothing but the Sum reads them: the gradient of a tensor
// cut into pieces and put back in another order (the gate reordering of PyTorch's LSTM/GRU exports), one
// copy instead of a zero-filled tensor per piece and their sum. Returns the number of rewrites.
size_t JoinSliceGradients(Graph& graph);

// Takes 2-D transposes out of matrix products: a Transpose of a Transpose that restores its input is read
// past; MatMul(A, Transpose(W)) and MatMul(Transpose(W), B) of 2-D float32/float64 W become com.microsoft
// FusedMatMul with transB/transA (when `fused_matmul`); Transpose(Gemm(A, B)) of a Gemm without C that
// nothing else reads becomes Gemm(B, A) with swapped, flipped transposes. Transposes left unread stay for
// EliminateDeadNodes. Returns the number of rewrites.
size_t FoldTransposesIntoProducts(Graph& graph, bool fused_matmul = true);

// Gives each LSTM node that an ai.edgetrain LSTMGrad node differentiates (the same eight inputs and
// attributes) a fourth output, the gate values of its float fast path, which the LSTMGrad reads as its
// input 11 instead of running the forward again; the LSTMGrad's outputs that nothing reads become omitted
// (not computed). Returns the number of pairs.
size_t KeepRecurrentTraces(Graph& graph);

}  // namespace edgetrain
