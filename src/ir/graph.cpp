#include "ir/graph.hpp"
#include "ir/scope.hpp"

#include <algorithm>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace edgetrain {

std::string DimsToString(const ValueInfo& info) {
  if (!info.has_shape) return "[?...]";
  std::string out = "[";
  for (size_t d = 0; d < info.shape.size(); ++d) {
    const Dim& dim = info.shape[d];
    out += (d ? ", " : "") + (dim.known() ? std::to_string(dim.value) : dim.symbol.empty() ? "?" : dim.symbol);
  }
  return out + "]";
}

std::string TypeToString(const ValueInfo& info) {
  return std::string(info.is_optional ? "optional " : "") + (info.is_sequence ? "sequence of " : "") +
         DataTypeName(info.dtype) + " " + DimsToString(info);
}

const std::string& Node::Describe() const {
  if (description.frozen) return description.text;
  auto current = [&] {  // compared piecewise, so that a cache hit builds no string
    std::string_view d = description.text;
    const std::string_view parts[] = {"node '", name, "' (", domain, domain.empty() ? "" : ".", op_type, ")"};
    for (std::string_view part : parts) {
      if (d.substr(0, part.size()) != part) return false;
      d.remove_prefix(part.size());
    }
    return d.empty();
  };
  if (description.text.empty() || !current())
    description.text = "node '" + name + "' (" + (domain.empty() ? "" : domain + ".") + op_type + ")";
  return description.text;
}

void Node::FreezeDescription() const {
  description.frozen = false;
  Describe();
  description.frozen = true;
}

Attribute Attribute::Int(int64_t v) {
  Attribute a;
  a.kind = Kind::kInt;
  a.i = v;
  return a;
}
Attribute Attribute::Float(float v) {
  Attribute a;
  a.kind = Kind::kFloat;
  a.f = v;
  return a;
}
Attribute Attribute::String(std::string v) {
  Attribute a;
  a.kind = Kind::kString;
  a.s = std::move(v);
  return a;
}
Attribute Attribute::Ints(std::vector<int64_t> v) {
  Attribute a;
  a.kind = Kind::kInts;
  a.ints = std::move(v);
  return a;
}
Attribute Attribute::Floats(std::vector<float> v) {
  Attribute a;
  a.kind = Kind::kFloats;
  a.floats = std::move(v);
  return a;
}
Attribute Attribute::TensorValue(Tensor v) {
  Attribute a;
  a.kind = Kind::kTensor;
  a.t = std::move(v);
  return a;
}
Attribute Attribute::Ref(Kind kind, std::string caller_attribute) {
  Attribute a;
  a.kind = kind;
  a.ref = std::move(caller_attribute);
  return a;
}

const Attribute* Node::Find(std::string_view key) const {
  auto it = attributes.find(key);
  return it == attributes.end() ? nullptr : &it->second;
}

int64_t Node::GetInt(std::string_view key, int64_t fallback) const {
  const Attribute* a = Find(key);
  if (!a) return fallback;
  ET_CHECK(a->kind == Attribute::Kind::kInt, ErrorCode::kInvalidModel, Describe(), ": attribute '", key,
           "' must be an int");
  return a->i;
}

float Node::GetFloat(std::string_view key, float fallback) const {
  const Attribute* a = Find(key);
  if (!a) return fallback;
  if (a->kind == Attribute::Kind::kInt) return static_cast<float>(a->i);
  ET_CHECK(a->kind == Attribute::Kind::kFloat, ErrorCode::kInvalidModel, Describe(), ": attribute '", key,
           "' must be a float");
  return a->f;
}

std::string Node::GetString(std::string_view key, const std::string& fallback) const {
  const Attribute* a = Find(key);
  if (!a) return fallback;
  ET_CHECK(a->kind == Attribute::Kind::kString, ErrorCode::kInvalidModel, Describe(), ": attribute '", key,
           "' must be a string");
  return a->s;
}

Int64Vector Node::GetInts(std::string_view key, Int64Vector fallback) const {
  const Attribute* a = Find(key);
  if (!a) return fallback;
  ET_CHECK(a->kind == Attribute::Kind::kInts || a->kind == Attribute::Kind::kInt, ErrorCode::kInvalidModel, Describe(),
           ": attribute '", key, "' must be a list of ints");
  if (a->kind == Attribute::Kind::kInt) return {a->i};
  return Int64Vector(a->ints.begin(), a->ints.end());
}

std::vector<float> Node::GetFloats(std::string_view key, std::vector<float> fallback) const {
  const Attribute* a = Find(key);
  if (!a) return fallback;
  ET_CHECK(a->kind == Attribute::Kind::kFloats, ErrorCode::kInvalidModel, Describe(), ": attribute '", key,
           "' must be a list of floats");
  return a->floats;
}

const Tensor* Node::GetTensor(std::string_view key) const {
  const Attribute* a = Find(key);
  if (!a) return nullptr;
  ET_CHECK(a->kind == Attribute::Kind::kTensor, ErrorCode::kInvalidModel, Describe(), ": attribute '", key,
           "' must be a tensor");
  return &a->t;
}

std::vector<const Graph*> Subgraphs(const Node& node) {
  std::vector<const Graph*> subs;
  for (const auto& [key, a] : node.attributes) {
    for (const auto& g : a.graphs) subs.push_back(g.get());
    if (a.g) subs.push_back(a.g.get());
  }
  return subs;
}

