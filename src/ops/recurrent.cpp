// Recurrent layers: RNN, GRU and LSTM (every attribute of the ONNX spec: directions, activations with
// alpha/beta, clip, layout, sequence_lens, initial states, peepholes, input_forget,
// linear_before_reset), their gradient rules through time, and the fused backward ops
// ai.edgetrain.RNNGrad/GRUGrad/LSTMGrad. One GEMM projects the inputs of every time step, one GEMM
// per step applies the recurrence, and the gate math is one fused loop per batch row.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/gemm.hpp"
#include "ops/gradient.hpp"
#include "ops/registry.hpp"

namespace edgetrain {
namespace {

enum class Cell { kRnn, kGru, kLstm };

int64_t GatesOf(Cell cell) { return cell == Cell::kRnn ? 1 : cell == Cell::kGru ? 3 : 4; }
size_t ActivationsOf(Cell cell) { return cell == Cell::kRnn ? 1 : cell == Cell::kGru ? 2 : 3; }
const char* NameOf(Cell cell) { return cell == Cell::kRnn ? "RNN" : cell == Cell::kGru ? "GRU" : "LSTM"; }

// tanh through one expf for float (libm's tanhf costs several times more); std::tanh for double.
template <typename T>
T Tanh(T x) {
  if constexpr (std::is_same_v<T, float>) {
    const float a = std::fabs(x);
    if (a < 0.01f) return x - x * x * x / 3.0f;
    const float e = std::exp(-2.0f * a);
    return std::copysign((1.0f - e) / (1.0f + e), x);
  } else {
    return std::tanh(x);
  }
}

// One activation of the spec's list with its alpha/beta; D(x, y) is its derivative at x (y = F(x)).
struct Activation {
  enum class Kind { kRelu, kTanh, kSigmoid, kAffine, kLeakyRelu, kThresholdedRelu, kScaledTanh, kHardSigmoid,
                    kElu, kSoftsign, kSoftplus };
  Kind kind = Kind::kTanh;
  double alpha = 0, beta = 0;

  template <typename T>
  T F(T x) const {
    switch (kind) {
      case Kind::kRelu: return x > 0 ? x : T(0);
      case Kind::kTanh: return Tanh(x);
      case Kind::kSigmoid: return T(1) / (T(1) + std::exp(-x));
      case Kind::kAffine: return T(alpha) * x + T(beta);
      case Kind::kLeakyRelu: return x >= 0 ? x : T(alpha) * x;
      case Kind::kThresholdedRelu: return x > T(alpha) ? x : T(0);
      case Kind::kScaledTanh: return T(alpha) * Tanh(T(beta) * x);
      case Kind::kHardSigmoid: return std::max(T(0), std::min(T(1), T(alpha) * x + T(beta)));
      case Kind::kElu: return x >= 0 ? x : T(alpha) * (std::exp(x) - T(1));
      case Kind::kSoftsign: return x / (T(1) + std::fabs(x));
      case Kind::kSoftplus: return x > 20 ? x : std::log1p(std::exp(x));
    }
    return x;
  }
  template <typename T>
  T D(T x, T y) const {
    switch (kind) {
      case Kind::kRelu: return x > 0 ? T(1) : T(0);
      case Kind::kTanh: return T(1) - y * y;
      case Kind::kSigmoid: return y * (T(1) - y);
      case Kind::kAffine: return T(alpha);
      case Kind::kLeakyRelu: return x >= 0 ? T(1) : T(alpha);
      case Kind::kThresholdedRelu: return x > T(alpha) ? T(1) : T(0);
      case Kind::kScaledTanh: {
        const T t = Tanh(T(beta) * x);
        return T(alpha) * T(beta) * (T(1) - t * t);
      }
      case Kind::kHardSigmoid: {
        const T v = T(alpha) * x + T(beta);
        return v > 0 && v < 1 ? T(alpha) : T(0);
      }
      case Kind::kElu: return x >= 0 ? T(1) : y + T(alpha);
      case Kind::kSoftsign: {
        const T d = T(1) + std::fabs(x);
        return T(1) / (d * d);
      }
      case Kind::kSoftplus: return T(1) / (T(1) + std::exp(-x));
    }
    return T(1);
  }
};

// Activation names with the alpha/beta defaults of the ONNX operators of the same name.
struct ActivationSpec {
  const char* name;
  Activation::Kind kind;
  bool uses_alpha, uses_beta;
  double alpha, beta;
};
constexpr ActivationSpec kActivations[] = {
    {"relu", Activation::Kind::kRelu, false, false, 0, 0},
    {"tanh", Activation::Kind::kTanh, false, false, 0, 0},
    {"sigmoid", Activation::Kind::kSigmoid, false, false, 0, 0},
    {"affine", Activation::Kind::kAffine, true, true, 1.0, 0.0},
    {"leakyrelu", Activation::Kind::kLeakyRelu, true, false, 0.01, 0},
    {"thresholdedrelu", Activation::Kind::kThresholdedRelu, true, false, 1.0, 0},
    {"scaledtanh", Activation::Kind::kScaledTanh, true, true, 1.0, 1.0},
    {"hardsigmoid", Activation::Kind::kHardSigmoid, true, true, 0.2, 0.5},
    {"elu", Activation::Kind::kElu, true, false, 1.0, 0},
    {"softsign", Activation::Kind::kSoftsign, false, false, 0, 0},
    {"softplus", Activation::Kind::kSoftplus, false, false, 0, 0},
};

// The attributes and sizes of one node, checked against its inputs.
struct Config {
  Cell cell = Cell::kLstm;
  int64_t seq = 0, batch = 0, input = 0, hidden = 0, dirs = 1, gates = 4;
  bool layout_batch_first = false, reverse = false, linear_before_reset = false, input_forget = false;
  double clip = 0;  // 0: no clip
  std::vector<Activation> acts;  // ActivationsOf(cell) per direction

