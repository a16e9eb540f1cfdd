// The one explicit list of every operator family. A new family adds its Register function here.
#include "ops/registry.hpp"
#include "ops/build_types.hpp"
#include "ops/string_ops.hpp"

#include <algorithm>
#include <iterator>
#include <cstring>
#include <set>

namespace edgetrain {

// ort_contrib.cpp: ORT's contrib ops of optimized training graphs (Gelu family, ConcatTraining, Skip/Simplified LN,
// BiasDropout).

OpKernelEntry& OpRegistry::Register(OpKernelEntry entry) { return entries_.emplace_back(std::move(entry)); }

void OpRegistry::SetGradientRule(const std::string& domain, const std::string& op_type, GradientFn rule) {
  bool found = false;
  for (auto& e : entries_)
    if (e.domain == domain && e.op_type == op_type) {
      e.gradient = rule;
      found = true;
    }
  // A reduced build leaves out operators whose rules the families still attach (a loop over several ops).
  ET_CHECK(found || ops_config::kReduced, ErrorCode::kInternal, "gradient rule for unregistered operator ", op_type);
}

const OpKernelEntry* OpRegistry::Find(const std::string& domain, const std::string& op_type, int64_t opset) const {
  const std::string& d = domain == "ai.onnx" ? std::string() : domain;
  for (const auto& e : entries_)
    if (e.domain == d && e.op_type == op_type && opset >= e.since_version && opset <= e.until_version) return &e;
  return nullptr;
}

bool OpRegistry::Knows(const std::string& domain, const std::string& op_type) const {
  const std::string& d = domain == "ai.onnx" ? std::string() : domain;
  return std::any_of(entries_.begin(), entries_.end(),
                     [&](const OpKernelEntry& e) { return e.domain == d && e.op_type == op_type; });
}

std::vector<std::string> OpRegistry::OpNames() const {
  std::set<std::string> names;
  for (const auto& e : entries_) names.insert(e.domain.empty() ? e.op_type : e.domain + ":" + e.op_type);
  return {names.begin(), names.end()};
}

const OpRegistry& OpRegistry::Global() {
  static const OpRegistry registry = [] {
    OpRegistry r;
    RegisterElementwiseOps(r);
    RegisterActivationOps(r);
    RegisterReductionOps(r);
    RegisterSoftmaxOps(r);
    RegisterLossOps(r);
    RegisterShapeOps(r);
    RegisterIndexingOps(r);
    RegisterMatMulOps(r);
    RegisterConvOps(r);
    RegisterPoolOps(r);
    RegisterNormalizationOps(r);
    RegisterRandomOps(r);
    RegisterSequenceOps(r);
    RegisterControlFlowOps(r);
    RegisterOptimizerOps(r);
    RegisterOrtGradientOps(r);
    RegisterOrtFusedOps(r);
    RegisterRecurrentOps(r);
    RegisterOrtContribOps(r);
    RegisterSpectralOps(r);
    RegisterQuantizeOps(r);
    RegisterOnnxTrainingOps(r);
    RegisterVisionOps(r);
    RegisterLinalgSetOps(r);
    RegisterOptionalOps(r);
    RegisterStringOps(r);  // ops/string_ops.hpp
    if constexpr (ops_config::kReduced) r.KeepConfigured();
    return r;
  }();
  return registry;
}

const char* OpRegistry::ReducedConfig() { return ops_config::kReduced ? ops_config::kConfigPath : nullptr; }

bool ElementTypeInBuild(DataType type) {
#ifdef EDGETRAIN_OPS_REDUCED
  return type == DataType::kFloat32 || std::find(std::begin(kConfiguredTypes), std::end(kConfiguredTypes), type) !=
                                           std::end(kConfiguredTypes);
#else
  (void)type;
  return true;
#endif
}

// Families register some operators together (one kernel for several ops, ORT's ops in two domains); of those, only
// the (domain, op) pairs and opset ranges that the config names stay.
void OpRegistry::KeepConfigured() {
  std::erase_if(entries_, [](const OpKernelEntry& e) {
    return std::none_of(std::begin(ops_config::kConfiguredOps), std::end(ops_config::kConfiguredOps),
                        [&](const ops_config::ConfiguredOp& op) {
                          return op.domain == e.domain && op.op_type == e.op_type && op.opset >= e.since_version &&
                                 op.opset <= e.until_version;
                        });
  });
}

void KernelContext::SetOutputValue(size_t i, const RuntimeValue& value) {
  if (value.is_none()) {
    SetOutputNone(i);
    return;
  }
  if (value.is_sequence) {
    SetOutputSequence(i, value.sequence);
    return;
  }
  Tensor& out = Output(i, value.tensor.shape(), value.tensor.dtype());
  CopyTensorData(value.tensor, out);
}

std::optional<Int64Vector> KernelContext::IntsFromInputOrAttr(size_t index, std::string_view attr) const {
  if (HasInput(index)) {
    const Tensor& t = Input(index);
    Int64Vector values(static_cast<size_t>(t.numel()));
    for (int64_t i = 0; i < t.numel(); ++i) values[static_cast<size_t>(i)] = t.Int64At(i);
    return values;
  }
  if (node_->HasAttr(attr)) return node_->GetInts(attr);
  return std::nullopt;
}

}  // namespace edgetrain
