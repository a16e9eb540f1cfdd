"""Building blocks: each adds ONNX operators to the loss graph and returns the name of its output.

Blocks build only while ``generate_artifacts`` composes the loss (it hands them the graph).
"""

import abc
import contextlib

import numpy as np

_composers = []  # the loss composers of the generate_artifacts calls in progress, innermost last


@contextlib.contextmanager
def composing(composer):
    """Makes blocks build into ``composer`` (an ``edgetrain._edgetrain.LossComposer``) within the block."""
    _composers.append(composer)
    try:
        yield
    finally:
        _composers.pop()


def composer():
    if not _composers:
        raise RuntimeError("onnxblock: blocks build only inside generate_artifacts (pass the block as its loss)")
    return _composers[-1]


class Block(abc.ABC):
    """Base of every block: subclasses implement ``build``, which returns the name of the block's output."""

    def __init__(self):
        pass

    @abc.abstractmethod
    def build(self, *args, **kwargs):
        """Adds this block's operators over the named input values and returns its output's name."""

    def __call__(self, *args, **kwargs):
        return self.build(*args, **kwargs)


class Op(Block):
    """Any ONNX operator of the default domain: ``Op("Gemm", transB=1)(a, b, c)``."""

    def __init__(self, op_type, **attributes):
        super().__init__()
        self._op_type = op_type
        self._attributes = attributes

    def build(self, *input_names):
        return composer().op(self._op_type, list(input_names), self._attributes)


def _op_block(op_type, doc):
    return type(op_type, (Op,), {"__init__": lambda self, **attributes: Op.__init__(self, op_type, **attributes),
                                 "__doc__": doc})


Add = _op_block("Add", "Adds an Add node.")
Sub = _op_block("Sub", "Adds a Sub node.")
Mul = _op_block("Mul", "Adds a Mul node.")
Div = _op_block("Div", "Adds a Div node.")
Neg = _op_block("Neg", "Adds a Neg node.")
Abs = _op_block("Abs", "Adds an Abs node.")
Log = _op_block("Log", "Adds a Log node.")
Exp = _op_block("Exp", "Adds an Exp node.")
Sqrt = _op_block("Sqrt", "Adds a Sqrt node.")
Sigmoid = _op_block("Sigmoid", "Adds a Sigmoid node.")
Relu = _op_block("Relu", "Adds a Relu node.")
ReduceMean = _op_block("ReduceMean", "Adds a ReduceMean node (attributes as ONNX's: keepdims=0 for a scalar).")
ReduceSum = _op_block("ReduceSum", "Adds a ReduceSum node (attributes as ONNX's: keepdims=0 for a scalar).")


def _constant(value):
    array = np.asarray(value)
    return composer().constant(array.astype(np.float32) if array.dtype == np.float64 else array)


class Constant(Block):
    """A constant (a Python float becomes a float32 scalar)."""

    def __init__(self, value_float):
        super().__init__()
        self._value = value_float

    def build(self):
        return _constant(self._value)


class Pow(Block):
    """Raises its input to a constant exponent."""

    def __init__(self, exponent):
        super().__init__()
        self._exponent = exponent

    def build(self, pow_input_name):
        return composer().op("Pow", [pow_input_name, _constant(self._exponent)])


class Clip(Block):
    """Clips its input to [clip_min, clip_max]; None leaves that side open."""

    def __init__(self, clip_min=None, clip_max=None):
        super().__init__()
        self._min, self._max = clip_min, clip_max

    def build(self, clip_input_name):
        bounds = ["" if bound is None else _constant(bound) for bound in (self._min, self._max)]
        return composer().op("Clip", [clip_input_name, *bounds])


class PassThrough(Block):
    """Returns its inputs unchanged."""

    def build(self, *input_names):
        return input_names[0] if len(input_names) == 1 else input_names


class InputLike(Block):
    """A new model input with the element type and shape of the value named ``like``."""

    def __init__(self, like):
        super().__init__()
        self._like = like

    def build(self, input_name=None):
        dtype, shape = composer().describe(self._like)
        if dtype is None or shape is None:
            raise RuntimeError(f"onnxblock: the type or shape of '{self._like}' is not known; use Input")
        return composer().target(input_name or "user_input", dtype, shape)


class Input(Block):
    """A new model input (such as a target): ``Input("target", np.float32, ["batch", 10])``."""

    def __init__(self, dtype, shape):
        super().__init__()
        self._dtype, self._shape = dtype, shape

    def build(self, input_name):
        return composer().target(input_name, self._dtype, self._shape)
