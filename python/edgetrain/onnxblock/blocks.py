"""Building blocks, as ORT's ``onnxblock.blocks``: each adds nodes to the model of the enclosing
``onnxblock.base``/``empty_base`` context and returns the name of its output.

A block is called inside the context (``Block.__call__`` runs ``build`` on the context's model, then
checks the model with the ONNX checker)::

    with onnxblock.base(model):
        loss = onnxblock.loss.MSELoss()("output")
"""

import abc
import itertools
import os

import numpy as np
import onnx
from onnx import helper, numpy_helper

from . import model_accessor

_names = itertools.count()


def generate_graph_name(token):
    """A fresh name ``onnx::<token>::<n>``, as ORT's (n counts within one base model, so that building the
    same model twice gives the same names)."""
    counter = model_accessor._GLOBAL_ACCESSOR.names if model_accessor._GLOBAL_ACCESSOR is not None else _names
    return f"onnx::{token}::{next(counter)}"


def _model():
    return model_accessor.current().model


def add_node(op_type, inputs, num_outputs=1, domain="", **attributes):
    """Appends one node to the current model; returns its output name (or names, when several)."""
    outputs = [generate_graph_name(f"{op_type}_output") for _ in range(num_outputs)]
    attributes = {key: value for key, value in attributes.items() if value is not None}
    _model().graph.node.append(helper.make_node(op_type, list(inputs), outputs, name=generate_graph_name(op_type),
                                                domain=domain or None, **attributes))
    return outputs[0] if num_outputs == 1 else outputs


def tensor_type(dtype):
    """The ONNX element type of a NumPy dtype."""
    return onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[np.dtype(dtype)]


def add_initializer(value, token, dtype=np.float32):
    name = generate_graph_name(token)
    _model().graph.initializer.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
    return name


def value_info(name, model=None):
    """The ValueInfoProto of ``name`` in the model (after shape inference when the graph does not say)."""
    model = model or _model()
    for search in (model, None):
        if search is None:
            search = onnx.shape_inference.infer_shapes(model)
        for info in itertools.chain(search.graph.input, search.graph.output, search.graph.value_info):
            if info.name == name:
                return info
        for initializer in search.graph.initializer:
            if initializer.name == name:
                return helper.make_tensor_value_info(name, initializer.data_type, list(initializer.dims))
    raise RuntimeError(f"onnxblock: the graph has no value '{name}' whose type is known")


def value_exists(name, model=None):
    graph = (model or _model()).graph
    return any(name == value for value in itertools.chain(
        (i.name for i in graph.input), (i.name for i in graph.initializer),
        (output for node in graph.node for output in node.output)))


def add_input_like(like, name, elem_type=None, drop_dim=None):
    """Adds graph input ``name`` typed as value ``like`` (optionally another element type, one dim less)."""
    info = onnx.ValueInfoProto()
    info.CopyFrom(value_info(like))
    info.name = name
    info.doc_string = ""
    if elem_type is not None:
        info.type.tensor_type.elem_type = elem_type
    if drop_dim is not None and info.type.tensor_type.HasField("shape"):
        dims = info.type.tensor_type.shape.dim
        if len(dims) > drop_dim:
            del dims[drop_dim]
    _model().graph.input.append(info)
    return name


class Block(abc.ABC):
    """Base of every block. Subclasses implement ``build``, which adds nodes to ``self.base`` (the model
    being built) and returns the names of its outputs."""

    def __init__(self, temp_file_name="temp.onnx"):
        if os.path.isabs(temp_file_name):
            raise RuntimeError("Please pass in a relative path for the temp_file_name.")
        self.base = None

    @abc.abstractmethod
    def build(self, *args, **kwargs):
        """Adds this block's nodes over the named input values; returns the output name(s)."""

    def __call__(self, *args, **kwargs):
        self.base = model_accessor.current().model
        output = self.build(*args, **kwargs)
        onnx.checker.check_model(self.base)
        return output

    def infer_shapes_on_base(self):
        """The current model with ONNX shape inference applied."""
        return onnx.shape_inference.infer_shapes(model_accessor.current().model)


class _BinaryOp(Block):
    def __init__(self, op_name):
        super().__init__()
        self._op_name = op_name

    def build(self, input_name1, input_name2):
        return add_node(self._op_name, [input_name1, input_name2])


class Add(_BinaryOp):
    """input_name1 + input_name2."""

    def __init__(self):
        super().__init__("Add")


class Sub(_BinaryOp):
    """input_name1 - input_name2."""

    def __init__(self):
        super().__init__("Sub")


class Mul(_BinaryOp):
    """input_name1 * input_name2."""

    def __init__(self):
        super().__init__("Mul")


class Div(_BinaryOp):
    """input_name1 / input_name2."""

    def __init__(self):
        super().__init__("Div")


class _UnaryOp(Block):
    def __init__(self, op_name, **attributes):
        super().__init__()
        self._op_name = op_name
        self._attributes = attributes

    def build(self, input_name):
        return add_node(self._op_name, [input_name], **self._attributes)


class ReduceMean(_UnaryOp):
    """The mean over every axis (keepdims as ONNX's)."""

    def __init__(self, keepdims=True):
        super().__init__("ReduceMean", keepdims=int(keepdims))


class ReduceSum(_UnaryOp):
    """The sum over every axis (keepdims as ONNX's)."""

    def __init__(self, keepdims=True):
        super().__init__("ReduceSum", keepdims=int(keepdims))


class Sigmoid(_UnaryOp):
    def __init__(self):
        super().__init__("Sigmoid")


class Log(_UnaryOp):
    def __init__(self):
        super().__init__("Log")


