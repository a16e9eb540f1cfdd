"""save_checkpoint and load_checkpoint_to_model, as ORT's ``onnxblock``."""

import os

from onnx import numpy_helper

from .. import _edgetrain


def save_checkpoint(parameters, path_to_checkpoint, nominal_checkpoint=False):
    """Writes ``parameters`` = (trainable, frozen) lists of onnx.TensorProto as a checkpoint file (ORT's
    ODTC format); a nominal checkpoint keeps only their names and element types."""
    if parameters is None:
        raise RuntimeError("No checkpoint parameters provided.")
    trainable, frozen = parameters
    _edgetrain.save_parameters([(p.name, numpy_helper.to_array(p)) for p in trainable],
                               [(p.name, numpy_helper.to_array(p)) for p in frozen],
                               os.fspath(path_to_checkpoint), bool(nominal_checkpoint))


def load_checkpoint_to_model(path_to_checkpoint, model):
    """Overwrites the initializers of ``model`` (an onnx.ModelProto, changed in place) that the checkpoint
    holds with the checkpoint's values."""
    state = _edgetrain.CheckpointState.load(os.fspath(path_to_checkpoint))
    names = set(state.parameter_names())
    for index, initializer in enumerate(model.graph.initializer):
        if initializer.name in names:
            model.graph.initializer[index].CopyFrom(
                numpy_helper.from_array(state.get_parameter(initializer.name), initializer.name))
