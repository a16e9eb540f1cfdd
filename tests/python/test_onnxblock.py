"""edgetrain.onnxblock's model building, as ORT's onnxblock: base/empty_base, Block.__call__, ForwardBlock,
TrainingBlock (requires_grad, parameters, to_model_proto), blocks.*, loss.* and optim.* blocks built on their own,
save_checkpoint and load_checkpoint_to_model; and ORT's requires_grad, nominal-state, Parameter.grad and
external-data semantics of artifacts and api."""

import os

import numpy as np
import onnx
import pytest
from conftest import MLP, MLP_PARAMETERS, linear_model
from onnx import TensorProto, helper, numpy_helper

import edgetrain
from edgetrain import artifacts, onnxblock
from edgetrain.api import CheckpointState, Module, Optimizer

rng = np.random.default_rng(3)
WEIGHT = rng.standard_normal((3, 2)).astype(np.float32)
BIAS = np.array([0.5, -0.25], np.float32)
X = rng.standard_normal((4, 3)).astype(np.float32)
TARGET = rng.standard_normal((4, 2)).astype(np.float32)


def op_types(model):
    return [node.op_type for node in model.graph.node]


class SigmoidHead(onnxblock.ForwardBlock):
    def __init__(self):
        super().__init__()
        self.sigmoid = onnxblock.blocks.Sigmoid()

    def build(self, output_name):
        return self.sigmoid(output_name)


class MSETraining(onnxblock.TrainingBlock):
    def __init__(self):
        super().__init__()
        self.loss = onnxblock.loss.MSELoss()

    def build(self, output_name):
        return self.loss(output_name)


def test_base_copies_the_model_and_blocks_build_into_it():
    model = linear_model(WEIGHT, BIAS)
    with onnxblock.base(model) as accessor:
        output = onnxblock.blocks.Relu()("y")
        assert accessor.model is not model and op_types(accessor.model) == ["MatMul", "Add", "Relu"]
        doubled = onnxblock.blocks.Mul()(output, onnxblock.blocks.Constant(2.0)())
        clipped = onnxblock.blocks.Clip(clip_max=1.0)(doubled)
        built = accessor.model
    assert op_types(model) == ["MatMul", "Add"]  # the base model itself is untouched
    assert op_types(built) == ["MatMul", "Add", "Relu", "Constant", "Mul", "Clip"]
    assert built.graph.node[-1].output[0] == clipped and clipped.startswith("onnx::Clip_output::")
    with pytest.raises(RuntimeError, match="^Base onnx model cannot be None"):
        with onnxblock.base(None):
            pass
    with onnxblock.base(model):
        with pytest.raises(RuntimeError, match="^Base onnx model already exists"):
            with onnxblock.empty_base():
                pass


def test_forward_block_registers_its_output_and_to_model_proto():
    head = SigmoidHead()
    with pytest.raises(RuntimeError, match="^Please build the forward models first"):
        head.to_model_proto()
    with onnxblock.base(linear_model(WEIGHT, BIAS)):
        output = head("y")
    model = head.to_model_proto()
    assert [o.name for o in model.graph.output] == [output]
    assert model.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT
    assert [d.dim_param or d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim] == ["batch", 2]


def test_empty_base_builds_a_model_from_scratch():
    class TwoLayers(onnxblock.ForwardBlock):
        def build(self, input_name):
            hidden = onnxblock.blocks.Linear(3, 4)(input_name)
            return onnxblock.blocks.Linear(4, 2, bias=False, alpha=0.5)(hidden)

    block = TwoLayers()
    with onnxblock.empty_base(opset_version=17) as accessor:
        accessor.model.graph.input.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3]))
        block("x")
    model = block.to_model_proto()
    assert [(o.domain, o.version) for o in model.opset_import] == [("com.microsoft", 1), ("", 17)]
    assert op_types(model) == ["Gemm", "Gemm"] and model.graph.node[1].attribute[0].f == 0.5
    assert sorted(list(t.dims) for t in model.graph.initializer) == [[2, 4], [4], [4, 3]]
    onnx.checker.check_model(model, full_check=True)


