#include "ops/gemm.hpp"

#if defined(EDGETRAIN_WITH_DNNL)
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

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

// One matmul primitive with its memory objects and argument array, bound to new data per call.
struct BatchedMatMulCall {
  bool refused = false;
  dnnl::matmul primitive;
  dnnl::memory a, b, c, scratchpad;
  size_t scratchpad_bytes = 0;
  std::vector<dnnl_exec_arg_t> args;
};

dnnl::memory::desc Contiguous(const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (size_t d = dims.size() - 1; d-- > 0;) strides[d] = strides[d + 1] * dims[d + 1];
  return dnnl::memory::desc(dims, dnnl::memory::data_type::f32, strides);
}

BatchedMatMulCall MakeBatchedMatMul(const std::vector<int64_t>& a_dims, const std::vector<int64_t>& b_dims,
                                    const std::vector<int64_t>& c_dims) {
  BatchedMatMulCall call;
  try {
    dnnl::engine& engine = dnnl_util::CpuEngine();
    const dnnl::memory::desc a = Contiguous(a_dims), b = Contiguous(b_dims), c = Contiguous(c_dims);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::matmul::primitive_desc pd({a, b, c}, attr, engine);
    call.primitive = dnnl::matmul(pd);
    call.a = dnnl::memory(a, engine, nullptr);
    call.b = dnnl::memory(b, engine, nullptr);
    call.c = dnnl::memory(c, engine, nullptr);
    call.scratchpad_bytes = pd.scratchpad_desc().get_size();
    call.scratchpad = dnnl::memory(pd.scratchpad_desc(), engine, nullptr);
    call.args = {{DNNL_ARG_SRC, call.a.get()},
                 {DNNL_ARG_WEIGHTS, call.b.get()},
                 {DNNL_ARG_DST, call.c.get()},
                 {DNNL_ARG_SCRATCHPAD, call.scratchpad.get()}};
  } catch (const dnnl::error&) {
    call.refused = true;
  }
  return call;
}

}  // namespace

bool DnnlBatchedMatMul(const std::vector<int64_t>& a_dims, const std::vector<int64_t>& b_dims,
                       const std::vector<int64_t>& c_dims, const float* a, const float* b, float* c, int threads) {
  if (a_dims.size() != c_dims.size() || b_dims.size() != c_dims.size() || c_dims.size() > 12) return false;
  LimitLibraryThreads(threads);
  thread_local dnnl_util::Key key;
  key.Clear();
  key.Add(omp_get_max_threads()).Add(a_dims).Add(b_dims);  // the thread count is fixed when the primitive is made
  BatchedMatMulCall& call = dnnl_util::Cached<BatchedMatMulCall>(
      key, [&] { return MakeBatchedMatMul(a_dims, b_dims, c_dims); });
  if (call.refused) return false;
  call.a.set_data_handle(const_cast<float*>(a));
  call.b.set_data_handle(const_cast<float*>(b));
  call.c.set_data_handle(c);
  call.scratchpad.set_data_handle(dnnl_util::ScratchpadBuffer(call.scratchpad_bytes));
  dnnl::stream& stream = dnnl_util::CpuStream();
  return dnnl_primitive_execute(call.primitive.get(), stream.get(), static_cast<int>(call.args.size()),
                                call.args.data()) == dnnl_success &&
         dnnl_stream_wait(stream.get()) == dnnl_success;
}

#else

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
