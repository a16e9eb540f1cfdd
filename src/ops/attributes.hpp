// Typed operator attributes and shape rules. An operator declares a struct A with
//   static A Parse(const Node&, int64_t opset)          reads and checks every attribute it uses
//   std::vector<ValueInfo> OutputTypes(inputs) const     optional: its shape rule
// and registers it with WithAttributes<A>(entry). A session parses it once per node when it compiles
// (a bad attribute fails there, naming node, attribute and value); kernels read ctx.Attributes<A>().
#pragma once

#include <concepts>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ops/kernel.hpp"
#include "ops/op_config.hpp"

namespace edgetrain {

// Reads a node's attributes with typed errors: "node 'g' (Gemm): attribute 'transA' = 2: must be 0 or 1".
class AttributeReader {
 public:
  explicit AttributeReader(const Node& node) : node_(node) {}

  int64_t Int(std::string_view name, int64_t fallback) const;
  int64_t RequiredInt(std::string_view name) const;
  bool Flag(std::string_view name, bool fallback) const;  // an int that must be 0 or 1
  float Float(std::string_view name, float fallback) const;  // an int is taken as a float
  std::string String(std::string_view name, const std::string& fallback,
                     std::initializer_list<std::string_view> allowed = {}) const;
  Int64Vector Ints(std::string_view name, Int64Vector fallback = {}) const;
  bool Has(std::string_view name) const { return node_.HasAttr(name); }

  // Throws unless `ok`, naming the attribute, its value and `rule` (what a valid value is).
  void Check(bool ok, std::string_view name, std::string_view rule) const;
  [[noreturn]] void Fail(std::string_view name, std::string_view rule) const;
  const Node& node() const { return node_; }

 private:
  const Attribute* Typed(std::string_view name, std::initializer_list<Attribute::Kind> kinds,
                         std::string_view expected) const;
  const Node& node_;
};

// "2", "1.5", "'SAME'", "[1, 2]": an attribute's value for error messages.
std::string AttributeValueString(const Attribute& attribute);

template <typename A>
concept HasShapeRule = requires(const A& a, const std::vector<const ValueInfo*>& inputs) {
  { a.OutputTypes(inputs) } -> std::same_as<std::vector<ValueInfo>>;
};

// Attaches A's parser to a registered entry (an operator that shares another's attributes, not its shapes).
template <typename A>
OpKernelEntry& WithAttributeParser(OpKernelEntry& entry) {
  entry.parse_attributes = [](const Node& node, int64_t opset) {
    return std::pair<const void*, std::shared_ptr<void>>(&kAttributesKey<A>, std::make_shared<A>(A::Parse(node, opset)));
  };
  return entry;
}

// Attaches A's parser and, if A has one, its shape rule.
template <typename A>
OpKernelEntry& WithAttributes(OpKernelEntry& entry) {
  WithAttributeParser<A>(entry);
  if constexpr (HasShapeRule<A>)
    entry.shape_rule = [](const Node& node, int64_t opset, const std::vector<const ValueInfo*>& inputs) {
      return A::Parse(node, opset).OutputTypes(inputs);
    };
  return entry;
}

// Shape-rule building blocks over symbolic dimensions.
// The input's shape when its rank is known (and it is a tensor), else nullptr.
const std::vector<Dim>* KnownShape(const ValueInfo* info);
// numpy broadcasting of two dimensions: 1 yields to the other, equal (value or symbol) stays, else unknown.
Dim BroadcastDim(const Dim& a, const Dim& b);
ValueInfo TensorInfo(DataType dtype, std::vector<Dim> shape);
inline Dim FixedDim(int64_t value) { return Dim{value, {}}; }

// Fills the types of node outputs that the model leaves unknown (libonnx's inference is best effort and
// knows no opset past 17) from the registered shape rules, walking the graph in order. A rule that fails
// leaves its outputs unknown: the kernel reports the problem when it runs.
void InferTypesByRules(Model& model);

}  // namespace edgetrain
