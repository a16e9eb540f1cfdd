"""Module(..., cache_frozen_prefix=...) and generate_artifacts(..., frozen_backbone_as_exported=True): head-only
training of an eval-mode CNN backbone gives the same bits with and without the per-sample cache, and the cache
is refused, naming the node, for a backbone in training mode."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import edgetrain
from edgetrain import artifacts
from edgetrain.api import CheckpointState, Module, Optimizer


def eval_cnn():
    """x [batch, 3, 6, 6] -> Conv -> BatchNormalization (eval) -> Relu -> GlobalAveragePool -> Flatten -> Gemm."""
    rng = np.random.RandomState(0)
    weights = {"conv.w": rng.randn(4, 3, 3, 3), "conv.b": rng.randn(4), "bn.scale": rng.rand(4) + 0.5,
               "bn.bias": rng.randn(4), "bn.mean": rng.randn(4) * 0.1, "bn.var": rng.rand(4) + 0.5,
               "head.w": rng.randn(3, 4) * 0.5, "head.b": rng.randn(3) * 0.1}
    nodes = [helper.make_node("Conv", ["x", "conv.w", "conv.b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "bn.scale", "bn.bias", "bn.mean", "bn.var"], ["b"]),
             helper.make_node("Relu", ["b"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "head.w", "head.b"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
                              [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def generate(tmp_path, as_exported):
    return artifacts.generate_artifacts(eval_cnn(), requires_grad=["head.w", "head.b"],
                                        frozen_params=["conv.w", "conv.b", "bn.scale", "bn.bias", "bn.mean", "bn.var"],
                                        loss=artifacts.LossType.CrossEntropyLoss, optimizer=artifacts.OptimType.AdamW,
                                        artifact_directory=tmp_path, frozen_backbone_as_exported=as_exported)


def train(paths, cache, epochs=3):
    state = CheckpointState.load_checkpoint(paths["checkpoint"])
    module = Module(paths["training_model"], state, paths["eval_model"], cache_frozen_prefix=cache)
    optimizer = Optimizer(paths["optimizer_model"], module)
    rng = np.random.RandomState(1)
    data = rng.rand(6, 3, 6, 6).astype(np.float32)
    labels = np.arange(6, dtype=np.int64) % 3
    losses = []
    for _ in range(epochs):
        for batch in ([0, 1, 2], [3, 4, 5]):
            losses.append(float(module(data[batch], labels[batch])))
            optimizer.step()
            module.lazy_reset_grad()
    return losses, module


def test_cached_head_training_is_bit_identical(tmp_path):
    paths = generate(tmp_path, as_exported=True)
    plain, _ = train(paths, None)
    cached, module = train(paths, "1M")
    assert cached == plain
    assert module.frozen_prefix_cache() == {"samples": 6, "bytes": 6 * (4 * 4 + 64), "hits": 12, "misses": 6}
    assert train(paths, True)[0] == plain


def test_cache_refused_for_a_training_mode_backbone(tmp_path):
    paths = generate(tmp_path, as_exported=False)  # BatchNormalization trains in training mode
    with pytest.raises(edgetrain.InvalidArgument, match="BatchNormalization"):
        train(paths, True, epochs=1)


@pytest.mark.parametrize("bad, error", [(0, edgetrain.InvalidArgument), (-1, edgetrain.InvalidArgument),
                                        ("12Q", edgetrain.InvalidArgument), (1.5, TypeError)])
def test_bad_cache_sizes(tmp_path, bad, error):
    paths = generate(tmp_path, as_exported=True)
    with pytest.raises(error, match="cache_frozen_prefix"):
        train(paths, bad, epochs=1)