def test_training_block_builds_training_and_eval_models_with_ort_requires_grad(tmp_path):
    block = MSETraining()
    for call in (block.parameters, block.to_model_proto):
        with pytest.raises(RuntimeError, match="^Please build the training"):
            call()
    block.requires_grad("weight")
    block.requires_grad("bias")
    block.requires_grad("bias", False)  # frozen: in the checkpoint, no gradient
    with onnxblock.base(linear_model(WEIGHT, BIAS)):
        loss_name = block("y")
    trainable, frozen = block.parameters()
    assert [p.name for p in trainable] == ["weight"] and [p.name for p in frozen] == ["bias"]
    np.testing.assert_array_equal(numpy_helper.to_array(trainable[0]), WEIGHT)
    training, evaluation = block.to_model_proto()
    assert [i.name for i in training.graph.input] == ["x", "target", "weight", "bias"]
    assert [o.name for o in training.graph.output][1:] == ["weight_grad"]
    assert [i.name for i in evaluation.graph.input] == ["x", "target", "weight", "bias"]
    assert loss_name.startswith("onnx::ReduceMean_output::")
    # the models train: the gradient is d mean((xW + b - t)^2) / dW
    directory = str(tmp_path)
    onnx.save(training, os.path.join(directory, "training.onnx"))
    onnxblock.save_checkpoint(block.parameters(), os.path.join(directory, "checkpoint"))
    state = CheckpointState.load_checkpoint(os.path.join(directory, "checkpoint"))
    assert state.parameters["weight"].grad is None  # no Module trains the state yet, as ORT
    module = Module(os.path.join(directory, "training.onnx"), state)
    assert state.parameters["weight"].grad.tolist() == [[0, 0]] * 3  # zeros before the first step, as ORT
    assert state.parameters["bias"].grad is None  # frozen: no gradient
    module(X, TARGET)
    residual = 2 * (X @ WEIGHT + BIAS - TARGET) / TARGET.size
    np.testing.assert_allclose(state.parameters["weight"].grad, X.T @ residual, rtol=1e-5, atol=1e-7)
    module.lazy_reset_grad()  # lazy, as ORT: the gradient stays until the next train step overwrites it
    np.testing.assert_allclose(state.parameters["weight"].grad, X.T @ residual, rtol=1e-5, atol=1e-7)
    module(X, TARGET)
    module(X, TARGET)  # then steps add up
    np.testing.assert_allclose(state.parameters["weight"].grad, 2 * X.T @ residual, rtol=1e-5, atol=1e-7)


def test_loss_blocks_build_on_their_own():
    with onnxblock.base(linear_model(WEIGHT, BIAS)) as accessor:
        ce = onnxblock.loss.CrossEntropyLoss(ignore_index=-1)("y")
        bce = onnxblock.loss.BCEWithLogitsLoss(weight=np.float32(2), pos_weight=np.array([1, 3], np.float32))("y")
        l1 = onnxblock.loss.L1Loss(reduction="none")("y", "target")
        model = accessor.model
    inputs = {i.name: i for i in model.graph.input}
    assert inputs["labels"].type.tensor_type.elem_type == TensorProto.INT64  # ORT's labels
    assert [d.dim_param for d in inputs["labels"].type.tensor_type.shape.dim] == ["batch"]
    assert inputs["target"].type.tensor_type.elem_type == TensorProto.FLOAT
    assert list(inputs) == ["x", "labels", "target"]  # the BCE target is reused by L1 (the name exists)
    node = next(n for n in model.graph.node if n.output[0] == ce)
    assert node.op_type == "SoftmaxCrossEntropyLoss" and helper.get_attribute_value(node.attribute[0]) == -1
    assert next(n for n in model.graph.node if n.output[0] == l1).op_type == "Abs"  # reduction none
    assert next(n for n in model.graph.node if n.output[0] == bce).op_type == "ReduceMean"


