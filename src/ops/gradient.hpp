// The contract between the autodiff walk (src/autodiff) and an operator's gradient rule. A rule
// lives beside its kernel, reads the forward node, and emits ordinary IR nodes that compute the
// gradient of each input that needs one. The walk, not the rule, sums gradients from several
// consumers, un-broadcasts (maybe_broadcast), and stops at frozen parameters and integer values.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ir/graph.hpp"
#include "ops/kernel.hpp"

namespace edgetrain {

class GradientContext {
 public:
  virtual ~GradientContext() = default;

  virtual const Node& node() const = 0;
  virtual int64_t opset() const = 0;
  // Forward value names: input i, output i ("" when omitted).
  const std::string& X(size_t i) const;
  const std::string& Y(size_t i) const;
  size_t NumInputs() const { return node().inputs.size(); }
  size_t NumOutputs() const { return node().outputs.size(); }

  // The gradient arriving at output i, or "" when none flows there (it is zero).
  virtual std::string dY(size_t i) const = 0;
  // Whether input i needs a gradient (it leads to a trainable parameter and is float).
  virtual bool NeedsGrad(size_t i) const = 0;
  // Declares the gradient of input i. With maybe_broadcast, `value` may have the broadcast shape
  // of the node's output; the walk sums it back to the input's shape.
  virtual void SetGrad(size_t i, const std::string& value, bool maybe_broadcast = false) = 0;

  // Appends a node; returns the names of its `num_outputs` new outputs.
  virtual std::vector<std::string> Emit(const std::string& op_type, const std::vector<std::string>& inputs,
                                        size_t num_outputs, AttributeMap attributes = {},
                                        const std::string& domain = "") = 0;
  std::string Op(const std::string& op_type, const std::vector<std::string>& inputs,
                 AttributeMap attributes = {}, const std::string& domain = "") {
    return Emit(op_type, inputs, 1, std::move(attributes), domain)[0];
  }
  // A constant value in the graph.
  virtual std::string Constant(const Tensor& value) = 0;
  // A scalar constant with the element type of value `like` (float32 when unknown).
  std::string ScalarLike(double value, const std::string& like);
  // Int64 1-D constant (axes, shapes, starts...).
  std::string Ints(const std::vector<int64_t>& values);
  // The forward node that makes `value` (null for an input or initializer, or where the caller does not
  // say), and how often the forward graph reads `value` (subgraphs and graph outputs included; 0: unknown).
  virtual const Node* ForwardProducer(const std::string& value) const {
    (void)value;
    return nullptr;
  }
  virtual size_t ForwardReads(const std::string& value) const {
    (void)value;
    return 0;
  }
  // What static shape inference knows about a value (nullptr when nothing).
  virtual const ValueInfo* Info(const std::string& value) const = 0;
  DataType TypeOf(const std::string& value) const;
  // Shape(value) as an int64 1-D value: a constant when static shape inference knows every
  // dimension, else computed at run time.
  std::string ShapeOf(const std::string& value);
};

}  // namespace edgetrain
