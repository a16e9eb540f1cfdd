// ONNX Runtime's fused and training operators as its training artifacts use them, with ORT's inputs,
// outputs, attributes and schema defaults: FusedMatMul/TransposeMatMul, FusedGemm, FusedConv, ConvGrad,
// MaxPoolGrad, AveragePoolGrad, BatchNormInternal, BatchNormalizationGrad and the optimizers
// AdamWOptimizer, SGDOptimizerV2, InplaceClipGradNorm. The math is shared with edgetrain's own
// kernels (ops/shared_kernels.hpp, *_util.hpp). ORT updates optimizer state in place; these kernels
// never write into their inputs and return fresh tensors in fresh sequences instead.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "ops/activation_util.hpp"
#include "ops/attributes.hpp"
#include "ops/elementwise_util.hpp"
#include "ops/gemm.hpp"
#include "ops/optimizer_util.hpp"
#include "ops/registry.hpp"
#include "ops/shared_kernels.hpp"

namespace edgetrain {
namespace {

// ---------------------------------------------------------------------------------------------
// FusedMatMul (and its older name TransposeMatMul): Y = alpha * op(A) x op(B), numpy matmul rules

// Where the matrices of one operand lie, and the logical shape [batch..., rows, cols] PlanMatMul sees.
struct MatMulOperand {
  Shape logical;
  int64_t ld = 0;            // row pitch of a stored matrix
  int64_t batch_stride = 0;  // elements between consecutive (flattened) batch indices
  bool transposed = false;   // the logical matrix is the stored one transposed
};

// `trans` swaps the last two dims; `trans_batch` reads [d0, d1..dr-2, dr-1] as batches d1..dr-2 of
// [d0, dr-1] matrices (rows d0 apart by d1*...*dr-1 elements). Vectors ignore both, as in ORT.
MatMulOperand DescribeOperand(const Shape& raw, bool trans, bool trans_batch, bool is_left) {
  MatMulOperand op;
  const size_t rank = raw.size();
  if (rank == 1) {
    op.logical = raw;
    op.ld = is_left ? raw[0] : 1;  // promoted to [1, k] (left) or [k, 1] (right)
    return op;
  }
  int64_t rows = 0;
  const int64_t cols = raw[rank - 1];
  if (trans_batch) {
    rows = raw[0];
    op.logical.assign(raw.begin() + 1, raw.end() - 1);
    op.ld = NumElements(Shape(raw.begin() + 1, raw.end()));
    op.batch_stride = cols;
  } else {
    rows = raw[rank - 2];
    op.logical.assign(raw.begin(), raw.end() - 2);
    op.ld = cols;
    op.batch_stride = rows * cols;
  }
  op.logical.push_back(trans ? cols : rows);
  op.logical.push_back(trans ? rows : cols);
  op.transposed = trans;
  return op;
}

void FusedMatMulKernel(KernelContext& ctx) {
  const Node& node = ctx.node();
  const std::string& what = node.Describe();
  const Tensor& a = ctx.Input(0);
  const Tensor& b = ctx.Input(1);
  ET_CHECK(a.dtype() == b.dtype(), ErrorCode::kInvalidArgument, what, ": A is ", DataTypeName(a.dtype()), " but B is ",
           DataTypeName(b.dtype()));
  ET_CHECK(a.rank() >= 1 && b.rank() >= 1, ErrorCode::kInvalidArgument, what, ": A ", ShapeToString(a.shape()),
           " and B ", ShapeToString(b.shape()), " must have rank >= 1");
  const MatMulOperand op_a =
      DescribeOperand(a.shape(), node.GetInt("transA", 0) != 0, node.GetInt("transBatchA", 0) != 0, true);
  const MatMulOperand op_b =
      DescribeOperand(b.shape(), node.GetInt("transB", 0) != 0, node.GetInt("transBatchB", 0) != 0, false);
  const MatMulShapes p = PlanMatMul(what, op_a.logical, op_b.logical);
  const double alpha = node.GetFloat("alpha", 1.0f);
  Tensor& y = ctx.Output(0, p.out, a.dtype());
  VisitFloat(a.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* ap = a.data<T>();
    const T* bp = b.data<T>();
    T* yp = y.data<T>();
    const bool single_b = NumElements(p.b_batch) == 1;
    if (single_b && !op_a.transposed && op_a.ld == p.k && op_a.batch_stride == p.m * p.k) {
      // A's batch is contiguous rows: one product of [batch * m, k] x [k, n].
      Gemm<T>(false, op_b.transposed, NumElements(p.batch) * p.m, p.n, p.k, static_cast<T>(alpha), ap, op_a.ld, bp,
              op_b.ld, T(0), yp, p.n, &ctx.threads());
      return;
    }
    std::vector<int64_t> a_offsets = BatchOffsets(p.a_batch, p.batch), b_offsets = BatchOffsets(p.b_batch, p.batch);
    for (auto& o : a_offsets) o *= op_a.batch_stride;
    for (auto& o : b_offsets) o *= op_b.batch_stride;
    ForEachProduct(ctx.threads(), static_cast<int64_t>(a_offsets.size()), p.m * p.n * std::max<int64_t>(p.k, 1),
                   [&](int64_t i, ThreadPool* pool) {
                     Gemm<T>(op_a.transposed, op_b.transposed, p.m, p.n, p.k, static_cast<T>(alpha), ap + a_offsets[i],
                             op_a.ld, bp + b_offsets[i], op_b.ld, T(0), yp + i * p.m * p.n, p.n, pool);
                   });
  });
}

// ---------------------------------------------------------------------------------------------
// FusedGemm and FusedConv: Gemm or Conv followed by the activation their attribute 'activation'
// names (none: the plain op). Relu runs inside the Gemm or Conv kernel, any other as a pass over Y.

void CheckActivation(const Node& node, const std::string& activation, const ActivationAttr& attr) {
  ET_CHECK(activation.empty() || VisitActivation(activation, attr, [](auto) {}), ErrorCode::kNotImplemented,
           node.Describe(), ": activation '", activation,
           "' is not supported (Relu, LeakyRelu, Tanh, Sigmoid, HardSigmoid, Elu, Celu, Selu, Softplus, Softsign, "
           "ThresholdedRelu, ParametricSoftplus, ScaledTanh)");
}

// Y = activation(Y) in place for an activation other than Relu (which the kernels fuse).
void ApplyActivation(KernelContext& ctx, Tensor& y, const std::string& activation, const ActivationAttr& attr) {
  if (activation.empty() || activation == "Relu") return;
  VisitActivation(activation, attr, [&](auto element) {
    elementwise::VisitFloatMath(y.dtype(), ctx.node().Describe(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      elementwise::UnaryMap<T, T>(ctx.threads(), y, y, element);
    });
  });
}

// FusedGemm names the activation's attributes with the prefix "activation_" (activation_alpha, ...).
void FusedGemmKernel(KernelContext& ctx) {
  const Node& node = ctx.node();
  const std::string activation = node.GetString("activation", "");
  const ActivationAttr attr = [&node](const char* name, double fallback) {
    return node.GetFloat(std::string("activation_") + name, static_cast<float>(fallback));
  };
  CheckActivation(node, activation, attr);
  ApplyActivation(ctx, GemmForward(ctx, activation == "Relu"), activation, attr);
}

// FusedConv(X, W, B?, Z?) lists the activation's parameters in 'activation_params' (alpha first, then
// beta or gamma). The residual input Z is not supported.
void FusedConvKernel(KernelContext& ctx) {
  const Node& node = ctx.node();
  const std::string activation = node.GetString("activation", "");
  const std::vector<float> params = node.GetFloats("activation_params");
  const ActivationAttr attr = [&params](const char* name, double fallback) {
    const size_t index = std::string_view(name) == "alpha" ? 0 : 1;
    return index < params.size() ? static_cast<double>(params[index]) : fallback;
  };
  CheckActivation(node, activation, attr);
  ET_CHECK(!ctx.HasInput(3), ErrorCode::kNotImplemented, node.Describe(), ": the sum input Z is not supported");
  ApplyActivation(ctx, ConvForwardKernel(ctx, activation == "Relu"), activation, attr);
}

// ---------------------------------------------------------------------------------------------
// MaxPoolGrad(dY, Indices) and AveragePoolGrad(dY) -> dX (ONNX domain in ORT). Neither input fixes
// dX's spatial size (the pooling rounds it down), so, as in ORT, dX has the shape the model declares
// for it, with batch and channels taken from dY.

Shape DeclaredPoolInputShape(const KernelContext& ctx, const Tensor& dy) {
  const std::string& what = ctx.node().Describe();
  ET_CHECK(dy.rank() >= 3, ErrorCode::kInvalidArgument, what, ": dY must have rank >= 3, got ",
           ShapeToString(dy.shape()));
  const ValueInfo* info = ctx.DeclaredOutput(0);
  const std::string output = ctx.node().outputs.empty() ? std::string() : ctx.node().outputs[0];
  ET_CHECK(info && info->has_shape && info->shape.size() == dy.rank(), ErrorCode::kInvalidModel, what,
           ": the model must declare the shape of output '", output, "' (rank ", dy.rank(),
           "): dX's spatial size does not follow from dY");
  Shape shape = {dy.dim(0), dy.dim(1)};
  for (size_t d = 1; d < dy.rank(); ++d) {
    const Dim& dim = info->shape[d];
    ET_CHECK(d < 2 ? !dim.known() || dim.value == dy.dim(1) : dim.known(), ErrorCode::kInvalidModel, what,
             ": the declared shape of output '", output, "' does not fit dY ", ShapeToString(dy.shape()),
             " (dimension ", d, ")");
    if (d >= 2) shape.push_back(dim.value);
  }
  return shape;
}

// dX = zeros, then dX.flat[Indices[i]] += dY[i]: MaxPool's Indices are flat over the whole input.
void MaxPoolGradKernel(KernelContext& ctx) {
  const std::string& what = ctx.node().Describe();
  const Tensor& dy = ctx.Input(0);
  const Tensor& indices = ctx.Input(1);
  ET_CHECK(indices.dtype() == DataType::kInt64 && indices.shape() == dy.shape(), ErrorCode::kInvalidArgument, what,
           ": Indices must be int64 of dY's shape ", ShapeToString(dy.shape()), ", got ", DataTypeName(indices.dtype()),
           " ", ShapeToString(indices.shape()));
  ET_CHECK(ctx.node().GetInt("storage_order", 0) == 0, ErrorCode::kNotImplemented, what,
           ": only row-major MaxPool indices (storage_order 0) are supported");
  const Shape x_shape = DeclaredPoolInputShape(ctx, dy);
  const int64_t x_count = NumElements(x_shape);
  const std::vector<int64_t> where = indices.ToInt64Vector();
  for (int64_t index : where)
    ET_CHECK(index >= 0 && index < x_count, ErrorCode::kOutOfRange, what, ": index ", index,
             " is out of range for dX of shape ", ShapeToString(x_shape));
  Tensor& dx = ctx.Output(0, x_shape, dy.dtype());
  VisitFloat(dy.dtype(), what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* dyp = dy.data<T>();
    T* dxp = dx.data<T>();
    std::fill(dxp, dxp + x_count, T(0));
    for (size_t i = 0; i < where.size(); ++i) dxp[where[i]] += dyp[i];
  });
}

