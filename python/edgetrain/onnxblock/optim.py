"""Optimizers for ``generate_artifacts(optimizer=...)`` with their hyper-parameters (ORT's AdamW and SGD,
and edgetrain's Adam). The optimizer model holds one fused update per parameter."""

from .. import _edgetrain


class ClipGradNorm:
    """Clips the global L2 norm of all gradients to ``max_norm`` before the update."""

    def __init__(self, max_norm):
        self.max_norm = float(max_norm)


class _Optimizer:
    def __init__(self, kind, clip_grad, **fields):
        self._spec = _edgetrain.OptimizerSpec()
        self._spec.type = kind
        self._spec.max_grad_norm = clip_grad.max_norm if clip_grad is not None else 0.0
        for name, value in fields.items():
            setattr(self._spec, name, value)

    def spec(self):
        return self._spec


class AdamW(_Optimizer):
    """ORT's AdamW (its adam_mode 1, as Hugging Face transformers: bias correction folded into the step)."""

    def __init__(self, bias_correction=True, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0, clip_grad=None):
        super().__init__(_edgetrain.OptimizerKind.ADAMW, clip_grad, hugging_face_mode=True,
                         correct_bias=bool(bias_correction), beta1=betas[0], beta2=betas[1], epsilon=eps,
                         weight_decay=weight_decay)


class Adam(_Optimizer):
    """torch.optim.Adam (weight decay added to the gradient)."""

    def __init__(self, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, clip_grad=None):
        super().__init__(_edgetrain.OptimizerKind.ADAM, clip_grad, beta1=betas[0], beta2=betas[1], epsilon=eps,
                         weight_decay=weight_decay)


class SGD(_Optimizer):
    """SGD, plain as ORT's, or with torch.optim.SGD's momentum, dampening, nesterov and weight decay."""

    def __init__(self, clip_grad=None, momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.0):
        super().__init__(_edgetrain.OptimizerKind.SGD, clip_grad, momentum=momentum, dampening=dampening,
                         nesterov=nesterov, weight_decay=weight_decay)
