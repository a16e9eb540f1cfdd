#include "onnx/importer.hpp"

#include <fstream>
#include <unordered_map>
#include <unordered_set>

#include "onnx/ort_format.hpp"
#include "onnx/proto.hpp"
#include "onnx/schema_hooks.hpp"

namespace edgetrain {

namespace {

using onnx_proto::TensorFromProto;

struct ImportContext {
  std::string source;
  std::string base_dir;
  const ImportOptions* options;
  std::map<std::string, int64_t> opsets;
  std::unordered_map<std::string, const onnxpb::FunctionProto*> local_functions;  // "domain:name"
  std::unordered_map<std::string, onnxpb::TypeProto> inferred_types;
  int unique = 0;
};

struct ExpandedNode {
  onnxpb::NodeProto proto;
  int64_t opset = 0;  // 0: the model's
};

std::string NormalDomain(const std::string& d) { return d == "ai.onnx" ? "" : d; }

Graph ConvertGraph(const onnxpb::GraphProto& g, ImportContext& ctx);

void CheckStringBytes(size_t bytes, const std::string& what, const ImportContext& ctx) {
  ET_CHECK(bytes <= ctx.options->max_string_bytes, ErrorCode::kResourceExhausted, ctx.source, ": ", what, " holds ",
           bytes, " bytes of strings, more than the limit of ", ctx.options->max_string_bytes);
}

void CheckNodeCount(size_t nodes, const ImportContext& ctx) {
  ET_CHECK(nodes <= ctx.options->max_nodes, ErrorCode::kResourceExhausted, ctx.source,
           ": a graph has more than ", ctx.options->max_nodes, " nodes after expanding functions");
}

Attribute ConvertAttribute(const onnxpb::AttributeProto& a, const std::string& where, ImportContext& ctx) {
  Attribute out;
  using A = onnxpb::AttributeProto;
  std::string what = where + " attribute '" + a.name() + "'";
  switch (a.type()) {
    case A::FLOAT: out.kind = Attribute::Kind::kFloat; out.f = a.f(); break;
    case A::INT: out.kind = Attribute::Kind::kInt; out.i = a.i(); break;
    case A::STRING:
      CheckStringBytes(a.s().size(), what, ctx);
      out.kind = Attribute::Kind::kString;
      out.s = a.s();
      break;
    case A::TENSOR: out.kind = Attribute::Kind::kTensor; out.t = TensorFromProto(a.t(), ctx.base_dir, what); break;
    case A::GRAPH: out.kind = Attribute::Kind::kGraph; out.g = std::make_shared<Graph>(ConvertGraph(a.g(), ctx)); break;
    case A::FLOATS: out.kind = Attribute::Kind::kFloats; out.floats.assign(a.floats().begin(), a.floats().end()); break;
    case A::INTS: out.kind = Attribute::Kind::kInts; out.ints.assign(a.ints().begin(), a.ints().end()); break;
    case A::STRINGS: {
      size_t bytes = 0;
      for (const auto& s : a.strings()) bytes += s.size();
      CheckStringBytes(bytes, what, ctx);
      out.kind = Attribute::Kind::kStrings;
      out.strings.assign(a.strings().begin(), a.strings().end());
      break;
    }
    case A::TENSORS:
      out.kind = Attribute::Kind::kTensors;
      for (const auto& t : a.tensors()) out.tensors.push_back(TensorFromProto(t, ctx.base_dir, what));
      break;
    case A::GRAPHS:
      out.kind = Attribute::Kind::kGraphs;
      for (const auto& sub : a.graphs()) out.graphs.push_back(std::make_shared<Graph>(ConvertGraph(sub, ctx)));
      break;
    case A::TYPE_PROTO: {
      onnxpb::ValueInfoProto holder;
      *holder.mutable_type() = a.tp();
      out.kind = Attribute::Kind::kType;
      out.type = std::make_shared<ValueInfo>(onnx_proto::ValueInfoFromProto(holder));
      break;
    }
    default: Fail(ErrorCode::kNotImplemented, what, ": attribute type ", static_cast<int>(a.type()), " is not supported");
  }
  return out;
}

// A Constant's value_* forms all become one 'value' tensor attribute.
void NormalizeConstant(Node& node) {
  if (node.HasAttr("value")) return;
  Attribute value;
  value.kind = Attribute::Kind::kTensor;
  if (const Attribute* a = node.Find("value_float")) value.t = Tensor::Scalar<float>(a->f);
  else if (const Attribute* a = node.Find("value_int")) value.t = Tensor::Scalar<int64_t>(a->i);
  else if (const Attribute* a = node.Find("value_floats"))
    value.t = Tensor::FromVector<float>(a->floats, {static_cast<int64_t>(a->floats.size())});
  else if (const Attribute* a = node.Find("value_ints"))
    value.t = Tensor::FromVector<int64_t>(a->ints, {static_cast<int64_t>(a->ints.size())});
  else Fail(ErrorCode::kNotImplemented, node.Describe(), ": only tensor, float and int constants are supported");
  node.attributes.clear();
  node.attributes["value"] = value;
}

const OnnxSchemaHooks* hooks_installed = nullptr;

}  // namespace

void SetOnnxSchemaHooks(const OnnxSchemaHooks* hooks) { hooks_installed = hooks; }
const OnnxSchemaHooks* GetOnnxSchemaHooks() { return hooks_installed; }

namespace {

// The default attribute values of the op's ONNX schema, when a full build installed the schemas.
std::vector<onnxpb::AttributeProto> SchemaDefaults(const onnxpb::NodeProto& node, int64_t opset) {
  std::vector<onnxpb::AttributeProto> defaults;
  if (!hooks_installed) return defaults;
  for (const std::string& bytes : hooks_installed->attribute_defaults(NormalDomain(node.domain()), node.op_type(), opset))
    if (onnxpb::AttributeProto a; onnxpb::Decode(bytes.data(), bytes.size(), a)) defaults.push_back(std::move(a));
  return defaults;
}

// Renames the outer-scope references inside a subgraph of an inlined function body.
void RenameSubgraphReads(onnxpb::GraphProto& g, const std::function<std::string(const std::string&)>& map_name) {
  for (auto& n : *g.mutable_node()) {
    for (int i = 0; i < n.input_size(); ++i) n.set_input(i, map_name(n.input(i)));
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) RenameSubgraphReads(*a.mutable_g(), map_name);
      for (auto& sub : *a.mutable_graphs()) RenameSubgraphReads(sub, map_name);
    }
  }
}

