// Convolution and pooling geometry shared by the reference kernels (conv.cpp, pool.cpp) and the
// oneDNN paths (conv_dnnl.cpp), which run float32 Conv, its gradients, ConvTranspose and the fused
// ConvReluMaxPool as oneDNN primitives.
#pragma once

#include <cstdint>
#include <vector>

#include "core/int64_vector.hpp"

namespace edgetrain {

// Spatial geometry shared by Conv and ConvTranspose. `input`/`output` are spatial sizes.
struct ConvGeometry {
  int64_t batch = 0, in_channels = 0, out_channels = 0, group = 1;
  Int64Vector input, output, kernel, strides, dilations, pad_begin, pad_end;
  int64_t InputSize() const { return Product(input); }
  int64_t OutputSize() const { return Product(output); }
  int64_t KernelSize() const { return Product(kernel); }
  static int64_t Product(const Int64Vector& v) {
    int64_t p = 1;
    for (int64_t x : v) p *= x;
    return p;
  }
};

// Pooling windows over [N, C, spatial...] (pool.cpp's ReadPoolGeometry derives them).
struct PoolGeometry {
  int64_t planes = 0;  // batch * channels
  Int64Vector input, output, kernel, strides, dilations, pad_begin, pad_end;
  int64_t InputSize() const { return ConvGeometry::Product(input); }
  int64_t OutputSize() const { return ConvGeometry::Product(output); }
  bool operator==(const PoolGeometry&) const = default;
};

// Each function runs one pass on `threads` threads. It returns false when this build has no oneDNN
// or oneDNN has no implementation for the configuration; the caller then runs the reference code,
// which rewrites every output. Tensors are contiguous in ONNX layouts; Conv's W is [M, C/group, kernel...].
namespace conv_dnnl {

// Y = Conv(X, W) + B (b may be null), then max(Y, 0) when `relu` (a post-op of the primitive).
bool ConvForward(const ConvGeometry& g, const float* x, const float* w, const float* b, float* y, int threads,
                 bool relu = false);
// dX of Conv from dY.
bool ConvBackwardData(const ConvGeometry& g, const float* dy, const float* w, float* dx, int threads);
// dW of Conv from dY and X, and dB when db is not null.
bool ConvBackwardWeights(const ConvGeometry& g, const float* dy, const float* x, float* dw, float* db, int threads);
// Y = MaxPool(max(Conv(X, W) + B, 0)) (b may be null) with the pooling `pool` (no dilations): the
// Conv's output stays in the layout oneDNN chose for it, and only the pooled result is reordered.
bool ConvReluMaxPoolForward(const ConvGeometry& g, const PoolGeometry& pool, const float* x, const float* w,
                            const float* b, float* y, int threads);
// Y = ConvTranspose(X, W) + B (b may be null): `g.input` is X's spatial size, `g.output` Y's, the
// pads apply to Y, `g.out_channels` is Y's channel count and W is [C, M/group, kernel...].
bool ConvTransposeForward(const ConvGeometry& g, const float* x, const float* w, const float* b, float* y, int threads);
// Whether oneDNN has its Winograd convolution on this CPU (AVX-512); where it has, the passes of 2-D 3x3 stride-1
// convolutions of 16 or more input and output channels and outputs of 8x8 or more run it unless
// UseWinogradConvolutions() is off.
bool WinogradAvailable();

}  // namespace conv_dnnl
}  // namespace edgetrain