void AveragePoolGradKernel(KernelContext& ctx) {
  const Tensor& dy = ctx.Input(0);
  AveragePoolBackward(ctx, dy, DeclaredPoolInputShape(ctx, dy));
}

// BatchNormalizationGrad(dY, X, scale, saved_mean, saved_inv_std) -> (dX, dScale, dBias).
void BatchNormalizationGradKernel(KernelContext& ctx) { BatchNormalizationBackward(ctx, true); }

// ---------------------------------------------------------------------------------------------
// Optimizers over sequences of tensors

double ScalarInput(const KernelContext& ctx, size_t index, const char* name) {
  const Tensor& t = ctx.Input(index);
  ET_CHECK(t.numel() == 1 && IsFloatType(t.dtype()), ErrorCode::kInvalidArgument, ctx.node().Describe(), ": ", name,
           " must be one float value, got ", DataTypeName(t.dtype()), " ", ShapeToString(t.shape()));
  return t.DoubleAt(0);
}

// Input `index`, the optional bool 'update_signal': absent means update.
bool UpdateSignal(const KernelContext& ctx, size_t index) {
  if (!ctx.HasInput(index)) return true;
  const Tensor& t = ctx.Input(index);
  ET_CHECK(t.dtype() == DataType::kBool && t.numel() >= 1, ErrorCode::kInvalidArgument, ctx.node().Describe(),
           ": update_signal must be a bool tensor, got ", DataTypeName(t.dtype()), " ", ShapeToString(t.shape()));
  return t.data<bool>()[0];
}

