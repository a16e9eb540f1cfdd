// Conversions between ONNX protobuf messages (onnx_messages.hpp, no libprotobuf) and our types.
// Only src/onnx includes this; nothing past the importer sees protobuf messages.
#pragma once

#include <string>

#include "core/tensor.hpp"
#include "ir/graph.hpp"
#include "onnx/onnx_messages.hpp"

namespace edgetrain {
struct ImportOptions;
}

namespace edgetrain::onnx_proto {

// The importer's pipeline on a parsed model: opset upgrade, function inlining, shape inference and
// conversion to our IR. `proto` is modified on the way.
Model ImportModelProto(onnxpb::ModelProto& proto, const std::string& source, const std::string& base_dir,
                       const ImportOptions& options);

// Replaces the graph's value_info and output types with what ONNX's shape inference finds (best
// effort: unknown values are left out or untyped; nothing changes without the schema hooks).
void InferValueInfo(onnxpb::ModelProto& proto);

// `base_dir` resolves external data; `what` names the tensor in errors ("initializer 'w' in m.onnx").
// CheckedTensorBytes: the bytes its type and shape need (a known type, dimensions >= 0, within the limit);
// CheckRawDataSize refuses raw data of another size (a tensor of a type it does not know passes).
uint64_t CheckedTensorBytes(const onnxpb::TensorProto& proto, const std::string& what);
void CheckRawDataSize(const onnxpb::TensorProto& proto, const std::string& what);
Tensor TensorFromProto(const onnxpb::TensorProto& proto, const std::string& base_dir, const std::string& what);
void TensorToProto(const Tensor& tensor, const std::string& name, onnxpb::TensorProto* proto);
ValueInfo ValueInfoFromProto(const onnxpb::ValueInfoProto& proto);
void ValueInfoToProto(const ValueInfo& info, onnxpb::ValueInfoProto* proto);

}  // namespace edgetrain::onnx_proto
