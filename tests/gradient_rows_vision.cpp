// Gradient-check rows (the float64 central-difference harness of gradient_check.hpp) for issue 19's
// differentiable operators: GridSample w.r.t. X and grid in every mode, padding and align_corners,
// RoiAlign w.r.t. X (avg and max, both coordinate transformations) and Det (batched, singular too).
#include "gradient_check.hpp"

namespace edgetrain::testing {
namespace {

Attribute S(std::string v) { return Attribute::String(std::move(v)); }
Attribute I(int64_t v) { return Attribute::Int(v); }

}  // namespace

std::vector<OpCase> VisionLinalgGradCases() {
  std::vector<OpCase> rows;
  for (const char* mode : {"bilinear", "nearest", "bicubic"})
    for (const char* padding : {"zeros", "border", "reflection"})
      for (int64_t align : {0, 1}) {
        // The grid reaches past [-1, 1] so that every padding rule is crossed.
        rows.push_back(OpCase{std::string("GridSample_") + mode + "_" + padding + (align ? "_aligned" : ""),
                                "GridSample",
                                {In({2, 2, 4, 5}), In({2, 3, 2, 2}, -1.25, 1.25)},
                                {{"mode", S(mode)}, {"padding_mode", S(padding)}, {"align_corners", I(align)}}});
      }
  const Tensor rois = Tensor::FromVector<double>({0.3, 0.4, 3.1, 2.9, 1.2, 0.1, 4.6, 3.3, -0.5, 1.0, 2.0, 5.5}, {3, 4});
  const Tensor batch = Tensor::FromVector<int64_t>({0, 1, 1}, {3});
  for (const char* mode : {"avg", "max"})
    for (const char* transform : {"half_pixel", "output_half_pixel"})
      for (int64_t ratio : {0, 2})
        rows.push_back(OpCase{std::string("RoiAlign_") + mode + "_" + transform + "_ratio" + std::to_string(ratio),
                                "RoiAlign",
                                {In({2, 2, 5, 6}), Const(rois), Const(batch)},
                                {{"mode", S(mode)},
                                 {"coordinate_transformation_mode", S(transform)},
                                 {"output_height", I(2)},
                                 {"output_width", I(3)},
                                 {"sampling_ratio", I(ratio)},
                                 {"spatial_scale", Attribute::Float(0.8f)}}});
  rows.push_back(OpCase{"Det_3x3", "Det", {In({3, 3})}});
  rows.push_back(OpCase{"Det_batched_4x4", "Det", {In({2, 3, 4, 4})}});
  rows.push_back(OpCase{"Det_1x1", "Det", {In({2, 1, 1})}});
  // A singular matrix (two equal rows): the gradient is its cofactor matrix, which is not zero.
  OpCase singular{"Det_singular_3x3", "Det", {In({3, 3})}};
  singular.transform = [](size_t, std::vector<double>& v) { std::copy(v.begin(), v.begin() + 3, v.begin() + 3); };
  rows.push_back(singular);
  return rows;
}

}  // namespace edgetrain::testing
