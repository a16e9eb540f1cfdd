"""edgetrain.artifacts.generate_artifacts (ORT's onnxruntime.training.artifacts) and edgetrain.onnxblock losses
and optimizers: the files, the inputs each loss adds, and the numbers a train and optimizer step give."""

import os

import numpy as np
import onnx
import pytest
from conftest import MLP, MLP_PARAMETERS, input_types, linear_model
from onnx import TensorProto

import edgetrain
from edgetrain import artifacts, onnxblock
from edgetrain.api import CheckpointState, Module, Optimizer

rng = np.random.default_rng(11)
WEIGHT = rng.standard_normal((3, 2)).astype(np.float32)
BIAS = np.array([0.5, -0.25], np.float32)
X = rng.standard_normal((5, 3)).astype(np.float32)
TARGET = rng.standard_normal((5, 2)).astype(np.float32)
LINEAR = ["weight", "bias"]  # ORT: only the parameters listed in requires_grad train


def train_step(paths, *inputs, learning_rate=None):
    """One train and optimizer step: (outputs of the train step, parameter changes by name)."""
    state = CheckpointState.load_checkpoint(paths["checkpoint"])
    module = Module(paths["training_model"], state, paths.get("eval_model"))
    optimizer = Optimizer(paths["optimizer_model"], module) if "optimizer_model" in paths else None
    if learning_rate is not None:
        optimizer.set_learning_rate(learning_rate)
    before = {name: parameter.data for name, parameter in state.parameters}
    outputs = module(*inputs)  # ORT's API: one array, or a tuple of them
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    if optimizer:
        optimizer.step()
    return outputs, {name: parameter.data - before[name] for name, parameter in state.parameters}


def mse_gradients(x, target):
    """Gradients of mean((x @ W + b - target)^2) for the linear model."""
    residual = 2 * (x @ WEIGHT + BIAS - target) / target.size
    return {"weight": x.T @ residual, "bias": residual.sum(axis=0)}


def test_model_proto_bytes_and_path_give_the_same_artifacts(tmp_path):
    proto = onnx.load(MLP)
    written = [artifacts.generate_artifacts(model, MLP_PARAMETERS, loss=artifacts.LossType.CrossEntropyLoss,
                                            optimizer=artifacts.OptimType.AdamW, artifact_directory=tmp_path / name)
               for name, model in [("path", str(MLP)), ("proto", proto), ("bytes", proto.SerializeToString())]]
    for paths in written:
        assert sorted(paths) == ["checkpoint", "eval_model", "optimizer_model", "training_model"]
        assert all(os.path.isfile(path) for path in paths.values())
        for key in ("training_model", "eval_model", "optimizer_model"):
            with open(paths[key], "rb") as mine, open(written[0][key], "rb") as reference:
                assert mine.read() == reference.read(), key
    assert input_types(written[0]["training_model"])["labels"] == (TensorProto.INT64, ["batch"])  # ORT's labels


