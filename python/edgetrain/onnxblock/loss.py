"""Loss blocks: ORT's (MSELoss, CrossEntropyLoss, BCEWithLogitsLoss, L1Loss) and edgetrain's (HuberLoss,
SmoothL1Loss, NLLLoss, KLDivLoss), in standard ONNX operators.

A loss's target is the value named by ``target_name`` (``labels_name``): an existing value of the model is
used as it is, otherwise a new graph input of that name is added, typed like the prediction (labels:
int64, as in ORT, shaped as the prediction without its class dimension).
"""

import numpy as np
from onnx import TensorProto

from . import blocks
from .blocks import Block, add_initializer, add_input_like, add_node, tensor_type, value_exists

_REDUCTIONS = ("mean", "sum", "none")


def _check_reduction(reduction):
    if reduction not in _REDUCTIONS:
        raise RuntimeError(f"Reduction {reduction} not supported.")
    return reduction


def _reduce(value, reduction):
    if reduction == "none":
        return value
    return add_node("ReduceMean" if reduction == "mean" else "ReduceSum", [value], keepdims=0)


def _target(prediction, target_name):
    return target_name if value_exists(target_name) else add_input_like(prediction, target_name)


def _scalar(value):
    return add_initializer(value, "loss_constant")


class _ElementwiseLoss(Block):
    def __init__(self, reduction):
        super().__init__()
        self._reduction = _check_reduction(reduction)

    def build(self, loss_input_name, target_name="target"):
        elementwise = self._elementwise(loss_input_name, _target(loss_input_name, target_name))
        return _reduce(elementwise, self._reduction)


class MSELoss(_ElementwiseLoss):
    """reduce((input - target)^2); reduction "mean", "sum" or "none"."""

    def __init__(self, reduction="mean"):
        super().__init__(reduction)

    def _elementwise(self, prediction, target):
        return add_node("Pow", [add_node("Sub", [prediction, target]), _scalar(2.0)])


class L1Loss(_ElementwiseLoss):
    """reduce(|input - target|)."""

    def __init__(self, reduction="mean"):
        super().__init__(reduction)

    def _elementwise(self, prediction, target):
        return add_node("Abs", [add_node("Sub", [prediction, target])])


class BCEWithLogitsLoss(_ElementwiseLoss):
    """Binary cross entropy of sigmoid(input), computed stably from the logits.

    ``weight``: a rescaling weight (broadcast over the elements); ``pos_weight``: the weight of positive
    examples (one per class).
    """

    def __init__(self, weight=None, reduction="mean", pos_weight=None):
        super().__init__(reduction)
        self._weight, self._pos_weight = weight, pos_weight

    def _elementwise(self, x, t):
        one = _scalar(1.0)
        # log(1 + exp(-|x|)), then softplus(-x) = relu(-x) + that
        log1p = add_node("Log", [add_node("Add", [one, add_node("Exp", [add_node("Neg", [add_node("Abs", [x])])])])])
        softplus_neg = add_node("Add", [add_node("Relu", [add_node("Neg", [x])]), log1p])
        if self._pos_weight is None:
            loss = add_node("Add", [add_node("Mul", [add_node("Sub", [one, t]), x]), softplus_neg])
        else:
            pos_weight = add_initializer(np.asarray(self._pos_weight, np.float32) - 1, "bceloss.pos_weight")
            log_weight = add_node("Add", [add_node("Mul", [pos_weight, t]), one])
            loss = add_node("Add", [add_node("Mul", [add_node("Sub", [one, t]), x]),
                                    add_node("Mul", [log_weight, softplus_neg])])
        if self._weight is not None:
            loss = add_node("Mul", [add_initializer(self._weight, "bceloss.weight"), loss])
        return loss


