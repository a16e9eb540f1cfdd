// Our own IR: no protobuf past the importer. Values are named; a node reads and writes names.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.hpp"

namespace edgetrain {

// The domain of edgetrain's own (fused) operators.
inline constexpr const char* kEdgetrainDomain = "ai.edgetrain";
// ONNX Runtime's contrib operators: those of its training artifacts (run so ORT users need not
// regenerate) and the fused ones of its graph optimizations (FusedConv, FusedGemm).
inline constexpr const char* kMicrosoftDomain = "com.microsoft";

struct Graph;

// One dimension: a fixed size (>= 0), a named symbol ("batch"), or unknown (neither).
struct Dim {
  int64_t value = -1;
  std::string symbol;
  bool known() const { return value >= 0; }
};

struct ValueInfo {
  std::string name;
  DataType dtype = DataType::kUndefined;
  bool has_shape = false;  // false: rank unknown
  std::vector<Dim> shape;
  bool is_sequence = false;  // sequence of tensors of `dtype`
  bool is_optional = false;  // optional(tensor or sequence): at run time the value may be None
};

// "[batch, 1, 28, 28]": "?" for an unknown dim, "[?...]" for an unknown rank.
std::string DimsToString(const ValueInfo& info);
// "float32 [batch, 10]", "sequence of float32 [?...]".
std::string TypeToString(const ValueInfo& info);

struct Attribute {
  enum class Kind { kFloat, kInt, kString, kTensor, kGraph, kFloats, kInts, kStrings, kTensors, kGraphs, kType };
  Kind kind = Kind::kInt;
  float f = 0;
  int64_t i = 0;
  std::string s;
  Tensor t;
  std::shared_ptr<Graph> g;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  std::vector<Tensor> tensors;
  std::vector<std::shared_ptr<Graph>> graphs;
  std::shared_ptr<ValueInfo> type;  // kType: a type (Optional's `type`), its name empty
  std::string ref;  // inside a function body: takes the value of the caller's attribute `ref`

  static Attribute Int(int64_t v);
  static Attribute Float(float v);
  static Attribute String(std::string v);
  static Attribute Ints(std::vector<int64_t> v);
  static Attribute Floats(std::vector<float> v);
  static Attribute TensorValue(Tensor v);
  static Attribute Ref(Kind kind, std::string caller_attribute);
};

// A node's attributes by name; looked up by string_view without building a std::string.
using AttributeMap = std::map<std::string, Attribute, std::less<>>;

struct Node {
  std::string name;
  std::string op_type;
  std::string domain;  // "" is the default ONNX domain
  std::vector<std::string> inputs;   // "" marks an omitted optional input
  std::vector<std::string> outputs;  // "" marks an omitted optional output
  AttributeMap attributes;
  int64_t opset = 0;  // opset of `domain` this node was written for; 0 = the model's

  // "node 'conv1' (Conv)" for error messages; built on first use and again only if the node changed.
  const std::string& Describe() const;

  bool HasAttr(std::string_view key) const { return attributes.count(key) != 0; }
  int64_t GetInt(std::string_view key, int64_t fallback) const;
  float GetFloat(std::string_view key, float fallback) const;
  std::string GetString(std::string_view key, const std::string& fallback) const;
  Int64Vector GetInts(std::string_view key, Int64Vector fallback = {}) const;
  std::vector<float> GetFloats(std::string_view key, std::vector<float> fallback = {}) const;
  const Tensor* GetTensor(std::string_view key) const;  // nullptr when absent
  const Attribute* Find(std::string_view key) const;

  // Describe()'s cache; frozen once a session has compiled the node (its fields no longer change), so that its
  // kernels' messages cost nothing per run. A copied or moved node starts unfrozen.
  struct DescriptionCache {
    std::string text;
    bool frozen = false;
    DescriptionCache() = default;
    DescriptionCache(const DescriptionCache& other) : text(other.text) {}
    DescriptionCache(DescriptionCache&& other) noexcept : text(std::move(other.text)) {}
    DescriptionCache& operator=(const DescriptionCache& other) { return *this = DescriptionCache(other); }
    DescriptionCache& operator=(DescriptionCache&& other) noexcept {
      text = std::move(other.text);
      frozen = false;
      return *this;
    }
    void clear() { *this = DescriptionCache(); }
  };
  mutable DescriptionCache description = {};
  void FreezeDescription() const;  // builds the cache and trusts it from then on
};

struct Graph {
  std::string name;
  std::vector<Node> nodes;
  std::vector<ValueInfo> inputs;   // excludes initializers unless the model lists them as inputs too
  std::vector<ValueInfo> outputs;
  std::map<std::string, ValueInfo> value_info;  // inferred or declared types of intermediate values
  std::map<std::string, Tensor> initializers;
  // Names an initializer may be overridden by a feed (listed both as input and initializer).
  bool IsInitializer(const std::string& value) const { return initializers.count(value) != 0; }
  const ValueInfo* FindValueInfo(const std::string& value) const;
};

struct Model {
  std::string source;  // file path or "<memory>", for error messages
  int64_t ir_version = 0;
  std::string producer;
  std::map<std::string, int64_t> opsets;  // domain -> version ("" and "ai.onnx" both map to "")
  Graph graph;

  int64_t OpsetFor(const std::string& domain) const;  // 0 when the domain is not imported
};

// An operator defined as a body of other operators (an ONNX model-local function).
struct FunctionDef {
  std::string domain, name;
  std::vector<std::string> inputs, outputs;  // formal parameter names
  std::vector<std::string> attributes;       // attribute names the body may reference
  std::vector<Node> nodes;
  int64_t opset = 17;  // default-domain opset of the body
};

// Node indices in an order where every node runs after the producers of its inputs.
// Throws kInvalidModel naming the node when the graph has a cycle or reads an undefined value.
std::vector<size_t> TopologicalOrder(const Graph& graph, const std::vector<std::string>& outer_scope = {});

}  // namespace edgetrain
