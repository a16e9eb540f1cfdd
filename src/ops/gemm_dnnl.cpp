#include "ops/gemm.hpp"

#if defined(EDGETRAIN_WITH_DNNL)
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include "core/function_ref.hpp"
#include "ops/dnnl_util.hpp"
#endif

namespace edgetrain::gemm_detail {

#if defined(EDGETRAIN_WITH_DNNL)

bool DnnlSgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc, int threads) {
  LimitLibraryThreads(threads);
  return dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) ==
         dnnl_success;
}

namespace {

using dims = dnnl::memory::dims;
constexpr auto kF32 = dnnl::memory::data_type::f32;
constexpr int64_t kLinearKey = 0, kBatchedKey = 1;  // the two kinds of matmul share one cache

// The matmul of the operands' descriptions (src, weights, [bias,] dst), with a ReLU post-op when
// `relu`, bound to memory objects; refused when oneDNN cannot make it.
dnnl_util::BoundPrimitive BoundMatMul(const std::vector<dnnl::memory::desc>& descs, bool relu) {
  try {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (relu) dnnl_util::AppendRelu(attr);
    const bool with_bias = descs.size() == 4;
    const dnnl::matmul::primitive_desc pd =
        with_bias ? dnnl::matmul::primitive_desc({descs[0], descs[1], descs[2], descs[3]}, attr, dnnl_util::CpuEngine())
                  : dnnl::matmul::primitive_desc({descs[0], descs[1], descs[2]}, attr, dnnl_util::CpuEngine());
    std::vector<std::pair<int, dnnl::memory::desc>> args = {{DNNL_ARG_SRC, descs[0]},
                                                            {DNNL_ARG_WEIGHTS, pd.weights_desc()}};
    if (with_bias) args.emplace_back(DNNL_ARG_BIAS, descs[2]);
    args.emplace_back(DNNL_ARG_DST, descs.back());
    return dnnl_util::Bind<dnnl::matmul>(pd, args);
  } catch (const dnnl::error&) {
    dnnl_util::BoundPrimitive refused;
    refused.refused = true;
    return refused;
  }
}

// The cached matmul under `key` on this thread, made on first use (see BoundMatMul).
dnnl_util::BoundPrimitive& CachedMatMul(const dnnl_util::Key& key, bool relu,
                                        FunctionRef<std::vector<dnnl::memory::desc>()> describe) {
  return dnnl_util::Cached<dnnl_util::BoundPrimitive>(key, [&] { return BoundMatMul(describe(), relu); });
}

// A linear layer's matmul with its constant weights reordered once into the layout it prefers.
struct PackedLinear {
  std::string key;                // the configuration it was made for
  const float* source = nullptr;  // the weights it packed
  dnnl::memory weights;
  dnnl_util::BoundPrimitive call;
};

// The PackedLinear in `state` for `key` and weights `b` (descs[1]), made when missing; packed
// weights of the same layout carry over to a new configuration (another batch size).
PackedLinear& Packed(std::shared_ptr<void>& state, const dnnl_util::Key& key, const float* b,
                     std::vector<dnnl::memory::desc> descs, bool relu) {
  auto* packed = static_cast<PackedLinear*>(state.get());
  if (packed && packed->key == key.text() && packed->source == b) return *packed;
  auto fresh = std::make_shared<PackedLinear>();
  fresh->key = key.text();
  fresh->source = b;
  const dnnl::memory::desc plain = descs[1];
  descs[1] = dnnl::memory::desc(plain.dims(), kF32, dnnl::memory::format_tag::any);
  fresh->call = BoundMatMul(descs, relu);
  if (!fresh->call.refused) {
    const dnnl::memory::desc chosen = fresh->call.memories[1].get_desc();  // Bind's order: src, weights, ...
    if (packed && packed->source == b && packed->weights && packed->weights.get_desc() == chosen) {
      fresh->weights = packed->weights;  // another batch size, the same packed layout
    } else {
      fresh->weights = dnnl::memory(chosen, dnnl_util::CpuEngine());
      dnnl::memory from(plain, dnnl_util::CpuEngine(), const_cast<float*>(b));
      dnnl::reorder(from, fresh->weights).execute(dnnl_util::CpuStream(), from, fresh->weights);
      dnnl_util::CpuStream().wait();
    }
  }
  state = fresh;
  return *fresh;
}

dnnl::memory::desc Contiguous(const std::vector<int64_t>& shape) {
  dims strides(shape.size(), 1);
  for (size_t d = shape.size() - 1; d-- > 0;) strides[d] = strides[d + 1] * shape[d + 1];
  return dnnl::memory::desc(shape, kF32, strides);
}

}  // namespace

