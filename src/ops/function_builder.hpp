// Builds the FunctionDef of an ai.edgetrain operator: its definition in standard ONNX operators.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.hpp"
#include "ir/graph.hpp"
#include "ops/kernel.hpp"

namespace edgetrain {

// Builds an ai.edgetrain operator's definition in standard ONNX operators (opset 17), node by node.
// Node i is named "<op>_<i>".
class FunctionBuilder {
 public:
  FunctionBuilder(std::string name, std::vector<std::string> inputs, std::vector<std::string> outputs,
                  std::vector<std::string> attributes = {})
      : f_(std::make_shared<FunctionDef>()) {
    f_->domain = kEdgetrainDomain;
    f_->name = std::move(name);
    f_->inputs = std::move(inputs);
    f_->outputs = std::move(outputs);
    f_->attributes = std::move(attributes);
  }

  // Appends a node with the given outputs; returns its first output ("" when it has none).
  std::string Node(const std::string& op, std::vector<std::string> inputs, std::vector<std::string> outputs,
                   AttributeMap attributes = {}) {
    edgetrain::Node n;
    n.name = op + "_" + std::to_string(f_->nodes.size());
    n.op_type = op;
    n.inputs = std::move(inputs);
    n.outputs = std::move(outputs);
    n.attributes = std::move(attributes);
    f_->nodes.push_back(std::move(n));
    const std::vector<std::string>& out = f_->nodes.back().outputs;
    return out.empty() ? std::string() : out[0];
  }
  // Appends a node with one output; returns it.
  std::string Op(const std::string& op, std::vector<std::string> inputs, const std::string& output,
                 AttributeMap attributes = {}) {
    return Node(op, std::move(inputs), {output}, std::move(attributes));
  }
  // A Constant node holding `value`.
  std::string Constant(const std::string& output, Tensor value) {
    return Op("Constant", {}, output, {{"value", Attribute::TensorValue(std::move(value))}});
  }
  // A Constant node holding `values` as an int64 1-D tensor.
  std::string Ints(const std::string& output, const std::vector<int64_t>& values) {
    return Constant(output, Tensor::FromVector<int64_t>(values, {static_cast<int64_t>(values.size())}));
  }

  std::shared_ptr<const FunctionDef> Build() { return f_; }

 private:
  std::shared_ptr<FunctionDef> f_;
};

}  // namespace edgetrain