struct NamedSequence {
  const char* name;
  const TensorSequence* tensors;
};

// The sequence inputs at `indices`: equally long (and not empty unless `allow_empty`), tensor k of
// each of the same float type and shape as tensor k of the first.
template <size_t N>
std::array<NamedSequence, N> SequenceInputs(const KernelContext& ctx, const std::array<size_t, N>& indices,
                                            const std::array<const char*, N>& names, bool allow_empty) {
  const std::string& what = ctx.node().Describe();
  std::array<NamedSequence, N> sequences;
  for (size_t j = 0; j < N; ++j) sequences[j] = {names[j], &ctx.InputSequence(indices[j])};
  const NamedSequence& first = sequences.front();
  ET_CHECK(allow_empty || !first.tensors->empty(), ErrorCode::kInvalidArgument, what, ": ", first.name,
           " is an empty sequence");
  for (const NamedSequence& s : sequences) {
    ET_CHECK(s.tensors->size() == first.tensors->size(), ErrorCode::kInvalidArgument, what, ": ", s.name, " holds ",
             s.tensors->size(), " tensors but ", first.name, " holds ", first.tensors->size());
    for (size_t k = 0; k < s.tensors->size(); ++k) {
      const Tensor& t = (*s.tensors)[k];
      const Tensor& reference = (*first.tensors)[k];
      ET_CHECK(IsFloatType(t.dtype()), ErrorCode::kInvalidArgument, what, ": ", s.name, "[", k, "] is ",
               DataTypeName(t.dtype()), ", expected a float type");
      ET_CHECK(t.dtype() == reference.dtype() && t.shape() == reference.shape(), ErrorCode::kInvalidArgument, what,
               ": ", s.name, "[", k, "] is ", DataTypeName(t.dtype()), " ", ShapeToString(t.shape()), " but ",
               first.name, "[", k, "] is ", DataTypeName(reference.dtype()), " ", ShapeToString(reference.shape()));
    }
  }
  return sequences;
}

