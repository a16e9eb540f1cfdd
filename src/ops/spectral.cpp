// Audio front-ends: DFT (opsets 17 and 20), STFT and MelWeightMatrix (17), with the gradient rules of
// DFT and STFT (signal and window) and their fused backward ops ai.edgetrain.DFTGrad/STFTGrad. Every
// transform runs in double: an iterative radix-2 FFT for power-of-two lengths, Bluestein's chirp-z
// through it for long lengths of other factors, and a direct O(n^2) sum over a twiddle table below that.
#include <algorithm>
#include <cmath>
#include <complex>
#include <memory>
#include <numbers>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/gradient.hpp"
#include "ops/registry.hpp"

namespace edgetrain {
namespace {

using Complex = std::complex<double>;

// ---- the transform ----

// Lengths of other factors up to this use the direct sum: measured faster than Bluestein's three
// power-of-two FFTs up to about 24 points (2.0 vs 3.1 us at 12, 6.7 vs 6.7 at 24, 10.3 vs 7.6 at 30).
constexpr int64_t kDirectMaxLength = 24;

bool IsPowerOfTwo(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

// y_k = sum_n x_n e^{sign 2 pi i k n / N}, sign -1 forward, +1 inverse; unnormalised, in place.
class Fft {
 public:
  Fft(int64_t n, bool inverse) : n_(n), sign_(inverse ? 1.0 : -1.0) {
    if (IsPowerOfTwo(n)) {
      twiddles_ = Twiddles(n, sign_);
    } else if (n <= kDirectMaxLength) {
      twiddles_ = Twiddles(n, sign_);
      scratch_.resize(static_cast<size_t>(n));
    } else {
      // Bluestein: kn = (k^2 + n^2 - (k-n)^2) / 2, a convolution with the chirp e^{sign i pi n^2 / N}.
      m_ = 1;
      while (m_ < 2 * n - 1) m_ *= 2;
      inner_ = std::make_unique<Fft>(m_, false);
      inner_inverse_ = std::make_unique<Fft>(m_, true);
      chirp_.resize(static_cast<size_t>(n));
      for (int64_t k = 0; k < n; ++k) {
        const int64_t k2 = (k * k) % (2 * n);  // exact: the angle's period is 2N in k^2
        chirp_[static_cast<size_t>(k)] = std::polar(1.0, sign_ * std::numbers::pi * static_cast<double>(k2) / n);
      }
      kernel_.assign(static_cast<size_t>(m_), Complex(0));
      for (int64_t k = 0; k < n; ++k) {
        kernel_[static_cast<size_t>(k)] = std::conj(chirp_[static_cast<size_t>(k)]);
        if (k) kernel_[static_cast<size_t>(m_ - k)] = std::conj(chirp_[static_cast<size_t>(k)]);
      }
      inner_->Run(kernel_.data());
      scratch_.resize(static_cast<size_t>(m_));
    }
  }
  Fft(const Fft&) = delete;
  Fft& operator=(const Fft&) = delete;

  int64_t size() const { return n_; }

  void Run(Complex* x) {
    if (IsPowerOfTwo(n_)) {
      Radix2(x);
    } else if (n_ <= kDirectMaxLength) {
      Direct(x);
    } else {
      Bluestein(x);
    }
  }

 private:
  static std::vector<Complex> Twiddles(int64_t n, double sign) {
    std::vector<Complex> w(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) w[static_cast<size_t>(k)] = std::polar(1.0, sign * 2 * std::numbers::pi * k / n);
    return w;
  }

  void Radix2(Complex* x) const {
    const int64_t n = n_;
    for (int64_t i = 1, j = 0; i < n; ++i) {
      int64_t bit = n >> 1;
      for (; j & bit; bit >>= 1) j ^= bit;
      j ^= bit;
      if (i < j) std::swap(x[i], x[j]);
    }
    for (int64_t len = 2; len <= n; len <<= 1) {
      const int64_t half = len / 2, stride = n / len;
      for (int64_t start = 0; start < n; start += len)
        for (int64_t k = 0; k < half; ++k) {
          const Complex t = twiddles_[static_cast<size_t>(k * stride)] * x[start + half + k];
          x[start + half + k] = x[start + k] - t;
          x[start + k] += t;
        }
    }
  }

  void Direct(Complex* x) {
    const int64_t n = n_;
    std::copy_n(x, n, scratch_.begin());
    for (int64_t k = 0; k < n; ++k) {
      Complex sum = 0;
      for (int64_t j = 0, index = 0; j < n; ++j) {
        sum += scratch_[static_cast<size_t>(j)] * twiddles_[static_cast<size_t>(index)];
        index += k;  // (j k) mod n, so that the angle stays exact
        if (index >= n) index -= n;
      }
      x[k] = sum;
    }
  }

  void Bluestein(Complex* x) {
    std::fill(scratch_.begin(), scratch_.end(), Complex(0));
    for (int64_t k = 0; k < n_; ++k) scratch_[static_cast<size_t>(k)] = x[k] * chirp_[static_cast<size_t>(k)];
    inner_->Run(scratch_.data());
    for (int64_t k = 0; k < m_; ++k) scratch_[static_cast<size_t>(k)] *= kernel_[static_cast<size_t>(k)];
    inner_inverse_->Run(scratch_.data());
    const double scale = 1.0 / static_cast<double>(m_);
    for (int64_t k = 0; k < n_; ++k) x[k] = scratch_[static_cast<size_t>(k)] * chirp_[static_cast<size_t>(k)] * scale;
  }

  int64_t n_ = 0, m_ = 0;
  double sign_ = -1;
  std::vector<Complex> twiddles_, chirp_, kernel_, scratch_;
  std::unique_ptr<Fft> inner_, inner_inverse_;
};

// float16 and bfloat16 are storage types: elements go through float on their way to and from double.
template <typename T>
double ToDouble(T v) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return static_cast<double>(static_cast<float>(v));
  } else {
    return static_cast<double>(v);
  }
}
template <typename T>
T FromDouble(double v) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return T(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}


// The element types of the spectral ops' signals (computed in double whatever they are).
template <typename Fn>
void VisitSignal(const KernelContext& ctx, size_t input, const char* name, Fn fn) {
  const DataType dtype = ctx.Input(input).dtype();
  switch (dtype) {
    case DataType::kFloat32: return fn(float{});
    case DataType::kFloat64: return fn(double{});
    case DataType::kFloat16: return fn(Float16{});
    case DataType::kBFloat16: return fn(BFloat16{});
    default:
      Fail(ErrorCode::kNotImplemented, ctx.node().Describe(), ": input ", name, " of type ", DataTypeName(dtype),
           " is not supported (float16, bfloat16, float32 and float64 are)");
  }
}

// A scalar (or one-element) integer input, named in errors.
int64_t ScalarInt(const KernelContext& ctx, size_t input, const char* name) {
  const Tensor& t = ctx.Input(input);
  ET_CHECK(t.dtype() == DataType::kInt32 || t.dtype() == DataType::kInt64, ErrorCode::kInvalidArgument,
           ctx.node().Describe(), ": input ", name, " must be int32 or int64, got ", DataTypeName(t.dtype()));
  ET_CHECK(t.numel() == 1 && t.rank() <= 1, ErrorCode::kInvalidArgument, ctx.node().Describe(), ": input ", name,
           " must be a scalar, got shape ", ShapeToString(t.shape()));
  return t.Int64At(0);
}

// ---- DFT ----

// One DFT node's sizes: the input viewed as [outer, length, inner, channels] around the axis.
struct DftConfig {
  int64_t axis = 0, length = 0, dft_length = 0, outer = 1, inner = 1, channels = 1;
  bool inverse = false, onesided = false;
  int64_t OutputLength() const { return onesided ? dft_length / 2 + 1 : dft_length; }
  Shape OutputShape(const Shape& input) const {
    Shape out = input;
    out[static_cast<size_t>(axis)] = OutputLength();
    out.back() = 2;
    return out;
  }
};

// Inputs: 0 the signal, 1 dft_length, 2 axis (opset 20; `axis_from_input`). Attributes: axis (opset 17),
// inverse, onesided.
DftConfig ParseDft(const KernelContext& ctx, bool axis_from_input) {
  const std::string& what = ctx.node().Describe();
  const Tensor& x = ctx.Input(0);
  DftConfig c;
  const int64_t rank = static_cast<int64_t>(x.rank());
  ET_CHECK(rank >= 2, ErrorCode::kInvalidArgument, what, ": input 'input' must have rank 2 or more ([..., 1] real or ",
           "[..., 2] complex), got ", ShapeToString(x.shape()));
  c.channels = x.shape().back();
  ET_CHECK(c.channels == 1 || c.channels == 2, ErrorCode::kInvalidArgument, what,
           ": input 'input' must end in a dimension of 1 (real) or 2 (complex), got ", ShapeToString(x.shape()));
  int64_t axis = ctx.node().GetInt("axis", axis_from_input ? -2 : 1);
  if (axis_from_input && ctx.HasInput(2)) axis = ScalarInt(ctx, 2, "axis");
  ET_CHECK((axis >= -rank && axis <= -2) || (axis >= 0 && axis <= rank - 2), ErrorCode::kInvalidArgument, what,
           ": axis ", axis, " must be in [", -rank, ", -2] or [0, ", rank - 2, "] for input ",
           ShapeToString(x.shape()), " (the last dimension holds real and imaginary parts)");
  c.axis = axis < 0 ? axis + rank : axis;
  c.length = x.dim(static_cast<size_t>(c.axis));
  c.dft_length = c.length;
  if (ctx.HasInput(1)) {
    c.dft_length = ScalarInt(ctx, 1, "dft_length");
    ET_CHECK(c.dft_length >= 1, ErrorCode::kInvalidArgument, what, ": input dft_length must be at least 1, got ",
             c.dft_length);
  }
  ET_CHECK(c.length >= 1, ErrorCode::kInvalidArgument, what, ": input 'input' has no elements along axis ", c.axis);
  const int64_t inverse = ctx.node().GetInt("inverse", 0), onesided = ctx.node().GetInt("onesided", 0);
  ET_CHECK(inverse == 0 || inverse == 1, ErrorCode::kInvalidArgument, what, ": attribute inverse must be 0 or 1, not ",
           inverse);
  ET_CHECK(onesided == 0 || onesided == 1, ErrorCode::kInvalidArgument, what,
           ": attribute onesided must be 0 or 1, not ", onesided);
  c.inverse = inverse == 1;
  c.onesided = onesided == 1;
  ET_CHECK(!c.onesided || c.channels == 1, ErrorCode::kInvalidArgument, what,
           ": attribute onesided=1 needs a real input ([..., 1]); input 'input' is complex ",
           ShapeToString(x.shape()));
  for (int64_t d = 0; d < c.axis; ++d) c.outer *= x.dim(static_cast<size_t>(d));
  for (int64_t d = c.axis + 1; d < rank - 1; ++d) c.inner *= x.dim(static_cast<size_t>(d));
  return c;
}

// Offset of element (o, n, i, channel 0) of a tensor viewed as [outer, len, inner, channels].
int64_t LineOffset(int64_t o, int64_t n, int64_t i, int64_t len, int64_t inner, int64_t channels) {
  return ((o * len + n) * inner + i) * channels;
}

template <typename T>
void DftForward(KernelContext& ctx, const DftConfig& c) {
  const Tensor& x = ctx.Input(0);
  const T* in = x.data<T>();
  const int64_t out_len = c.OutputLength(), used = std::min(c.length, c.dft_length);
  T* out = ctx.Output(0, c.OutputShape(x.shape()), x.dtype()).template data<T>();
  const double scale = c.inverse ? 1.0 / static_cast<double>(c.dft_length) : 1.0;
  ctx.threads().ParallelFor(c.outer * c.inner, 1, [&](int64_t begin, int64_t end) {
    Fft fft(c.dft_length, c.inverse);
    std::vector<Complex> line(static_cast<size_t>(c.dft_length));
    for (int64_t line_index = begin; line_index < end; ++line_index) {
      const int64_t o = line_index / c.inner, i = line_index % c.inner;
      std::fill(line.begin(), line.end(), Complex(0));
      for (int64_t n = 0; n < used; ++n) {
        const T* v = in + LineOffset(o, n, i, c.length, c.inner, c.channels);
        line[static_cast<size_t>(n)] = Complex(ToDouble(v[0]), c.channels == 2 ? ToDouble(v[1]) : 0.0);
      }
      fft.Run(line.data());
      for (int64_t k = 0; k < out_len; ++k) {
        T* y = out + LineOffset(o, k, i, out_len, c.inner, 2);
        y[0] = FromDouble<T>(line[static_cast<size_t>(k)].real() * scale);
        y[1] = FromDouble<T>(line[static_cast<size_t>(k)].imag() * scale);
      }
    }
  });
}

void DftKernel(KernelContext& ctx, bool axis_from_input) {
  const DftConfig c = ParseDft(ctx, axis_from_input);
  VisitSignal(ctx, 0, "input", [&](auto tag) { DftForward<decltype(tag)>(ctx, c); });
}

// ai.edgetrain.DFTGrad(input, dY, dft_length, axis) with the forward node's attributes (axis always set):
// dInput = F^H dY, the transform of the other direction over dY zero-filled to dft_length (the bins a
// onesided output left out), unscaled for a forward DFT and scaled by 1/N for an inverse one; the real
// part for a real input, zero where dft_length truncated the input.
template <typename T>
void DftBackward(KernelContext& ctx, const DftConfig& c) {
  const std::string& what = ctx.node().Describe();
  const Tensor& x = ctx.Input(0);
  const Tensor& dy = ctx.Input(3);
  const Shape expected = c.OutputShape(x.shape());
  ET_CHECK(dy.dtype() == x.dtype() && dy.shape() == expected, ErrorCode::kInvalidArgument, what,
           ": gradient dY must be ", DataTypeName(x.dtype()), " ", ShapeToString(expected), ", got ",
           DataTypeName(dy.dtype()), " ", ShapeToString(dy.shape()));
  const T* g = dy.data<T>();
  T* dx = ctx.Output(0, x.shape(), x.dtype()).template data<T>();
  std::fill_n(dx, x.numel(), FromDouble<T>(0));
  const int64_t out_len = c.OutputLength(), used = std::min(c.length, c.dft_length);
  const double scale = c.inverse ? 1.0 / static_cast<double>(c.dft_length) : 1.0;
  ctx.threads().ParallelFor(c.outer * c.inner, 1, [&](int64_t begin, int64_t end) {
    Fft fft(c.dft_length, !c.inverse);
    std::vector<Complex> line(static_cast<size_t>(c.dft_length));
    for (int64_t line_index = begin; line_index < end; ++line_index) {
      const int64_t o = line_index / c.inner, i = line_index % c.inner;
      std::fill(line.begin(), line.end(), Complex(0));
      for (int64_t k = 0; k < out_len; ++k) {
        const T* v = g + LineOffset(o, k, i, out_len, c.inner, 2);
        line[static_cast<size_t>(k)] = Complex(ToDouble(v[0]), ToDouble(v[1]));
      }
      fft.Run(line.data());
      for (int64_t n = 0; n < used; ++n) {
        T* d = dx + LineOffset(o, n, i, c.length, c.inner, c.channels);
        d[0] = FromDouble<T>(line[static_cast<size_t>(n)].real() * scale);
        if (c.channels == 2) d[1] = FromDouble<T>(line[static_cast<size_t>(n)].imag() * scale);
      }
    }
  });
}

void DftGradKernel(KernelContext& ctx) {
  const DftConfig c = ParseDft(ctx, /*axis_from_input=*/true);
  VisitSignal(ctx, 0, "input", [&](auto tag) { DftBackward<decltype(tag)>(ctx, c); });
}

void DftGradient(GradientContext& g) {
  if (!g.NeedsGrad(0) || g.dY(0).empty()) return;
  AttributeMap attrs = g.node().attributes;
  const bool axis_input = g.opset() >= 20;
  attrs["axis"] = Attribute::Int(axis_input ? -2 : g.node().GetInt("axis", 1));
  const std::string dft_length = g.NumInputs() > 1 ? g.X(1) : "";
  const std::string axis = axis_input && g.NumInputs() > 2 ? g.X(2) : "";
  g.SetGrad(0, g.Op("DFTGrad", {g.X(0), dft_length, axis, g.dY(0)}, attrs, kEdgetrainDomain));
}

// ---- STFT ----

struct StftConfig {
  int64_t batch = 0, signal_length = 0, channels = 1, step = 0, frame_length = 0, frames = 0;
  bool onesided = true, has_window = false;
  int64_t Bins() const { return onesided ? frame_length / 2 + 1 : frame_length; }
  Shape OutputShape() const { return {batch, frames, Bins(), 2}; }
};

// Inputs: 0 signal [batch, length, 1|2], 1 frame_step, 2 window [frame_length] (optional),
// 3 frame_length (optional). Attribute onesided (default 1).
StftConfig ParseStft(const KernelContext& ctx) {
  const std::string& what = ctx.node().Describe();
  const Tensor& signal = ctx.Input(0);
  StftConfig c;
  ET_CHECK(signal.rank() == 3 && (signal.dim(2) == 1 || signal.dim(2) == 2), ErrorCode::kInvalidArgument, what,
           ": input signal must be [batch, signal_length, 1] (real) or [batch, signal_length, 2] (complex), got ",
           ShapeToString(signal.shape()));
  c.batch = signal.dim(0);
  c.signal_length = signal.dim(1);
  c.channels = signal.dim(2);
  c.step = ScalarInt(ctx, 1, "frame_step");
  ET_CHECK(c.step >= 1, ErrorCode::kInvalidArgument, what, ": input frame_step must be positive, got ", c.step);
  c.has_window = ctx.HasInput(2);
  if (c.has_window) {
    const Tensor& window = ctx.Input(2);
    ET_CHECK(window.rank() == 1, ErrorCode::kInvalidArgument, what, ": input window must be 1-D, got ",
             ShapeToString(window.shape()));
    ET_CHECK(window.dtype() == signal.dtype(), ErrorCode::kInvalidArgument, what, ": input window is ",
             DataTypeName(window.dtype()), ", signal is ", DataTypeName(signal.dtype()));
    c.frame_length = window.dim(0);
  }
  if (ctx.HasInput(3)) {
    const int64_t frame_length = ScalarInt(ctx, 3, "frame_length");
    ET_CHECK(frame_length >= 1, ErrorCode::kInvalidArgument, what, ": input frame_length must be positive, got ",
             frame_length);
    ET_CHECK(!c.has_window || frame_length == c.frame_length, ErrorCode::kInvalidArgument, what,
             ": input window has ", c.frame_length, " values but input frame_length is ", frame_length);
    c.frame_length = frame_length;
  }
  ET_CHECK(c.has_window || ctx.HasInput(3), ErrorCode::kInvalidArgument, what,
           ": STFT needs input window or input frame_length");
  ET_CHECK(c.frame_length >= 1, ErrorCode::kInvalidArgument, what, ": input window must not be empty");
  ET_CHECK(c.frame_length <= c.signal_length, ErrorCode::kInvalidArgument, what, ": frame length ", c.frame_length,
           " is longer than input signal (", c.signal_length, " samples)");
  const int64_t onesided = ctx.node().GetInt("onesided", 1);
  ET_CHECK(onesided == 0 || onesided == 1, ErrorCode::kInvalidArgument, what,
           ": attribute onesided must be 0 or 1, not ", onesided);
  c.onesided = onesided == 1;
  ET_CHECK(!c.onesided || c.channels == 1, ErrorCode::kInvalidArgument, what,
           ": attribute onesided=1 (the default) needs a real signal ([batch, length, 1]); input signal is complex ",
           ShapeToString(signal.shape()));
  c.frames = (c.signal_length - c.frame_length) / c.step + 1;
  return c;
}

template <typename T>
void StftForward(KernelContext& ctx, const StftConfig& c) {
  const T* signal = ctx.Input(0).data<T>();
  const T* window = c.has_window ? ctx.Input(2).data<T>() : nullptr;
  T* out = ctx.Output(0, c.OutputShape(), ctx.Input(0).dtype()).template data<T>();
  const int64_t bins = c.Bins(), L = c.frame_length;
  ctx.threads().ParallelFor(c.batch * c.frames, 1, [&](int64_t begin, int64_t end) {
    Fft fft(L, false);
    std::vector<Complex> frame(static_cast<size_t>(L));
    for (int64_t index = begin; index < end; ++index) {
      const int64_t b = index / c.frames, f = index % c.frames;
      const T* s = signal + (b * c.signal_length + f * c.step) * c.channels;
      for (int64_t n = 0; n < L; ++n) {
        const double w = window ? ToDouble(window[n]) : 1.0;
        frame[static_cast<size_t>(n)] =
            Complex(w * ToDouble(s[n * c.channels]), c.channels == 2 ? w * ToDouble(s[n * 2 + 1]) : 0.0);
      }
      fft.Run(frame.data());
      T* y = out + index * bins * 2;
      for (int64_t k = 0; k < bins; ++k) {
        y[2 * k] = FromDouble<T>(frame[static_cast<size_t>(k)].real());
        y[2 * k + 1] = FromDouble<T>(frame[static_cast<size_t>(k)].imag());
      }
    }
  });
}

void StftKernel(KernelContext& ctx) {
  const StftConfig c = ParseStft(ctx);
  VisitSignal(ctx, 0, "signal", [&](auto tag) { StftForward<decltype(tag)>(ctx, c); });
}

// ai.edgetrain.STFTGrad(signal, frame_step, window, frame_length, dY) -> (dSignal, dWindow). Per frame,
// h = F^H dY (zero-filled past the onesided bins); dSignal[frame + n] += w_n h_n, dWindow_n += Re(s_n conj(h_n)).
template <typename T>
void StftBackward(KernelContext& ctx, const StftConfig& c) {
  const std::string& what = ctx.node().Describe();
  const Tensor& x = ctx.Input(0);
  const Tensor& dy = ctx.Input(4);
  ET_CHECK(dy.dtype() == x.dtype() && dy.shape() == c.OutputShape(), ErrorCode::kInvalidArgument, what,
           ": gradient dY must be ", DataTypeName(x.dtype()), " ", ShapeToString(c.OutputShape()), ", got ",
           DataTypeName(dy.dtype()), " ", ShapeToString(dy.shape()));
  const T* signal = x.data<T>();
  const T* window = c.has_window ? ctx.Input(2).data<T>() : nullptr;
  const T* g = dy.data<T>();
  const int64_t bins = c.Bins(), L = c.frame_length;
  T* ds = ctx.Output(0, x.shape(), x.dtype()).template data<T>();
  std::fill_n(ds, x.numel(), FromDouble<T>(0));
  std::vector<double> dw(static_cast<size_t>(L), 0.0);
  Fft fft(L, true);
  std::vector<Complex> h(static_cast<size_t>(L));
  std::vector<double> dsignal(static_cast<size_t>(c.signal_length * c.channels));
  for (int64_t b = 0; b < c.batch; ++b) {
    std::fill(dsignal.begin(), dsignal.end(), 0.0);
    for (int64_t f = 0; f < c.frames; ++f) {
      std::fill(h.begin(), h.end(), Complex(0));
      const T* gf = g + (b * c.frames + f) * bins * 2;
      for (int64_t k = 0; k < bins; ++k) h[static_cast<size_t>(k)] = Complex(ToDouble(gf[2 * k]), ToDouble(gf[2 * k + 1]));
      fft.Run(h.data());
      const int64_t start = f * c.step;
      const T* s = signal + (b * c.signal_length + start) * c.channels;
      double* d = dsignal.data() + start * c.channels;
      for (int64_t n = 0; n < L; ++n) {
        const Complex hn = h[static_cast<size_t>(n)];
        const double w = window ? ToDouble(window[n]) : 1.0;
        d[n * c.channels] += w * hn.real();
        double dwn = ToDouble(s[n * c.channels]) * hn.real();
        if (c.channels == 2) {
          d[n * 2 + 1] += w * hn.imag();
          dwn += ToDouble(s[n * 2 + 1]) * hn.imag();
        }
        dw[static_cast<size_t>(n)] += dwn;
      }
    }
    T* out = ds + b * c.signal_length * c.channels;
    for (size_t e = 0; e < dsignal.size(); ++e) out[e] = FromDouble<T>(dsignal[e]);
  }
  T* dwindow = ctx.Output(1, {L}, x.dtype()).template data<T>();
  for (int64_t n = 0; n < L; ++n) dwindow[n] = FromDouble<T>(dw[static_cast<size_t>(n)]);
}

void StftGradKernel(KernelContext& ctx) {
  const StftConfig c = ParseStft(ctx);
  VisitSignal(ctx, 0, "signal", [&](auto tag) { StftBackward<decltype(tag)>(ctx, c); });
}

void StftGradient(GradientContext& g) {
  const bool signal = g.NeedsGrad(0), window = g.NumInputs() > 2 && !g.X(2).empty() && g.NeedsGrad(2);
  if ((!signal && !window) || g.dY(0).empty()) return;
  const std::string frame_length = g.NumInputs() > 3 ? g.X(3) : "";
  const std::vector<std::string> grads =
      g.Emit("STFTGrad", {g.X(0), g.X(1), g.NumInputs() > 2 ? g.X(2) : "", frame_length, g.dY(0)}, 2,
             g.node().attributes, kEdgetrainDomain);
  if (signal) g.SetGrad(0, grads[0]);
  if (window) g.SetGrad(2, grads[1]);
}

// ---- MelWeightMatrix ----

// Triangles with peak 1 between mel-spaced edges, as the ONNX reference computes them: the edges are
// num_mel_bins + 2 points spaced (high - low) / (num_mel_bins + 2) apart in mel, each mapped to the
// spectrogram bin floor((dft_length + 1) * hz / sample_rate).
void MelWeightMatrixKernel(KernelContext& ctx) {
  const std::string& what = ctx.node().Describe();
  const int64_t mel_bins = ScalarInt(ctx, 0, "num_mel_bins");
  const int64_t dft_length = ScalarInt(ctx, 1, "dft_length");
  const int64_t sample_rate = ScalarInt(ctx, 2, "sample_rate");
  auto hertz = [&](size_t input, const char* name) {
    const Tensor& t = ctx.Input(input);
    ET_CHECK(IsFloatType(t.dtype()) && t.numel() == 1 && t.rank() <= 1, ErrorCode::kInvalidArgument, what,
             ": input ", name, " must be a float scalar, got ", DataTypeName(t.dtype()), " ",
             ShapeToString(t.shape()));
    return t.DoubleAt(0);
  };
  const double lower = hertz(3, "lower_edge_hertz"), upper = hertz(4, "upper_edge_hertz");
  ET_CHECK(mel_bins >= 1, ErrorCode::kInvalidArgument, what, ": input num_mel_bins must be positive, got ", mel_bins);
  ET_CHECK(dft_length >= 1, ErrorCode::kInvalidArgument, what, ": input dft_length must be positive, got ",
           dft_length);
  ET_CHECK(sample_rate >= 1, ErrorCode::kInvalidArgument, what, ": input sample_rate must be positive, got ",
           sample_rate);
  ET_CHECK(lower >= 0 && lower < upper, ErrorCode::kInvalidArgument, what,
           ": need 0 <= lower_edge_hertz < upper_edge_hertz, got ", lower, " and ", upper);
  const int64_t spectrogram_bins = dft_length / 2 + 1;
  const double low_mel = 2595 * std::log10(1 + lower / 700), high_mel = 2595 * std::log10(1 + upper / 700);
  const double mel_step = (high_mel - low_mel) / static_cast<double>(mel_bins + 2);
  std::vector<int64_t> edges(static_cast<size_t>(mel_bins + 2));
  for (int64_t i = 0; i < mel_bins + 2; ++i) {
    const double hz = 700 * (std::pow(10.0, (static_cast<double>(i) * mel_step + low_mel) / 2595) - 1);
    edges[static_cast<size_t>(i)] = static_cast<int64_t>(std::floor(static_cast<double>(dft_length + 1) * hz /
                                                                     static_cast<double>(sample_rate)));
    ET_CHECK(edges[static_cast<size_t>(i)] >= 0 && edges[static_cast<size_t>(i)] < spectrogram_bins,
             ErrorCode::kInvalidArgument, what, ": upper_edge_hertz ", upper, " lies past the last of the ",
             spectrogram_bins, " bins of a ", dft_length, "-point DFT at sample_rate ", sample_rate);
  }
  std::vector<double> m(static_cast<size_t>(spectrogram_bins * mel_bins), 0.0);
  for (int64_t i = 0; i < mel_bins; ++i) {
    const int64_t left = edges[static_cast<size_t>(i)], center = edges[static_cast<size_t>(i) + 1],
                  right = edges[static_cast<size_t>(i) + 2];
    if (center == left) {
      m[static_cast<size_t>(center * mel_bins + i)] = 1;
    } else {
      for (int64_t j = left; j <= center; ++j)
        m[static_cast<size_t>(j * mel_bins + i)] = static_cast<double>(j - left) / static_cast<double>(center - left);
    }
    for (int64_t j = center; j < right; ++j)
      m[static_cast<size_t>(j * mel_bins + i)] = static_cast<double>(right - j) / static_cast<double>(right - center);
  }
  const int64_t dtype_code = ctx.node().GetInt("output_datatype", 1);
  ET_CHECK(IsKnownDataType(static_cast<int32_t>(dtype_code)) && dtype_code != static_cast<int64_t>(DataType::kString) &&
               dtype_code != static_cast<int64_t>(DataType::kBool),
           ErrorCode::kInvalidArgument, what, ": attribute output_datatype ", dtype_code,
           " is not a numeric ONNX element type");
  const DataType dtype = static_cast<DataType>(dtype_code);
  Tensor& out = ctx.Output(0, {spectrogram_bins, mel_bins}, dtype);
  VisitAll(dtype, what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data<T>();
    for (size_t e = 0; e < m.size(); ++e) o[e] = FromDouble<T>(m[e]);
  });
}

}  // namespace