const onnxpb::FunctionProto* FindFunctionBody(const onnxpb::NodeProto& node, int64_t opset, ImportContext& ctx,
                                            onnxpb::FunctionProto& storage) {
  std::string domain = NormalDomain(node.domain());
  bool has_kernel = ctx.options->has_kernel && ctx.options->has_kernel(domain, node.op_type(), opset);
  if (has_kernel) return nullptr;  // a fused kernel beats its function body
  auto local = ctx.local_functions.find(domain + ":" + node.op_type());
  if (local != ctx.local_functions.end()) return local->second;
  if (!ctx.options->has_kernel || !hooks_installed) return nullptr;
  std::vector<std::string> input_types;
  for (const auto& in : node.input()) {
    auto it = ctx.inferred_types.find(in);
    input_types.push_back(it == ctx.inferred_types.end() ? std::string() : onnxpb::Encode(it->second));
  }
  std::string body;
  if (!hooks_installed->function_body(onnxpb::Encode(node), opset, input_types, &body)) return nullptr;
  ET_CHECK(onnxpb::Decode(body.data(), body.size(), storage), ErrorCode::kInternal, ctx.source,
           ": the ONNX function body of ", node.op_type(), " does not decode");
  return &storage;
}

// How the names of one inlined function call map into the calling graph: the function's inputs and
// outputs become the call's, every other body value gets the call's unique prefix.
class BodyNames {
 public:
  BodyNames(const onnxpb::NodeProto& call, const onnxpb::FunctionProto& fn, std::string prefix)
      : prefix_(std::move(prefix)) {
    for (int i = 0; i < fn.input_size(); ++i) rename_[fn.input(i)] = i < call.input_size() ? call.input(i) : "";
    for (int i = 0; i < fn.output_size(); ++i) rename_[fn.output(i)] = i < call.output_size() ? call.output(i) : "";
    for (const auto& b : fn.node()) body_values_.insert(b.output().begin(), b.output().end());
  }
  // A name a body node reads or writes.
  std::string Map(const std::string& name) const {
    if (name.empty()) return name;
    auto it = rename_.find(name);
    return it != rename_.end() ? it->second : prefix_ + name;
  }
  // A name a subgraph of a body node reads from its enclosing scope (the caller's values stay).
  std::string MapOuterRead(const std::string& name) const {
    if (auto it = rename_.find(name); it != rename_.end()) return it->second;
    return body_values_.count(name) ? prefix_ + name : name;
  }