def test_optimizer_blocks_build_the_optimizer_model(tmp_path):
    paths = artifacts.generate_artifacts(linear_model(WEIGHT, BIAS), ["weight", "bias"],
                                         loss=artifacts.LossType.MSELoss, artifact_directory=tmp_path)
    assert "optimizer_model" not in paths  # optimizer=None, as ORT
    block = MSETraining()
    block.requires_grad("weight")
    block.requires_grad("bias")
    with onnxblock.base(linear_model(WEIGHT, BIAS)):
        block("y")
    sgd = onnxblock.optim.SGD()
    with pytest.raises(RuntimeError, match="^Please build the forward models first"):
        sgd.to_model_proto()
    with onnxblock.empty_base(opset_version=17):
        sgd(block.parameters())
    onnx.save(sgd.to_model_proto(), tmp_path / "sgd.onnx")
    state = CheckpointState.load_checkpoint(paths["checkpoint"])
    module = Module(paths["training_model"], state, paths["eval_model"])
    optimizer = Optimizer(str(tmp_path / "sgd.onnx"), module)
    optimizer.set_learning_rate(0.5)
    assert optimizer.get_learning_rate() == 0.5
    module(X, TARGET)
    gradient = state.parameters["bias"].grad
    optimizer.step()
    np.testing.assert_allclose(state.parameters["bias"].data, BIAS - 0.5 * gradient, rtol=1e-6)
    with pytest.raises(TypeError, match="clip_grad must be an onnxblock.optim.ClipGradNorm"):
        onnxblock.optim.AdamW(clip_grad=1.0)


def test_checkpoint_utils_save_and_load_into_a_model(tmp_path):
    trainable = [numpy_helper.from_array(WEIGHT * 2, "weight")]
    frozen = [numpy_helper.from_array(BIAS + 1, "bias")]
    onnxblock.save_checkpoint((trainable, frozen), tmp_path / "checkpoint")
    onnxblock.save_checkpoint((trainable, frozen), tmp_path / "nominal", nominal_checkpoint=True)
    state = CheckpointState.load_checkpoint(tmp_path / "checkpoint")
    assert [(name, p.requires_grad) for name, p in state.parameters] == [("weight", True), ("bias", False)]
    np.testing.assert_array_equal(state.parameters["weight"].data, WEIGHT * 2)
    model = linear_model(WEIGHT, BIAS)
    onnxblock.load_checkpoint_to_model(tmp_path / "checkpoint", model)
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    np.testing.assert_array_equal(values["weight"], WEIGHT * 2)
    np.testing.assert_array_equal(values["bias"], BIAS + 1)
    assert os.path.getsize(tmp_path / "nominal") < os.path.getsize(tmp_path / "checkpoint")
    with pytest.raises(RuntimeError, match="^No checkpoint parameters provided.$"):
        onnxblock.save_checkpoint(None, tmp_path / "none")
    with pytest.raises(edgetrain.InvalidArgument, match="save_checkpoint: parameter 'weight' is given twice"):
        onnxblock.save_checkpoint((trainable, trainable), tmp_path / "twice")


