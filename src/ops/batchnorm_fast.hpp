// BatchNormalization's float32 training kernels on NCHW, viewed as [batch, channels, spatial]: one pass over X
// for the statistics (sums about a per-channel shift, float lanes over runs of at most 1024 elements and
// double across runs), the normalization of each channel while its data is still in cache, and a backward
// of two passes. Portable loops (auto-vectorised) with AVX2/FMA and AVX-512 clones of the same source on x86-64.
// normalization.cpp's reference kernels are their oracle (tests/norm_backend_test.cpp).
#pragma once

#include <cstdint>

#include "core/threading.hpp"
#include "ops/vector_math.hpp"

namespace edgetrain::batchnorm {

enum class Isa { kPortable, kAvx2, kAvx512 };

// kAvx512 on x86-64 with an AVX-512 CPU, kAvx2 with an AVX2/FMA one, else kPortable. Asking for an ISA the CPU
// lacks runs the best one below it.
Isa BestIsa();

// An activation applied to the normalized values as they are written (ai.edgetrain BatchNormalizationRelu,
// BatchNormalizationClip and BatchNormalizationSilu): Relu as v > 0 ? v : 0, Clip as min(max(v, low), high), as those
// kernels compute them, and SiLU as v * vector_math::SigmoidOne(v).
struct Activation {
  enum class Kind { kNone, kRelu, kClip, kSilu } kind = Kind::kNone;
  float low = 0, high = 0;  // kClip's bounds
};

// y[i] = activation(x[i] * a + b) for i in [0, count) (x == y allowed): the element-wise arithmetic of
// TrainingForward and ApplyAffine, inlined so that a fused pass compiled for the same ISA gives the same bits.
inline __attribute__((always_inline)) void AffineRow(const float* x, float* y, int64_t count, float a, float b,
                                                     Activation activation) {
  switch (activation.kind) {
    case Activation::Kind::kNone:
#pragma omp simd
      for (int64_t i = 0; i < count; ++i) y[i] = x[i] * a + b;
      break;
    case Activation::Kind::kRelu:
#pragma omp simd
      for (int64_t i = 0; i < count; ++i) {
        const float v = x[i] * a + b;
        y[i] = v > 0.0f ? v : 0.0f;
      }
      break;
    case Activation::Kind::kClip: {
      const float low = activation.low, high = activation.high;
#pragma omp simd
      for (int64_t i = 0; i < count; ++i) {
        const float v = x[i] * a + b;
        const float above = v < low ? low : v;  // std::max(v, low)
        y[i] = high < above ? high : above;     // std::min(above, high)
      }
      break;
    }
    case Activation::Kind::kSilu:
#pragma omp simd
      for (int64_t i = 0; i < count; ++i) {
        const float v = x[i] * a + b;
        y[i] = v * vector_math::SigmoidOne(v);
      }
      break;
  }
}

// AffineRow compiled for `isa`: for the kernels that map their input as they read it (the direct depthwise
// convolutions), the same bits as ApplyAffine on that isa.
void MapRow(Isa isa, const float* x, float* y, int64_t count, float a, float b, Activation activation);

// Per channel c: the batch mean and population variance into mean[c], var[c], and
// y = activation((x - mean) / sqrt(var + epsilon) * scale[c] + bias[c]), computed as activation(x * a + b)
// with float a and b; `affine`, when not null, receives a in [0, channels) and b in [channels, 2 * channels).
// batch * spatial > 0.
void TrainingForward(ThreadPool& threads, Isa isa, const float* x, float* y, int64_t batch, int64_t channels,
                     int64_t spatial, const double* scale, const double* bias, double epsilon, double* mean,
                     double* var, Activation activation = {}, float* affine = nullptr);

// TrainingForward's y again from its `affine`, without the statistics pass: the same bits for the same isa.
void ApplyAffine(ThreadPool& threads, Isa isa, const float* x, float* y, int64_t batch, int64_t channels,
                 int64_t spatial, const float* affine, Activation activation);

// dX, dScale, dBias of TrainingForward for dY. saved_mean and saved_inv_std (1 / sqrt(var + epsilon)) are
// the forward's statistics, or both null to recompute them from X with `epsilon`. With a `gated` activation, dY is
// the gradient of its output: it passes where the activation passes x * a + b (TrainingForward's `affine`, computed
// as TrainingForward computes it), or for SiLU is scaled by its slope there, so that the activation's own gradient
// needs no pass of its own.
void TrainingBackward(ThreadPool& threads, Isa isa, const float* dy, const float* x, float* dx, int64_t batch,
                      int64_t channels, int64_t spatial, const double* scale, const double* saved_mean,
                      const double* saved_inv_std, double epsilon, double* dscale, double* dbias,
                      const float* affine = nullptr, Activation gated = {});

}  // namespace edgetrain::batchnorm
