// oneDNN paths of the float32 convolutions (see conv_dnnl.hpp). Each pass is cached per thread as a
// Call: its primitive, reorders between the ONNX layouts and the layouts the primitive chose, and
// the memory objects, which get the tensors' pointers on every run.
#include "ops/conv_dnnl.hpp"

#if defined(EDGETRAIN_WITH_DNNL)
#include <omp.h>

#include <algorithm>
#include <initializer_list>

#include "core/kernel_backend.hpp"
#include "core/threading.hpp"
#include "ops/dnnl_util.hpp"
#endif

namespace edgetrain::conv_dnnl {

#if defined(EDGETRAIN_WITH_DNNL)

namespace {

using dnnl::memory;

enum class Pass : int64_t { kForward, kBackwardData, kBackwardWeights, kTransposeForward, kForwardReluMaxPool };

size_t AlignedBytes(size_t bytes) { return (bytes + 63) / 64 * 64; }

// One primitive execution and its arguments.
struct Step {
  dnnl::primitive primitive;
  std::vector<dnnl_exec_arg_t> args;
};

// A pass as oneDNN runs it: reorders of the inputs into the primitive's layouts, the primitive,
// reorders of its outputs back into the tensors (no reorder where the layouts agree).
struct Call {
  std::vector<Step> steps;
  std::vector<std::pair<int, memory>> tensors;  // the caller's tensors by argument, ONNX layouts
  // The primitive's own layouts: bound on each run to owned_offsets in this thread's scratch buffer,
  // since no pass reads them after it returns (kept per Call, they held a copy of every activation).
  std::vector<memory> owned;
  std::vector<size_t> owned_offsets;
  size_t owned_bytes = 0;
  memory scratchpad;  // shared by the steps, which run one after another; after the owned layouts
  size_t scratchpad_bytes = 0;
  bool refused = false;    // oneDNN has no implementation for this configuration
  bool reference = false;  // oneDNN's implementation is its slow reference code
};

memory::dims RowMajorStrides(const memory::dims& dims) {
  memory::dims strides(dims.size());
  memory::dim stride = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= dims[i];
  }
  return strides;
}

memory::desc Dense(const memory::dims& dims) {
  return memory::desc(dims, memory::data_type::f32, RowMajorStrides(dims));
}

// [N, C, spatial...]
memory::desc Activations(int64_t batch, int64_t channels, const Int64Vector& spatial) {
  memory::dims dims = {batch, channels};
  dims.insert(dims.end(), spatial.begin(), spatial.end());
  return Dense(dims);
}

// W as oneDNN's [(G,) O, I, kernel...] over ONNX's memory: Conv stores [G*O, I, kernel...],
// ConvTranspose [G*I, O, kernel...] (O and I per group, from oneDNN's side of the pass).
memory::desc Weights(const ConvGeometry& g, bool transposed) {
  const int64_t out_per_group = g.out_channels / g.group, in_per_group = g.in_channels / g.group;
  const int64_t kernel_size = g.KernelSize();
  memory::dims dims, strides;
  if (g.group > 1) {
    dims.push_back(g.group);
    strides.push_back(out_per_group * in_per_group * kernel_size);
  }
  dims.insert(dims.end(), {out_per_group, in_per_group});
  if (transposed) {
    strides.insert(strides.end(), {kernel_size, out_per_group * kernel_size});
  } else {
    strides.insert(strides.end(), {in_per_group * kernel_size, kernel_size});
  }
  const memory::dims kernel_strides = RowMajorStrides(g.kernel);
  dims.insert(dims.end(), g.kernel.begin(), g.kernel.end());
  strides.insert(strides.end(), kernel_strides.begin(), kernel_strides.end());
  return memory::desc(dims, memory::data_type::f32, strides);
}

// The same dims in a layout the primitive may choose.
memory::desc AnyLayout(const memory::desc& desc) {
  return memory::desc(desc.dims(), memory::data_type::f32, memory::format_tag::any);
}

// An argument of the pass: its id, its layout in the tensor, and whether the pass writes it.
struct Arg {
  int id;
  memory::desc tensor;
  bool output;
};

// The Call around a primitive whose pd is `pd`: `args` are the caller's tensors, `internal` memory
// the Call keeps (in the primitive's own layout) between this primitive and the next.
template <typename Primitive>
Call Assemble(const typename Primitive::primitive_desc& pd, const std::vector<Arg>& args,
              const std::vector<std::pair<int, memory>>& internal = {}) {
  const dnnl::engine& engine = dnnl_util::CpuEngine();
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  Call call;
  call.scratchpad_bytes = pd.scratchpad_desc().get_size();
  call.reference = std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
  struct Pending {
    dnnl::reorder::primitive_desc pd;
    const memory* from;
    const memory* to;
  };
  std::vector<Pending> before, after;
  Step main{Primitive(pd), {}};
  call.owned.reserve(args.size() + internal.size());  // Pending points into both vectors
  call.tensors.reserve(args.size());
  auto own = [&](const memory::desc& desc) -> const memory& {
    call.owned_offsets.push_back(call.owned_bytes);
    call.owned_bytes += AlignedBytes(desc.get_size());
    return call.owned.emplace_back(desc, engine, nullptr);
  };
  for (const auto& [id, kept] : internal) {  // the same object in a chained call: one place (see Chain)
    call.owned_offsets.push_back(call.owned_bytes);
    call.owned_bytes += AlignedBytes(kept.get_desc().get_size());
    main.args.push_back({id, call.owned.emplace_back(kept).get()});
  }
  for (const Arg& arg : args) {
    const memory& tensor = call.tensors.emplace_back(arg.id, memory(arg.tensor, engine, nullptr)).second;
    const memory::desc chosen = pd.query_md(dnnl::query::exec_arg_md, arg.id);
    if (chosen == arg.tensor) {
      main.args.push_back({arg.id, tensor.get()});
      continue;
    }
    const memory& owned = own(chosen);
    main.args.push_back({arg.id, owned.get()});
    if (arg.output) {
      after.push_back({dnnl::reorder::primitive_desc(engine, chosen, engine, arg.tensor, attr), &owned, &tensor});
    } else {
      before.push_back({dnnl::reorder::primitive_desc(engine, arg.tensor, engine, chosen, attr), &tensor, &owned});
    }
  }
  for (const auto* list : {&before, &after})
    for (const Pending& r : *list)
      call.scratchpad_bytes = std::max(call.scratchpad_bytes, r.pd.scratchpad_desc().get_size());
  call.scratchpad = memory(
      memory::desc({static_cast<memory::dim>(call.scratchpad_bytes)}, memory::data_type::u8, memory::format_tag::x),
      engine, nullptr);
  const dnnl_exec_arg_t scratchpad{DNNL_ARG_SCRATCHPAD, call.scratchpad.get()};
  auto add_reorders = [&](const std::vector<Pending>& list) {
    for (const Pending& r : list)
      call.steps.push_back(
          {dnnl::reorder(r.pd), {{DNNL_ARG_FROM, r.from->get()}, {DNNL_ARG_TO, r.to->get()}, scratchpad}});
  };
  add_reorders(before);
  main.args.push_back(scratchpad);
  call.steps.push_back(std::move(main));
  add_reorders(after);
  return call;
}

// `next`'s steps run after `call`'s, on one scratchpad (the larger of the two).
void Chain(Call& call, Call next) {
  call.steps.insert(call.steps.end(), std::make_move_iterator(next.steps.begin()),
                    std::make_move_iterator(next.steps.end()));
  call.tensors.insert(call.tensors.end(), next.tensors.begin(), next.tensors.end());
  call.owned.insert(call.owned.end(), next.owned.begin(), next.owned.end());
  const size_t shift = call.owned_bytes;
  for (size_t i = 0; i < next.owned.size(); ++i) {
    size_t offset = shift + next.owned_offsets[i];
    for (size_t j = 0; j < call.owned.size() - next.owned.size(); ++j)
      if (call.owned[j].get() == next.owned[i].get()) offset = call.owned_offsets[j];  // memory both calls share
    call.owned_offsets.push_back(offset);
  }
  call.owned_bytes += next.owned_bytes;
  call.scratchpad_bytes = std::max(call.scratchpad_bytes, next.scratchpad_bytes);
  call.reference = call.reference || next.reference;
  call.scratchpad = memory(
      memory::desc({static_cast<memory::dim>(call.scratchpad_bytes)}, memory::data_type::u8, memory::format_tag::x),
      dnnl_util::CpuEngine(), nullptr);
  for (Step& step : call.steps)
    for (dnnl_exec_arg_t& arg : step.args)
      if (arg.arg == DNNL_ARG_SCRATCHPAD) arg.memory = call.scratchpad.get();
}

struct Request {
  Pass pass;
  const ConvGeometry& g;
  bool with_bias;
  bool relu = false;                   // forward passes: ReLU applied to the output inside the primitive
  const PoolGeometry* pool = nullptr;  // kForwardReluMaxPool: the pooling of the Conv's output
};

// One input and one output channel per group: oneDNN's depthwise kernels need its blocked layouts
// (on plain ones it falls back to im2col and GEMM, 10x slower).
bool IsDepthwise(const ConvGeometry& g) {
  return g.group > 1 && g.in_channels == g.group && g.out_channels == g.group;
}

// Whether the primitive gets to choose its layouts (reorders run around it) rather than work on the
// ONNX layouts. Its layouts pad channels to blocks of 16 (AVX-512), which costs more than the
// reorders save where a pass writes an image of fewer than 6 channels per group: dX of a first
// layer, a ConvTranspose to few channels (measured on LeNet-size shapes, one thread).
bool ChoosesLayouts(const Request& r) {
  constexpr int64_t kFewChannels = 6;
  const ConvGeometry& g = r.g;
  if (r.pass == Pass::kBackwardData) return g.in_channels / g.group >= kFewChannels || IsDepthwise(g);
  if (r.pass == Pass::kTransposeForward) return g.out_channels / g.group >= kFewChannels;
  return true;
}

// Whether a forward pass should run on channels-last activations: oneDNN's own layouts pad the
// channels to blocks of 16, which wastes most of the work for a 1-D convolution over a count of
// input channels just past a block (measured: eeg_cnn's first layer, 18 channels, 0.68 ms instead
// of 1.05 ms). Only tried where measured, and dropped when oneDNN would run its reference code.
bool ChannelsLast(const Request& r) {
  const ConvGeometry& g = r.g;
  const bool forward = r.pass == Pass::kForward || r.pass == Pass::kForwardReluMaxPool;
  return forward && g.input.size() == 1 && g.group == 1 && g.in_channels > 8 && g.in_channels % 16 != 0;
}

memory::desc ChannelsLastLayout(const memory::desc& desc) {
  return memory::desc(desc.dims(), memory::data_type::f32, memory::format_tag::nwc);
}

// oneDNN's Winograd F(4x4, 3x3) (AVX-512 CPUs only; elsewhere it refuses and the direct kernels run): 3x3,
// stride 1 convolutions do 2.25x fewer multiplies, at about twice the direct kernels' round-off. Below 16
// channels it pads to 16 and is slower than the direct kernels (measured, 64x64 images, batch 32); below 8x8
// outputs its 4x4 tiles waste a third of the work, and its scratch grows with the weights (ResNet-18's 512
// channels at 7x7: 49-89 MB for 10% less time).
bool WinogradFits(const Request& r) {
  constexpr int64_t kMinChannels = 16, kMinOutput = 8;
  const ConvGeometry& g = r.g;
  if (!UseWinogradConvolutions() || r.pass == Pass::kTransposeForward || g.group != 1 || g.kernel.size() != 2 ||
      g.in_channels < kMinChannels || g.out_channels < kMinChannels)
    return false;
  for (size_t d = 0; d < 2; ++d)
    if (g.kernel[d] != 3 || g.strides[d] != 1 || g.dilations[d] != 1 || g.output[d] < kMinOutput) return false;
  return true;
}

Call MakeCall(const Request& r, bool channels_last, dnnl::algorithm algo = dnnl::algorithm::convolution_direct) {
  const ConvGeometry& g = r.g;
  const memory::desc src = Activations(g.batch, g.in_channels, g.input);
  const memory::desc dst = Activations(g.batch, g.out_channels, g.output);
  const memory::desc weights = Weights(g, r.pass == Pass::kTransposeForward);
  const memory::desc bias = r.with_bias ? Dense({g.out_channels}) : memory::desc();
  const bool choose = ChoosesLayouts(r);
  memory::desc any_src = choose ? AnyLayout(src) : src, any_dst = choose ? AnyLayout(dst) : dst;
  if (channels_last) {
    any_src = ChannelsLastLayout(src);
    any_dst = ChannelsLastLayout(dst);
  }
  const memory::desc any_weights = choose ? AnyLayout(weights) : weights;
  memory::dims dilations = g.dilations;
  for (memory::dim& d : dilations) d -= 1;  // oneDNN counts the gaps between kernel taps
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const dnnl::engine& engine = dnnl_util::CpuEngine();
  std::vector<Arg> args;
  try {
    if (r.pass == Pass::kTransposeForward) {
      const dnnl::deconvolution_forward::desc desc(dnnl::prop_kind::forward_inference,
                                                   dnnl::algorithm::deconvolution_direct, any_src, any_weights, bias,
                                                   any_dst, g.strides, dilations, g.pad_begin, g.pad_end);
      args = {{DNNL_ARG_SRC, src, false}, {DNNL_ARG_WEIGHTS, weights, false}, {DNNL_ARG_DST, dst, true}};
      if (r.with_bias) args.push_back({DNNL_ARG_BIAS, bias, false});
      return Assemble<dnnl::deconvolution_forward>({desc, attr, engine}, args);
    }
    const bool forward_pass = r.pass == Pass::kForward || r.pass == Pass::kForwardReluMaxPool;
    const dnnl::convolution_forward::desc forward(dnnl::prop_kind::forward_training, algo, any_src, any_weights,
                                                  forward_pass ? bias : memory::desc(), any_dst, g.strides, dilations,
                                                  g.pad_begin, g.pad_end);
    if (forward_pass) {
      if (r.relu) dnnl_util::AppendRelu(attr);
      args = {{DNNL_ARG_SRC, src, false}, {DNNL_ARG_WEIGHTS, weights, false}};
      if (r.with_bias) args.push_back({DNNL_ARG_BIAS, bias, false});
      if (r.pass == Pass::kForward) {
        args.push_back({DNNL_ARG_DST, dst, true});
        return Assemble<dnnl::convolution_forward>({forward, attr, engine}, args);
      }
      // The pooling reads the Conv's output in the Conv's layout; only the pooled tensor is reordered.
      const dnnl::convolution_forward::primitive_desc conv(forward, attr, engine);
      const memory conv_out(conv.dst_desc(), engine, nullptr);  // placed in the scratch buffer by Run
      const PoolGeometry& p = *r.pool;
      memory::dims pad_end(p.output.size());  // the padding oneDNN needs for exactly p.output windows
      for (size_t d = 0; d < pad_end.size(); ++d)
        pad_end[d] = (p.output[d] - 1) * p.strides[d] + p.kernel[d] - p.input[d] - p.pad_begin[d];
      const memory::desc pooled = Activations(g.batch, g.out_channels, p.output);
      const dnnl::pooling_forward::desc pool(dnnl::prop_kind::forward_inference, dnnl::algorithm::pooling_max,
                                             conv.dst_desc(), AnyLayout(pooled), p.strides, p.kernel, p.pad_begin,
                                             pad_end);
      dnnl::primitive_attr pool_attr;
      pool_attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      Call call = Assemble<dnnl::convolution_forward>(conv, args, {{DNNL_ARG_DST, conv_out}});
      Chain(call, Assemble<dnnl::pooling_forward>({pool, pool_attr, engine}, {{DNNL_ARG_DST, pooled, true}},
                                                  {{DNNL_ARG_SRC, conv_out}}));
      return call;
    }
    const dnnl::convolution_forward::primitive_desc hint(forward, engine);
    if (r.pass == Pass::kBackwardData) {
      const dnnl::convolution_backward_data::desc desc(algo, any_src, any_weights, any_dst, g.strides, dilations,
                                                       g.pad_begin, g.pad_end);
      args = {{DNNL_ARG_DIFF_DST, dst, false}, {DNNL_ARG_WEIGHTS, weights, false}, {DNNL_ARG_DIFF_SRC, src, true}};
      return Assemble<dnnl::convolution_backward_data>({desc, attr, engine, hint}, args);
    }
    const dnnl::convolution_backward_weights::desc desc(algo, any_src, any_weights, bias, any_dst, g.strides,
                                                        dilations, g.pad_begin, g.pad_end);
    args = {{DNNL_ARG_DIFF_DST, dst, false}, {DNNL_ARG_SRC, src, false}, {DNNL_ARG_DIFF_WEIGHTS, weights, true}};
    if (r.with_bias) args.push_back({DNNL_ARG_DIFF_BIAS, bias, true});
    return Assemble<dnnl::convolution_backward_weights>({desc, attr, engine, hint}, args);
  } catch (const dnnl::error&) {
    Call refused;
    refused.refused = true;
    return refused;
  }
}

// This thread's Call for the request, made on first use.
Call& CachedCall(const Request& r) {
  thread_local dnnl_util::Key key;
  const ConvGeometry& g = r.g;
  key.Clear();
  // oneDNN fixes a primitive's thread count when it makes it (from LimitLibraryThreads, called first).
  const bool winograd = WinogradFits(r);
  key.Add({static_cast<int64_t>(r.pass), r.with_bias ? 1 : 0, r.relu ? 1 : 0, winograd ? 1 : 0, omp_get_max_threads(),
           g.batch, g.in_channels, g.out_channels, g.group})
      .Add(g.input)
      .Add(g.output)
      .Add(g.kernel)
      .Add(g.strides)
      .Add(g.dilations)
      .Add(g.pad_begin)
      .Add(g.pad_end);
  if (r.pool) key.Add(r.pool->kernel).Add(r.pool->strides).Add(r.pool->pad_begin).Add(r.pool->output);
  // Capturing one reference keeps the std::function in its small buffer (no allocation on a hit).
  return dnnl_util::Cached<Call>(key, [&r, winograd] {
    if (winograd) {
      Call call = MakeCall(r, false, dnnl::algorithm::convolution_winograd);
      if (!call.refused && !call.reference) return call;
    }
    if (ChannelsLast(r)) {
      Call call = MakeCall(r, true);
      if (!call.refused && !call.reference) return call;
    }
    return MakeCall(r, false);
  });
}

// Whether oneDNN can take the geometry at all: 1 to 3 spatial dims, no empty tensor, no negative pad
// (ConvTranspose with an output_shape beyond its full extent).
bool Describable(const ConvGeometry& g) {
  const size_t spatial = g.input.size();
  if (spatial < 1 || spatial > 3) return false;
  if (g.batch <= 0 || g.in_channels <= 0 || g.out_channels <= 0 || g.InputSize() <= 0 || g.OutputSize() <= 0)
    return false;
  for (size_t d = 0; d < spatial; ++d)
    if (g.pad_begin[d] < 0 || g.pad_end[d] < 0) return false;
  return true;
}

// A pass of fewer multiply-adds than this per thread runs on one thread: below it, waking the others
// for each primitive and reorder costs more than they save (LeNet at batch 1 on 2 threads).
constexpr int64_t kMinMacsPerThread = int64_t{1} << 17;

// The cached Call for the request on `threads` threads, or null when oneDNN cannot run it.
Call* Usable(const Request& r, int threads) {
  if (!Describable(r.g)) return nullptr;
  const ConvGeometry& g = r.g;
  const int64_t macs = g.batch * g.out_channels * (g.in_channels / g.group) * g.KernelSize() *
                       (r.pass == Pass::kTransposeForward ? g.InputSize() : g.OutputSize());
  LimitLibraryThreads(macs < 2 * kMinMacsPerThread ? 1 : threads);
  Call& call = CachedCall(r);
  return call.refused ? nullptr : &call;
}

struct ArgData {
  int arg;
  const void* data;  // null: an optional argument the call does not have
};

// Binds the tensors to the call's memory objects and runs its steps on this thread's stream. The C
// API takes the cached argument arrays as they are (the C++ execute builds a map and a vector).
bool Run(Call& call, std::initializer_list<ArgData> data) {
  for (const ArgData& d : data) {
    if (!d.data) continue;
    for (auto& [id, tensor] : call.tensors)
      if (id == d.arg) tensor.set_data_handle(const_cast<void*>(d.data));
  }
  auto* buffer = static_cast<uint8_t*>(dnnl_util::ScratchpadBuffer(call.owned_bytes + call.scratchpad_bytes));
  for (size_t i = 0; i < call.owned.size(); ++i) call.owned[i].set_data_handle(buffer + call.owned_offsets[i]);
  call.scratchpad.set_data_handle(buffer + call.owned_bytes);
  dnnl::stream& stream = dnnl_util::CpuStream();
  for (const Step& step : call.steps)
    if (dnnl_primitive_execute(step.primitive.get(), stream.get(), static_cast<int>(step.args.size()),
                               step.args.data()) != dnnl_success)
      return false;
  return dnnl_stream_wait(stream.get()) == dnnl_success;
}

}  // namespace

