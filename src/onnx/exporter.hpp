// Our IR -> ONNX file. Operators of the ai.edgetrain domain used by the graph are written with
// their standard-ONNX definitions as model-local functions, so any ONNX runtime can run the file.
#pragma once

#include <functional>
#include <string>

#include "ir/graph.hpp"

namespace edgetrain {

struct ExportOptions {
  // The standard-ONNX definition of an ai.edgetrain operator (domain, op), written as a model-local
  // function. Null, or a null result: a graph that uses the operator is an error naming it.
  std::function<const FunctionDef*(const std::string&, const std::string&)> function_of;
  // True for an operator that has no such definition (the fused recurrent gradients): it is written
  // as a bare ai.edgetrain node, which only edgetrain runs.
  std::function<bool(const std::string&, const std::string&)> exported_without_body;
};

std::string SerializeModel(const Model& model, const ExportOptions& options = {});
// Written to a temporary file, flushed and renamed into place.
void SaveModel(const Model& model, const std::string& path, const ExportOptions& options = {});

}  // namespace edgetrain
