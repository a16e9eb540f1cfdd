"""ForwardBlock and TrainingBlock: blocks that turn the model they build into a forward model, or into
training and eval models (edgetrain's autodiff builds the gradient graph)."""

import abc
import os
import tempfile

import onnx

from .. import _edgetrain
from . import blocks, model_accessor


def _register_graph_outputs(model, output_names):
    """Makes ``output_names`` the graph's outputs, typed from the graph (after shape inference)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    infos = [blocks.value_info(name, inferred) for name in output_names]
    del model.graph.output[:]
    model.graph.output.extend(infos)


def _output_names(output):
    return [output] if isinstance(output, str) else list(output)


class ForwardBlock(blocks.Block):
    """A block whose ``build`` output(s) become the outputs of the model it builds (``to_model_proto``)."""

    def __init__(self):
        super().__init__()
        self._model = None

    @abc.abstractmethod
    def build(self, *args, **kwargs):
        """Stacks blocks on the model; returns the name(s) of the graph output(s)."""

    def to_model_proto(self):
        if self._model is None:
            raise RuntimeError("Please build the forward models first before trying to retrieve it.")
        return self._model

    def __call__(self, *args, **kwargs):
        accessor = model_accessor.current()
        self.base = accessor.model
        output = self.build(*args, **kwargs)
        model = onnx.shape_inference.infer_shapes(accessor.model)
        _register_graph_outputs(model, _output_names(output))
        self._model = model
        accessor.model.CopyFrom(model)
        return output


class TrainingBlock(blocks.Block):
    """A block whose ``build`` returns the loss (then any other outputs): calling it builds the training
    model (forward, loss, gradients of the parameters that require grad) and the eval model.

    As in ORT, no parameter requires grad unless ``requires_grad(name)`` says so; initializers neither
    requiring grad nor frozen (``requires_grad(name, False)``) stay constants of the graph.
    """

    def __init__(self):
        super().__init__()
        self._requires_grad = set()
        self._frozen_params = set()
        self._parameters = None
        self._training_model = None
        self._eval_model = None

    @abc.abstractmethod
    def build(self, *args, **kwargs):
        """Stacks blocks on the model; returns the loss's name (or a tuple: the loss, then other outputs)."""

    def requires_grad(self, argument_name, value=True):
        if value:
            self._requires_grad.add(argument_name)
            self._frozen_params.discard(argument_name)
        else:
            self._requires_grad.discard(argument_name)
            self._frozen_params.add(argument_name)

    def parameters(self):
        """(trainable, frozen): the parameters as lists of onnx.TensorProto, once the block is built."""
        if self._parameters is None:
            raise RuntimeError("Please build the training model first before trying to retrieve the parameters.")
        return self._parameters

    def to_model_proto(self):
        """(training model, eval model), once the block is built."""
        if self._training_model is None or self._eval_model is None:
            raise RuntimeError("Please build the training and eval models first before trying to retrieve them.")
        return self._training_model, self._eval_model

    def __call__(self, *args, **kwargs):
        accessor = model_accessor.current()
        self.base = accessor.model
        output = self.build(*args, **kwargs)
        names = _output_names(output)
        model = onnx.shape_inference.infer_shapes(accessor.model)
        _register_graph_outputs(model, names)
        initializers = {tensor.name: tensor for tensor in model.graph.initializer}
        for name in sorted(self._requires_grad | self._frozen_params):
            if name not in initializers:
                kind = "requires_grad" if name in self._requires_grad else "frozen"
                raise RuntimeError(f"{kind} parameter '{name}' is not an initializer of the model")
        trainable = [t for t in model.graph.initializer if t.name in self._requires_grad]
        frozen = [t for t in model.graph.initializer if t.name in self._frozen_params]
        self._parameters = (trainable, frozen)
        self._training_model, self._eval_model = _build_training_models(
            model, [t.name for t in trainable], [t.name for t in frozen], names[0], names[1:],
            getattr(self, "frozen_backbone_as_exported", False))
        accessor.model.CopyFrom(self._training_model)
        return output


def _build_training_models(model, trainable, frozen, loss_name, other_outputs, frozen_backbone_as_exported=False):
    """edgetrain's autodiff over ``model`` whose output ``loss_name`` is the loss."""
    options = _edgetrain.ArtifactOptions()
    options.frozen_backbone_as_exported = frozen_backbone_as_exported
    options.requires_grad = trainable
    options.frozen = frozen
    options.unlisted_are_constants = True
    options.loss_inputs = [loss_name]
    options.additional_outputs = list(other_outputs)
    spec = _edgetrain.LossSpec()
    spec.type = _edgetrain.LossKind.CUSTOM
    spec.compose = lambda composer: composer.prediction(0)
    options.loss = spec
    with tempfile.TemporaryDirectory(prefix="edgetrain-onnxblock-") as scratch:
        path = os.path.join(scratch, "forward.onnx")
        onnx.save(model, path)
        paths = _edgetrain.generate_artifacts(path, scratch, options, False)
        return onnx.load(paths["training_model"]), onnx.load(paths["eval_model"])