bool ConvForward(const ConvGeometry& g, const float* x, const float* w, const float* b, float* y, int threads,
                 bool relu) {
  Call* call = Usable({Pass::kForward, g, b != nullptr, relu}, threads);
  return call && Run(*call, {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, y}});
}

bool ConvReluMaxPoolForward(const ConvGeometry& g, const PoolGeometry& pool, const float* x, const float* w,
                            const float* b, float* y, int threads) {
  for (int64_t d : pool.dilations)
    if (d != 1) return false;
  Call* call = Usable({Pass::kForwardReluMaxPool, g, b != nullptr, true, &pool}, threads);
  return call && Run(*call, {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, y}});
}

bool ConvBackwardData(const ConvGeometry& g, const float* dy, const float* w, float* dx, int threads) {
  Call* call = Usable({Pass::kBackwardData, g, false}, threads);
  return call && Run(*call, {{DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DIFF_SRC, dx}});
}

bool ConvBackwardWeights(const ConvGeometry& g, const float* dy, const float* x, float* dw, float* db, int threads) {
  Call* call = Usable({Pass::kBackwardWeights, g, db != nullptr}, threads);
  return call &&
         Run(*call,
             {{DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_SRC, x}, {DNNL_ARG_DIFF_WEIGHTS, dw}, {DNNL_ARG_DIFF_BIAS, db}});
}

