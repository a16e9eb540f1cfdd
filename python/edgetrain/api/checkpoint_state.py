"""``onnxruntime.training.api.checkpoint_state``'s names."""

from . import CheckpointState, Parameter, Parameters, Properties  # noqa: F401