 private:
  std::string prefix_;
  std::unordered_map<std::string, std::string> rename_;
  std::unordered_set<std::string> body_values_;
};

// The attribute values a body's attribute references resolve to: the schema's defaults, then the call's own.
struct CallAttributes {
  std::vector<onnxpb::AttributeProto> defaults;
  std::unordered_map<std::string, const onnxpb::AttributeProto*> by_name;
  CallAttributes(const onnxpb::NodeProto& call, int64_t opset) : defaults(SchemaDefaults(call, opset)) {
    for (const auto& attr : defaults)
      if (attr.type() != onnxpb::AttributeProto::UNDEFINED) by_name[attr.name()] = &attr;
    for (const auto& a : call.attribute()) by_name[a.name()] = &a;
  }
};

// Copies body node `b`'s attributes into `out`: references resolved against the call, subgraphs' reads renamed.
void InlineAttributes(const onnxpb::NodeProto& b, const CallAttributes& call, const BodyNames& names,
                      onnxpb::NodeProto& out) {
  const std::function<std::string(const std::string&)> outer_read = [&](const std::string& n) {
    return names.MapOuterRead(n);
  };
  out.clear_attribute();
  for (const auto& a : b.attribute()) {
    if (a.ref_attr_name().empty()) {
      onnxpb::AttributeProto* copy = out.add_attribute();
      *copy = a;
      if (copy->has_g()) RenameSubgraphReads(*copy->mutable_g(), outer_read);
      for (auto& sub : *copy->mutable_graphs()) RenameSubgraphReads(sub, outer_read);
    } else if (auto it = call.by_name.find(a.ref_attr_name()); it != call.by_name.end()) {
      onnxpb::AttributeProto* copy = out.add_attribute();
      *copy = *it->second;
      copy->set_name(a.name());
    }
  }
}

// The nodes of function `fn` as called by `call`: names renamed, attribute references resolved.
std::vector<ExpandedNode> InlineBody(const onnxpb::NodeProto& call, const onnxpb::FunctionProto& fn, int64_t opset,
                                     ImportContext& ctx) {
  const BodyNames names(call, fn, "_" + call.op_type() + std::to_string(ctx.unique++) + "/");
  const CallAttributes call_attrs(call, opset);
  int64_t body_opset = 0;
  for (const auto& imp : fn.opset_import())
    if (NormalDomain(imp.domain()).empty()) body_opset = imp.version();
  std::vector<ExpandedNode> body;
  for (const auto& b : fn.node()) {
    ExpandedNode e;
    e.proto = b;
    e.opset = NormalDomain(b.domain()).empty() ? body_opset : 0;
    e.proto.set_name(call.name() + "/" + (b.name().empty() ? b.op_type() : b.name()));
    for (int i = 0; i < e.proto.input_size(); ++i) e.proto.set_input(i, names.Map(b.input(i)));
    for (int i = 0; i < e.proto.output_size(); ++i) e.proto.set_output(i, names.Map(b.output(i)));
    InlineAttributes(b, call_attrs, names, e.proto);
    body.push_back(std::move(e));
  }
  return body;
}