bool ConvTransposeForward(const ConvGeometry& g, const float* x, const float* w, const float* b, float* y,
                          int threads) {
  Call* call = Usable({Pass::kTransposeForward, g, b != nullptr}, threads);
  return call && Run(*call, {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, y}});
}

bool WinogradAvailable() {
  static const bool available = [] {
    const memory::desc image({1, 16, 8, 8}, memory::data_type::f32, memory::format_tag::any);
    const memory::desc weights({16, 16, 3, 3}, memory::data_type::f32, memory::format_tag::any);
    try {
      const dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_training,
                                                 dnnl::algorithm::convolution_winograd, image, weights,
                                                 memory::desc(), image, {1, 1}, {1, 1}, {1, 1});
      const dnnl::convolution_forward::primitive_desc probe(desc, dnnl_util::CpuEngine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return available;
}

#else

bool ConvForward(const ConvGeometry&, const float*, const float*, const float*, float*, int, bool) { return false; }
bool ConvReluMaxPoolForward(const ConvGeometry&, const PoolGeometry&, const float*, const float*, const float*, float*,
                            int) {
  return false;
}
bool ConvBackwardData(const ConvGeometry&, const float*, const float*, float*, int) { return false; }
bool ConvBackwardWeights(const ConvGeometry&, const float*, const float*, float*, float*, int) { return false; }
bool ConvTransposeForward(const ConvGeometry&, const float*, const float*, const float*, float*, int) { return false; }
bool WinogradAvailable() { return false; }

#endif

}  // namespace edgetrain::conv_dnnl
