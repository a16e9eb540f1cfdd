"""``onnxruntime.training.api.module``'s names."""

from . import Module  # noqa: F401
