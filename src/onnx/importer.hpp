// ONNX model file -> our IR. Handles opset imports, initializers (with external data), Constant
// nodes as initializers, model-local functions and ONNX function ops without a kernel (inlined),
// subgraphs, and ONNX shape inference for value types. ONNX Runtime's .ort flatbuffer models are
// recognized by their file identifier (or extension) and read too (see ort_format.hpp).
#pragma once

#include <functional>
#include <string>

#include "ir/graph.hpp"

namespace edgetrain {

struct ImportOptions {
  // Whether edgetrain has a kernel for (domain, op, opset). Ops without one whose ONNX schema
  // defines a function body are expanded into that body. Null: expand nothing.
  std::function<bool(const std::string&, const std::string&, int64_t)> has_kernel;
  bool infer_shapes = true;
  // When infer_shapes is false, inference still runs if this holds for some node of the main
  // graph (domain, op, opset): e.g. ops whose kernels read the shapes a model declares.
  std::function<bool(const std::string&, const std::string&, int64_t)> needs_shapes;
  // Runs after shape inference (when it runs): fills types it left unknown (ops' shape rules).
  std::function<void(Model&)> complete_types;
  // > 0: models importing an older default-domain opset are converted to this one first.
  int64_t upgrade_to_opset = 0;
  // Bounds on what a model file makes the importer allocate, checked before it does (kResourceExhausted
  // naming the file): nodes of one graph after function expansion, initializers of one graph, bytes
  // of one string or strings attribute.
  size_t max_nodes = size_t{1} << 20;
  size_t max_initializers = size_t{1} << 20;
  size_t max_string_bytes = size_t{1} << 20;
};

Model LoadModel(const std::string& path, const ImportOptions& options = {});
// `base_dir` resolves external data files; `source` names the model in errors.
Model LoadModelFromBuffer(const void* data, size_t size, const std::string& source = "<memory>",
                          const std::string& base_dir = ".", const ImportOptions& options = {});

}  // namespace edgetrain
