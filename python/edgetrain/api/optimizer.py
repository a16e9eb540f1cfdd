"""``onnxruntime.training.api.optimizer``'s names."""

from . import Optimizer  # noqa: F401