// Replaces calls of functions (model-local, or ONNX function ops we have no kernel for) by their
// bodies, recursively. Values inside a body get a unique prefix.
void ExpandNodes(const std::vector<ExpandedNode>& in, std::vector<ExpandedNode>& out, ImportContext& ctx, int depth) {
  ET_CHECK(depth < 32, ErrorCode::kInvalidModel, ctx.source, ": functions nest more than 32 deep (recursive function?)");
  for (const auto& item : in) {
    const onnxpb::NodeProto& node = item.proto;
    const int64_t opset = item.opset ? item.opset : ctx.opsets[NormalDomain(node.domain())];
    onnxpb::FunctionProto built;
    if (const onnxpb::FunctionProto* fn = FindFunctionBody(node, opset, ctx, built)) {
      ExpandNodes(InlineBody(node, *fn, opset, ctx), out, ctx, depth + 1);
      continue;
    }
    CheckNodeCount(out.size() + 1, ctx);
    out.push_back(item);
  }
}

Graph ConvertGraph(const onnxpb::GraphProto& g, ImportContext& ctx) {
  Graph graph;
  graph.name = g.name();
  ET_CHECK(static_cast<size_t>(g.initializer_size()) <= ctx.options->max_initializers, ErrorCode::kResourceExhausted,
           ctx.source, ": graph '", g.name(), "' has ", g.initializer_size(), " initializers, more than the limit of ",
           ctx.options->max_initializers);
  ET_CHECK(static_cast<size_t>(g.node_size()) <= ctx.options->max_nodes, ErrorCode::kResourceExhausted, ctx.source,
           ": graph '", g.name(), "' has ", g.node_size(), " nodes, more than the limit of ", ctx.options->max_nodes);
  for (const auto& init : g.initializer()) {
    ET_CHECK(!init.name().empty(), ErrorCode::kInvalidModel, ctx.source, ": an initializer has no name");
    graph.initializers[init.name()] =
        TensorFromProto(init, ctx.base_dir, "initializer '" + init.name() + "' in " + ctx.source);
  }
  ET_CHECK(g.sparse_initializer_size() == 0, ErrorCode::kNotImplemented, ctx.source,
           ": sparse initializers are not supported");
  for (const auto& v : g.input()) graph.inputs.push_back(onnx_proto::ValueInfoFromProto(v));
  for (const auto& v : g.output()) graph.outputs.push_back(onnx_proto::ValueInfoFromProto(v));
  for (const auto& v : g.value_info()) graph.value_info[v.name()] = onnx_proto::ValueInfoFromProto(v);

  std::vector<ExpandedNode> nodes, expanded;
  for (const auto& n : g.node()) nodes.push_back({n, 0});
  ExpandNodes(nodes, expanded, ctx, 0);
  int index = 0;
  for (const auto& e : expanded) {
    const onnxpb::NodeProto& n = e.proto;
    Node node;
    node.name = n.name().empty() ? n.op_type() + "_" + std::to_string(index) : n.name();
    ++index;
    node.op_type = n.op_type();
    node.domain = NormalDomain(n.domain());
    node.opset = e.opset;
    node.inputs.assign(n.input().begin(), n.input().end());
    node.outputs.assign(n.output().begin(), n.output().end());
    for (const auto& a : n.attribute()) node.attributes[a.name()] = ConvertAttribute(a, node.Describe(), ctx);
    if (node.op_type == "Constant" && node.domain.empty()) NormalizeConstant(node);
    graph.nodes.push_back(std::move(node));
  }
  return graph;
}

void CollectInferredTypes(const onnxpb::GraphProto& g, ImportContext& ctx) {
  for (const auto* list : {&g.input(), &g.output(), &g.value_info()})
    for (const auto& v : *list) ctx.inferred_types[v.name()] = v.type();
}

// Pre-14 training-mode BatchNormalization may list saved mean/variance outputs that nothing reads;
// ONNX's version converter refuses them, so they are dropped first.
void DropUnusedBatchNormOutputs(onnxpb::GraphProto& g) {
  std::unordered_set<std::string> used;
  for (const auto& n : g.node())
    for (const auto& i : n.input()) used.insert(i);
  for (const auto& o : g.output()) used.insert(o.name());
  for (auto& n : *g.mutable_node()) {
    if (n.op_type() != "BatchNormalization" || n.output_size() <= 3) continue;
    bool unused = true;
    for (int k = 3; k < n.output_size(); ++k) unused &= !used.count(n.output(k));
    if (unused)
      n.mutable_output()->resize(3);
  }
}

