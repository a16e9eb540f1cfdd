// Which implementation runs the kernels that have two: oneDNN's (when edgetrain is built with it)
// or edgetrain's own reference code. The reference kernels always stay; the tests run both.
#pragma once

namespace edgetrain {

enum class KernelBackend { kReference, kDnnl };

// True when this build links oneDNN (CMake option EDGETRAIN_WITH_DNNL).
bool DnnlAvailable();
// The process-wide choice: oneDNN when available, unless the environment sets
// EDGETRAIN_KERNELS=reference.
KernelBackend ActiveKernelBackend();
// Throws kInvalidArgument when asked for oneDNN in a build without it.
void SetKernelBackend(KernelBackend backend);
inline bool UseDnnl() { return ActiveKernelBackend() == KernelBackend::kDnnl; }
// Edgetrain's direct SIMD kernels that stand in for oneDNN's (depthwise convolution on NCHW, Sigmoid's vector
// exp): on the oneDNN backend; in a build without oneDNN, unless EDGETRAIN_KERNELS=reference or
// SetDirectKernels(false) leaves the plain reference loops (the tests compare the two in one process; it returns
// the previous setting).
bool UseDirectKernels();
bool SetDirectKernels(bool on);
// oneDNN's Winograd algorithm for 3x3, stride-1 convolutions where oneDNN has it (AVX-512 CPUs): on unless the
// environment sets EDGETRAIN_WINOGRAD=0. SetWinogradConvolutions returns the previous setting.
bool UseWinogradConvolutions();
bool SetWinogradConvolutions(bool on);

}  // namespace edgetrain