// Output sequence `index` (a throwaway when the node leaves it out, as ORT allows), emptied.
TensorSequence& SequenceOutput(KernelContext& ctx, size_t index, TensorSequence& throwaway) {
  if (index < ctx.NumOutputs()) return ctx.OutputSequence(index);
  throwaway.clear();
  return throwaway;
}

void CloneAllInto(const TensorSequence& tensors, TensorSequence& copies) {
  for (const Tensor& t : tensors) copies.push_back(t.Clone());
}

// An updated tensor of an optimizer: the fed one itself when the session lets it be overwritten
// (as ORT's kernels do), else new memory.
Tensor UpdatedTensor(const Tensor& input, bool in_place) {
  return in_place ? input : Tensor(input.dtype(), input.shape(), "updated tensor");
}

// AdamWOptimizer(lr, step, weights, gradients, momentums_1, momentums_2, update_signal?) ->
// (updated_flag, updated_weights, updated_momentums_1, updated_momentums_2). alpha/beta are beta1/beta2.
struct AdamWAttributes {
  AdamHyperparameters h;

  static AdamWAttributes Parse(const Node& node, int64_t /*opset*/) {
    const AttributeReader read(node);
    AdamWAttributes a;
    a.h.beta1 = read.Float("alpha", 0.9f);
    a.h.beta2 = read.Float("beta", 0.999f);
    a.h.epsilon = read.Float("epsilon", 1e-8f);
    a.h.weight_decay = read.Float("weight_decay", 1e-2f);
    a.h.mode = read.Int("adam_mode", 0);
    read.Check(a.h.mode == 0 || a.h.mode == 1, "adam_mode", "must be 0 (PyTorch AdamW) or 1 (Hugging Face AdamW)");
    a.h.correct_bias = read.Flag("correct_bias", true);
    read.Check(a.h.mode == 1 || a.h.correct_bias, "correct_bias", "must be 1 with adam_mode 0 (PyTorch AdamW)");
    return a;
  }
};

