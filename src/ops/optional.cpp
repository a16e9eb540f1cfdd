// Optional values (opsets 15-18): Optional, OptionalHasElement, OptionalGetElement. An optional is
// carried as the RuntimeValue it holds (tensor or sequence) or as None (RuntimeValue::is_none).
#include "ops/registry.hpp"

namespace edgetrain {

namespace {

// Optional(input?) -> optional: the input, or None (of attribute `type`) when the input is left out.
void OptionalKernel(KernelContext& ctx) {
  const Node& node = ctx.node();
  if (ctx.HasInput(0)) {
    ctx.SetOutputValue(0, ctx.InputValue(0));
    return;
  }
  const Attribute* type = node.Find("type");
  ET_CHECK(type && type->kind == Attribute::Kind::kType, ErrorCode::kInvalidModel, node.Describe(),
           ": without an input, attribute 'type' (the type of the empty optional) is required");
  ctx.SetOutputNone(0);
}

// OptionalHasElement(input?) -> bool scalar; from opset 18 a plain tensor or sequence counts as present
// and a left-out input as empty.
void OptionalHasElementKernel(KernelContext& ctx) {
  const bool present = ctx.HasInput(0) && !ctx.InputValue(0).is_none();
  ET_CHECK(ctx.HasInput(0) || ctx.opset() >= 18, ErrorCode::kInvalidModel, ctx.node().Describe(),
           ": input 0 (the optional) is required before opset 18");
  ctx.Output(0, {}, DataType::kBool).data<bool>()[0] = present;
}

// OptionalGetElement(optional) -> its tensor or sequence; None is an error naming the node.
void OptionalGetElementKernel(KernelContext& ctx) {
  const RuntimeValue& value = ctx.InputValue(0);
  ET_CHECK(!value.is_none(), ErrorCode::kInvalidArgument, ctx.node().Describe(), ": input 0 ('",
           ctx.node().inputs[0], "') is an empty optional, which has no element to get");
  ctx.SetOutputValue(0, value);
}

}  // namespace

void RegisterOptionalOps(OpRegistry& r) {
  ET_REGISTER_ONNX(r, "Optional", OptionalKernel, 15);
  ET_REGISTER_ONNX(r, "OptionalHasElement", OptionalHasElementKernel, 15);
  ET_REGISTER_ONNX(r, "OptionalGetElement", OptionalGetElementKernel, 15);
}

}  // namespace edgetrain
