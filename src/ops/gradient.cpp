// The helpers every gradient rule shares (ops/gradient.hpp); the walk that drives the rules is offline
// (src/autodiff), the rules and this contract live with the operators.
#include "ops/gradient.hpp"

namespace edgetrain {

const std::string& GradientContext::X(size_t i) const {
  static const std::string kNone;
  return i < node().inputs.size() ? node().inputs[i] : kNone;
}

const std::string& GradientContext::Y(size_t i) const {
  static const std::string kNone;
  return i < node().outputs.size() ? node().outputs[i] : kNone;
}

DataType GradientContext::TypeOf(const std::string& value) const {
  const ValueInfo* info = Info(value);
  return info && info->dtype != DataType::kUndefined ? info->dtype : DataType::kFloat32;
}

std::string GradientContext::ScalarLike(double value, const std::string& like) {
  DataType type = TypeOf(like);
  if (type == DataType::kFloat64) return Constant(Tensor::Scalar<double>(value));
  return Constant(Tensor::Scalar<float>(static_cast<float>(value)));
}

std::string GradientContext::Ints(const std::vector<int64_t>& values) {
  return Constant(Tensor::FromVector<int64_t>(values, {static_cast<int64_t>(values.size())}));
}

std::string GradientContext::ShapeOf(const std::string& value) {
  const ValueInfo* info = Info(value);
  if (!info || !info->has_shape) return Op("Shape", {value});
  std::vector<int64_t> dims;
  for (const Dim& d : info->shape) {
    if (!d.known()) return Op("Shape", {value});
    dims.push_back(d.value);
  }
  return Ints(dims);
}

}  // namespace edgetrain