class HuberLoss(_ElementwiseLoss):
    """torch.nn.HuberLoss: quadratic within ``delta`` of the target, linear beyond."""

    def __init__(self, reduction="mean", delta=1.0):
        super().__init__(reduction)
        self._delta, self._quadratic_scale, self._linear_scale = float(delta), 0.5, float(delta)

    def _elementwise(self, prediction, target):
        abs_diff = add_node("Abs", [add_node("Sub", [prediction, target])])
        quadratic = add_node("Sub", [abs_diff, add_node("Relu", [add_node("Sub", [abs_diff, _scalar(self._delta)])])])
        linear = add_node("Sub", [abs_diff, quadratic])
        squared = add_node("Mul", [add_node("Mul", [quadratic, quadratic]), _scalar(self._quadratic_scale)])
        return add_node("Add", [squared, add_node("Mul", [linear, _scalar(self._linear_scale)])])


class SmoothL1Loss(HuberLoss):
    """torch.nn.SmoothL1Loss: HuberLoss(delta=beta) / beta (beta 0 is L1Loss)."""

    def __init__(self, reduction="mean", beta=1.0):
        super().__init__(reduction, delta=beta)
        if beta < 0:
            raise ValueError(f"SmoothL1Loss: beta must be >= 0, got {beta}")
        self._quadratic_scale = 0.5 / beta if beta > 0 else 0.0
        self._linear_scale = 1.0


class KLDivLoss(_ElementwiseLoss):
    """torch.nn.KLDivLoss: the input holds log-probabilities; the target probabilities (log with log_target)."""

    def __init__(self, reduction="mean", log_target=False):
        super().__init__(reduction)
        self._log_target = log_target

    def _elementwise(self, prediction, t):
        if self._log_target:
            return add_node("Mul", [add_node("Exp", [t]), add_node("Sub", [t, prediction])])
        safe = add_node("Where", [add_node("Equal", [t, _scalar(0.0)]), _scalar(1.0), t])
        return add_node("Mul", [t, add_node("Sub", [add_node("Log", [safe]), prediction])])


class _ClassificationLoss(Block):
    def __init__(self, op_type, weight, reduction, ignore_index, label_dtype):
        super().__init__()
        self._op_type, self._weight, self._ignore_index = op_type, weight, ignore_index
        self._reduction = _check_reduction(reduction)
        self._label_type = tensor_type(label_dtype)
        if self._label_type not in (TensorProto.INT64, TensorProto.INT32):
            raise ValueError(f"{type(self).__name__}: labels are int64 or int32, not {np.dtype(label_dtype)}")

    def build(self, scores_input_name, labels_name="labels"):
        if not value_exists(labels_name):
            add_input_like(scores_input_name, labels_name, elem_type=self._label_type, drop_dim=1)
        inputs = [scores_input_name, labels_name]
        if self._weight is not None:
            inputs.append(add_initializer(self._weight, "celoss.weight"))
        if self._op_type == "SoftmaxCrossEntropyLoss":  # outputs: loss, log_prob
            return add_node(self._op_type, inputs, num_outputs=2, reduction=self._reduction,
                            ignore_index=self._ignore_index)[0]
        return add_node(self._op_type, inputs, reduction=self._reduction, ignore_index=self._ignore_index)

class CrossEntropyLoss(_ClassificationLoss):
    """Softmax cross entropy of scores [N, C, ...] against class labels [N, ...] (int64, as in ORT).

    ``weight``: one weight per class; ``ignore_index``: a label that contributes nothing.
    """

    def __init__(self, weight=None, reduction="mean", ignore_index=None, label_dtype=np.int64):
        super().__init__("SoftmaxCrossEntropyLoss", weight, reduction, ignore_index, label_dtype)


class NLLLoss(_ClassificationLoss):
    """Negative log likelihood of log-probabilities [N, C, ...] against class labels [N, ...] (int64)."""

    def __init__(self, weight=None, reduction="mean", ignore_index=None, label_dtype=np.int64):
        super().__init__("NegativeLogLikelihoodLoss", weight, reduction, ignore_index, label_dtype)


__all__ = ["BCEWithLogitsLoss", "CrossEntropyLoss", "HuberLoss", "KLDivLoss", "L1Loss", "MSELoss", "NLLLoss",
           "SmoothL1Loss", "blocks"]
