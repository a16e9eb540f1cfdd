#include "ops/gemm.hpp"

#if defined(EDGETRAIN_WITH_DNNL)
#include <oneapi/dnnl/dnnl.h>
#endif

namespace edgetrain::gemm_detail {

bool DnnlSgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc, int threads) {
#if defined(EDGETRAIN_WITH_DNNL)
  LimitLibraryThreads(threads);
  return dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) ==
         dnnl_success;
#else
  (void)trans_a, (void)trans_b, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb;
  (void)beta, (void)c, (void)ldc, (void)threads;
  return false;
#endif
}

}  // namespace edgetrain::gemm_detail
