"""Optimizer blocks, as ORT's ``onnxblock.optim`` (AdamW, SGD, ClipGradNorm) plus edgetrain's Adam and SGD
momentum. Called on ``(trainable, frozen)`` parameters inside ``onnxblock.empty_base()``, an optimizer
builds the optimizer model (``to_model_proto``); ``generate_artifacts(optimizer=...)`` takes one too."""

import numpy as np
import onnx

from .. import _edgetrain
from . import model_accessor
from .blocks import Block, add_node
from .onnxblock import ForwardBlock


class ClipGradNorm(Block):
    """Clips the global L2 norm of all gradients to ``max_norm`` before the update."""

    def __init__(self, max_norm):
        super().__init__()
        self.max_norm = float(max_norm)

    def build(self, *gradient_names):
        """Standalone: the scale min(1, max_norm / norm) for the named gradients (a float32 scalar)."""
        squares = [add_node("ReduceSumSquare", [name], keepdims=0) for name in gradient_names]
        norm = add_node("Sqrt", [squares[0] if len(squares) == 1 else add_node("Sum", squares)])
        limit = add_node("Constant", [], value=onnx.numpy_helper.from_array(
            np.asarray(self.max_norm, np.float32)))
        epsilon = add_node("Constant", [], value=onnx.numpy_helper.from_array(
            np.asarray(1e-6, np.float32)))
        one = add_node("Constant", [], value=onnx.numpy_helper.from_array(np.asarray(1, np.float32)))
        return add_node("Min", [one, add_node("Div", [limit, add_node("Add", [norm, epsilon])])])


class _Optimizer(ForwardBlock):
    def __init__(self, kind, clip_grad, **fields):
        super().__init__()
        if clip_grad is not None and not isinstance(clip_grad, ClipGradNorm):
            raise TypeError(f"clip_grad must be an onnxblock.optim.ClipGradNorm, got {type(clip_grad).__name__}")
        self._spec = _edgetrain.OptimizerSpec()
        self._spec.type = kind
        self._spec.max_grad_norm = clip_grad.max_norm if clip_grad is not None else 0.0
        for name, value in fields.items():
            setattr(self._spec, name, value)

    def spec(self):
        return self._spec

    def build(self, parameters):
        """``parameters``: (trainable, frozen) lists of onnx.TensorProto, as TrainingBlock.parameters()."""
        trainable, _ = parameters
        described = [(p.name, onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[p.data_type], list(p.dims)) for p in trainable]
        return onnx.load_from_string(_edgetrain.optimizer_model(self._spec, described))

    def __call__(self, parameters):
        accessor = model_accessor.current()
        self.base = accessor.model
        model = self.build(parameters)
        for opset in self.base.opset_import:  # keep the base's opset where it is newer
            if opset.domain in ("", "ai.onnx"):
                for own in model.opset_import:
                    if own.domain == "" and own.version < opset.version:
                        own.version = opset.version
        self._model = model
        accessor.model.CopyFrom(model)
        return [output.name for output in model.graph.output]


class AdamW(_Optimizer):
    """ORT's AdamW (its adam_mode 1, as Hugging Face transformers: bias correction folded into the step)."""

    def __init__(self, bias_correction=True, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0, clip_grad=None):
        super().__init__(_edgetrain.OptimizerKind.ADAMW, clip_grad, hugging_face_mode=True,
                         correct_bias=bool(bias_correction), beta1=betas[0], beta2=betas[1], epsilon=eps,
                         weight_decay=weight_decay)


class Adam(_Optimizer):
    """edgetrain's: torch.optim.Adam (weight decay added to the gradient)."""

    def __init__(self, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, clip_grad=None):
        super().__init__(_edgetrain.OptimizerKind.ADAM, clip_grad, beta1=betas[0], beta2=betas[1], epsilon=eps,
                         weight_decay=weight_decay)


class SGD(_Optimizer):
    """SGD, plain as ORT's; edgetrain adds torch.optim.SGD's momentum, dampening, nesterov and weight decay."""

    def __init__(self, clip_grad=None, momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.0):
        super().__init__(_edgetrain.OptimizerKind.SGD, clip_grad, momentum=momentum, dampening=dampening,
                         nesterov=nesterov, weight_decay=weight_decay)


__all__ = ["Adam", "AdamW", "ClipGradNorm", "SGD"]