def test_no_trainable_parameter_still_gives_eval_and_inference_artifacts(tmp_path):
    paths = artifacts.generate_artifacts(str(MLP), loss=artifacts.LossType.CrossEntropyLoss,
                                         optimizer=artifacts.OptimType.AdamW, artifact_directory=tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["checkpoint", "eval_model.onnx", "training_model.onnx"]
    state = CheckpointState.load_checkpoint(paths["checkpoint"])
    assert len(state.parameters) == 0  # ORT: unlisted initializers stay constants of the graphs
    assert {t.name for t in onnx.load(paths["eval_model"]).graph.initializer} >= set(MLP_PARAMETERS)
    module = Module(paths["training_model"], state, paths["eval_model"])
    images, labels = np.ones((2, 1, 28, 28), np.float32), np.array([3, 4], np.int64)
    training_loss = module(images, labels)
    assert module.get_parameters_size() == 0
    module.eval()
    np.testing.assert_allclose(module(images, labels), training_loss, rtol=1e-6)
    module.export_model_for_inferencing(tmp_path / "inference.onnx", ["output"])
    assert [o.name for o in onnx.load(tmp_path / "inference.onnx").graph.output] == ["output"]


def test_nominal_state_reads_raise_until_parameters_are_loaded(tmp_path):
    paths = artifacts.generate_artifacts(str(MLP), MLP_PARAMETERS, loss=artifacts.LossType.CrossEntropyLoss,
                                         artifact_directory=tmp_path, nominal_checkpoint=True)
    nominal = CheckpointState.load_checkpoint(paths["nominal_checkpoint"])
    message = ("Cannot get parameter 'net.1.bias' from a nominal state: load the parameter values first "
               "(Module.copy_buffer_to_parameters(buffer, trainable_only=False))")
    with pytest.raises(edgetrain.InvalidArgument) as raised:
        nominal.parameters["net.1.bias"]
    assert str(raised.value) == message and isinstance(raised.value, RuntimeError)  # ORT raises RuntimeError
    module = Module(paths["training_model"], nominal, paths["eval_model"])
    with pytest.raises(edgetrain.InvalidArgument) as raised:
        module.get_contiguous_parameters()
    assert str(raised.value) == ("CopyParametersToBuffer: the checkpoint is nominal; supply the parameters with "
                                 "CopyBufferToParameters(buffer, trainable_only=false) first")
    complete = Module(paths["training_model"], CheckpointState.load_checkpoint(paths["checkpoint"]))
    module.copy_buffer_to_parameters(complete.get_contiguous_parameters(), trainable_only=False)
    np.testing.assert_array_equal(module.get_contiguous_parameters(), complete.get_contiguous_parameters())
    np.testing.assert_array_equal(nominal.parameters["net.1.bias"].data,  # readable once loaded
                                  CheckpointState.load_checkpoint(paths["checkpoint"]).parameters["net.1.bias"].data)


@pytest.mark.parametrize("one_file", [True, False])
def test_models_with_external_data_in_and_out(tmp_path, one_file):
    model = onnx.load(MLP)
    for index, tensor in enumerate(model.graph.initializer):  # external data needs raw_data
        model.graph.initializer[index].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor), tensor.name))
    path = tmp_path / "external.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=one_file,
                    location="weights.bin" if one_file else None, size_threshold=0)
    assert len(os.listdir(tmp_path)) == (2 if one_file else 1 + len(MLP_PARAMETERS))
    trained = MLP_PARAMETERS[:4]  # net.5.* stay constants of the graphs, kept as external data like the input's
    external = artifacts.generate_artifacts(str(path), trained, loss=artifacts.LossType.CrossEntropyLoss,
                                            optimizer=artifacts.OptimType.SGD, artifact_directory=tmp_path / "out")
    inline = artifacts.generate_artifacts(onnx.load(MLP), trained, loss=artifacts.LossType.CrossEntropyLoss,
                                          optimizer=artifacts.OptimType.SGD, artifact_directory=tmp_path / "inline")
    written = sorted(os.listdir(tmp_path / "out"))
    data_files = (["eval_model.onnx.data", "training_model.onnx.data"] if one_file else ["net.5.weight"])
    assert written == sorted(["checkpoint", "eval_model.onnx", "optimizer_model.onnx", "training_model.onnx",
                              *data_files])
    assert os.path.getsize(external["training_model"]) < 10_000 < os.path.getsize(inline["training_model"])
    with open(external["checkpoint"], "rb") as a, open(inline["checkpoint"], "rb") as b:
        assert a.read() == b.read()
    images, labels = np.random.default_rng(1).random((4, 1, 28, 28), np.float32), np.arange(4, dtype=np.int64)
    results = []
    for paths in (external, inline):
        module = Module(paths["training_model"], CheckpointState.load_checkpoint(paths["checkpoint"]),
                        paths["eval_model"])
        Optimizer(paths["optimizer_model"], module)
        module.train()
        loss = module(images, labels)
        module.eval()
        results.append((loss, module(images, labels)))
    np.testing.assert_array_equal(results[0], results[1])
    model.graph.initializer[0].ClearField("raw_data")  # save_model moved the data out of this proto
    with pytest.raises(RuntimeError, match="^tensor 'net.1.weight' keeps its data in an external file: pass the "
                                           "model's path$"):
        artifacts.generate_artifacts(model, MLP_PARAMETERS, artifact_directory=tmp_path / "no_path")


class EveryBlock(onnxblock.TrainingBlock):
    """The loss is sum(y); every other block's output is returned after it."""

    def build(self, y):
        b = onnxblock.blocks
        self.names = {
            "div": b.Div()(y, b.Constant(2.0)()), "neg": b.Neg()(y), "abs": b.Abs()(y), "sigmoid": b.Sigmoid()(y),
            "log": b.Log()(b.Abs()(y)), "pow": b.Pow(3.0)(y), "sub": b.Sub()(y, b.Constant(1.0)()),
            "mean": b.ReduceMean(keepdims=True)(y), "clip": b.Clip(-0.5, 0.5)(y),
            "cast": b.Cast(TensorProto.DOUBLE)(y), "l2": b.ReduceAllL2()(y, y),
            "clip_scale": onnxblock.optim.ClipGradNorm(0.1)(y), "mul_add": b.Add()(b.Mul()(y, y), y),
        }
        return (b.ReduceSum(keepdims=False)(y), *self.names.values())