void AdamWOptimizerKernel(KernelContext& ctx) {
  const std::string& what = ctx.node().Describe();
  const AdamHyperparameters& h = ctx.Attributes<AdamWAttributes>().h;
  const double lr = ScalarInput(ctx, 0, "lr");
  const Tensor& step_tensor = ctx.Input(1);
  ET_CHECK(step_tensor.numel() == 1 && step_tensor.dtype() == DataType::kInt64, ErrorCode::kInvalidArgument, what,
           ": step must be one int64 value, got ", DataTypeName(step_tensor.dtype()), " ",
           ShapeToString(step_tensor.shape()));
  // ORT's training runtime (orttraining/training_api/optimizer.cc, Optimizer::Step) feeds the number
  // of updates done so far plus one, and the kernel takes it as the bias-correction power as it is.
  const int64_t step = step_tensor.data<int64_t>()[0];
  ET_CHECK(!h.correct_bias || step >= 1, ErrorCode::kInvalidArgument, what, ": step must be >= 1 (the number of this ",
           "update) when correct_bias is 1, got ", step);
  const auto in = SequenceInputs<4>(ctx, {2, 3, 4, 5}, {"weights", "gradients", "momentums_1", "momentums_2"},
                                    /*allow_empty=*/false);
  const bool update = UpdateSignal(ctx, 6);
  ctx.Output(0, step_tensor.shape(), DataType::kBool).data<bool>()[0] = update;
  if (!ctx.HasOutput(1) && !ctx.HasOutput(2) && !ctx.HasOutput(3)) return;
  TensorSequence throwaway[3];
  TensorSequence& weights = SequenceOutput(ctx, 1, throwaway[0]);
  TensorSequence& m1s = SequenceOutput(ctx, 2, throwaway[1]);
  TensorSequence& m2s = SequenceOutput(ctx, 3, throwaway[2]);
  if (!update) {
    CloneAllInto(*in[0].tensors, weights);
    CloneAllInto(*in[2].tensors, m1s);
    CloneAllInto(*in[3].tensors, m2s);
    return;
  }
  const AdamCoefficients c = MakeAdamCoefficients(h, lr, static_cast<double>(step));
  // Like ORT's kernel, update the fed tensors themselves where the session allows it.
  const bool in_place = ctx.InputMayBeOverwritten(2) && ctx.InputMayBeOverwritten(4) && ctx.InputMayBeOverwritten(5);
  for (size_t k = 0; k < in[0].tensors->size(); ++k) {
    const Tensor& w = (*in[0].tensors)[k];
    Tensor w_out = UpdatedTensor(w, in_place), m1_out = UpdatedTensor((*in[2].tensors)[k], in_place),
           m2_out = UpdatedTensor((*in[3].tensors)[k], in_place);
    VisitFloat(w.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      AdamUpdate<T>(ctx.threads(), c, w.numel(), w.data<T>(), (*in[1].tensors)[k].template data<T>(),
                    (*in[2].tensors)[k].template data<T>(), (*in[3].tensors)[k].template data<T>(), w_out.data<T>(),
                    m1_out.data<T>(), m2_out.data<T>());
    });
    weights.push_back(std::move(w_out));
    m1s.push_back(std::move(m1_out));
    m2s.push_back(std::move(m2_out));
  }
}

// SGDOptimizerV2(lr, weights, gradients, update_signal?) -> (update_completed, updated_weights):
// w' = w - lr * g.
void SGDOptimizerV2Kernel(KernelContext& ctx) {
  const std::string& what = ctx.node().Describe();
  const double lr = ScalarInput(ctx, 0, "lr");
  const auto in = SequenceInputs<2>(ctx, {1, 2}, {"weights", "gradients"}, false);
  const bool update = UpdateSignal(ctx, 3);
  ctx.Output(0, ctx.Input(0).shape(), DataType::kBool).data<bool>()[0] = update;
  if (!ctx.HasOutput(1)) return;
  TensorSequence& weights = ctx.OutputSequence(1);
  if (!update) {
    CloneAllInto(*in[0].tensors, weights);
    return;
  }
  const bool in_place = ctx.InputMayBeOverwritten(1);
  for (size_t k = 0; k < in[0].tensors->size(); ++k) {
    const Tensor& w = (*in[0].tensors)[k];
    Tensor w_out = UpdatedTensor(w, in_place);
    VisitFloat(w.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      SgdUpdate<T>(ctx.threads(), lr, 0.0, w.numel(), w.data<T>(), (*in[1].tensors)[k].template data<T>(),
                   w_out.data<T>());
    });
    weights.push_back(std::move(w_out));
  }
}

