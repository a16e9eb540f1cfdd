"""Shared fixtures of the Python package tests. Run them with Debian's Python and the built package:
PYTHONPATH=build/python /usr/bin/python3 -m pytest tests/python (ctest does this)."""

import pathlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgetrain import artifacts

ROOT = pathlib.Path(__file__).resolve().parents[2]
MLP = ROOT / "models" / "mlp.onnx"
MLP_PARAMETERS = [f"net.{layer}.{kind}" for layer in (1, 3, 5) for kind in ("weight", "bias")]


@pytest.fixture(scope="module")
def mlp_artifacts(tmp_path_factory):
    """The MLP's artifacts (cross entropy, ORT's AdamW), its logits "output" returned after the loss."""
    return artifacts.generate_artifacts(str(MLP), requires_grad=MLP_PARAMETERS, loss=artifacts.LossType.CrossEntropyLoss,
                                        optimizer=artifacts.OptimType.AdamW,
                                        artifact_directory=tmp_path_factory.mktemp("mlp"),
                                        additional_output_names=["output"])


def mlp_forward(parameters, images):
    """The MLP in NumPy: Flatten, then Gemm-Relu-Gemm-Relu-Gemm with torch's [out, in] weights."""
    h = images.reshape(len(images), -1)
    for layer in (1, 3, 5):
        h = h @ parameters[f"net.{layer}.weight"].T + parameters[f"net.{layer}.bias"]
        if layer != 5:
            h = np.maximum(h, 0)
    return h


def cross_entropy(logits, labels):
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probabilities = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return -log_probabilities[np.arange(len(labels)), labels].mean()


def linear_model(weight, bias, outputs=("y",)):
    """y = x @ weight + bias as an ONNX model, x [batch, in]; extra output names are copies of y."""
    nodes = [helper.make_node("MatMul", ["x", "weight"], ["xw"]), helper.make_node("Add", ["xw", "bias"], ["y"])]
    nodes += [helper.make_node("Identity", ["y"], [name]) for name in outputs if name != "y"]
    graph = helper.make_graph(
        nodes, "linear", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", weight.shape[0]])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", weight.shape[1]]) for name in outputs],
        [numpy_helper.from_array(weight, "weight"), numpy_helper.from_array(bias, "bias")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def input_types(model_path):
    """The training model's inputs as {name: (ONNX element type, dims)}, dims as ints or symbols."""
    model = onnx.load(model_path)
    return {i.name: (i.type.tensor_type.elem_type,
                     [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]) for i in model.graph.input}