// ONNX 1.12's shape inference crashes on model-local functions and on a training-mode
// BatchNormalization that lists only its first output; it runs on a copy without those traits.
onnxpb::ModelProto ShapeInferenceSafeCopy(const onnxpb::ModelProto& proto) {
  onnxpb::ModelProto copy = proto;
  copy.clear_functions();
  int unique = 0;
  for (auto& n : *copy.mutable_graph()->mutable_node()) {
    if (n.op_type() != "BatchNormalization" || !NormalDomain(n.domain()).empty()) continue;
    while (n.output_size() < 3) n.add_output("_edgetrain_bn_stat" + std::to_string(unique++));
  }
  return copy;
}

}  // namespace

void onnx_proto::InferValueInfo(onnxpb::ModelProto& proto) {
  if (!hooks_installed) return;  // a device-only build: kernels compute shapes at run time anyway
  const std::string inferred_bytes = hooks_installed->infer_shapes(onnxpb::Encode(ShapeInferenceSafeCopy(proto)));
  onnxpb::ModelProto inferred;
  if (!onnxpb::Decode(inferred_bytes.data(), inferred_bytes.size(), inferred)) return;
  *proto.mutable_graph()->mutable_value_info() = inferred.graph().value_info();
  *proto.mutable_graph()->mutable_output() = inferred.graph().output();  // refined in place
}

namespace {

// ONNX's version converter dereferences a null value for a name the main graph reads but never
// defines (libonnx's graphProtoToGraph): such a model is refused before it gets there.
void CheckDefinedForConversion(const onnxpb::GraphProto& g, const std::string& source) {
  std::unordered_set<std::string> defined{""};
  for (const auto& v : g.input()) defined.insert(v.name());
  for (const auto& t : g.initializer()) defined.insert(t.name());
  for (const auto& n : g.node()) defined.insert(n.output().begin(), n.output().end());
  for (const auto& n : g.node())
    for (const auto& in : n.input())
      ET_CHECK(defined.count(in), ErrorCode::kInvalidModel, source, ": node '", n.name(), "' (", n.op_type(),
               ") reads '", in, "', which no node, graph input or initializer defines");
  for (const auto& out : g.output())
    ET_CHECK(defined.count(out.name()), ErrorCode::kInvalidModel, source, ": graph output '", out.name(),
             "' is not computed by any node, nor a graph input or initializer");
}

void CheckRawDataSizes(const onnxpb::GraphProto& g, const std::string& source);

// ONNX 1.12's shape inference (and its version converter) copies a tensor's raw data by its byte count into a vector
// sized by its element count, a heap overflow when they disagree: every tensor is checked before those run.
template <typename Nodes>
void CheckNodeTensors(const Nodes& nodes, const std::string& source) {
  for (const auto& n : nodes)
    for (const auto& a : n.attribute()) {
      if (a.has_t() || a.tensors_size() > 0) {
        const std::string domain = NormalDomain(n.domain());
        const std::string what = "node '" + n.name() + "' (" + (domain.empty() ? "" : domain + ".") + n.op_type() +
                                 ") attribute '" + a.name() + "' in " + source;
        if (a.has_t()) onnx_proto::CheckRawDataSize(a.t(), what);
        for (const auto& t : a.tensors()) onnx_proto::CheckRawDataSize(t, what);
      }
      if (a.has_g()) CheckRawDataSizes(a.g(), source);
      for (const auto& sub : a.graphs()) CheckRawDataSizes(sub, source);
    }
}

void CheckRawDataSizes(const onnxpb::GraphProto& g, const std::string& source) {
  for (const auto& t : g.initializer()) onnx_proto::CheckRawDataSize(t, "initializer '" + t.name() + "' in " + source);
  CheckNodeTensors(g.node(), source);
}

}  // namespace