// InplaceClipGradNorm(gradients) -> clipped_gradients: every gradient times
// min(1, max_norm / (total L2 norm + 1e-6)), as torch.nn.utils.clip_grad_norm_ and ORT compute it.
void InplaceClipGradNormKernel(KernelContext& ctx) {
  const Node& node = ctx.node();
  const std::string& what = node.Describe();
  const double max_norm = node.GetFloat("max_norm", 1.0f);
  const std::string norm_type = node.GetString("norm_type", "fro");
  ET_CHECK(norm_type == "fro", ErrorCode::kNotImplemented, what, ": norm_type '", norm_type,
           "' is not supported (only 'fro', the L2 norm)");
  const TensorSequence& gradients = *SequenceInputs<1>(ctx, {0}, {"gradients"}, /*allow_empty=*/true)[0].tensors;
  double squares = 0;
  for (const Tensor& g : gradients)
    for (double v : g.ToDoubleVector()) squares += v * v;
  const double coefficient = std::min(max_norm / (std::sqrt(squares) + 1e-6), 1.0);
  TensorSequence clipped;
  for (const Tensor& g : gradients) {
    Tensor out(g.dtype(), g.shape(), what + " clipped gradient");
    VisitFloat(g.dtype(), what, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T scale = static_cast<T>(coefficient);
      const T* src = g.data<T>();
      T* dst = out.data<T>();
      for (int64_t i = 0; i < g.numel(); ++i) dst[i] = src[i] * scale;
    });
    clipped.push_back(std::move(out));
  }
  ctx.SetOutputSequence(0, std::move(clipped));
}

}  // namespace

void RegisterOrtFusedOps(OpRegistry& r) {
  ET_IF_BUILT("com.microsoft", "FusedMatMul") RegisterMicrosoft(r, "FusedMatMul", FusedMatMulKernel);
  ET_IF_BUILT("com.microsoft", "TransposeMatMul") RegisterMicrosoft(r, "TransposeMatMul", FusedMatMulKernel);
  ET_IF_BUILT("com.microsoft", "FusedGemm") RegisterMicrosoft(r, "FusedGemm", FusedGemmKernel);
  ET_IF_BUILT("com.microsoft", "FusedConv") RegisterMicrosoft(r, "FusedConv", FusedConvKernel);
  ET_IF_BUILT("com.microsoft", "ConvGrad") RegisterMicrosoft(r, "ConvGrad", ConvGradKernel);
  // dX has the shape the model declares (DeclaredPoolInputShape).
  ET_REGISTER_ONNX(r, "MaxPoolGrad", MaxPoolGradKernel).reads_declared_outputs = true;
  ET_REGISTER_ONNX(r, "AveragePoolGrad", AveragePoolGradKernel).reads_declared_outputs = true;
  ET_IF_BUILT("com.microsoft", "BatchNormInternal") RegisterMicrosoft(r, "BatchNormInternal", BatchNormalizationKernel);
  ET_IF_BUILT("com.microsoft", "BatchNormalizationGrad")
    RegisterMicrosoft(r, "BatchNormalizationGrad", BatchNormalizationGradKernel);
  ET_IF_BUILT("com.microsoft", "AdamWOptimizer") WithAttributes<AdamWAttributes>(RegisterMicrosoft(r, "AdamWOptimizer", AdamWOptimizerKernel));
  ET_IF_BUILT("com.microsoft", "SGDOptimizerV2") RegisterMicrosoft(r, "SGDOptimizerV2", SGDOptimizerV2Kernel);
  ET_IF_BUILT("com.microsoft", "InplaceClipGradNorm")
    RegisterMicrosoft(r, "InplaceClipGradNorm", InplaceClipGradNormKernel);
}

}  // namespace edgetrain
