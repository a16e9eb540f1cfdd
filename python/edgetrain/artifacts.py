"""The offline phase: training artifacts from a forward ONNX model, as ``onnxruntime.training.artifacts``."""

import enum
import logging
import os
import pathlib

import onnx

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


def _external_data_layout(model):
    """None, or "one_file" / "per_tensor": how the model's initializers keep their data outside the file."""
    locations = {entry.value for tensor in model.graph.initializer if tensor.data_location == onnx.TensorProto.EXTERNAL
                 for entry in tensor.external_data if entry.key == "location"}
    external = sum(tensor.data_location == onnx.TensorProto.EXTERNAL for tensor in model.graph.initializer)
    if not locations:
        return None
    return "one_file" if len(locations) == 1 and external > 1 else "per_tensor"


def _load_model(model):
    if isinstance(model, (str, os.PathLike)):
        layout = _external_data_layout(onnx.load(os.fspath(model), load_external_data=False))
        return onnx.load(os.fspath(model)), os.fspath(model), layout  # external data read too
    if isinstance(model, bytes):
        return onnx.load_from_string(model), None, None
    if isinstance(model, onnx.ModelProto):
        return model, None, None
    raise RuntimeError("Please pass in either a string or an ONNX ModelProto for the model.")


def _loss_block(loss):
    if loss is None:
        logging.info("No loss function enum provided. Loss node will not be added to the graph.")
        return onnxblock.blocks.PassThrough()
    if isinstance(loss, LossType):
        return getattr(onnxblock.loss, loss.name)()
    if isinstance(loss, onnxblock.Block):
        return loss
    raise RuntimeError(f"Unknown loss provided {type(loss)}. Expected loss to be either one of "
                       "edgetrain.artifacts.LossType or edgetrain.onnxblock.Block.")


def _optimizer_block(optimizer):
    if isinstance(optimizer, OptimType):
        return getattr(onnxblock.optim, optimizer.name)()
    if isinstance(optimizer, onnxblock.Block):
        return optimizer
    raise TypeError(f"Unknown optimizer provided {type(optimizer)}. Expected optimizer to be either one of "
                    "edgetrain.artifacts.OptimType or edgetrain.onnxblock.Block.")