  int64_t GH() const { return gates * hidden; }
  // Row of X (and of the per-step projections) for time t and batch b.
  int64_t XRow(int64_t t, int64_t b) const { return layout_batch_first ? b * seq + t : t * batch + b; }
  // Offset of Y[t, d, b, :] and of a state [d, b, :] (initial_h, Y_h, ...).
  int64_t YOffset(int64_t t, int64_t d, int64_t b) const {
    return (layout_batch_first ? (b * seq + t) * dirs + d : (t * dirs + d) * batch + b) * hidden;
  }
  int64_t StateOffset(int64_t d, int64_t b) const {
    return (layout_batch_first ? b * dirs + d : d * batch + b) * hidden;
  }
  bool Reversed(int64_t d) const { return d == 1 || reverse; }
  const Activation& Act(int64_t d, size_t k) const { return acts[static_cast<size_t>(d) * ActivationsOf(cell) + k]; }
};

Config ParseConfig(Cell cell, const Node& node, const Tensor& x, const Tensor& w, const Tensor& r) {
  const std::string& what = node.Describe();
  Config c;
  c.cell = cell;
  c.gates = GatesOf(cell);
  const int64_t layout = node.GetInt("layout", 0);
  ET_CHECK(layout == 0 || layout == 1, ErrorCode::kInvalidArgument, what, ": attribute layout must be 0 or 1, not ",
           layout);
  c.layout_batch_first = layout == 1;
  const std::string direction = node.GetString("direction", "forward");
  ET_CHECK(direction == "forward" || direction == "reverse" || direction == "bidirectional",
           ErrorCode::kInvalidArgument, what, ": attribute direction must be forward, reverse or bidirectional, not '",
           direction, "'");
  c.dirs = direction == "bidirectional" ? 2 : 1;
  c.reverse = direction == "reverse";
  ET_CHECK(x.rank() == 3, ErrorCode::kInvalidArgument, what, ": input X must be 3-D, got ", ShapeToString(x.shape()));
  c.seq = x.dim(c.layout_batch_first ? 1 : 0);
  c.batch = x.dim(c.layout_batch_first ? 0 : 1);
  c.input = x.dim(2);
  ET_CHECK(r.rank() == 3, ErrorCode::kInvalidArgument, what, ": input R must be 3-D, got ", ShapeToString(r.shape()));
  c.hidden = node.GetInt("hidden_size", r.dim(2));
  ET_CHECK(w.rank() == 3 && w.dim(0) == c.dirs && w.dim(1) == c.GH() && w.dim(2) == c.input,
           ErrorCode::kInvalidArgument, what, ": input W must be [", c.dirs, ", ", c.GH(), ", ", c.input, "], got ",
           ShapeToString(w.shape()));
  ET_CHECK(r.dim(0) == c.dirs && r.dim(1) == c.GH() && r.dim(2) == c.hidden, ErrorCode::kInvalidArgument, what,
           ": input R must be [", c.dirs, ", ", c.GH(), ", ", c.hidden, "], got ", ShapeToString(r.shape()));
  ET_CHECK(w.dtype() == x.dtype() && r.dtype() == x.dtype(), ErrorCode::kInvalidArgument, what,
           ": X, W and R must have one element type");
  c.clip = node.GetFloat("clip", 0.0f);
  ET_CHECK(!node.HasAttr("clip") || c.clip > 0, ErrorCode::kInvalidArgument, what,
           ": attribute clip must be positive, not ", c.clip);
  c.linear_before_reset = cell == Cell::kGru && node.GetInt("linear_before_reset", 0) != 0;
  c.input_forget = cell == Cell::kLstm && node.GetInt("input_forget", 0) != 0;

  std::vector<std::string> names;
  if (const Attribute* a = node.Find("activations")) names = a->strings;
  const size_t per_dir = ActivationsOf(cell);
  if (names.empty()) {
    const std::vector<std::string> defaults = cell == Cell::kRnn   ? std::vector<std::string>{"Tanh"}
                                              : cell == Cell::kGru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                                   : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
    for (int64_t d = 0; d < c.dirs; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
  } else if (names.size() == per_dir && c.dirs == 2) {
    const std::vector<std::string> once = names;
    names.insert(names.end(), once.begin(), once.end());
  }
  ET_CHECK(names.size() == per_dir * static_cast<size_t>(c.dirs), ErrorCode::kInvalidArgument, what,
           ": attribute activations must name ", per_dir * static_cast<size_t>(c.dirs), " functions, got ",
           names.size());
  // alpha and beta are consumed in order by the activations that take them.
  const std::vector<float> alphas = node.GetFloats("activation_alpha"), betas = node.GetFloats("activation_beta");
  size_t next_alpha = 0, next_beta = 0;
  for (const std::string& name : names) {
    std::string lower = name;
    for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    const ActivationSpec* spec = nullptr;
    for (const ActivationSpec& s : kActivations)
      if (lower == s.name) spec = &s;
    ET_CHECK(spec, ErrorCode::kNotImplemented, what, ": activation '", name, "' is not one the ONNX spec lists");
    Activation act;
    act.kind = spec->kind;
    act.alpha = spec->alpha;
    act.beta = spec->beta;
    if (spec->uses_alpha && next_alpha < alphas.size()) act.alpha = alphas[next_alpha++];
    if (spec->uses_beta && next_beta < betas.size()) act.beta = betas[next_beta++];
    c.acts.push_back(act);
  }
  return c;
}

// The optional inputs, checked; null where omitted.
template <typename T>
struct Inputs {
  const T *x = nullptr, *w = nullptr, *r = nullptr, *b = nullptr, *h0 = nullptr, *c0 = nullptr, *p = nullptr;
  std::vector<int64_t> lengths;  // per batch row
};

template <typename T>
Inputs<T> ReadInputs(const KernelContext& ctx, const Config& c) {
  const std::string& what = ctx.node().Describe();
  Inputs<T> in;
  in.x = ctx.Input(0).data<T>();
  in.w = ctx.Input(1).data<T>();
  in.r = ctx.Input(2).data<T>();
  auto optional = [&](size_t i, const char* name, const Shape& shape) -> const T* {
    if (!ctx.HasInput(i)) return nullptr;
    const Tensor& t = ctx.Input(i);
    ET_CHECK(t.dtype() == ctx.Input(0).dtype(), ErrorCode::kInvalidArgument, what, ": input ", name, " is ",
             DataTypeName(t.dtype()), ", X is ", DataTypeName(ctx.Input(0).dtype()));
    ET_CHECK(t.shape() == shape, ErrorCode::kInvalidArgument, what, ": input ", name, " must be ",
             ShapeToString(shape), ", got ", ShapeToString(t.shape()));
    return t.data<T>();
  };
  const Shape state = c.layout_batch_first ? Shape{c.batch, c.dirs, c.hidden} : Shape{c.dirs, c.batch, c.hidden};
  in.b = optional(3, "B", {c.dirs, 2 * c.GH()});
  in.h0 = optional(5, "initial_h", state);
  if (c.cell == Cell::kLstm) {
    in.c0 = optional(6, "initial_c", state);
    in.p = optional(7, "P", {c.dirs, 3 * c.hidden});
  }
  in.lengths.assign(static_cast<size_t>(c.batch), c.seq);
  if (ctx.HasInput(4)) {
    const Tensor& lens = ctx.Input(4);
    ET_CHECK(lens.dtype() == DataType::kInt32 && lens.shape() == Shape{c.batch}, ErrorCode::kInvalidArgument, what,
             ": input sequence_lens must be int32 [", c.batch, "], got ", DataTypeName(lens.dtype()), " ",
             ShapeToString(lens.shape()));
    for (int64_t b = 0; b < c.batch; ++b) {
      const int64_t len = lens.Int64At(b);
      ET_CHECK(len >= 0 && len <= c.seq, ErrorCode::kOutOfRange, what, ": sequence_lens[", b, "] = ", len,
               " is outside [0, ", c.seq, "]");
      in.lengths[static_cast<size_t>(b)] = len;
    }
  }
  return in;
}

template <typename T>
T Clip(T v, double clip) {
  return clip > 0 ? std::max(T(-clip), std::min(T(clip), v)) : v;
}
template <typename T>
T ClipMask(T v, double clip) {
  return clip > 0 && (v < T(-clip) || v > T(clip)) ? T(0) : T(1);
}

// What the backward pass needs from one direction, indexed by time t (not by processing order).
template <typename T>
struct Trace {
  std::vector<T> pre;    // [seq, batch, GH] gate inputs before clip and activation
  std::vector<T> hprev;  // [seq, batch, H] hidden state before step t
  std::vector<T> cprev;  // LSTM: [seq, batch, H] cell state before step t
  std::vector<T> cnew;   // LSTM: [seq, batch, H] cell state after step t
  std::vector<T> q;      // GRU with linear_before_reset: [seq, batch, H] Rh·h + Rbh
};

// Runs direction d: writes Y (when y), and the final states into h/c ([batch, H]); fills the trace.
template <typename T>
void RunDirection(const Config& c, const Inputs<T>& in, int64_t d, ThreadPool* pool, T* y, std::vector<T>& h,
                  std::vector<T>& cs, Trace<T>* trace) {
  const int64_t H = c.hidden, GH = c.GH(), B = c.batch, I = c.input, rows = c.seq * B;
  const T* w = in.w + d * GH * I;
  const T* r = in.r + d * GH * H;
  const T* wb = in.b ? in.b + d * 2 * GH : nullptr;
  const T* rb = in.b ? wb + GH : nullptr;
  const T* p = in.p ? in.p + d * 3 * H : nullptr;
  const bool lbr = c.linear_before_reset;
  // Input projection of every step with the biases (GRU with linear_before_reset keeps Rbh apart).
  std::vector<T> xw(static_cast<size_t>(rows * GH));
  Gemm<T>(false, true, rows, GH, I, T(1), in.x, I, w, I, T(0), xw.data(), GH, pool);
  if (wb)
    for (int64_t row = 0; row < rows; ++row) {
      T* dst = xw.data() + row * GH;
      for (int64_t k = 0; k < GH; ++k) dst[k] += wb[k] + (lbr && k >= 2 * H ? T(0) : rb[k]);
    }
  h.assign(static_cast<size_t>(B * H), T(0));
  cs.assign(static_cast<size_t>(B * H), T(0));
  for (int64_t b = 0; b < B; ++b) {
    if (in.h0) std::copy_n(in.h0 + c.StateOffset(d, b), H, h.data() + b * H);
    if (in.c0) std::copy_n(in.c0 + c.StateOffset(d, b), H, cs.data() + b * H);
  }
  if (trace) {
    trace->pre.assign(static_cast<size_t>(rows * GH), T(0));
    trace->hprev.assign(static_cast<size_t>(rows * H), T(0));
    if (c.cell == Cell::kLstm) {
      trace->cprev.assign(static_cast<size_t>(rows * H), T(0));
      trace->cnew.assign(static_cast<size_t>(rows * H), T(0));
    }
    if (lbr) trace->q.assign(static_cast<size_t>(rows * H), T(0));
  }
  std::vector<T> rg(static_cast<size_t>(B * GH)), rh(c.cell == Cell::kGru ? static_cast<size_t>(B * H) : 0);
  const Activation& f = c.Act(d, 0);
  const Activation& g = c.Act(d, ActivationsOf(c.cell) > 1 ? 1 : 0);
  const Activation& ha = c.Act(d, ActivationsOf(c.cell) > 2 ? 2 : 0);
  const double clip = c.clip;
  for (int64_t s = 0; s < c.seq; ++s) {
    const int64_t t = c.Reversed(d) ? c.seq - 1 - s : s;
    if (trace) {
      std::copy(h.begin(), h.end(), trace->hprev.begin() + t * B * H);
      if (c.cell == Cell::kLstm) std::copy(cs.begin(), cs.end(), trace->cprev.begin() + t * B * H);
    }
    // Recurrent projection; GRU without linear_before_reset applies Rh to r ⊙ h below.
    const int64_t rec_cols = c.cell == Cell::kGru && !lbr ? 2 * H : GH;
    Gemm<T>(false, true, B, rec_cols, H, T(1), h.data(), H, r, H, T(0), rg.data(), GH, pool);
    auto active = [&](int64_t b) { return t < in.lengths[static_cast<size_t>(b)]; };
    if (c.cell == Cell::kGru) {
      for (int64_t b = 0; b < B; ++b) {
        const T* xr = xw.data() + c.XRow(t, b) * GH;
        T* gr = rg.data() + b * GH;
        T* hb = h.data() + b * H;
        for (int64_t k = 0; k < H; ++k) {
          const T ar = xr[H + k] + gr[H + k];
          const T rv = f.F(Clip(ar, clip));
          if (lbr) {
            const T q = gr[2 * H + k] + (rb ? rb[2 * H + k] : T(0));
            gr[2 * H + k] = rv * q;  // its share of the h gate's input
            if (trace) trace->q[static_cast<size_t>((t * B + b) * H + k)] = q;
          } else {
            rh[static_cast<size_t>(b * H + k)] = rv * hb[k];
          }
        }
      }
      if (!lbr) Gemm<T>(false, true, B, H, H, T(1), rh.data(), H, r + 2 * H * H, H, T(0), rg.data() + 2 * H, GH, pool);
    }
    for (int64_t b = 0; b < B; ++b) {
      T* yb = y ? y + c.YOffset(t, d, b) : nullptr;
      if (!active(b)) {
        if (yb) std::fill_n(yb, H, T(0));
        continue;
      }
      const T* xr = xw.data() + c.XRow(t, b) * GH;
      const T* gr = rg.data() + b * GH;
      T* hb = h.data() + b * H;
      T* cb = cs.data() + b * H;
      T* pre = trace ? trace->pre.data() + (t * B + b) * GH : nullptr;
      for (int64_t k = 0; k < H; ++k) {
        if (c.cell == Cell::kRnn) {
          const T a = xr[k] + gr[k];
          if (pre) pre[k] = a;
          hb[k] = f.F(Clip(a, clip));
        } else if (c.cell == Cell::kGru) {
          const T az = xr[k] + gr[k], ar = xr[H + k] + gr[H + k], ah = xr[2 * H + k] + gr[2 * H + k];
          if (pre) {
            pre[k] = az;
            pre[H + k] = ar;
            pre[2 * H + k] = ah;
          }
          const T z = f.F(Clip(az, clip)), hh = g.F(Clip(ah, clip));
          hb[k] = (T(1) - z) * hh + z * hb[k];
        } else {
          T ai = xr[k] + gr[k], ao = xr[H + k] + gr[H + k], af = xr[2 * H + k] + gr[2 * H + k];
          const T ac = xr[3 * H + k] + gr[3 * H + k];
          const T cprev = cb[k];
          if (p) {
            ai += p[k] * cprev;
            af += p[2 * H + k] * cprev;
          }
          const T iv = f.F(Clip(ai, clip));
          const T fv = c.input_forget ? T(1) - iv : f.F(Clip(af, clip));
          const T cv = fv * cprev + iv * g.F(Clip(ac, clip));
          if (p) ao += p[H + k] * cv;
          const T ov = f.F(Clip(ao, clip));
          cb[k] = cv;
          hb[k] = ov * ha.F(cv);
          if (pre) {
            pre[k] = ai;
            pre[H + k] = ao;
            pre[2 * H + k] = af;
            pre[3 * H + k] = ac;
            trace->cnew[static_cast<size_t>((t * B + b) * H + k)] = cv;
          }
        }
      }
      if (yb) std::copy_n(hb, H, yb);
    }
  }
}

// ---- float LSTM fast path ----
// Default activations (sigmoid, tanh, tanh), no clip, no peepholes, no input_forget, every sequence at
// full length: the gate math runs on vectors and the forward keeps its gates for the backward (the
// trace, FastLstmTrace). The reference loops above stay the oracle for everything else.
namespace fast_lstm {

// Vectors pass between always-inlined functions of this file only, so the ABI -Wpsabi warns about never
// applies (to the end of the file: the templates are instantiated there).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#if defined(__GNUC__)
#define ET_LSTM_INLINE inline __attribute__((always_inline))
#else
#define ET_LSTM_INLINE inline
#endif

template <int Bytes>
struct Vec {
  typedef float F __attribute__((vector_size(Bytes)));
  typedef int32_t I __attribute__((vector_size(Bytes)));
  static constexpr int kLanes = Bytes / 4;
  static ET_LSTM_INLINE F Load(const float* p) {
    F v;
    __builtin_memcpy(&v, p, sizeof(F));
    return v;
  }
  static ET_LSTM_INLINE void Store(float* p, F v) { __builtin_memcpy(p, &v, sizeof(F)); }
  static ET_LSTM_INLINE F Splat(float x) { return F{} + x; }
  // a where `mask` (a vector comparison) is set, b elsewhere.
  static ET_LSTM_INLINE F Select(I mask, F a, F b) {
    I ai, bi;
    __builtin_memcpy(&ai, &a, sizeof(F));
    __builtin_memcpy(&bi, &b, sizeof(F));
    const I out = (ai & mask) | (bi & ~mask);
    F r;
    __builtin_memcpy(&r, &out, sizeof(F));
    return r;
  }
  // exp with Cephes' polynomial on [-ln2/2, ln2/2] (relative error about 2e-7), inputs clamped to
  // [-87.3, 88] so that 2^n stays a normal float.
  static ET_LSTM_INLINE F Exp(F x) {
    x = Select(x < Splat(-87.3f), Splat(-87.3f), x);
    x = Select(x > Splat(88.0f), Splat(88.0f), x);
    const F shift = Splat(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
    const F rounded = x * 1.44269504088896341f + shift;
    const F n = rounded - shift;
    const F r = x - n * 0.693359375f + n * 2.12194440e-4f;
    F p = Splat(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const F e = p * r * r + r + 1.0f;
    I bits;  // n sits in the low mantissa bits of `rounded`
    __builtin_memcpy(&bits, &rounded, sizeof(F));
    bits = (bits - 0x4B400000 + 127) << 23;
    F scale;
    __builtin_memcpy(&scale, &bits, sizeof(F));
    return e * scale;
  }
  static ET_LSTM_INLINE F Sigmoid(F x) { return 1.0f / (1.0f + Exp(-x)); }
  // tanh(x) = 2 / (1 + exp(-2x)) - 1; x (1 - x^2/3 + 2x^4/15) below |x| = 1/16, where the difference
  // would lose relative precision.
  static ET_LSTM_INLINE F Tanh(F x) {
    const F t = 2.0f / (1.0f + Exp(-2.0f * x)) - 1.0f;
    const F x2 = x * x;
    const F small = x * (1.0f + x2 * (-0.333333333f + x2 * 0.133333333f));
    return Select(x2 < Splat(0.00390625f), small, t);
  }
};

ET_LSTM_INLINE float SigmoidScalar(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// One batch row of one step: gate pre-activations `pre` (4H), c before the step `cp`; writes the activated
// gates to `a` (4H), the new h, c and tanh(c) (h also to `y` when not null). In passes of independent
// activations (i, o, f contiguous, then g, then the cell) so that the long exp chains of successive
// vectors overlap instead of one vector's five chains waiting on each other.
template <int Bytes>
ET_LSTM_INLINE void ForwardRowImpl(int64_t H, const float* __restrict pre, float* __restrict a,
                                   const float* __restrict cp, float* __restrict h, float* __restrict c,
                                   float* __restrict tc, float* __restrict y) {
  using V = Vec<Bytes>;
  using F = typename V::F;
  constexpr int L = V::kLanes;
  int64_t k = 0;
  for (; k + 2 * L <= 3 * H; k += 2 * L) {
    const F s0 = V::Sigmoid(V::Load(pre + k)), s1 = V::Sigmoid(V::Load(pre + k + L));
    V::Store(a + k, s0);
    V::Store(a + k + L, s1);
  }
  for (; k < 3 * H; ++k) a[k] = SigmoidScalar(pre[k]);
  float* __restrict g = a + 3 * H;
  for (k = 0; k + L <= H; k += L) V::Store(g + k, V::Tanh(V::Load(pre + 3 * H + k)));
  for (; k < H; ++k) g[k] = std::tanh(pre[3 * H + k]);
  for (k = 0; k + L <= H; k += L) {
    const F cv = V::Load(a + 2 * H + k) * V::Load(cp + k) + V::Load(a + k) * V::Load(g + k);
    const F tcv = V::Tanh(cv), hv = V::Load(a + H + k) * tcv;
    V::Store(c + k, cv);
    V::Store(tc + k, tcv);
    V::Store(h + k, hv);
    if (y) V::Store(y + k, hv);
  }
  for (; k < H; ++k) {
    const float cv = a[2 * H + k] * cp[k] + a[k] * g[k], tcv = std::tanh(cv), hv = a[H + k] * tcv;
    c[k] = cv;
    tc[k] = tcv;
    h[k] = hv;
    if (y) y[k] = hv;
  }
}

// The backward of one batch row of one step from its activated gates `a`, c before the step `cp` and
// tanh of c after it `tc`: dh is the gradient at h (dy added when not null), dc the one at c (replaced by
// the one at cp); writes the pre-activation gradients dg (4H).
template <int Bytes>
ET_LSTM_INLINE void BackwardRowImpl(int64_t H, const float* a, const float* __restrict cp,
                                    const float* __restrict tc, const float* __restrict dh,
                                    const float* __restrict dy, float* __restrict dc,
                                    float* dg) {
  using V = Vec<Bytes>;
  using F = typename V::F;
  constexpr int L = V::kLanes;
  int64_t k = 0;
  for (; k + L <= H; k += L) {
    const F i = V::Load(a + k), o = V::Load(a + H + k), f = V::Load(a + 2 * H + k), g = V::Load(a + 3 * H + k);
    const F c0 = V::Load(cp + k), t = V::Load(tc + k);
    F dhv = V::Load(dh + k);
    if (dy) dhv += V::Load(dy + k);
    const F dC = V::Load(dc + k) + dhv * o * (1.0f - t * t);
    V::Store(dg + k, dC * g * i * (1.0f - i));
    V::Store(dg + H + k, dhv * t * o * (1.0f - o));
    V::Store(dg + 2 * H + k, dC * c0 * f * (1.0f - f));
    V::Store(dg + 3 * H + k, dC * i * (1.0f - g * g));
    V::Store(dc + k, dC * f);
  }
  for (; k < H; ++k) {
    const float i = a[k], o = a[H + k], f = a[2 * H + k], g = a[3 * H + k];
    const float t = tc[k], dhv = dh[k] + (dy ? dy[k] : 0.0f);
    const float dC = dc[k] + dhv * o * (1.0f - t * t);
    dg[k] = dC * g * i * (1.0f - i);
    dg[H + k] = dhv * t * o * (1.0f - o);
    dg[2 * H + k] = dC * cp[k] * f * (1.0f - f);
    dg[3 * H + k] = dC * i * (1.0f - g * g);
    dc[k] = dC * f;
  }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__AVX2__)
__attribute__((target("avx2,fma"))) void ForwardRowAvx2(int64_t H, const float* pre, float* a, const float* cp,
                                                        float* h, float* c, float* tc, float* y) {
  ForwardRowImpl<32>(H, pre, a, cp, h, c, tc, y);
}
__attribute__((target("avx2,fma"))) void BackwardRowAvx2(int64_t H, const float* a, const float* cp, const float* tc,
                                                         const float* dh, const float* dy, float* dc, float* dg) {
  BackwardRowImpl<32>(H, a, cp, tc, dh, dy, dc, dg);
}
__attribute__((target("avx512f,avx2,fma"))) void ForwardRowAvx512(int64_t H, const float* pre, float* a,
                                                                  const float* cp, float* h, float* c, float* tc,
                                                                  float* y) {
  ForwardRowImpl<64>(H, pre, a, cp, h, c, tc, y);
}
__attribute__((target("avx512f,avx2,fma"))) void BackwardRowAvx512(int64_t H, const float* a, const float* cp,
                                                                   const float* tc, const float* dh, const float* dy,
                                                                   float* dc, float* dg) {
  BackwardRowImpl<64>(H, a, cp, tc, dh, dy, dc, dg);
}
void ForwardRow(int64_t H, const float* pre, float* a, const float* cp, float* h, float* c, float* tc, float* y) {
  if (CpuHasAvx512()) return ForwardRowAvx512(H, pre, a, cp, h, c, tc, y);
  if (CpuHasAvx2Fma()) return ForwardRowAvx2(H, pre, a, cp, h, c, tc, y);
  ForwardRowImpl<16>(H, pre, a, cp, h, c, tc, y);
}
void BackwardRow(int64_t H, const float* a, const float* cp, const float* tc, const float* dh, const float* dy,
                 float* dc, float* dg) {
  if (CpuHasAvx512()) return BackwardRowAvx512(H, a, cp, tc, dh, dy, dc, dg);
  if (CpuHasAvx2Fma()) return BackwardRowAvx2(H, a, cp, tc, dh, dy, dc, dg);
  BackwardRowImpl<16>(H, a, cp, tc, dh, dy, dc, dg);
}
#else
#if defined(__AVX2__)
constexpr int kBytes = 32;
#else
constexpr int kBytes = 16;
#endif
void ForwardRow(int64_t H, const float* pre, float* a, const float* cp, float* h, float* c, float* tc, float* y) {
  ForwardRowImpl<kBytes>(H, pre, a, cp, h, c, tc, y);
}
void BackwardRow(int64_t H, const float* a, const float* cp, const float* tc, const float* dh, const float* dy,
                 float* dc, float* dg) {
  BackwardRowImpl<kBytes>(H, a, cp, tc, dh, dy, dc, dg);
}
#endif

}  // namespace fast_lstm

// Whether the float LSTM fast path computes this node (see fast_lstm).
bool FastLstmApplies(const Config& c, const Inputs<float>& in) {
  if (c.cell != Cell::kLstm || c.clip > 0 || c.input_forget || in.p || c.seq == 0 || c.batch == 0 || c.hidden == 0)
    return false;
  for (int64_t d = 0; d < c.dirs; ++d)
    if (c.Act(d, 0).kind != Activation::Kind::kSigmoid || c.Act(d, 1).kind != Activation::Kind::kTanh ||
        c.Act(d, 2).kind != Activation::Kind::kTanh)
      return false;
  return std::all_of(in.lengths.begin(), in.lengths.end(), [&](int64_t len) { return len == c.seq; });
}

// Values of one direction's trace, in X's row order: [rows, 4H] activated gates i, o, f, c; [rows, XH]
// rows x, 1, h before the step (one GEMM then gives dW, dB and dR); [rows, H] c before the step; [rows, H]
// tanh of c after it.
template <typename P>
struct FastLstmTrace {
  int64_t xh_cols;
  P *gates, *xh, *cprev, *tanh_c;
  FastLstmTrace(const Config& c, P* trace, int64_t d) {
    const int64_t H = c.hidden, rows = c.seq * c.batch;
    xh_cols = c.input + 1 + H;
    gates = trace + d * rows * (c.GH() + xh_cols + 2 * H);
    xh = gates + rows * c.GH();
    cprev = xh + rows * xh_cols;
    tanh_c = cprev + rows * H;
  }
};

int64_t FastLstmTraceSize(const Config& c) {
  return c.dirs * c.seq * c.batch * (c.GH() + c.input + 1 + 3 * c.hidden);
}

// Values of scratch FastLstmForward and FastLstmBackward take. The forward packs [W | Wb + Rb | R] once per
// call and runs each step's gates as one product on it (K = I + 1 + H: no separate input projection, no
// second pass adding it); on 64x512x157 our micro-kernel on that packed B beats oneDNN's sgemm, which packs
// B again on every call (79 against 68 GFLOP/s, mean thread CPU time of 28-step runs). The backward's dh
// product (64x128x512) is the other way round (oneDNN 74, ours 64), so R is packed only without oneDNN.
int64_t FastLstmForwardWork(const Config& c) {
  const int64_t xh = c.input + 1 + c.hidden;
  return c.GH() * xh + PackedGemmBSize<float>(xh, c.GH()) + PackedGemmBSize<float>(c.input + 1, c.GH()) +
         c.batch * c.GH();
}
// With gates_in_trace the backward writes the gate gradients over the trace's gates (each row read just
// before): no [rows, 4H] buffer of its own, whose cold lines would be fetched only to be overwritten.
int64_t FastLstmBackwardWork(const Config& c, bool gates_in_trace) {
  return (gates_in_trace ? 0 : c.seq * c.batch * c.GH()) + 2 * c.batch * c.hidden + (c.input + 1 + c.hidden) * c.GH() +
         (UseDnnl() ? 0 : PackedGemmBSize<float>(c.GH(), c.hidden));
}

// dh[m x n] = dG R for one step of the backward: oneDNN's sgemm, or our kernel on R packed once per call.
void RecurrentGemm(int64_t m, int64_t n, int64_t k, const float* dg, int64_t ldg, const float* r,
                   const float* packed_r, float* dh, ThreadPool* pool) {
  if (UseDnnl()) return Gemm<float>(false, false, m, n, k, 1.0f, dg, ldg, r, n, 0.0f, dh, n, pool);
  GemmPackedB(false, m, n, k, 1.0f, dg, ldg, packed_r, 0.0f, dh, n, pool);
}

// Forward of every direction: Y (when y), Y_h and Y_c, and the trace (FastLstmTraceSize values).
void FastLstmForward(const Config& c, const Inputs<float>& in, ThreadPool* pool, float* y, float* yh, float* yc,
                     float* trace, float* work) {
  const int64_t H = c.hidden, GH = c.GH(), B = c.batch, I = c.input, rows = c.seq * B;
  // Pitch between the batch rows of one step in [rows, .] arrays (X's row order).
  const int64_t step_rows = c.layout_batch_first ? c.seq : 1;
  const int64_t XH = I + 1 + H;
  float* wall = work;  // [GH, XH]: W, both biases, R
  float* packed = wall + GH * XH;
  float* packed_x = packed + PackedGemmBSize<float>(XH, GH);  // [W | Wb + Rb] alone: a first step from h = 0
  // One step's pre-activations: the product writes them here, where they stay in cache for the gate math
  // (not into the trace, whose lines are cold).
  float* pre = packed_x + PackedGemmBSize<float>(I + 1, GH);
  for (int64_t d = 0; d < c.dirs; ++d) {
    const FastLstmTrace<float> tr(c, trace, d);
    const float* w = in.w + d * GH * I;
    const float* r = in.r + d * GH * H;
    for (int64_t row = 0; row < rows; ++row) {
      std::copy_n(in.x + row * I, I, tr.xh + row * XH);
      tr.xh[row * XH + I] = 1.0f;
    }
    // Each step's gates in one product with K = I + 1 + H: [x_t | 1 | h_{t-1}] [W | Wb + Rb | R]^T.
    for (int64_t g = 0; g < GH; ++g) {
      std::copy_n(w + g * I, I, wall + g * XH);
      wall[g * XH + I] = in.b ? in.b[d * 2 * GH + g] + in.b[d * 2 * GH + GH + g] : 0.0f;
      std::copy_n(r + g * H, H, wall + g * XH + I + 1);
    }
    PackGemmB(true, XH, GH, wall, XH, packed);
    if (!in.h0) PackGemmB(true, I + 1, GH, wall, XH, packed_x);
    for (int64_t s = 0; s < c.seq; ++s) {
      const int64_t t = c.Reversed(d) ? c.seq - 1 - s : s;
      const int64_t next = c.Reversed(d) ? t - 1 : t + 1;
      const int64_t row0 = c.XRow(t, 0);
      if (s == 0)
        for (int64_t b = 0; b < B; ++b) {
          float* hb = tr.xh + (row0 + b * step_rows) * XH + I + 1;
          float* cb = tr.cprev + (row0 + b * step_rows) * H;
          if (in.h0) std::copy_n(in.h0 + c.StateOffset(d, b), H, hb); else std::fill_n(hb, H, 0.0f);
          if (in.c0) std::copy_n(in.c0 + c.StateOffset(d, b), H, cb); else std::fill_n(cb, H, 0.0f);
        }
      const bool from_zero = s == 0 && !in.h0;  // R h_{t-1} is 0: the product stops before the h columns
      GemmPackedB(false, B, GH, from_zero ? I + 1 : XH, 1.0f, tr.xh + row0 * XH, step_rows * XH,
                  from_zero ? packed_x : packed, 0.0f, pre, GH, pool);
      // The new state goes where the next step reads it (its rows of xh and cprev), the last one to Y_h/Y_c.
      const bool last = s == c.seq - 1;
      for (int64_t b = 0; b < B; ++b) {
        const int64_t row = row0 + b * step_rows;
        float* hn = last ? yh + c.StateOffset(d, b) : tr.xh + c.XRow(next, b) * XH + I + 1;
        float* cn = last ? yc + c.StateOffset(d, b) : tr.cprev + c.XRow(next, b) * H;
        fast_lstm::ForwardRow(H, pre + b * GH, tr.gates + row * GH, tr.cprev + row * H, hn, cn, tr.tanh_c + row * H,
                              y ? y + c.YOffset(t, d, b) : nullptr);
      }
    }
  }
}

// Backward of every direction from the trace; dx, dw, dr, db, dh0, dc0 are the LSTMGrad outputs (dx, dh0
// and dc0 may be null: not requested). `clobbered_trace`: the trace itself when it may be overwritten
// (FastLstmBackwardWork's gates_in_trace), else null.
void FastLstmBackward(const Config& c, const Inputs<float>& in, ThreadPool* pool, const float* trace,
                      float* clobbered_trace, const float* dy, const float* dyh, const float* dyc, float* dx, float* dw,
                      float* dr, float* db, float* dh0, float* dc0, float* work) {
  const int64_t H = c.hidden, GH = c.GH(), B = c.batch, I = c.input, rows = c.seq * B;
  const int64_t step_rows = c.layout_batch_first ? c.seq : 1;
  float* dgates = clobbered_trace ? nullptr : work;  // [rows, GH] in X's row order
  float* dh = clobbered_trace ? work : dgates + rows * GH;
  float* dc = dh + B * H;
  float* dwrb = dc + B * H;  // [I + 1 + H, GH]
  float* packed_r = dwrb + (I + 1 + H) * GH;
  for (int64_t d = 0; d < c.dirs; ++d) {
    const FastLstmTrace<const float> tr(c, trace, d);
    if (clobbered_trace) dgates = FastLstmTrace<float>(c, clobbered_trace, d).gates;
    const int64_t XH = tr.xh_cols;
    const float* r = in.r + d * GH * H;
    if (!UseDnnl()) PackGemmB(false, GH, H, r, H, packed_r);
    for (int64_t b = 0; b < B; ++b) {
      float* dhb = dh + b * H;
      float* dcb = dc + b * H;
      if (dyh) std::copy_n(dyh + c.StateOffset(d, b), H, dhb); else std::fill_n(dhb, H, 0.0f);
      if (dyc) std::copy_n(dyc + c.StateOffset(d, b), H, dcb); else std::fill_n(dcb, H, 0.0f);
    }
    for (int64_t s = c.seq - 1; s >= 0; --s) {
      const int64_t t = c.Reversed(d) ? c.seq - 1 - s : s;
      const int64_t row0 = c.XRow(t, 0);
      for (int64_t b = 0; b < B; ++b) {
        const int64_t row = row0 + b * step_rows;
        fast_lstm::BackwardRow(H, tr.gates + row * GH, tr.cprev + row * H, tr.tanh_c + row * H, dh + b * H,
                               dy ? dy + c.YOffset(t, d, b) : nullptr, dc + b * H, dgates + row * GH);
      }
      if (s > 0 || dh0)
        RecurrentGemm(B, H, GH, dgates + row0 * GH, step_rows * GH, r, packed_r, dh, pool);
    }
    for (int64_t b = 0; b < B; ++b) {
      if (dh0) std::copy_n(dh + b * H, H, dh0 + c.StateOffset(d, b));
      if (dc0) std::copy_n(dc + b * H, H, dc0 + c.StateOffset(d, b));
    }
    if (dx)
      Gemm<float>(false, false, rows, I, GH, 1.0f, dgates, GH, in.w + d * GH * I, I, d == 0 ? 0.0f : 1.0f, dx, I,
                  pool);
    // [dW | dB | dR]^T = [x | 1 | h]^T dgates, then transposed into place.
    Gemm<float>(true, false, XH, GH, rows, 1.0f, tr.xh, XH, dgates, GH, 0.0f, dwrb, GH, pool);
    float* dwd = dw + d * GH * I;
    float* drd = dr + d * GH * H;
    float* dbd = db + d * 2 * GH;
    constexpr int64_t kTile = 16;  // transposed in tiles that stay in L1
    for (int64_t g0 = 0; g0 < GH; g0 += kTile)
      for (int64_t k0 = 0; k0 < XH; k0 += kTile)
        for (int64_t g = g0; g < std::min(GH, g0 + kTile); ++g)
          for (int64_t k = k0; k < std::min(XH, k0 + kTile); ++k) {
            const float v = dwrb[k * GH + g];
            if (k < I) {
              dwd[g * I + k] = v;
            } else if (k == I) {
              dbd[g] = dbd[GH + g] = v;
            } else {
              drd[g * H + k - I - 1] = v;
            }
          }
  }
}

template <typename T>
void ForwardTyped(KernelContext& ctx, Cell cell) {
  const Tensor &x = ctx.Input(0), &w = ctx.Input(1), &r = ctx.Input(2);
  const Config c = ParseConfig(cell, ctx.node(), x, w, r);
  const Inputs<T> in = ReadInputs<T>(ctx, c);
  const Shape y_shape = c.layout_batch_first ? Shape{c.batch, c.seq, c.dirs, c.hidden}
                                             : Shape{c.seq, c.dirs, c.batch, c.hidden};
  const Shape state = c.layout_batch_first ? Shape{c.batch, c.dirs, c.hidden} : Shape{c.dirs, c.batch, c.hidden};
  T* y = ctx.HasOutput(0) ? ctx.Output(0, y_shape, x.dtype()).template data<T>() : nullptr;
  T* yh = ctx.Output(1, state, x.dtype()).template data<T>();
  T* yc = ctx.Output(2, state, x.dtype()).template data<T>();
  if constexpr (std::is_same_v<T, float>) {
    // Output 3 exists only where KeepRecurrentTraces paired this node with its LSTMGrad.
    const bool fast = FastLstmApplies(c, in);
    const int64_t size = fast ? FastLstmTraceSize(c) : 0;
    float* kept = ctx.HasOutput(3) ? ctx.Output(3, {size}, DataType::kFloat32).data<float>() : nullptr;
    if (fast) {
      const size_t work = static_cast<size_t>(FastLstmForwardWork(c));
      NodeScratch<float> scratch(ctx, work + (kept ? 0 : static_cast<size_t>(size)));
      float* trace = kept ? kept : scratch.Take(static_cast<size_t>(size)).data();
      FastLstmForward(c, in, &ctx.threads(), y, yh, yc, trace, scratch.Take(work).data());
      return;
    }
  }
  std::vector<T> h, cs;
  for (int64_t d = 0; d < c.dirs; ++d) {
    RunDirection<T>(c, in, d, &ctx.threads(), y, h, cs, nullptr);
    for (int64_t b = 0; b < c.batch; ++b) {
      std::copy_n(h.data() + b * c.hidden, c.hidden, yh + c.StateOffset(d, b));
      std::copy_n(cs.data() + b * c.hidden, c.hidden, yc + c.StateOffset(d, b));
    }
  }
}

template <typename Fn>
void VisitFloat(const KernelContext& ctx, Fn fn) {
  const DataType dtype = ctx.Input(0).dtype();
  if (dtype == DataType::kFloat32) {
    fn(float{});
  } else if (dtype == DataType::kFloat64) {
    fn(double{});
  } else {
    Fail(ErrorCode::kNotImplemented, ctx.node().Describe(), ": X of type ", DataTypeName(dtype),
             " is not supported (float32 and float64 are)");
  }
}

void ForwardKernel(KernelContext& ctx, Cell cell) {
  VisitFloat(ctx, [&](auto tag) { ForwardTyped<decltype(tag)>(ctx, cell); });
}

// ---- backward ----
// ai.edgetrain.<Cell>Grad: inputs are the forward node's (padded to 8 for LSTM, 6 otherwise) then
// dY, dY_h (and dY_c for LSTM), any omitted; outputs dX, dW, dR, dB, d_initial_h (, d_initial_c, dP).
// The forward pass is recomputed to recover the gate values (nothing but the inputs is kept).
template <typename T>
void BackwardTyped(KernelContext& ctx, Cell cell) {
  const Tensor &x = ctx.Input(0), &w = ctx.Input(1), &r = ctx.Input(2);
  const std::string& what = ctx.node().Describe();
  const Config c = ParseConfig(cell, ctx.node(), x, w, r);
  const Inputs<T> in = ReadInputs<T>(ctx, c);
  const size_t first_grad = cell == Cell::kLstm ? 8 : 6;
  const Shape y_shape = c.layout_batch_first ? Shape{c.batch, c.seq, c.dirs, c.hidden}
                                             : Shape{c.seq, c.dirs, c.batch, c.hidden};
  const Shape state = c.layout_batch_first ? Shape{c.batch, c.dirs, c.hidden} : Shape{c.dirs, c.batch, c.hidden};
  auto grad_in = [&](size_t k, const Shape& shape, const char* name) -> const T* {
    if (!ctx.HasInput(first_grad + k)) return nullptr;
    const Tensor& t = ctx.Input(first_grad + k);
    ET_CHECK(t.dtype() == x.dtype() && t.shape() == shape, ErrorCode::kInvalidArgument, what, ": gradient ", name,
             " must be ", DataTypeName(x.dtype()), " ", ShapeToString(shape), ", got ", DataTypeName(t.dtype()), " ",
             ShapeToString(t.shape()));
    return t.data<T>();
  };
  const T* dy = grad_in(0, y_shape, "dY");
  const T* dyh = grad_in(1, state, "dY_h");
  const T* dyc = cell == Cell::kLstm ? grad_in(2, state, "dY_c") : nullptr;

  const int64_t H = c.hidden, GH = c.GH(), B = c.batch, I = c.input, rows = c.seq * B;
  ThreadPool* pool = &ctx.threads();
  T* dx = ctx.Output(0, x.shape(), x.dtype()).template data<T>();
  T* dw = ctx.Output(1, w.shape(), x.dtype()).template data<T>();
  T* dr = ctx.Output(2, r.shape(), x.dtype()).template data<T>();
  T* db = ctx.Output(3, {c.dirs, 2 * GH}, x.dtype()).template data<T>();
  T* dh0 = ctx.Output(4, state, x.dtype()).template data<T>();
  T* dc0 = cell == Cell::kLstm ? ctx.Output(5, state, x.dtype()).template data<T>() : nullptr;
  T* dp = cell == Cell::kLstm ? ctx.Output(6, {c.dirs, 3 * H}, x.dtype()).template data<T>() : nullptr;
  std::fill_n(dr, r.numel(), T(0));
  std::fill_n(db, c.dirs * 2 * GH, T(0));
  if (dp) std::fill_n(dp, c.dirs * 3 * H, T(0));

  if constexpr (std::is_same_v<T, float>) {
    if (FastLstmApplies(c, in)) {
      const size_t trace_size = static_cast<size_t>(FastLstmTraceSize(c));
      const bool kept = ctx.HasInput(11) && ctx.Input(11).dtype() == DataType::kFloat32 &&
                        ctx.Input(11).numel() == FastLstmTraceSize(c);
      const bool clobber = !kept || ctx.InputMayBeClobbered(11);  // a trace of its own is always scratch
      const size_t work = static_cast<size_t>(FastLstmBackwardWork(c, clobber));
      const size_t states = static_cast<size_t>(c.dirs * B * H);
      const size_t forward_work = static_cast<size_t>(FastLstmForwardWork(c));
      NodeScratch<float> scratch(ctx, work + (kept ? 0 : trace_size + 2 * states + forward_work));
      const float* trace = nullptr;
      float* clobbered = nullptr;
      if (kept) {
        trace = ctx.Input(11).data<float>();
        if (clobber) clobbered = const_cast<float*>(trace);
      } else {  // run the forward again for its trace
        float* own = scratch.Take(trace_size).data();
        float* yh = scratch.Take(states).data();
        FastLstmForward(c, in, pool, nullptr, yh, scratch.Take(states).data(), own, scratch.Take(forward_work).data());
        trace = clobbered = own;
      }
      FastLstmBackward(c, in, pool, trace, clobbered, dy, dyh, dyc, ctx.HasOutput(0) ? dx : nullptr, dw, dr, db,
                       ctx.HasOutput(4) ? dh0 : nullptr, ctx.HasOutput(5) ? dc0 : nullptr, scratch.Take(work).data());
      return;
    }
  }
  Trace<T> tr;
  std::vector<T> h, cs, dgates(static_cast<size_t>(rows * GH)), drec(static_cast<size_t>(B * GH));
  std::vector<T> dh(static_cast<size_t>(B * H)), dc(static_cast<size_t>(B * H)), dhp(static_cast<size_t>(B * H));
  std::vector<T> dcp(static_cast<size_t>(B * H)), drh(static_cast<size_t>(B * H)), rh(static_cast<size_t>(B * H));
  const bool lbr = c.linear_before_reset;
  const double clip = c.clip;
  for (int64_t d = 0; d < c.dirs; ++d) {
    RunDirection<T>(c, in, d, pool, nullptr, h, cs, &tr);
    const T* rw = in.r + d * GH * H;
    const T* p = in.p ? in.p + d * 3 * H : nullptr;
    T* drd = dr + d * GH * H;
    T* dpd = dp ? dp + d * 3 * H : nullptr;
    const Activation& f = c.Act(d, 0);
    const Activation& g = c.Act(d, ActivationsOf(cell) > 1 ? 1 : 0);
    const Activation& ha = c.Act(d, ActivationsOf(cell) > 2 ? 2 : 0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t k = 0; k < H; ++k) {
        dh[static_cast<size_t>(b * H + k)] = dyh ? dyh[c.StateOffset(d, b) + k] : T(0);
        dc[static_cast<size_t>(b * H + k)] = dyc ? dyc[c.StateOffset(d, b) + k] : T(0);
      }
    std::fill(dgates.begin(), dgates.end(), T(0));
    // RNN and LSTM with layout 0: the recurrent gradient of step t is dgates' rows of step t, so dR and
    // its bias take one GEMM over the whole sequence after the loop.
    const bool whole_sequence_dr = cell != Cell::kGru && !c.layout_batch_first;
    for (int64_t s = c.seq - 1; s >= 0; --s) {
      const int64_t t = c.Reversed(d) ? c.seq - 1 - s : s;
      const T* hprev = tr.hprev.data() + t * B * H;
      if (!whole_sequence_dr) std::fill(drec.begin(), drec.end(), T(0));
      for (int64_t b = 0; b < B; ++b) {
        T* dhb = dh.data() + b * H;
        T* dhpb = dhp.data() + b * H;
        T* dcpb = dcp.data() + b * H;
        if (t >= in.lengths[static_cast<size_t>(b)]) {  // state passes through unchanged
          std::copy_n(dhb, H, dhpb);
          std::copy_n(dc.data() + b * H, H, dcpb);
          continue;
        }
        if (dy)
          for (int64_t k = 0; k < H; ++k) dhb[k] += dy[c.YOffset(t, d, b) + k];
        const T* pre = tr.pre.data() + (t * B + b) * GH;
        T* dg = dgates.data() + c.XRow(t, b) * GH;
        T* dq = drec.data() + b * GH;
        const T* hp = hprev + b * H;
        for (int64_t k = 0; k < H; ++k) {
          if (cell == Cell::kRnn) {
            const T a = Clip(pre[k], clip), hv = f.F(a);
            dg[k] = dhb[k] * f.D(a, hv) * ClipMask(pre[k], clip);
            dq[k] = dg[k];
            dhpb[k] = 0;
          } else if (cell == Cell::kGru) {
            const T az = Clip(pre[k], clip), ah = Clip(pre[2 * H + k], clip);
            const T z = f.F(az), hh = g.F(ah);
            const T dz = dhb[k] * (hp[k] - hh);
            dg[k] = dz * f.D(az, z) * ClipMask(pre[k], clip);
            dg[2 * H + k] = dhb[k] * (T(1) - z) * g.D(ah, hh) * ClipMask(pre[2 * H + k], clip);
            dhpb[k] = dhb[k] * z;
            dq[k] = dg[k];
            const T ar = Clip(pre[H + k], clip), rv = f.F(ar);
            dq[2 * H + k] = lbr ? dg[2 * H + k] * rv : dg[2 * H + k];
            if (!lbr) rh[static_cast<size_t>(b * H + k)] = rv * hp[k];
          } else {
            const size_t e = static_cast<size_t>((t * B + b) * H + k);
            const T cprev = tr.cprev[e], cv = tr.cnew[e];
            const T ai = Clip(pre[k], clip), ao = Clip(pre[H + k], clip), af = Clip(pre[2 * H + k], clip);
            const T ac = Clip(pre[3 * H + k], clip);
            const T iv = f.F(ai), ov = f.F(ao), fv = c.input_forget ? T(1) - iv : f.F(af), cc = g.F(ac);
            const T hc = ha.F(cv);
            const T dov = dhb[k] * hc;
            const T dao = dov * f.D(ao, ov) * ClipMask(pre[H + k], clip);
            T dC = dc[static_cast<size_t>(b * H + k)] + dhb[k] * ov * ha.D(cv, hc);
            if (p) dC += dao * p[H + k];
            T di = dC * cc;
            const T dfv = dC * cprev;
            T daf = 0;
            if (c.input_forget) {
              di -= dfv;
            } else {
              daf = dfv * f.D(af, fv) * ClipMask(pre[2 * H + k], clip);
            }
            const T dai = di * f.D(ai, iv) * ClipMask(pre[k], clip);
            const T dac = dC * iv * g.D(ac, cc) * ClipMask(pre[3 * H + k], clip);
            T dcprev = dC * fv;
            if (p) {
              dcprev += dai * p[k] + daf * p[2 * H + k];
              dpd[k] += dai * cprev;
              dpd[H + k] += dao * cv;
              dpd[2 * H + k] += daf * cprev;
            }
            dg[k] = dai;
            dg[H + k] = dao;
            dg[2 * H + k] = daf;
            dg[3 * H + k] = dac;
            if (!whole_sequence_dr)
              for (int64_t q = 0; q < 4; ++q) dq[q * H + k] = dg[q * H + k];
            dcpb[k] = dcprev;
            dhpb[k] = 0;
          }
        }
      }
      if (cell == Cell::kGru) {
        // The reset gate's gradient goes through the h gate's recurrent term.
        if (!lbr) Gemm<T>(false, false, B, H, H, T(1), drec.data() + 2 * H, GH, rw + 2 * H * H, H, T(0), drh.data(), H, pool);
        for (int64_t b = 0; b < B; ++b) {
          if (t >= in.lengths[static_cast<size_t>(b)]) continue;
          const T* pre = tr.pre.data() + (t * B + b) * GH;
          T* dg = dgates.data() + c.XRow(t, b) * GH;
          T* dq = drec.data() + b * GH;
          const T* hp = hprev + b * H;
          for (int64_t k = 0; k < H; ++k) {
            const T ar = Clip(pre[H + k], clip), rv = f.F(ar);
            T drv;
            if (lbr) {
              drv = dg[2 * H + k] * tr.q[static_cast<size_t>((t * B + b) * H + k)];
            } else {
              const T drhk = drh[static_cast<size_t>(b * H + k)];
              drv = drhk * hp[k];
              dhp[static_cast<size_t>(b * H + k)] += drhk * rv;
            }
            dg[H + k] = drv * f.D(ar, rv) * ClipMask(pre[H + k], clip);
            dq[H + k] = dg[H + k];
          }
        }
        if (!lbr) Gemm<T>(true, false, H, H, B, T(1), drec.data() + 2 * H, GH, rh.data(), H, T(1), drd + 2 * H * H, H, pool);
      }
      const int64_t rec_rows = cell == Cell::kGru && !lbr ? 2 * H : GH;
      if (whole_sequence_dr) {
        Gemm<T>(false, false, B, H, GH, T(1), dgates.data() + t * B * GH, GH, rw, H, T(1), dhp.data(), H, pool);
      } else {
        Gemm<T>(false, false, B, H, rec_rows, T(1), drec.data(), GH, rw, H, T(1), dhp.data(), H, pool);
        Gemm<T>(true, false, rec_rows, H, B, T(1), drec.data(), GH, hprev, H, T(1), drd, H, pool);
        T* drb = db + d * 2 * GH + GH;
        for (int64_t b = 0; b < B; ++b)
          for (int64_t k = 0; k < GH; ++k) drb[k] += drec[static_cast<size_t>(b * GH + k)];
      }
      std::swap(dh, dhp);
      if (cell == Cell::kLstm) std::swap(dc, dcp);
    }
    for (int64_t b = 0; b < B; ++b) {
      std::copy_n(dh.data() + b * H, H, dh0 + c.StateOffset(d, b));
      if (dc0) std::copy_n(dc.data() + b * H, H, dc0 + c.StateOffset(d, b));
    }
    Gemm<T>(false, false, rows, I, GH, T(1), dgates.data(), GH, in.w + d * GH * I, I, d == 0 ? T(0) : T(1), dx, I,
            pool);
    Gemm<T>(true, false, GH, I, rows, T(1), dgates.data(), GH, in.x, I, T(0), dw + d * GH * I, I, pool);
    T* dwb = db + d * 2 * GH;
    for (int64_t row = 0; row < rows; ++row)
      for (int64_t k = 0; k < GH; ++k) dwb[k] += dgates[static_cast<size_t>(row * GH + k)];
    if (whole_sequence_dr) {
      Gemm<T>(true, false, GH, H, rows, T(1), dgates.data(), GH, tr.hprev.data(), H, T(1), dr + d * GH * H, H, pool);
      std::copy_n(dwb, GH, dwb + GH);
    }
  }
}

void BackwardKernel(KernelContext& ctx, Cell cell) {
  VisitFloat(ctx, [&](auto tag) { BackwardTyped<decltype(tag)>(ctx, cell); });
}

// Gradient rule: one fused backward node for every input that needs a gradient.
void RecurrentGradient(GradientContext& g, Cell cell) {
  const size_t num_inputs = cell == Cell::kLstm ? 8 : 6, num_outputs = cell == Cell::kLstm ? 3 : 2;
  std::vector<std::string> inputs;
  for (size_t i = 0; i < num_inputs; ++i) inputs.push_back(g.X(i));
  bool any = false;
  for (size_t i = 0; i < num_outputs; ++i) {
    inputs.push_back(g.dY(i));
    any = any || !inputs.back().empty();
  }
  if (!any) return;
  const std::vector<std::string> grads = g.Emit(std::string(NameOf(cell)) + "Grad", inputs,
                                                cell == Cell::kLstm ? 7 : 5, g.node().attributes, kEdgetrainDomain);
  // Forward input -> backward output: X, W, R, B, (sequence_lens), initial_h, initial_c, P.
  const std::vector<std::pair<size_t, size_t>> map = {{0, 0}, {1, 1}, {2, 2}, {3, 3}, {5, 4}, {6, 5}, {7, 6}};
  for (const auto& [input, output] : map)
    if (input < g.NumInputs() && output < grads.size() && !g.X(input).empty() && g.NeedsGrad(input))
      g.SetGrad(input, grads[output]);
}

}  // namespace

void RegisterRecurrentOps(OpRegistry& r) {
  // One kernel serves the three cells: the family is left out only when all of them are (the registry drops the rest).
  constexpr bool kAnyCell = ops_config::InBuild("", "RNN") || ops_config::InBuild("", "GRU") ||
                            ops_config::InBuild("", "LSTM") || ops_config::InBuild(kEdgetrainDomain, "RNNGrad") ||
                            ops_config::InBuild(kEdgetrainDomain, "GRUGrad") ||
                            ops_config::InBuild(kEdgetrainDomain, "LSTMGrad");
  if constexpr (kAnyCell) {
    for (Cell cell : {Cell::kRnn, Cell::kGru, Cell::kLstm}) {
      const std::string name = NameOf(cell);
      RegisterOnnx(r, name, [cell](KernelContext& ctx) { ForwardKernel(ctx, cell); });
      r.SetGradient(name, [cell](GradientContext& g) { RecurrentGradient(g, cell); });
      // No definition in standard ops: a backward through time would need a Loop body per cell.
      RegisterFused(r, name + "Grad", [cell](KernelContext& ctx) { BackwardKernel(ctx, cell); }, nullptr);
    }
  }
}

}  // namespace edgetrain
