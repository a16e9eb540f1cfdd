#include "ops/attributes.hpp"

#include <sstream>

#include "ops/registry.hpp"

namespace edgetrain {
namespace {

const char* KindName(Attribute::Kind kind) {
  switch (kind) {
    case Attribute::Kind::kFloat: return "a float";
    case Attribute::Kind::kInt: return "an int";
    case Attribute::Kind::kString: return "a string";
    case Attribute::Kind::kTensor: return "a tensor";
    case Attribute::Kind::kGraph: return "a graph";
    case Attribute::Kind::kFloats: return "a list of floats";
    case Attribute::Kind::kInts: return "a list of ints";
    case Attribute::Kind::kStrings: return "a list of strings";
    case Attribute::Kind::kTensors: return "a list of tensors";
    case Attribute::Kind::kGraphs: return "a list of graphs";
    case Attribute::Kind::kType: return "a type";
  }
  return "an attribute";
}

template <typename T>
std::string ListString(const std::vector<T>& values) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << values[i];
  out << ']';
  return out.str();
}

}  // namespace

std::string AttributeValueString(const Attribute& a) {
  switch (a.kind) {
    case Attribute::Kind::kFloat: {
      std::ostringstream out;
      out << a.f;
      return out.str();
    }
    case Attribute::Kind::kInt: return std::to_string(a.i);
    case Attribute::Kind::kString: return "'" + a.s + "'";
    case Attribute::Kind::kFloats: return ListString(a.floats);
    case Attribute::Kind::kInts: return ListString(a.ints);
    case Attribute::Kind::kStrings: return ListString(a.strings);
    default: return std::string("<") + KindName(a.kind) + ">";
  }
}

const Attribute* AttributeReader::Typed(std::string_view name, std::initializer_list<Attribute::Kind> kinds,
                                        std::string_view expected) const {
  const Attribute* a = node_.Find(name);
  if (!a) return nullptr;
  for (Attribute::Kind kind : kinds)
    if (a->kind == kind) return a;
  ::edgetrain::Fail(ErrorCode::kInvalidModel, node_.Describe(), ": attribute '", name, "' must be ", expected, ", got ",
                    KindName(a->kind), " ", AttributeValueString(*a));
}

void AttributeReader::Fail(std::string_view name, std::string_view rule) const {
  const Attribute* a = node_.Find(name);
  ::edgetrain::Fail(ErrorCode::kInvalidModel, node_.Describe(), ": attribute '", name, "' = ",
                    a ? AttributeValueString(*a) : std::string("<absent>"), ": ", rule);
}

void AttributeReader::Check(bool ok, std::string_view name, std::string_view rule) const {
  if (!ok) Fail(name, rule);
}

int64_t AttributeReader::Int(std::string_view name, int64_t fallback) const {
  const Attribute* a = Typed(name, {Attribute::Kind::kInt}, "an int");
  return a ? a->i : fallback;
}

int64_t AttributeReader::RequiredInt(std::string_view name) const {
  const Attribute* a = Typed(name, {Attribute::Kind::kInt}, "an int");
  ET_CHECK(a, ErrorCode::kInvalidModel, node_.Describe(), ": required attribute '", name, "' is missing");
  return a->i;
}

bool AttributeReader::Flag(std::string_view name, bool fallback) const {
  const int64_t value = Int(name, fallback ? 1 : 0);
  Check(value == 0 || value == 1, name, "must be 0 or 1");
  return value != 0;
}

float AttributeReader::Float(std::string_view name, float fallback) const {
  const Attribute* a = Typed(name, {Attribute::Kind::kFloat, Attribute::Kind::kInt}, "a float");
  if (!a) return fallback;
  return a->kind == Attribute::Kind::kInt ? static_cast<float>(a->i) : a->f;
}