def test_every_building_block_computes_onnx_semantics(tmp_path):
    block = EveryBlock()
    with onnxblock.base(linear_model(WEIGHT, BIAS)):
        block("y")
    training, evaluation = block.to_model_proto()
    onnx.save(training, tmp_path / "training.onnx")
    onnx.save(evaluation, tmp_path / "eval.onnx")
    onnxblock.save_checkpoint(block.parameters(), tmp_path / "checkpoint")
    module = Module(str(tmp_path / "training.onnx"), CheckpointState.load_checkpoint(tmp_path / "checkpoint"),
                    str(tmp_path / "eval.onnx"))
    module.eval()
    loss, *values = module(X)
    y = X @ WEIGHT + BIAS
    np.testing.assert_allclose(loss, y.sum(), rtol=1e-5)
    expected = {"div": y / 2, "neg": -y, "abs": np.abs(y), "sigmoid": 1 / (1 + np.exp(-y)), "log": np.log(np.abs(y)),
                "pow": y ** 3, "sub": y - 1, "mean": y.mean(keepdims=True), "clip": np.clip(y, -0.5, 0.5),
                "cast": y.astype(np.float64), "l2": np.sqrt(2 * (y ** 2).sum()),
                "clip_scale": min(1, 0.1 / (np.sqrt((y ** 2).sum()) + 1e-6)), "mul_add": y * y + y}
    assert list(block.names) == list(expected)
    for (name, value), got in zip(expected.items(), values):
        assert got.dtype == np.asarray(value).dtype or name != "cast", name
        np.testing.assert_allclose(got, value, rtol=1e-5, atol=1e-6, err_msg=name)


def test_sequence_and_label_encoder_blocks_build_their_nodes():
    with onnxblock.base(linear_model(WEIGHT, BIAS)) as accessor:
        sequence = onnxblock.blocks.SequenceConstruct()("y", "x")
        encoded = onnxblock.blocks.LabelEncoder(keys_int64s=[1, 2], values_int64s=[10, 20])(
            onnxblock.blocks.Cast(TensorProto.INT64)("y"))
        model = accessor.model
    node = next(n for n in model.graph.node if n.output[0] == sequence)
    assert node.op_type == "SequenceConstruct" and list(node.input) == ["y", "x"]
    node = next(n for n in model.graph.node if n.output[0] == encoded)
    assert (node.domain, node.op_type) == ("ai.onnx.ml", "LabelEncoder")
    attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attributes["keys_int64s"] == [1, 2] and attributes["values_int64s"] == [10, 20]
    assert ("ai.onnx.ml", 2) in [(o.domain, o.version) for o in model.opset_import]


def test_api_submodules_and_defaults_as_ort():
    from edgetrain import api
    from edgetrain.api.checkpoint_state import CheckpointState as state_class, Parameter, Parameters, Properties
    from edgetrain.api.lr_scheduler import LinearLRScheduler
    from edgetrain.api.module import Module as module_class
    from edgetrain.api.optimizer import Optimizer as optimizer_class
    assert (state_class, module_class, optimizer_class, LinearLRScheduler) == (
        api.CheckpointState, api.Module, api.Optimizer, api.LinearLRScheduler)
    assert (Parameter, Parameters, Properties) == (api.Parameter, api.Parameters, api.Properties)
    import inspect
    assert inspect.signature(api.Module.get_parameters_size).parameters["trainable_only"].default is True
    assert inspect.signature(api.Module.get_contiguous_parameters).parameters["trainable_only"].default is False
    assert [p.default for p in inspect.signature(artifacts.generate_artifacts).parameters.values()
            if p.kind != p.KEYWORD_ONLY][1:] == [  # edgetrain's additions are keyword-only
        None, None, None, None, None, "", False, None, None, False, None]