bool DnnlLinear(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, bool trans_b,
                const float* bias, float* y, int threads, bool relu, std::shared_ptr<void>* constant_weights) {
  LimitLibraryThreads(threads);
  thread_local dnnl_util::Key key;
  key.Clear();
  // oneDNN fixes a primitive's thread count when it makes it: the count is part of the key.
  key.Add({kLinearKey, omp_get_max_threads(), m, n, k, lda, ldb, trans_b ? 1 : 0, bias ? 1 : 0, relu ? 1 : 0});
  auto describe = [&] {
    std::vector<dnnl::memory::desc> descs = {dnnl::memory::desc({m, k}, kF32, dims{lda, 1}),
                                             dnnl::memory::desc({k, n}, kF32, trans_b ? dims{1, ldb} : dims{ldb, 1})};
    if (bias) descs.emplace_back(dims{1, n}, kF32, dims{n, 1});
    descs.emplace_back(dims{m, n}, kF32, dims{n, 1});
    return descs;
  };
  if (constant_weights) {
    PackedLinear& packed = Packed(*constant_weights, key, b, describe(), relu);
    return !packed.call.refused && dnnl_util::Execute(packed.call,
                                                      {{DNNL_ARG_SRC, a},
                                                       {DNNL_ARG_WEIGHTS, packed.weights.get_data_handle()},
                                                       {DNNL_ARG_BIAS, bias},
                                                       {DNNL_ARG_DST, y}},
                                                      threads);
  }
  dnnl_util::BoundPrimitive& call = CachedMatMul(key, relu, describe);
  return !call.refused &&
         dnnl_util::Execute(call, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST, y}},
                            threads);
}

bool DnnlBatchedMatMul(const std::vector<int64_t>& a_dims, const std::vector<int64_t>& b_dims,
                       const std::vector<int64_t>& c_dims, const float* a, const float* b, float* c, int threads) {
  if (a_dims.size() != c_dims.size() || b_dims.size() != c_dims.size() || c_dims.size() > 12) return false;
  LimitLibraryThreads(threads);
  thread_local dnnl_util::Key key;
  key.Clear();
  // The thread count is fixed when the primitive is made.
  key.Add({kBatchedKey, omp_get_max_threads()}).Add(a_dims).Add(b_dims);
  dnnl_util::BoundPrimitive& call = CachedMatMul(key, false, [&] {
    return std::vector<dnnl::memory::desc>{Contiguous(a_dims), Contiguous(b_dims), Contiguous(c_dims)};
  });
  return !call.refused &&
         dnnl_util::Execute(call, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}}, threads);
}

#else

bool DnnlLinear(int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, bool, const float*, float*,
                int, bool, std::shared_ptr<void>*) {
  return false;
}

bool DnnlSgemm(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float,
               float*, int64_t, int) {
  return false;
}

bool DnnlBatchedMatMul(const std::vector<int64_t>&, const std::vector<int64_t>&, const std::vector<int64_t>&,
                       const float*, const float*, float*, int) {
  return false;
}

#endif

}  // namespace edgetrain::gemm_detail