std::string AttributeReader::String(std::string_view name, const std::string& fallback,
                                    std::initializer_list<std::string_view> allowed) const {
  const Attribute* a = Typed(name, {Attribute::Kind::kString}, "a string");
  if (!a) return fallback;
  if (allowed.size() == 0) return a->s;
  std::string rule = "must be one of";
  for (std::string_view option : allowed) {
    if (a->s == option) return a->s;
    rule += std::string(" '") + std::string(option) + "'";
  }
  Fail(name, rule);
}

Int64Vector AttributeReader::Ints(std::string_view name, Int64Vector fallback) const {
  const Attribute* a = Typed(name, {Attribute::Kind::kInts, Attribute::Kind::kInt}, "a list of ints");
  if (!a) return fallback;
  if (a->kind == Attribute::Kind::kInt) return {a->i};
  return Int64Vector(a->ints.begin(), a->ints.end());
}

const std::vector<Dim>* KnownShape(const ValueInfo* info) {
  return info && info->has_shape && !info->is_sequence ? &info->shape : nullptr;
}

Dim BroadcastDim(const Dim& a, const Dim& b) {
  if (a.known() && a.value == 1) return b;
  if (b.known() && b.value == 1) return a;
  if (a.known() && b.known()) return a.value == b.value ? a : Dim{};
  if (a.known()) return a;  // b is unknown or symbolic and must then be a's size (or 1)
  if (b.known()) return b;
  return !a.symbol.empty() && a.symbol == b.symbol ? a : Dim{};
}

ValueInfo TensorInfo(DataType dtype, std::vector<Dim> shape) {
  ValueInfo info;
  info.dtype = dtype;
  info.has_shape = true;
  info.shape = std::move(shape);
  return info;
}

void InferTypesByRules(Model& model) {
  Graph& graph = model.graph;
  std::map<std::string, ValueInfo> from_initializers;
  for (const auto& [name, tensor] : graph.initializers) {
    std::vector<Dim> dims;
    for (int64_t d : tensor.shape()) dims.push_back(FixedDim(d));
    from_initializers.emplace(name, TensorInfo(tensor.dtype(), std::move(dims)));
  }
  auto info_of = [&](const std::string& name) -> const ValueInfo* {
    if (name.empty()) return nullptr;
    if (const ValueInfo* info = graph.FindValueInfo(name)) return info;
    auto it = from_initializers.find(name);
    return it == from_initializers.end() ? nullptr : &it->second;
  };
  const OpRegistry& registry = OpRegistry::Global();
  for (const Node& node : graph.nodes) {
    const int64_t opset = node.opset ? node.opset : model.OpsetFor(node.domain);
    const OpKernelEntry* entry = registry.Find(node.domain, node.op_type, opset);
    if (!entry || !entry->shape_rule) continue;
    bool unknown = false;
    for (const auto& out : node.outputs) {
      const ValueInfo* info = out.empty() ? nullptr : graph.FindValueInfo(out);
      unknown = unknown || (!out.empty() && (!info || !info->has_shape || info->dtype == DataType::kUndefined));
    }
    if (!unknown) continue;
    std::vector<const ValueInfo*> inputs;
    for (const auto& in : node.inputs) inputs.push_back(info_of(in));
    std::vector<ValueInfo> outputs;
    try {
      outputs = entry->shape_rule(node, opset, inputs);
    } catch (const Error&) {
      continue;  // the session reports a bad attribute when it compiles, a bad shape when the kernel runs
    }
    for (size_t i = 0; i < outputs.size() && i < node.outputs.size(); ++i) {
      const std::string& name = node.outputs[i];
      const ValueInfo* known = name.empty() ? nullptr : graph.FindValueInfo(name);
      if (name.empty() || outputs[i].dtype == DataType::kUndefined || (known && known->has_shape)) continue;
      outputs[i].name = name;
      bool declared_output = false;
      for (ValueInfo& o : graph.outputs)
        if (o.name == name) o = outputs[i], declared_output = true;
      if (!declared_output) graph.value_info[name] = outputs[i];
    }
  }
}

}  // namespace edgetrain
