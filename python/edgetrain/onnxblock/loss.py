"""Loss blocks: ORT's (MSELoss, CrossEntropyLoss, BCEWithLogitsLoss, L1Loss) and edgetrain's (HuberLoss,
SmoothL1Loss, NLLLoss, KLDivLoss). Each is built by edgetrain's C++ loss builder.

A loss's target is the value named by ``target_name`` (``labels_name``): an existing value of the model is
used as it is, otherwise a new model input of that name is added, shaped like the prediction (labels: the
prediction without its class dimension).
"""

import numpy as np

from .. import _edgetrain
from .blocks import Block, composer

_REDUCTIONS = {"mean": _edgetrain.Reduction.MEAN, "sum": _edgetrain.Reduction.SUM}


def _spec(kind, reduction, **fields):
    if reduction not in _REDUCTIONS:
        raise ValueError(f"Reduction {reduction} not supported (a training loss is a scalar: mean or sum).")
    spec = _edgetrain.LossSpec()
    spec.type = kind
    spec.reduction = _REDUCTIONS[reduction]
    for name, value in fields.items():
        if value is not None:
            setattr(spec, name, value)
    return spec


def _floats(values):
    return None if values is None else [float(v) for v in np.asarray(values, dtype=np.float32).ravel()]


class _BuiltInLoss(Block):
    def __init__(self, spec):
        super().__init__()
        self._spec = spec

    def build(self, loss_input_name, target_name="target"):
        return composer().loss(self._spec, loss_input_name, target_name)


class MSELoss(_BuiltInLoss):
    """reduce((output - target)^2)."""

    def __init__(self, reduction="mean"):
        super().__init__(_spec(_edgetrain.LossKind.MSE, reduction))


class L1Loss(_BuiltInLoss):
    """reduce(|output - target|)."""

    def __init__(self, reduction="mean"):
        super().__init__(_spec(_edgetrain.LossKind.L1, reduction))


class HuberLoss(_BuiltInLoss):
    """torch.nn.HuberLoss: quadratic within ``delta`` of the target, linear beyond."""

    def __init__(self, reduction="mean", delta=1.0):
        super().__init__(_spec(_edgetrain.LossKind.HUBER, reduction, delta=delta))


class SmoothL1Loss(_BuiltInLoss):
    """torch.nn.SmoothL1Loss: HuberLoss / beta (beta 0 is L1)."""

    def __init__(self, reduction="mean", beta=1.0):
        super().__init__(_spec(_edgetrain.LossKind.SMOOTH_L1, reduction, delta=beta))


class KLDivLoss(_BuiltInLoss):
    """torch.nn.KLDivLoss: the input holds log-probabilities; the target probabilities (log with log_target)."""

    def __init__(self, reduction="mean", log_target=False):
        super().__init__(_spec(_edgetrain.LossKind.KL_DIV, reduction, log_target=log_target))


class BCEWithLogitsLoss(_BuiltInLoss):
    """Binary cross entropy of sigmoid(output) (computed stably from the logits).

    ``pos_weight``: the weight of positive examples, one per class or one value.
    """

    def __init__(self, weight=None, reduction="mean", pos_weight=None):
        if weight is not None:
            raise NotImplementedError("BCEWithLogitsLoss: per-sample weight is not supported (pos_weight is)")
        super().__init__(_spec(_edgetrain.LossKind.BCE_WITH_LOGITS, reduction, pos_weight=_floats(pos_weight)))


class _ClassificationLoss(_BuiltInLoss):
    def __init__(self, kind, weight, reduction, ignore_index, label_dtype):
        super().__init__(_spec(kind, reduction, class_weights=_floats(weight), ignore_index=ignore_index,
                               label_type=label_dtype))

    def build(self, scores_input_name, labels_name="labels"):
        return super().build(scores_input_name, labels_name)


class CrossEntropyLoss(_ClassificationLoss):
    """Softmax cross entropy of scores [N, C, ...] against class labels [N, ...] (int32 as in ORT).

    ``weight``: one weight per class; ``ignore_index``: a label that contributes nothing.
    """

    def __init__(self, weight=None, reduction="mean", ignore_index=None, label_dtype=np.int32):
        super().__init__(_edgetrain.LossKind.CROSS_ENTROPY, weight, reduction, ignore_index, label_dtype)


class NLLLoss(_ClassificationLoss):
    """Negative log likelihood of log-probabilities [N, C, ...] against class labels [N, ...]."""

    def __init__(self, weight=None, reduction="mean", ignore_index=None, label_dtype=np.int32):
        super().__init__(_edgetrain.LossKind.NLL, weight, reduction, ignore_index, label_dtype)
