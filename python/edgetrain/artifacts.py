"""The offline phase: training artifacts from a forward ONNX model, as ``onnxruntime.training.artifacts``."""

import enum
import os
import tempfile

from . import _edgetrain, onnxblock


class LossType(enum.Enum):
    """The loss added to the training model (``loss`` of :func:`generate_artifacts`): ORT's four, then edgetrain's."""

    MSELoss = 1
    CrossEntropyLoss = 2
    BCEWithLogitsLoss = 3
    L1Loss = 4
    HuberLoss = 5
    SmoothL1Loss = 6
    NLLLoss = 7
    KLDivLoss = 8


class OptimType(enum.Enum):
    """The optimizer of the optimizer model (``optimizer`` of :func:`generate_artifacts`): ORT's two, then Adam."""

    AdamW = 1
    SGD = 2
    Adam = 3


def _loss_block(loss):
    if isinstance(loss, LossType):
        return getattr(onnxblock.loss, loss.name)()
    if isinstance(loss, onnxblock.Block):
        return loss
    raise RuntimeError(f"Unknown loss provided {type(loss)}. Expected loss to be either one of "
                       "edgetrain.artifacts.LossType or edgetrain.onnxblock.Block.")


def _optimizer_spec(optimizer):
    if isinstance(optimizer, OptimType):
        return getattr(onnxblock.optim, optimizer.name)().spec()
    if isinstance(optimizer, onnxblock.optim._Optimizer):
        return optimizer.spec()
    raise RuntimeError(f"Unknown optimizer provided {type(optimizer)}. Expected optimizer to be of type "
                       "edgetrain.artifacts.OptimType or an edgetrain.onnxblock.optim optimizer.")


def _compose(block):
    def compose(composer):
        predictions = [composer.prediction(i) for i in range(composer.num_predictions())]
        with onnxblock.blocks.composing(composer):
            loss = block(*predictions)
        if not isinstance(loss, str):
            raise RuntimeError(f"the loss block {type(block).__name__} must return one value name, got {loss!r}")
        return loss

    return compose


def generate_artifacts(
    model,
    requires_grad=None,
    frozen_params=None,
    loss=LossType.CrossEntropyLoss,
    optimizer=OptimType.AdamW,
    artifact_directory=None,
    prefix="",
    ort_format=False,
    custom_op_library=None,
    additional_output_names=None,
    nominal_checkpoint=False,
    loss_input_names=None,
):
    """Writes the training, eval and optimizer models and the checkpoint for ``model``.

    Args:
        model: the forward model: an ``onnx.ModelProto``, its serialized bytes, or the path of an ONNX file.
        requires_grad: names of the parameters that train (default: every float initializer not frozen).
        frozen_params: names of parameters that do not train.
        loss: a :class:`LossType`, an ``edgetrain.onnxblock.Block`` composing a custom loss, or None when
            the (first) loss input already is the loss.
        optimizer: an :class:`OptimType`, an ``edgetrain.onnxblock.optim`` optimizer with its
            hyper-parameters, or None for no optimizer model.
        artifact_directory: where the artifacts go (created if missing; default: the current directory).
        prefix: prepended to each file name.
        ort_format, custom_op_library: ORT's; not supported (edgetrain writes ONNX files).
        additional_output_names: model outputs the training and eval models return after the loss.
        nominal_checkpoint: also write ``<prefix>nominal_checkpoint`` (names and types, no values).
        loss_input_names: the model outputs the loss takes (default: a Block takes every model output,
            as in ORT; a :class:`LossType` or None takes the first).

    Returns:
        A dict of the paths written: training_model, eval_model, optimizer_model (when an optimizer is
        given), checkpoint and nominal_checkpoint (when asked for).
    """
    if ort_format:
        raise NotImplementedError("ort_format: edgetrain writes ONNX files, and loads them on device")
    if custom_op_library is not None:
        raise NotImplementedError("custom_op_library: edgetrain has no custom operator libraries")
    options = _edgetrain.ArtifactOptions()
    options.requires_grad = list(requires_grad or [])
    options.frozen = list(frozen_params or [])
    options.additional_outputs = list(additional_output_names or [])
    options.prefix = prefix
    if optimizer is not None:
        options.optimizer = _optimizer_spec(optimizer)
    block = onnxblock.blocks.PassThrough() if loss is None else _loss_block(loss)
    artifact_directory = os.fspath(os.getcwd() if artifact_directory is None else artifact_directory)

    with tempfile.TemporaryDirectory(prefix="edgetrain-model-") as scratch:
        if isinstance(model, (str, os.PathLike)):
            model_path = os.fspath(model)
        else:
            model_bytes = model if isinstance(model, bytes) else model.SerializeToString()
            model_path = os.path.join(scratch, "model.onnx")
            with open(model_path, "wb") as file:
                file.write(model_bytes)
        loss_inputs = loss_input_names
        if loss_inputs is None and isinstance(loss, onnxblock.Block):
            loss_inputs = _edgetrain.model_output_names(model_path)
        options.loss_inputs = list(loss_inputs or [])
        spec = _edgetrain.LossSpec()
        spec.type = _edgetrain.LossKind.CUSTOM
        spec.compose = _compose(block)
        options.loss = spec
        paths = _edgetrain.generate_artifacts(model_path, artifact_directory, options, nominal_checkpoint)

    if optimizer is None:
        os.remove(paths.pop("optimizer_model"))
    return paths
