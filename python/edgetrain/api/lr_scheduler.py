"""``onnxruntime.training.api.lr_scheduler``'s names."""

from . import LinearLRScheduler  # noqa: F401
