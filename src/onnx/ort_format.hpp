// ONNX Runtime's flatbuffer model format (".ort", file identifier "ORTM") -> our IR. The file is
// verified, rebuilt as an ONNX ModelProto and then goes through the ONNX importer's own pipeline.
#pragma once

#include <cstddef>
#include <string>

#include "ir/graph.hpp"
#include "onnx/importer.hpp"

namespace edgetrain {

// Whether `data` starts like an ORT-format model (the identifier at bytes 4..7), whatever its name.
bool IsOrtFormatModel(const void* data, size_t size);

// `source` names the model in errors. A corrupt or truncated file is kInvalidModel; content
// edgetrain cannot represent (sparse initializers, compiled nodes, external data) is kNotImplemented.
Model LoadOrtFormatModel(const void* data, size_t size, const std::string& source, const ImportOptions& options = {});

// A serialized ONNX model -> the same model in ORT's format (version 6), as `generate_artifacts(ort_format=True)`
// writes it. Model-local functions are not kept (the format has none); `source` names the model in errors.
std::string ConvertOnnxToOrtFormat(const std::string& onnx_bytes, const std::string& source);

}  // namespace edgetrain