bool HasSubgraph(const Node& node) {
  for (const auto& [key, a] : node.attributes)
    if (a.g || !a.graphs.empty()) return true;
  return false;
}

const ValueInfo* Graph::FindValueInfo(const std::string& value) const {
  for (const auto& v : inputs)
    if (v.name == value) return &v;
  for (const auto& v : outputs)
    if (v.name == value) return &v;
  auto it = value_info.find(value);
  return it == value_info.end() ? nullptr : &it->second;
}

int64_t Model::OpsetFor(const std::string& domain) const {
  auto it = opsets.find(domain == "ai.onnx" ? "" : domain);
  return it == opsets.end() ? 0 : it->second;
}

// Names a subgraph reads from its enclosing scope (recursively).
static void CollectOuterReads(const Graph& g, std::unordered_set<std::string>& reads) {
  std::unordered_set<std::string> local;
  for (const auto& v : g.inputs) local.insert(v.name);
  for (const auto& [name, t] : g.initializers) local.insert(name);
  for (const auto& n : g.nodes)
    for (const auto& o : n.outputs) local.insert(o);
  for (const auto& n : g.nodes) {
    for (const auto& i : n.inputs)
      if (!i.empty() && !local.count(i)) reads.insert(i);
    for (const Graph* sub : Subgraphs(n)) {
      std::unordered_set<std::string> inner;
      CollectOuterReads(*sub, inner);
      for (const auto& r : inner)
        if (!local.count(r)) reads.insert(r);
    }
  }
}

std::vector<std::string> OuterReads(const Graph& graph) {
  std::unordered_set<std::string> reads;
  CollectOuterReads(graph, reads);
  std::vector<std::string> sorted(reads.begin(), reads.end());
  std::sort(sorted.begin(), sorted.end());
  return sorted;
}

std::vector<std::string> NodeReads(const Node& node) {
  std::vector<std::string> reads;
  for (const auto& in : node.inputs)
    if (!in.empty()) reads.push_back(in);
  for (const Graph* sub : Subgraphs(node))
    for (auto& r : OuterReads(*sub)) reads.push_back(std::move(r));
  return reads;
}

namespace {

// The node that makes each value; a value made twice is an error.
std::unordered_map<std::string, size_t> Producers(const Graph& graph) {
  std::unordered_map<std::string, size_t> producer;
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    for (const auto& o : graph.nodes[i].outputs) {
      if (o.empty()) continue;
      auto [it, inserted] = producer.emplace(o, i);
      ET_CHECK(inserted, ErrorCode::kInvalidModel, graph.nodes[i].Describe(), ": output '", o,
               "' is already produced by ", graph.nodes[it->second].Describe());
    }
  return producer;
}

// The values node `n` reads that another node makes; any other read must be `available`.
std::vector<std::string> NodeDependencies(const Node& n, const std::unordered_map<std::string, size_t>& producer,
                                          const std::unordered_set<std::string>& available) {
  const std::vector<std::string> all = NodeReads(n);
  const std::unordered_set<std::string> reads(all.begin(), all.end());
  std::vector<std::string> deps;
  for (const auto& r : reads) {
    if (producer.count(r)) {
      deps.push_back(r);
      continue;
    }
    ET_CHECK(available.count(r), ErrorCode::kInvalidModel, n.Describe(), " reads '", r,
             "', which is not a graph input, an initializer or the output of any node");
  }
  return deps;
}

// Kahn's algorithm over `deps` (per node, the values it waits for), stable in the file's node order.
std::vector<size_t> KahnOrder(const Graph& graph, const std::vector<std::vector<std::string>>& deps) {
  std::vector<size_t> pending(graph.nodes.size());
  std::unordered_map<std::string, std::vector<size_t>> consumers;
  std::set<size_t> ready;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    pending[i] = deps[i].size();
    for (const auto& d : deps[i]) consumers[d].push_back(i);
    if (pending[i] == 0) ready.insert(i);
  }
  std::vector<size_t> order;
  while (!ready.empty()) {
    const size_t i = *ready.begin();
    ready.erase(ready.begin());
    order.push_back(i);
    for (const auto& o : graph.nodes[i].outputs) {
      auto it = consumers.find(o);
      if (it == consumers.end()) continue;
      for (size_t c : it->second)
        if (--pending[c] == 0) ready.insert(c);
    }
  }
  for (size_t i = 0; i < graph.nodes.size() && order.size() != graph.nodes.size(); ++i)
    ET_CHECK(pending[i] == 0, ErrorCode::kInvalidModel, "the graph has a cycle through ", graph.nodes[i].Describe());
  return order;
}

}  // namespace

std::vector<size_t> TopologicalOrder(const Graph& graph, const std::vector<std::string>& outer_scope) {
  const std::unordered_map<std::string, size_t> producer = Producers(graph);
  std::unordered_set<std::string> available(outer_scope.begin(), outer_scope.end());
  for (const auto& v : graph.inputs) available.insert(v.name);
  for (const auto& [name, t] : graph.initializers) available.insert(name);
  std::vector<std::vector<std::string>> deps;
  deps.reserve(graph.nodes.size());
  for (const Node& n : graph.nodes) deps.push_back(NodeDependencies(n, producer, available));
  return KahnOrder(graph, deps);
}

}  // namespace edgetrain