def generate_artifacts(
    model,
    requires_grad=None,
    frozen_params=None,
    loss=None,
    optimizer=None,
    artifact_directory=None,
    prefix="",
    ort_format=False,
    custom_op_library=None,
    additional_output_names=None,
    nominal_checkpoint=False,
    loss_input_names=None,
    *,
    frozen_backbone_as_exported=False,
):
    """Writes the training and eval models, the checkpoint and (with an optimizer) the optimizer model.

    Args, as ORT's:
        model: the forward model: an ``onnx.ModelProto``, or the path of an ONNX file (its external data,
            in one file or one per tensor, is read, and the training and eval models keep their constant
            weights the same way); edgetrain also takes the model's bytes.
        requires_grad: names of the parameters that train. As in ORT, none trains unless listed.
        frozen_params: names of parameters that do not train but are kept in the checkpoint. Initializers in
            neither list stay constants of the graphs.
        loss: a :class:`LossType`, an ``edgetrain.onnxblock.Block`` building the loss over the model outputs,
            or None when the first output (of ``loss_input_names``) already is the loss.
        optimizer: an :class:`OptimType` or an ``onnxblock.optim`` block; None writes no optimizer model.
        artifact_directory: where the artifacts go (created if missing; default: the current directory).
        prefix: prepended to each file name.
        ort_format: also write each model in ONNX Runtime's ``.ort`` format beside the ``.onnx`` file.
        custom_op_library: not supported (NotImplementedError): ORT's custom operator libraries hold ORT kernels.
        additional_output_names: model values the training and eval models return after the loss.
        nominal_checkpoint: also write ``<prefix>nominal_checkpoint`` (names and types, no values).
        loss_input_names: the model outputs the loss takes (default: every graph output).
        frozen_backbone_as_exported: (edgetrain's addition, keyword only) BatchNormalization and Dropout exported
            in eval mode that no trainable parameter reaches stay in eval mode in the training model (a backbone
            frozen under ``model.eval()``), so that ``Module(..., cache_frozen_prefix=True)`` can cache it.

    Returns:
        edgetrain's addition: a dict of the paths written (training_model, eval_model, checkpoint, and
        nominal_checkpoint, optimizer_model and the ``*_ort`` models when written).
    """
    if custom_op_library is not None:
        raise NotImplementedError(f"custom_op_library '{custom_op_library}': edgetrain cannot load ONNX Runtime "
                                  "custom operator libraries (their kernels are built against ORT); implement the "
                                  "operator in edgetrain (src/ops) instead")
    loaded_model, model_path, external_layout = _load_model(model)
    loss_block = _loss_block(loss)
    if additional_output_names is not None and not isinstance(additional_output_names, list):
        raise RuntimeError(f"Unknown type provided for additional output names {type(additional_output_names)}. "
                           "Expected additional output names to be a list of strings.")

    class _TrainingBlock(onnxblock.TrainingBlock):
        def build(self, *inputs_to_loss):
            if loss_input_names:
                inputs_to_loss = loss_input_names
            loss_output = loss_block(*inputs_to_loss)
            if not additional_output_names:
                return loss_output
            loss_outputs = loss_output if isinstance(loss_output, tuple) else (loss_output,)
            return (*loss_outputs, *additional_output_names)

    training_block = _TrainingBlock()
    training_block.frozen_backbone_as_exported = frozen_backbone_as_exported
    if requires_grad is not None and frozen_params is not None and set(requires_grad) & set(frozen_params):
        raise RuntimeError("A parameter cannot be frozen and require gradient computation at the same "
                           f"time {set(requires_grad) & set(frozen_params)}")
    for name in requires_grad or []:
        training_block.requires_grad(name)
    for name in frozen_params or []:
        training_block.requires_grad(name, False)

    with onnxblock.base(loaded_model, model_path):
        training_block(*[output.name for output in loaded_model.graph.output])
        training_model, eval_model = training_block.to_model_proto()
        parameters = training_block.parameters()

    directory = pathlib.Path(os.getcwd() if artifact_directory is None else os.fsdecode(artifact_directory))
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}

    def save_model(key, model_proto):
        path = directory / f"{prefix}{key}.onnx"
        if ort_format:  # as ORT: the .ort model beside the .onnx one
            ort_path = path.with_suffix(".ort")
            ort_path.write_bytes(_edgetrain.onnx_to_ort_format(model_proto.SerializeToString(), str(ort_path)))
            paths[f"{key}_ort"] = str(ort_path)
        if external_layout is None or key == "optimizer_model":
            onnx.save(model_proto, str(path))
        else:  # as the base model kept its weights: in one file beside the model, or one file per tensor
            one_file = external_layout == "one_file"
            onnx.save(model_proto, str(path), save_as_external_data=True, all_tensors_to_one_file=one_file,
                      location=f"{path.name}.data" if one_file else None)
        paths[key] = str(path)

    save_model("training_model", training_model)
    save_model("eval_model", eval_model)
    paths["checkpoint"] = str(directory / f"{prefix}checkpoint")
    onnxblock.save_checkpoint(parameters, paths["checkpoint"], nominal_checkpoint=False)
    if nominal_checkpoint:
        paths["nominal_checkpoint"] = str(directory / f"{prefix}nominal_checkpoint")
        onnxblock.save_checkpoint(parameters, paths["nominal_checkpoint"], nominal_checkpoint=True)

    if optimizer is None:
        logging.info("No optimizer enum provided. Skipping optimizer model generation.")
        return paths
    optimizer_block = _optimizer_block(optimizer)
    if not parameters[0]:
        logging.warning("No parameter requires grad: no optimizer model is written.")
        return paths
    opset_version = next((o.version for o in loaded_model.opset_import if o.domain in ("", "ai.onnx")), None)
    with onnxblock.empty_base(opset_version=opset_version):
        optimizer_block(parameters)
        save_model("optimizer_model", optimizer_block.to_model_proto())
    return paths
