"""edgetrain: on-device training of ONNX models.

The Python API mirrors ONNX Runtime's ``onnxruntime.training``, so a script moves over by changing
its imports from ``onnxruntime.training`` to ``edgetrain``::

    from edgetrain import artifacts                  # generate_artifacts, LossType, OptimType
    from edgetrain import onnxblock                  # custom losses
    from edgetrain.api import CheckpointState, Module, Optimizer, LinearLRScheduler

Every error edgetrain reports is an ``edgetrain.Error`` (a RuntimeError) of the subclass named
after its kind (``InvalidArgument``, ``InvalidModel``, ``IoError``, ...), with edgetrain's message.
"""

from ._edgetrain import (
    Error,
    Internal,
    InvalidArgument,
    InvalidModel,
    IoError,
    NotImplemented,
    OutOfRange,
    ResourceExhausted,
    __version__,
)

__all__ = ["Error", "Internal", "InvalidArgument", "InvalidModel", "IoError", "NotImplemented", "OutOfRange",
           "ResourceExhausted", "__version__"]
