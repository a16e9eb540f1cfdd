// Our IR -> ONNX file. Operators of the ai.edgetrain domain used by the graph are written with
// their standard-ONNX definitions as model-local functions, so any ONNX runtime can run the file.
#pragma once

#include <string>

#include "ir/graph.hpp"

namespace edgetrain {

std::string SerializeModel(const Model& model);
// Written to a temporary file, flushed and renamed into place.
void SaveModel(const Model& model, const std::string& path);

}  // namespace edgetrain