Model onnx_proto::ImportModelProto(onnxpb::ModelProto& proto, const std::string& source, const std::string& base_dir,
                                   const ImportOptions& options) {
  ET_CHECK(proto.has_graph(), ErrorCode::kInvalidModel, "'", source,
           "' is not a valid ONNX model: it has no graph (truncated or corrupt file?)");
  ET_CHECK(proto.graph().sparse_initializer_size() == 0, ErrorCode::kNotImplemented, source,
           ": sparse initializers are not supported");
  CheckRawDataSizes(proto.graph(), source);
  for (const auto& f : proto.functions()) CheckNodeTensors(f.node(), source);
  ImportContext ctx{source, base_dir, &options, {}, {}, {}, 0};
  Model model;
  model.source = source;
  model.ir_version = proto.ir_version();
  model.producer = proto.producer_name();
  for (const auto& imp : proto.opset_import()) ctx.opsets[NormalDomain(imp.domain())] = imp.version();
  if (!ctx.opsets.count("")) ctx.opsets[""] = 1;
  if (options.upgrade_to_opset > ctx.opsets[""]) {
    DropUnusedBatchNormOutputs(*proto.mutable_graph());
    CheckDefinedForConversion(proto.graph(), source);
    ET_CHECK(hooks_installed, ErrorCode::kNotImplemented, source, ": the model imports opset ", ctx.opsets[""],
             "; converting it to opset ", options.upgrade_to_opset, " needs ONNX's version converter, which this ",
             "device-only build leaves out (convert it offline: edgetrain generate-artifacts does)");
    std::string converted;
    try {
      converted = hooks_installed->convert_version(onnxpb::Encode(proto), options.upgrade_to_opset);
    } catch (const std::exception& e) {
      Fail(ErrorCode::kNotImplemented, source, ": cannot convert the model from opset ", ctx.opsets[""], " to ",
           options.upgrade_to_opset, ": ", e.what());
    }
    ET_CHECK(onnxpb::Decode(converted.data(), converted.size(), proto), ErrorCode::kInternal, source,
             ": the converted model does not decode");
    ctx.opsets.clear();
    for (const auto& imp : proto.opset_import()) ctx.opsets[NormalDomain(imp.domain())] = imp.version();
  }
  model.opsets = ctx.opsets;
  for (const auto& f : proto.functions()) ctx.local_functions[NormalDomain(f.domain()) + ":" + f.name()] = &f;

  bool infer = options.infer_shapes;
  for (int i = 0; !infer && options.needs_shapes && i < proto.graph().node_size(); ++i) {
    const onnxpb::NodeProto& node = proto.graph().node(i);
    const std::string domain = NormalDomain(node.domain());
    infer = options.needs_shapes(domain, node.op_type(), ctx.opsets.count(domain) ? ctx.opsets[domain] : 1);
  }
  if (infer) onnx_proto::InferValueInfo(proto);
  CollectInferredTypes(proto.graph(), ctx);
  model.graph = ConvertGraph(proto.graph(), ctx);
  if (infer && options.complete_types) options.complete_types(model);
  return model;
}

Model LoadModelFromBuffer(const void* data, size_t size, const std::string& source, const std::string& base_dir,
                          const ImportOptions& options) {
  if (IsOrtFormatModel(data, size)) return LoadOrtFormatModel(data, size, source, options);
  onnxpb::ModelProto proto;
  std::string why;
  ET_CHECK(size <= static_cast<size_t>(INT32_MAX) && onnxpb::Decode(data, size, proto, &why), ErrorCode::kInvalidModel,
           "'", source, "' is not a valid ONNX model (", why.empty() ? "larger than 2 GiB" : why, ")");
  return onnx_proto::ImportModelProto(proto, source, base_dir, options);
}

Model LoadModel(const std::string& path, const ImportOptions& options) {
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  ET_CHECK(file.good(), ErrorCode::kIoError, "cannot open model file '", path, "'");
  std::string bytes(static_cast<size_t>(file.tellg()), '\0');
  file.seekg(0);
  file.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ET_CHECK(!bytes.empty(), ErrorCode::kInvalidModel, "'", path, "' is empty, not an ONNX model");
  if (path.size() > 4 && path.compare(path.size() - 4, 4, ".ort") == 0)  // as ONNX Runtime does: by extension too
    return LoadOrtFormatModel(bytes.data(), bytes.size(), path, options);
  size_t slash = path.find_last_of('/');
  std::string base_dir = slash == std::string::npos ? "." : path.substr(0, slash);
  return LoadModelFromBuffer(bytes.data(), bytes.size(), path, base_dir, options);
}

}  // namespace edgetrain