class Neg(_UnaryOp):
    def __init__(self):
        super().__init__("Neg")


class Abs(_UnaryOp):
    def __init__(self):
        super().__init__("Abs")


class Exp(_UnaryOp):
    """edgetrain's: exp(input)."""

    def __init__(self):
        super().__init__("Exp")


class Sqrt(_UnaryOp):
    """edgetrain's: sqrt(input)."""

    def __init__(self):
        super().__init__("Sqrt")


class Relu(_UnaryOp):
    """edgetrain's: max(input, 0)."""

    def __init__(self):
        super().__init__("Relu")


class Op(Block):
    """edgetrain's: any ONNX operator with one output, ``Op("Gemm", transB=1)(a, b, c)``."""

    def __init__(self, op_type, domain="", **attributes):
        super().__init__()
        self._op_type, self._domain, self._attributes = op_type, domain, attributes

    def build(self, *input_names):
        return add_node(self._op_type, input_names, domain=self._domain, **self._attributes)


class Pow(Block):
    """input ** exponent (a constant)."""

    def __init__(self, exponent):
        super().__init__()
        self._exponent = exponent

    def build(self, pow_input_name):
        exponent = add_initializer(self._exponent, "pow_exponent")
        return add_node("Pow", [pow_input_name, exponent])


class Constant(Block):
    """A float32 constant: ``Constant(0.5)()``."""

    def __init__(self, value_float):
        super().__init__()
        self._value = value_float

    def build(self):
        return add_node("Constant", [], value=numpy_helper.from_array(np.asarray(self._value, np.float32)))


class SequenceConstruct(Block):
    """A sequence of the input tensors."""

    def build(self, *sequence_input_names):
        return add_node("SequenceConstruct", sequence_input_names)


class ReduceAllL2(Block):
    """The L2 norm of all inputs together (a float32 scalar), in standard operators."""

    def build(self, *reduce_node_input_names):
        squares = [add_node("ReduceSumSquare", [name], keepdims=0) for name in reduce_node_input_names]
        total = squares[0] if len(squares) == 1 else add_node("Sum", squares)
        return add_node("Sqrt", [total])


class Clip(Block):
    """Clips the input to [clip_min, clip_max]; None leaves that side open."""

    def __init__(self, clip_min=None, clip_max=None):
        super().__init__()
        self._min, self._max = clip_min, clip_max

    def build(self, clip_input_name):
        bounds = ["" if bound is None else add_initializer(bound, "clip_bound") for bound in (self._min, self._max)]
        while bounds and bounds[-1] == "":
            bounds.pop()
        return add_node("Clip", [clip_input_name, *bounds])


class PassThrough(Block):
    """Its inputs, unchanged (one name, or a tuple of them)."""

    def build(self, *input_names):
        return input_names[0] if len(input_names) == 1 else input_names


class InputLike(Block):
    """A new graph input typed as the value named ``like``."""

    def __init__(self, like):
        super().__init__()
        self._like = like

    def build(self, input_name=None):
        return add_input_like(self._like, input_name or generate_graph_name("input"))


class Input(Block):
    """edgetrain's: a new graph input of a given type, ``Input(np.float32, ["batch", 10])("target")``."""

    def __init__(self, dtype, shape):
        super().__init__()
        self._dtype, self._shape = dtype, shape

    def build(self, input_name):
        elem_type = tensor_type(self._dtype)
        _model().graph.input.append(helper.make_tensor_value_info(input_name, elem_type, list(self._shape)))
        return input_name


class LabelEncoder(Block):
    """ai.onnx.ml LabelEncoder: maps keys to values (attributes as ONNX's)."""

    def __init__(self, default_float=0.0, default_int64=-1, default_string="_Unused", keys_floats=None,
                 keys_int64s=None, keys_strings=None, values_floats=None, values_int64s=None, values_strings=None):
        super().__init__()
        self._attributes = dict(default_float=default_float, default_int64=default_int64,
                                default_string=default_string, keys_floats=keys_floats, keys_int64s=keys_int64s,
                                keys_strings=keys_strings, values_floats=values_floats, values_int64s=values_int64s,
                                values_strings=values_strings)

    def build(self, label_encoder_input_name):
        model = _model()
        if not any(opset.domain == "ai.onnx.ml" for opset in model.opset_import):
            model.opset_import.append(helper.make_opsetid("ai.onnx.ml", 2))
        return add_node("LabelEncoder", [label_encoder_input_name], domain="ai.onnx.ml", **self._attributes)


class Cast(Block):
    """The input converted to element type ``to`` (an onnx.TensorProto.DataType)."""

    def __init__(self, to):
        super().__init__()
        self._to = to

    def build(self, cast_input_name):
        return add_node("Cast", [cast_input_name], to=self._to)


class Linear(Block):
    """alpha * input @ weight^T + beta * bias, as torch.nn.Linear (weight [out, in], initialized as torch's)."""

    def __init__(self, in_features, out_features, bias=True, alpha=1.0, beta=1.0):
        super().__init__()
        self._in, self._out, self._bias, self._alpha, self._beta = in_features, out_features, bias, alpha, beta

    def build(self, linear_input_name):
        bound = 1.0 / np.sqrt(self._in)
        rng = np.random.default_rng()
        weight = add_initializer(rng.uniform(-bound, bound, (self._out, self._in)), "linear.weight")
        inputs = [linear_input_name, weight]
        if self._bias:
            inputs.append(add_initializer(rng.uniform(-bound, bound, (self._out,)), "linear.bias"))
        return add_node("Gemm", inputs, alpha=float(self._alpha), beta=float(self._beta), transB=1)
