"""The model that blocks build into, as ORT's ``onnxblock.base`` / ``empty_base``."""

import contextlib
import copy
import itertools
import os

import onnx

_GLOBAL_ACCESSOR = None


class ModelAccessor:
    """Holds the model the blocks of a ``base``/``empty_base`` context manipulate (``model``)."""

    def __init__(self, model, model_path=None):
        self._model = model
        self._path = model_path
        self.names = itertools.count()  # for blocks.generate_graph_name

    @property
    def model(self):
        if self._model is None:
            raise RuntimeError("The onnx model was not set. Use onnxblock.base or onnxblock.empty_base to create it.")
        return self._model

    @property
    def path(self):
        return self._path

    @property
    def has_path(self):
        return self._path is not None


def current():
    """The accessor of the innermost ``base``/``empty_base`` context."""
    if _GLOBAL_ACCESSOR is None:
        raise RuntimeError("onnxblock: blocks build only inside `with onnxblock.base(model):` or "
                           "`with onnxblock.empty_base():`")
    return _GLOBAL_ACCESSOR


@contextlib.contextmanager
def _accessing(model, model_path=None):
    global _GLOBAL_ACCESSOR
    if _GLOBAL_ACCESSOR is not None:
        raise RuntimeError("Base onnx model already exists. Cannot create multiple ModelAccessors.")
    _GLOBAL_ACCESSOR = ModelAccessor(model, model_path)
    try:
        yield _GLOBAL_ACCESSOR
    finally:
        _GLOBAL_ACCESSOR = None


def _internalized(model, model_path):
    """The model with the data of its external-data tensors inside (read from beside ``model_path``)."""
    from onnx import external_data_helper
    for tensor in external_data_helper._get_all_tensors(model):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        if not tensor.HasField("raw_data"):
            if model_path is None:
                raise RuntimeError(f"tensor '{tensor.name}' keeps its data in an external file: pass the model's path")
            external_data_helper.load_external_data_for_tensor(tensor, os.path.dirname(os.fspath(model_path)))
        tensor.data_location = onnx.TensorProto.DEFAULT
        del tensor.external_data[:]
    return model


@contextlib.contextmanager
def base(model, model_path=None):
    """Blocks called within build on a copy of ``model`` (``accessor.model`` is the result)."""
    if model is None:
        raise RuntimeError("Base onnx model cannot be None. Please use onnxblock.empty_base if you would like to "
                           "build a model from scratch.")
    with _accessing(_internalized(copy.deepcopy(model), model_path), model_path) as accessor:
        yield accessor


@contextlib.contextmanager
def empty_base(opset_version=None):
    """Blocks called within build on a new, empty model (opset ``opset_version``, default onnx's newest)."""
    model = onnx.ModelProto()
    model.ir_version = onnx.IR_VERSION
    model.producer_name = "edgetrain"
    model.graph.name = "graph"
    model.opset_import.extend((onnx.helper.make_opsetid("com.microsoft", 1),
                               onnx.helper.make_opsetid("", opset_version or onnx.defs.onnx_opset_version())))
    with _accessing(model) as accessor:
        yield accessor


@contextlib.contextmanager
def custom_op_library(custom_op_library_path):
    """ORT's custom operator libraries are shared objects of ORT kernels, which edgetrain cannot load."""
    raise NotImplementedError(f"custom_op_library '{custom_op_library_path}': edgetrain cannot load ONNX Runtime "
                              "custom operator libraries (their kernels are built against ORT); implement the "
                              "operator in edgetrain (src/ops) instead")
    yield  # pragma: no cover
