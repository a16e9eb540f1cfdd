// Gradient-check rows for the shape operator family (shape.cpp and indexing.cpp).
#include <limits>

#include "gradient_check.hpp"

namespace edgetrain::testing {

namespace {

CaseInput Indices(std::vector<int64_t> values, Shape shape) {
  return Const(Tensor::FromVector<int64_t>(values, std::move(shape)));
}
CaseInput Floats(std::vector<float> values) {
  const int64_t n = static_cast<int64_t>(values.size());
  return Const(Tensor::FromVector<float>(values, {n}));
}
CaseInput ScalarInt(int64_t value) { return Const(Tensor::Scalar<int64_t>(value)); }
Attribute Str(const char* s) { return Attribute::String(s); }
Attribute Int(int64_t v) { return Attribute::Int(v); }

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

}  // namespace

std::vector<OpCase> ShapeGradCases() {
  return {
      // Reshape family.
      {"Reshape_infer", "Reshape", {In({2, 3, 4}), Ints({4, -1})}},
      {"Reshape_copy_dim", "Reshape", {In({2, 3, 4}), Ints({0, 12})}},
      {"Flatten_default", "Flatten", {In({2, 3, 4})}},
      {"Flatten_axis0", "Flatten", {In({2, 3, 4})}, {{"axis", Int(0)}}},
      {"Flatten_negative_axis", "Flatten", {In({2, 3, 4})}, {{"axis", Int(-1)}}},
      {"Squeeze_axes", "Squeeze", {In({2, 1, 3, 1}), Ints({1, -1})}},
      {"Squeeze_all", "Squeeze", {In({1, 3, 1})}},
      {"Unsqueeze_axes", "Unsqueeze", {In({2, 3}), Ints({0, -1})}},

      {"Transpose_perm", "Transpose", {In({2, 3, 4})}, {{"perm", Attribute::Ints({2, 0, 1})}}},
      {"Transpose_default", "Transpose", {In({2, 3, 4})}},

      // Concat / Split.
      {"Concat_axis1_three", "Concat", {In({2, 1, 3}), In({2, 4, 3}), In({2, 2, 3})}, {{"axis", Int(1)}}},
      {"Concat_negative_axis", "Concat", {In({2, 3}), In({2, 1})}, {{"axis", Int(-1)}}},
      {"Concat_single", "Concat", {In({2, 3})}, {{"axis", Int(0)}}},
      {"Split_uneven_negative_axis", "Split", {In({2, 5}), Ints({2, 3})}, {{"axis", Int(-1)}}, 2},
      {"Split_equal", "Split", {In({6, 2})}, {{"axis", Int(0)}}, 3},
      {"Split_with_empty_part", "Split", {In({3, 4}), Ints({0, 1, 3})}, {{"axis", Int(1)}}, 3},

      // Slice.
      {"Slice_basic", "Slice", {In({4, 5}), Ints({1, 0}), Ints({3, 4})}},
      {"Slice_axes_negative", "Slice", {In({3, 4, 5}), Ints({-3}), Ints({kMax}), Ints({-1})}},
      {"Slice_steps", "Slice", {In({5, 7}), Ints({0, 1}), Ints({5, 7}), Ints({0, 1}), Ints({2, 3})}},
      {"Slice_reverse", "Slice", {In({3, 4}), Ints({-1}), Ints({-kMax}), Ints({1}), Ints({-1})}},
      {"Slice_negative_step2", "Slice", {In({3, 7}), Ints({5, 2}), Ints({0, 0}), Ints({1, 0}), Ints({-2, -1})}},
      {"Slice_empty", "Slice", {In({3, 4}), Ints({2, 0}), Ints({2, 4}), Ints({0, 1})}, {}, 1},

      // Pad.
      {"Pad_constant", "Pad", {In({2, 3}), Ints({1, 0, 2, 1})}},
      {"Pad_constant_value", "Pad", {In({2, 3}), Ints({0, 1, 1, 2}), In({})}},
      {"Pad_negative", "Pad", {In({4, 5}), Ints({-1, 2, 1, -2})}},
      {"Pad_reflect", "Pad", {In({3, 4}), Ints({2, 1, 1, 3})}, {{"mode", Str("reflect")}}},
      {"Pad_edge", "Pad", {In({2, 3, 2}), Ints({0, 2, 1, 1, 3, 0})}, {{"mode", Str("edge")}}},
      {"Pad_edge_negative", "Pad", {In({3, 4}), Ints({-1, 2, 1, -1})}, {{"mode", Str("edge")}}},
      // Pad-18: pads for the listed axes only; Pad-19: wrap.
      AtOpset(18, {"Pad18_axes_constant", "Pad", {In({2, 3, 4}), Ints({1, -1, 2, 1}), Omitted(), Ints({-1, 1})}}),
      AtOpset(18, {"Pad18_axes_value", "Pad", {In({2, 3}), Ints({2, 1}), In({}), Ints({1})}}),
      AtOpset(18, {"Pad18_axes_reflect", "Pad", {In({2, 4, 3}), Ints({2, 1}), Omitted(), Ints({1})},
                   {{"mode", Str("reflect")}}}),
      AtOpset(19, {"Pad19_wrap", "Pad", {In({3, 4}), Ints({1, 2, 2, 3})}, {{"mode", Str("wrap")}}}),
      AtOpset(19, {"Pad19_wrap_axes", "Pad", {In({2, 3, 4}), Ints({3, 1}), Omitted(), Ints({2})},
                   {{"mode", Str("wrap")}}}),

      // Expand / Tile.
      {"Expand_new_axes", "Expand", {In({3, 1}), Ints({2, 3, 4})}},
      {"Expand_both_broadcast", "Expand", {In({1, 4}), Ints({3, 1})}},
      {"Tile_2d", "Tile", {In({2, 3}), Ints({2, 3})}},
      {"Tile_3d_ones", "Tile", {In({2, 1, 3}), Ints({1, 4, 2})}},

      // Trilu.
      {"Trilu_upper", "Trilu", {In({3, 4})}},
      {"Trilu_lower_k", "Trilu", {In({4, 3}), ScalarInt(-1)}, {{"upper", Int(0)}}},
      {"Trilu_upper_batched_k", "Trilu", {In({2, 3, 4}), ScalarInt(1)}},

      // Gather family.
      {"Gather_duplicates_negative", "Gather", {In({5, 3}), Indices({0, -1, 2, 0, 4}, {5})}},
      {"Gather_axis1_2d_indices", "Gather", {In({2, 4, 3}), Indices({3, 1, 1, -4}, {2, 2})}, {{"axis", Int(1)}}},
      {"Gather_scalar_index_negative_axis", "Gather", {In({3, 4}), ScalarInt(-2)}, {{"axis", Int(-1)}}},
      {"GatherElements_axis1_duplicates", "GatherElements", {In({3, 4}), Indices({0, 0, 3, 1, 1, 2, 2, 2, 0}, {3, 3})},
       {{"axis", Int(1)}}},
      {"GatherElements_negative", "GatherElements", {In({3, 2}), Indices({-1, 0, 2, -2}, {2, 2})}, {{"axis", Int(0)}}},
      {"GatherND_duplicates", "GatherND", {In({3, 4, 2}), Indices({0, 1, 2, -1, 0, 1}, {3, 2})}},
      {"GatherND_rows", "GatherND", {In({3, 4}), Indices({2, 0, 2}, {3, 1})}},

      // Scatter family (reduction 'none', distinct indices).
      {"ScatterElements_axis0", "ScatterElements", {In({3, 3}), Indices({1, 0, 2, 0, 2, 1}, {2, 3}), In({2, 3})}},
      {"ScatterElements_negative", "ScatterElements", {In({2, 4}), Indices({-1, 0, 1, -2}, {2, 2}), In({2, 2})},
       {{"axis", Int(-1)}}},
      AtOpset(10, {"Scatter_opset10", "Scatter", {In({3, 3}), Indices({1, 0, 2, 0, 2, 1}, {2, 3}), In({2, 3})}}),
      {"ScatterND_rows", "ScatterND", {In({4, 3}), Indices({1, 3}, {2, 1}), In({2, 3})}},
      {"ScatterND_elements", "ScatterND", {In({3, 3}), Indices({0, 1, 2, 2, 1, 0}, {3, 2}), In({3})}},

      // CenterCropPad (opset 18): crop and pad around the centre, odd differences too.
      AtOpset(18, {"CenterCropPad_crop_and_pad", "CenterCropPad", {In({5, 2, 3}), Ints({2, 5, 3})}}),
      AtOpset(18, {"CenterCropPad_axes", "CenterCropPad", {In({2, 6, 3}), Ints({6, 3})},
                   {{"axes", Attribute::Ints({-1, 1})}}}),

      // AffineGrid (opset 20): linear in theta.
      AtOpset(20, {"AffineGrid_2d", "AffineGrid", {In({2, 2, 3}), Ints({2, 1, 3, 4})}}),
      AtOpset(20, {"AffineGrid_3d_align_corners", "AffineGrid", {In({1, 3, 4}), Ints({1, 2, 2, 3, 2})},
                   {{"align_corners", Int(1)}}}),

      // Col2Im (opset 18): the adjoint of im2col.
      AtOpset(18, {"Col2Im_2d", "Col2Im", {In({1, 8, 4}), Ints({3, 3}), Ints({2, 2})}}),
      AtOpset(18, {"Col2Im_strides_pads_dilations", "Col2Im", {In({2, 4, 12}), Ints({4, 5}), Ints({2, 2})},
                   {{"strides", Attribute::Ints({2, 1})}, {"pads", Attribute::Ints({1, 0, 1, 1})},
                    {"dilations", Attribute::Ints({1, 2})}}}),
      AtOpset(18, {"Col2Im_1d_channels", "Col2Im", {In({1, 6, 3}), Ints({5}), Ints({3})},
                   {{"strides", Attribute::Ints({2})}, {"pads", Attribute::Ints({1, 1})}}}),

      // Resize (nearest).
      {"Resize_nearest_upsample", "Resize", {In({1, 2, 3, 3}), Omitted(), Floats({1, 1, 2, 2})}, {{"mode", Str("nearest")}}},
      {"Resize_nearest_sizes", "Resize", {In({1, 1, 3, 4}), Omitted(), Omitted(), Indices({1, 1, 5, 7}, {4})},
       {{"mode", Str("nearest")}, {"nearest_mode", Str("round_prefer_ceil")}}},
      {"Resize_nearest_downsample_asymmetric", "Resize", {In({1, 1, 4, 6}), Omitted(), Floats({1, 1, 0.5f, 0.5f})},
       {{"mode", Str("nearest")}, {"coordinate_transformation_mode", Str("asymmetric")}, {"nearest_mode", Str("floor")}}},
      {"Resize_nearest_align_corners", "Resize", {In({2, 5}), Omitted(), Floats({1.5f, 1.7f})},
       {{"mode", Str("nearest")}, {"coordinate_transformation_mode", Str("align_corners")}}},
      {"Resize_nearest_crop", "Resize", {In({1, 4, 4}), Floats({0, -0.2f, 0.1f, 1, 0.8f, 1.3f}), Omitted(), Indices({1, 5, 6}, {3})},
       {{"mode", Str("nearest")}, {"coordinate_transformation_mode", Str("tf_crop_and_resize")}}},
  };
}

}  // namespace edgetrain::testing
