// Gradient-check rows for src/ops/matmul.cpp, src/ops/conv.cpp and src/ops/pool.cpp.
#include <algorithm>
#include <numeric>

#include "gradient_check.hpp"

namespace edgetrain::testing {

namespace {

using Ints64 = std::vector<int64_t>;

Attribute I(int64_t v) { return Attribute::Int(v); }
Attribute Is(Ints64 v) { return Attribute::Ints(std::move(v)); }

// Replaces the values by evenly spaced ones in the same order, so no two are within 1/n of each
// other: max pooling then has no near-ties for finite differences to cross.
void Distinct(size_t, std::vector<double>& values) {
  std::vector<size_t> order(values.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return values[a] < values[b]; });
  const double n = static_cast<double>(values.size());
  for (size_t rank = 0; rank < order.size(); ++rank) values[order[rank]] = -1.0 + 2.0 * static_cast<double>(rank) / n;
}

OpCase MaxPoolRow(std::string name, Shape x, AttributeMap attrs, int outputs = 1) {
  OpCase row{std::move(name), "MaxPool", {In(std::move(x))}, std::move(attrs), outputs};
  row.transform = Distinct;
  return row;
}

}  // namespace

std::vector<OpCase> MatMulConvGradCases() {
  return {
      // MatMul
      {"MatMul_2d", "MatMul", {In({3, 4}), In({4, 5})}},
      {"MatMul_batched", "MatMul", {In({2, 3, 4}), In({2, 4, 5})}},
      {"MatMul_broadcast_batch", "MatMul", {In({2, 1, 3, 4}), In({3, 4, 5})}},
      {"MatMul_batched_x_2d", "MatMul", {In({2, 3, 4}), In({4, 5})}},
      {"MatMul_2d_x_batched", "MatMul", {In({3, 4}), In({2, 4, 5})}},
      {"MatMul_1d_x_2d", "MatMul", {In({4}), In({4, 5})}},
      {"MatMul_2d_x_1d", "MatMul", {In({3, 4}), In({4})}},
      {"MatMul_1d_x_1d", "MatMul", {In({4}), In({4})}},
      {"MatMul_1d_x_batched", "MatMul", {In({4}), In({2, 4, 5})}},
      {"MatMul_batched_x_1d", "MatMul", {In({2, 3, 4}), In({4})}},
      // Gemm
      {"Gemm_plain", "Gemm", {In({3, 4}), In({4, 5})}},
      {"Gemm_transA", "Gemm", {In({4, 3}), In({4, 5}), In({3, 5})}, {{"transA", I(1)}}},
      {"Gemm_transB", "Gemm", {In({3, 4}), In({5, 4}), In({3, 5})}, {{"transB", I(1)}}},
      {"Gemm_transA_transB", "Gemm", {In({4, 3}), In({5, 4}), In({5})}, {{"transA", I(1)}, {"transB", I(1)}}},
      {"Gemm_alpha_beta_C_matrix", "Gemm", {In({3, 4}), In({4, 5}), In({3, 5})},
       {{"alpha", Attribute::Float(0.5f)}, {"beta", Attribute::Float(2.0f)}}},
      {"Gemm_C_row", "Gemm", {In({3, 4}), In({4, 5}), In({5})}, {{"beta", Attribute::Float(-1.5f)}}},
      {"Gemm_C_one", "Gemm", {In({3, 4}), In({4, 5}), In({1})}, {{"alpha", Attribute::Float(2.0f)}}},
      {"Gemm_C_column", "Gemm", {In({3, 4}), In({4, 5}), In({3, 1})}, {{"transA", I(0)}}},
      // Einsum
      {"Einsum_matmul", "Einsum", {In({3, 4}), In({4, 5})}, {{"equation", Attribute::String("ij,jk->ik")}}},
      {"Einsum_batched", "Einsum", {In({2, 3, 4}), In({2, 4, 5})}, {{"equation", Attribute::String("bij,bjk->bik")}}},
      {"Einsum_implicit", "Einsum", {In({3, 4}), In({4, 5})}, {{"equation", Attribute::String("ij, jk")}}},
      {"Einsum_transpose", "Einsum", {In({3, 4})}, {{"equation", Attribute::String("ij->ji")}}},
      {"Einsum_row_sum", "Einsum", {In({3, 4})}, {{"equation", Attribute::String("ij->i")}}},
      {"Einsum_total", "Einsum", {In({2, 3, 4})}, {{"equation", Attribute::String("ijk->")}}},
      {"Einsum_dot", "Einsum", {In({5}), In({5})}, {{"equation", Attribute::String("i,i->")}}},
      {"Einsum_outer", "Einsum", {In({3}), In({4})}, {{"equation", Attribute::String("i,j->ij")}}},
      {"Einsum_summed_label", "Einsum", {In({3, 4}), In({4, 5})}, {{"equation", Attribute::String("ij,jk->k")}}},
      {"Einsum_ellipsis", "Einsum", {In({2, 3, 4}), In({2, 4, 5})}, {{"equation", Attribute::String("...ij,...jk->...ik")}}},
      {"Einsum_ellipsis_broadcast", "Einsum", {In({2, 3, 4}), In({4, 5})},
       {{"equation", Attribute::String("...ij,...jk->...ik")}}},
      {"Einsum_three_operands", "Einsum", {In({2, 3}), In({3, 4}), In({4, 2})},
       {{"equation", Attribute::String("ij,jk,kl->il")}}},
      // Conv
      {"Conv_1d_bias", "Conv", {In({2, 3, 7}), In({4, 3, 3}), In({4})}},
      {"Conv_2d", "Conv", {In({2, 3, 5, 5}), In({4, 3, 3, 3})}},
      {"Conv_2d_bias_pads_strides", "Conv", {In({2, 3, 5, 5}), In({4, 3, 3, 3}), In({4})},
       {{"pads", Is({1, 1, 1, 1})}, {"strides", Is({2, 2})}}},
      {"Conv_2d_asymmetric_pads", "Conv", {In({2, 2, 5, 4}), In({3, 2, 3, 2})}, {{"pads", Is({0, 1, 2, 0})}}},
      {"Conv_2d_stride_leftover", "Conv", {In({2, 2, 6, 7}), In({3, 2, 3, 3}), In({3})}, {{"strides", Is({2, 3})}}},
      {"Conv_2d_dilations", "Conv", {In({2, 2, 7, 7}), In({3, 2, 3, 3})},
       {{"dilations", Is({2, 2})}, {"pads", Is({1, 2, 1, 0})}}},
      {"Conv_2d_groups", "Conv", {In({2, 4, 5, 5}), In({6, 2, 3, 3}), In({6})}, {{"group", I(2)}}},
      {"Conv_2d_depthwise", "Conv", {In({2, 3, 5, 5}), In({3, 1, 3, 3})}, {{"group", I(3)}, {"pads", Is({1, 1, 1, 1})}}},
      {"Conv_2d_depthwise_many", "Conv", {In({2, 16, 4, 4}), In({16, 1, 3, 3}), In({16})},
       {{"group", I(16)}, {"pads", Is({1, 1, 1, 1})}}},
      {"Conv_2d_pointwise", "Conv", {In({2, 3, 4, 4}), In({5, 3, 1, 1}), In({5})}},
      {"Conv_2d_large_batch", "Conv", {In({9, 2, 5, 5}), In({3, 2, 3, 3}), In({3})}, {{"pads", Is({1, 1, 1, 1})}}},
      {"Conv_2d_batch_one", "Conv", {In({1, 2, 6, 6}), In({3, 2, 3, 3})}, {{"strides", Is({2, 2})}}},
      {"Conv_2d_same_upper", "Conv", {In({2, 2, 5, 5}), In({3, 2, 3, 3})},
       {{"auto_pad", Attribute::String("SAME_UPPER")}, {"strides", Is({2, 2})}}},
      {"Conv_2d_same_lower", "Conv", {In({2, 2, 6, 6}), In({3, 2, 2, 2})},
       {{"auto_pad", Attribute::String("SAME_LOWER")}}},
      {"Conv_2d_valid", "Conv", {In({2, 2, 5, 5}), In({3, 2, 3, 3})},
       {{"auto_pad", Attribute::String("VALID")}, {"strides", Is({2, 2})}}},
      // One input channel, stride 1: the direct single-channel path (kernel widths 3, 5 and 7).
      {"Conv_2d_single_channel_3", "Conv", {In({2, 1, 6, 7}), In({3, 1, 3, 3}), In({3})}, {{"pads", Is({1, 1, 1, 1})}}},
      {"Conv_2d_single_channel_5", "Conv", {In({3, 1, 7, 20}), In({5, 1, 2, 5}), In({5})}, {{"pads", Is({0, 2, 1, 0})}}},
      {"Conv_2d_single_channel_7", "Conv", {In({1, 1, 5, 9}), In({2, 1, 3, 7})}, {{"pads", Is({2, 3, 0, 3})}}},
      // The kernel covers the whole input: one output position, run as a fully connected layer.
      {"Conv_1d_fully_connected", "Conv", {In({3, 4, 5}), In({6, 4, 5}), In({6})}},
      {"Conv_2d_fully_connected", "Conv", {In({2, 3, 3, 4}), In({5, 3, 3, 4})}, {{"strides", Is({2, 2})}}},
      {"Conv_3d", "Conv", {In({1, 2, 4, 4, 4}), In({3, 2, 2, 2, 2}), In({3})},
       {{"pads", Is({1, 0, 1, 0, 1, 1})}, {"strides", Is({2, 1, 2})}}},
      // ConvTranspose
      {"ConvTranspose_2d_bias", "ConvTranspose", {In({2, 3, 4, 4}), In({3, 2, 3, 3}), In({2})}},
      {"ConvTranspose_2d_strides_pads", "ConvTranspose", {In({2, 3, 3, 4}), In({3, 2, 3, 3})},
       {{"strides", Is({2, 2})}, {"pads", Is({1, 1, 1, 0})}}},
      {"ConvTranspose_2d_output_padding", "ConvTranspose", {In({1, 2, 3, 3}), In({2, 3, 3, 3}), In({3})},
       {{"strides", Is({2, 2})}, {"output_padding", Is({1, 1})}}},
      {"ConvTranspose_2d_groups", "ConvTranspose", {In({2, 4, 3, 3}), In({4, 1, 3, 3})}, {{"group", I(2)}}},
      {"ConvTranspose_2d_output_shape", "ConvTranspose", {In({1, 2, 4, 4}), In({2, 2, 3, 3})},
       {{"strides", Is({2, 2})}, {"output_shape", Is({8, 8})}}},
      {"ConvTranspose_1d_dilations", "ConvTranspose", {In({2, 2, 5}), In({2, 3, 3}), In({3})},
       {{"dilations", Is({2})}, {"pads", Is({1, 2})}}},
      // MaxPool
      MaxPoolRow("MaxPool_2d", {2, 2, 4, 4}, {{"kernel_shape", Is({2, 2})}, {"strides", Is({2, 2})}}),
      MaxPoolRow("MaxPool_2d_overlap_pads", {2, 2, 5, 5}, {{"kernel_shape", Is({3, 3})}, {"pads", Is({1, 1, 1, 1})}}),
      MaxPoolRow("MaxPool_2d_ceil_mode", {1, 2, 5, 5},
                 {{"kernel_shape", Is({2, 2})}, {"strides", Is({2, 2})}, {"ceil_mode", I(1)}}),
      MaxPoolRow("MaxPool_2d_strides_pads_ceil", {1, 2, 6, 7},
                 {{"kernel_shape", Is({3, 2})}, {"strides", Is({2, 2})}, {"pads", Is({1, 0, 1, 1})}, {"ceil_mode", I(1)}}),
      MaxPoolRow("MaxPool_2d_same_upper", {1, 2, 5, 5},
                 {{"kernel_shape", Is({2, 2})}, {"strides", Is({2, 2})}, {"auto_pad", Attribute::String("SAME_UPPER")}}),
      MaxPoolRow("MaxPool_1d_dilations", {2, 3, 9}, {{"kernel_shape", Is({3})}, {"dilations", Is({2})}}),
      MaxPoolRow("MaxPool_3d", {1, 2, 4, 4, 4}, {{"kernel_shape", Is({2, 2, 2})}, {"strides", Is({2, 1, 2})}}),
      MaxPoolRow("MaxPool_2d_with_indices", {2, 2, 4, 4}, {{"kernel_shape", Is({2, 2})}, {"strides", Is({1, 2})}}, 2),
      // AveragePool
      {"AveragePool_2d", "AveragePool", {In({2, 2, 4, 4})}, {{"kernel_shape", Is({2, 2})}, {"strides", Is({2, 2})}}},
      {"AveragePool_2d_pads_exclude", "AveragePool", {In({2, 2, 5, 5})},
       {{"kernel_shape", Is({3, 3})}, {"pads", Is({1, 1, 1, 1})}, {"count_include_pad", I(0)}}},
      {"AveragePool_2d_pads_include", "AveragePool", {In({2, 2, 5, 5})},
       {{"kernel_shape", Is({3, 3})}, {"pads", Is({1, 0, 1, 2})}, {"strides", Is({2, 1})}, {"count_include_pad", I(1)}}},
      {"AveragePool_2d_ceil_exclude", "AveragePool", {In({1, 2, 5, 6})},
       {{"kernel_shape", Is({2, 3})}, {"strides", Is({2, 2})}, {"pads", Is({1, 0, 0, 0})}, {"ceil_mode", I(1)}}},
      {"AveragePool_2d_ceil_include", "AveragePool", {In({1, 2, 5, 6})},
       {{"kernel_shape", Is({2, 3})}, {"strides", Is({2, 2})}, {"pads", Is({1, 1, 0, 1})}, {"ceil_mode", I(1)},
        {"count_include_pad", I(1)}}},
      {"AveragePool_2d_same_lower", "AveragePool", {In({1, 2, 5, 5})},
       {{"kernel_shape", Is({3, 3})}, {"strides", Is({2, 2})}, {"auto_pad", Attribute::String("SAME_LOWER")}}},
      {"AveragePool_1d_strides", "AveragePool", {In({2, 3, 8})}, {{"kernel_shape", Is({3})}, {"strides", Is({2})}}},
      {"AveragePool_3d", "AveragePool", {In({1, 2, 4, 4, 3})},
       {{"kernel_shape", Is({2, 2, 2})}, {"pads", Is({0, 1, 0, 1, 0, 1})}, {"count_include_pad", I(1)}}},
      // Global pools
      {"GlobalAveragePool_2d", "GlobalAveragePool", {In({2, 3, 4, 5})}},
      {"GlobalAveragePool_1d", "GlobalAveragePool", {In({2, 3, 6})}},
      {"GlobalMaxPool_2d", "GlobalMaxPool", {In({2, 3, 4, 4})}, {}, 1, "", 1e-5, Distinct},
      {"GlobalMaxPool_3d", "GlobalMaxPool", {In({1, 2, 2, 3, 2})}, {}, 1, "", 1e-5, Distinct},
  };
}

}  // namespace edgetrain::testing