def test_prefix_nominal_checkpoint_and_no_optimizer(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # ORT's default artifact directory: the current one
    paths = artifacts.generate_artifacts(str(MLP), MLP_PARAMETERS, loss=artifacts.LossType.CrossEntropyLoss,
                                         prefix="mlp_", optimizer=None, nominal_checkpoint=True)
    assert sorted(os.listdir(tmp_path)) == ["mlp_checkpoint", "mlp_eval_model.onnx", "mlp_nominal_checkpoint",
                                            "mlp_training_model.onnx"]
    assert paths["nominal_checkpoint"] == os.path.join(str(tmp_path), "mlp_nominal_checkpoint")
    nominal = CheckpointState.load_checkpoint(paths["nominal_checkpoint"])
    complete = CheckpointState.load_checkpoint(paths["checkpoint"])
    assert nominal.parameters.keys() == complete.parameters.keys()
    assert os.path.getsize(paths["nominal_checkpoint"]) < 10_000 < os.path.getsize(paths["checkpoint"])

    # ORT's nominal flow: the app supplies every parameter value (here: the complete checkpoint's) before training.
    images, labels = np.zeros((2, 1, 28, 28), np.float32), np.array([1, 2], np.int64)
    module = Module(paths["training_model"], nominal, paths["eval_model"])
    with pytest.raises(edgetrain.InvalidArgument, match="TrainStep: the checkpoint is nominal"):
        module(images, labels)
    reference = Module(paths["training_model"], complete, paths["eval_model"])
    module.copy_buffer_to_parameters(reference.get_contiguous_parameters(), trainable_only=False)
    np.testing.assert_array_equal(module(images, labels), reference(images, labels))


def test_ort_format_writes_ort_models_that_train_the_same(tmp_path):
    common = dict(requires_grad=MLP_PARAMETERS, loss=artifacts.LossType.CrossEntropyLoss,
                  optimizer=artifacts.OptimType.AdamW, additional_output_names=["output"])
    onnx_paths = artifacts.generate_artifacts(str(MLP), artifact_directory=tmp_path / "onnx", **common)
    ort_paths = artifacts.generate_artifacts(str(MLP), artifact_directory=tmp_path / "ort", ort_format=True, **common)
    assert sorted(os.listdir(tmp_path / "ort")) == ["checkpoint", "eval_model.onnx", "eval_model.ort",
                                                    "optimizer_model.onnx", "optimizer_model.ort",
                                                    "training_model.onnx", "training_model.ort"]
    for key in ("training_model", "eval_model", "optimizer_model"):
        with open(ort_paths[f"{key}_ort"], "rb") as file:
            assert file.read(8)[4:] == b"ORTM"  # ORT's flatbuffer file identifier
    images = np.random.default_rng(2).random((8, 1, 28, 28), np.float32)
    labels = np.arange(8, dtype=np.int64)

    def train(paths, suffix):
        state = CheckpointState.load_checkpoint(paths["checkpoint"])
        module = Module(paths["training_model" + suffix], state, paths["eval_model" + suffix])
        optimizer = Optimizer(paths["optimizer_model" + suffix], module)
        losses = []
        for _ in range(3):
            losses.append(module(images, labels)[0])
            optimizer.step()
            module.lazy_reset_grad()
        module.eval()
        return losses, module(images, labels)[1], module.get_contiguous_parameters()

    for mine, reference in zip(train(ort_paths, "_ort"), train(onnx_paths, "")):
        np.testing.assert_array_equal(mine, reference)
    with pytest.raises(edgetrain.InvalidModel) as raised:
        edgetrain._edgetrain.onnx_to_ort_format(b"not a model", "model.ort")
    assert str(raised.value) == "'model.ort' is not a valid ONNX model"


def test_requires_grad_frozen_params_and_additional_outputs(tmp_path):
    paths = artifacts.generate_artifacts(linear_model(WEIGHT, BIAS), requires_grad=["weight"], frozen_params=["bias"],
                                         loss=artifacts.LossType.MSELoss, optimizer=artifacts.OptimType.SGD,
                                         artifact_directory=tmp_path, additional_output_names=["y"])
    state = CheckpointState.load_checkpoint(paths["checkpoint"])
    assert [(name, p.requires_grad) for name, p in state.parameters] == [("weight", True), ("bias", False)]
    (loss, y), changes = train_step(paths, X, TARGET, learning_rate=0.5)
    np.testing.assert_allclose(y, X @ WEIGHT + BIAS, rtol=1e-6)
    np.testing.assert_allclose(loss, np.mean((y - TARGET) ** 2), rtol=1e-6)
    np.testing.assert_allclose(changes["weight"], -0.5 * mse_gradients(X, TARGET)["weight"], rtol=1e-5, atol=1e-7)
    assert not changes["bias"].any()


@pytest.mark.parametrize("loss, expected", [
    ("MSELoss", lambda y, t: np.mean((y - t) ** 2)),
    ("L1Loss", lambda y, t: np.mean(np.abs(y - t))),
    ("HuberLoss", lambda y, t: np.mean(np.where(np.abs(y - t) < 1, 0.5 * (y - t) ** 2, np.abs(y - t) - 0.5))),
    ("BCEWithLogitsLoss", lambda y, t: np.mean(np.maximum(y, 0) - y * t + np.log1p(np.exp(-np.abs(y))))),
])
def test_regression_loss_types(tmp_path, loss, expected):
    paths = artifacts.generate_artifacts(linear_model(WEIGHT, BIAS), LINEAR, loss=artifacts.LossType[loss],
                                         artifact_directory=tmp_path)
    assert input_types(paths["training_model"])["target"] == (TensorProto.FLOAT, ["batch", 2])
    target = TARGET if loss != "BCEWithLogitsLoss" else (TARGET > 0).astype(np.float32)
    (loss_value,), _ = train_step(paths, X, target)
    np.testing.assert_allclose(loss_value, expected(X @ WEIGHT + BIAS, target), rtol=1e-5)


def test_classification_loss_blocks_take_their_options(tmp_path):
    weights = np.array([1.0, 3.0], np.float32)
    labels = np.array([0, 1, 1, 0, 1], np.int64)
    block = onnxblock.loss.CrossEntropyLoss(weight=weights, reduction="sum", label_dtype=np.int64)
    paths = artifacts.generate_artifacts(linear_model(WEIGHT, BIAS), LINEAR, loss=block, artifact_directory=tmp_path)
    assert input_types(paths["training_model"])["labels"] == (TensorProto.INT64, ["batch"])
    (loss_value,), _ = train_step(paths, X, labels)
    logits = X @ WEIGHT + BIAS
    log_probabilities = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    expected = -(weights[labels] * log_probabilities[np.arange(5), labels]).sum()
    np.testing.assert_allclose(loss_value, expected, rtol=1e-5)


class HalfMSE(onnxblock.Block):
    def __init__(self):
        super().__init__()
        self.mse = onnxblock.loss.MSELoss()
        self.half = onnxblock.blocks.Constant(0.5)
        self.mul = onnxblock.blocks.Mul()

    def build(self, output_name):
        return self.mul(self.half(), self.mse(output_name))


class SquaredErrorFromOperators(onnxblock.Block):
    """MSE written with operator blocks and a target made like the output."""

    def build(self, output_name):
        target = onnxblock.blocks.InputLike(output_name)("expected")
        difference = onnxblock.blocks.Sub()(output_name, target)
        return onnxblock.blocks.ReduceMean(keepdims=0)(onnxblock.blocks.Pow(2.0)(difference))


def test_custom_loss_blocks_compose_like_the_built_in_loss(tmp_path):
    def run(loss):
        paths = artifacts.generate_artifacts(linear_model(WEIGHT, BIAS), LINEAR, loss=loss, artifact_directory=tmp_path,
                                             optimizer=onnxblock.optim.SGD())
        (loss_value,), changes = train_step(paths, X, TARGET, learning_rate=1.0)
        return input_types(paths["training_model"]), loss_value, changes

    inputs, mse, mse_changes = run(artifacts.LossType.MSELoss)
    half_inputs, half, half_changes = run(HalfMSE())
    assert list(half_inputs) == list(inputs) == ["x", "target", "weight", "bias"]
    np.testing.assert_allclose(half, 0.5 * mse, rtol=1e-6)
    for name in mse_changes:
        np.testing.assert_allclose(half_changes[name], 0.5 * mse_changes[name], rtol=1e-5, atol=1e-8)

    operator_inputs, operator_mse, operator_changes = run(SquaredErrorFromOperators())
    assert operator_inputs["expected"] == (TensorProto.FLOAT, ["batch", 2])
    np.testing.assert_allclose(operator_mse, mse, rtol=1e-6)
    for name in mse_changes:
        np.testing.assert_allclose(operator_changes[name], mse_changes[name], rtol=1e-5, atol=1e-8)


class TwoHeads(onnxblock.Block):
    """ORT's documented pattern: each model output gets its loss; both losses read the same target."""

    def __init__(self):
        super().__init__()
        self.l1, self.mse, self.add = onnxblock.loss.L1Loss(), onnxblock.loss.MSELoss(), onnxblock.blocks.Add()

    def build(self, first, second):
        return self.add(self.l1(first, target_name="shared"), self.mse(second, target_name="shared"))


def test_block_receives_every_model_output_unless_loss_input_names(tmp_path):
    model = linear_model(WEIGHT, BIAS, outputs=("y", "z"))
    paths = artifacts.generate_artifacts(model, LINEAR, loss=TwoHeads(), artifact_directory=tmp_path / "both")
    assert list(input_types(paths["training_model"])) == ["x", "shared", "weight", "bias"]
    (loss_value,), _ = train_step(paths, X, TARGET)
    y = X @ WEIGHT + BIAS
    np.testing.assert_allclose(loss_value, np.mean(np.abs(y - TARGET)) + np.mean((y - TARGET) ** 2), rtol=1e-5)

    paths = artifacts.generate_artifacts(model, LINEAR, loss=onnxblock.loss.MSELoss(), loss_input_names=["z"],
                                         artifact_directory=tmp_path / "z")
    assert list(input_types(paths["training_model"])) == ["x", "target", "weight", "bias"]


def test_loss_none_takes_the_model_output_as_the_loss(tmp_path):
    model = linear_model(WEIGHT, BIAS)
    model.graph.node.append(onnx.helper.make_node("ReduceSum", ["y"], ["total"], keepdims=0))
    model.graph.output[0].CopyFrom(onnx.helper.make_tensor_value_info("total", TensorProto.FLOAT, []))
    paths = artifacts.generate_artifacts(model, LINEAR, loss=None, artifact_directory=tmp_path,
                                         optimizer=artifacts.OptimType.SGD)
    assert list(input_types(paths["training_model"])) == ["x", "weight", "bias"]
    (loss_value,), changes = train_step(paths, X, learning_rate=1.0)
    np.testing.assert_allclose(loss_value, (X @ WEIGHT + BIAS).sum(), rtol=1e-5)
    np.testing.assert_allclose(changes["bias"], [-5.0, -5.0], rtol=1e-6)  # d sum / d bias = batch size


def test_optimizer_hyper_parameters(tmp_path):
    def changes(optimizer):
        paths = artifacts.generate_artifacts(linear_model(WEIGHT, BIAS), LINEAR, loss=artifacts.LossType.MSELoss,
                                             optimizer=optimizer, artifact_directory=tmp_path)
        return train_step(paths, X, TARGET, learning_rate=0.01)[1]

    gradients = mse_gradients(X, TARGET)
    adamw = changes(artifacts.OptimType.AdamW)  # a first Adam step moves each weight by about lr
    np.testing.assert_allclose(adamw["weight"], -0.01 * np.sign(gradients["weight"]), rtol=1e-3)
    decayed = changes(onnxblock.optim.AdamW(weight_decay=0.5))  # ORT's AdamW decays after the step
    np.testing.assert_allclose(decayed["weight"], (WEIGHT + adamw["weight"]) * (1 - 0.01 * 0.5) - WEIGHT, rtol=1e-4)
    clipped = changes(onnxblock.optim.SGD(clip_grad=onnxblock.optim.ClipGradNorm(0.1)))
    norm = np.sqrt(sum((g ** 2).sum() for g in gradients.values()))
    assert norm > 0.5
    np.testing.assert_allclose(clipped["weight"], -0.01 * gradients["weight"] * 0.1 / norm, rtol=1e-3)


class TargetNamedX(onnxblock.Block):
    def build(self, output_name):
        target = onnxblock.blocks.Input(np.float32, ["batch", 2])("x")
        return onnxblock.blocks.ReduceSum(keepdims=0)(onnxblock.blocks.Sub()(output_name, target))


class FailingBlock(onnxblock.Block):
    def build(self, output_name):
        raise ValueError("my block failed")


def test_generate_artifacts_errors(tmp_path):
    model = str(MLP)
    with pytest.raises(RuntimeError) as raised:
        artifacts.generate_artifacts(model, requires_grad=["nope"], artifact_directory=tmp_path)
    assert str(raised.value) == "requires_grad parameter 'nope' is not an initializer of the model"
    with pytest.raises(RuntimeError) as raised:
        artifacts.generate_artifacts(model, requires_grad=["net.1.bias"], frozen_params=["net.1.bias"],
                                     artifact_directory=tmp_path)
    assert str(raised.value) == ("A parameter cannot be frozen and require gradient computation at the same time "
                                 "{'net.1.bias'}")
    with pytest.raises(FileNotFoundError, match="/nonexistent.onnx"):  # onnx.load's error, as in ORT
        artifacts.generate_artifacts("/nonexistent.onnx", artifact_directory=tmp_path)
    with pytest.raises(RuntimeError, match="Please pass in either a string or an ONNX ModelProto for the model."):
        artifacts.generate_artifacts(42, artifact_directory=tmp_path)
    with pytest.raises(onnx.checker.ValidationError, match="'x' has been used as graph input names multiple times"):
        artifacts.generate_artifacts(linear_model(WEIGHT, BIAS), LINEAR, loss=TargetNamedX(), artifact_directory=tmp_path)
    with pytest.raises(ValueError, match="my block failed"):  # a block's own exception passes through
        artifacts.generate_artifacts(model, MLP_PARAMETERS, loss=FailingBlock(), artifact_directory=tmp_path)
    with pytest.raises(RuntimeError, match="Unknown loss provided <class 'str'>"):
        artifacts.generate_artifacts(model, MLP_PARAMETERS, loss="mse", artifact_directory=tmp_path)
    with pytest.raises(TypeError, match="Unknown optimizer provided <class 'str'>"):
        artifacts.generate_artifacts(model, MLP_PARAMETERS, loss=artifacts.LossType.CrossEntropyLoss, optimizer="adam",
                                     artifact_directory=tmp_path)
    with pytest.raises(RuntimeError, match="Expected additional output names to be a list of strings"):
        artifacts.generate_artifacts(model, MLP_PARAMETERS, additional_output_names="output", artifact_directory=tmp_path)
    with pytest.raises(NotImplementedError) as raised:
        artifacts.generate_artifacts(model, custom_op_library="libcustom.so", artifact_directory=tmp_path)
    assert str(raised.value).startswith("custom_op_library 'libcustom.so': edgetrain cannot load ONNX Runtime custom "
                                        "operator libraries")
    with pytest.raises(NotImplementedError, match="custom_op_library 'lib.so'"):
        with onnxblock.custom_op_library("lib.so"):
            pass
    for reduction_block in (onnxblock.loss.MSELoss, onnxblock.loss.L1Loss, onnxblock.loss.CrossEntropyLoss,
                            onnxblock.loss.BCEWithLogitsLoss):
        with pytest.raises(RuntimeError, match="^Reduction max not supported.$"):
            reduction_block(reduction="max")
    with pytest.raises(RuntimeError, match="blocks build only inside `with onnxblock.base"):
        onnxblock.blocks.Add()("a", "b")
