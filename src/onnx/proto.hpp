// Conversions between ONNX protobuf messages and our types. Only src/onnx (and tests that read
// ONNX's own .pb test data) include this; nothing past the importer sees protobuf.
#pragma once

#include <onnx/onnx-data_pb.h>
#include <onnx/onnx_pb.h>

#include <string>

#include "core/tensor.hpp"
#include "ir/graph.hpp"

namespace edgetrain {
struct ImportOptions;
}

namespace edgetrain::onnx_proto {

// The importer's pipeline on a parsed model: opset upgrade, function inlining, shape inference and
// conversion to our IR. `proto` is modified on the way.
Model ImportModelProto(onnx::ModelProto& proto, const std::string& source, const std::string& base_dir,
                       const ImportOptions& options);

// Replaces the graph's value_info and output types with what ONNX's shape inference finds (best
// effort: unknown values are left out or untyped).
void InferValueInfo(onnx::ModelProto& proto);

// `base_dir` resolves external data; `what` names the tensor in errors ("initializer 'w' in m.onnx").
Tensor TensorFromProto(const onnx::TensorProto& proto, const std::string& base_dir, const std::string& what);
void TensorToProto(const Tensor& tensor, const std::string& name, onnx::TensorProto* proto);
ValueInfo ValueInfoFromProto(const onnx::ValueInfoProto& proto);
void ValueInfoToProto(const ValueInfo& info, onnx::ValueInfoProto* proto);

// Reads a serialized message of type M from a file; throws kIoError / kInvalidModel naming it.
template <typename M>
M ParseFile(const std::string& path, const std::string& kind);

}  // namespace edgetrain::onnx_proto