void RegisterSpectralOps(OpRegistry& r) {
  ET_REGISTER_ONNX(r, "DFT", [](KernelContext& ctx) { DftKernel(ctx, false); }, 17, 19);
  ET_REGISTER_ONNX(r, "DFT", [](KernelContext& ctx) { DftKernel(ctx, true); }, 20);
  ET_IF_BUILT("", "DFT") r.SetGradient("DFT", DftGradient);
  // No definition in standard ops: the adjoint's zero-fill and truncation need run-time lengths.
  ET_IF_BUILT("ai.edgetrain", "DFTGrad") RegisterFused(r, "DFTGrad", DftGradKernel, nullptr);

  ET_REGISTER_ONNX(r, "STFT", StftKernel, 17);
  ET_IF_BUILT("", "STFT") r.SetGradient("STFT", StftGradient);
  ET_IF_BUILT("ai.edgetrain", "STFTGrad") RegisterFused(r, "STFTGrad", StftGradKernel, nullptr);

  ET_REGISTER_ONNX(r, "MelWeightMatrix", MelWeightMatrixKernel, 17);
  // Piecewise constant in the edge frequencies (they pick whole bins): zero gradient almost everywhere.
  ET_IF_BUILT("", "MelWeightMatrix") r.SetGradient("MelWeightMatrix", [](GradientContext&) {});
}

}  // namespace edgetrain
