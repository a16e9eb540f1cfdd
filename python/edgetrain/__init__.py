"""edgetrain: on-device training of ONNX models.

The Python API mirrors ONNX Runtime's ``onnxruntime.training``, so a script moves over by changing
its imports from ``onnxruntime.training`` to ``edgetrain``::

    from edgetrain import artifacts                  # generate_artifacts, LossType, OptimType
    from edgetrain import onnxblock                  # model building: blocks, losses, optimizers
    from edgetrain.api import CheckpointState, Module, Optimizer, LinearLRScheduler

Every error edgetrain reports is an ``edgetrain.Error`` (a RuntimeError) of the subclass named
after its kind (``InvalidArgument``, ``InvalidModel``, ``IoError``, ...), with edgetrain's message; the
Python layer raises ORT's exception types (RuntimeError, TypeError, NotImplementedError) with ORT's messages.
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
