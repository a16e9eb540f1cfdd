"""edgetrain.api (ORT's onnxruntime.training.api): CheckpointState, Module, Optimizer, LinearLRScheduler, and
edgetrain's errors as Python exceptions with edgetrain's messages."""


import numpy as np
import onnx
import pytest
from conftest import MLP, MLP_PARAMETERS, cross_entropy, mlp_forward
from onnx import numpy_helper

import edgetrain
from edgetrain import artifacts
from edgetrain.api import CheckpointState, LinearLRScheduler, Module, Optimizer

rng = np.random.default_rng(7)
IMAGES = rng.random((16, 1, 28, 28), dtype=np.float32)
LABELS = rng.integers(0, 10, 16).astype(np.int64)  # ORT's CrossEntropyLoss labels


def parameter_values(state):
    return {name: parameter.data for name, parameter in state.parameters}


def session(paths, optimizer=True):
    state = CheckpointState.load_checkpoint(paths["checkpoint"])
    module = Module(paths["training_model"], state, paths["eval_model"])
    return state, module, Optimizer(paths["optimizer_model"], module) if optimizer else None


def test_checkpoint_parameters_are_a_mapping_by_name(mlp_artifacts):
    state = CheckpointState.load_checkpoint(mlp_artifacts["checkpoint"])
    parameters = state.parameters
    assert parameters.keys() == ["net.1.bias", "net.1.weight", "net.3.bias", "net.3.weight", "net.5.bias",
                                 "net.5.weight"]
    assert len(parameters) == 6 and "net.3.bias" in parameters and "nope" not in parameters
    weight = parameters["net.1.weight"]
    assert (weight.name, weight.requires_grad, weight.data.shape, weight.data.dtype) == \
        ("net.1.weight", True, (512, 784), np.float32)
    assert [name for name, _ in parameters] == parameters.keys()  # ORT iterates (name, Parameter) pairs
    assert parameters.get("nope") is None and parameters.get("net.5.bias").name == "net.5.bias"

    initial = {t.name: numpy_helper.to_array(t) for t in onnx.load(MLP).graph.initializer}
    bias = parameters["net.5.bias"].data
    np.testing.assert_array_equal(bias, initial["net.5.bias"])
    bias[:] = 7  # data is a copy
    assert not np.any(parameters["net.5.bias"].data == 7)
    parameters["net.5.bias"] = np.arange(10, dtype=np.float32)
    np.testing.assert_array_equal(parameters["net.5.bias"].data, np.arange(10))
    parameters["net.5.bias"].data = np.ones(10, np.float32)
    np.testing.assert_array_equal(parameters["net.5.bias"].data, np.ones(10))


def test_properties_round_trip_through_a_saved_checkpoint(mlp_artifacts, tmp_path):
    state = CheckpointState.load_checkpoint(mlp_artifacts["checkpoint"])
    state.properties["epoch"] = 3
    state.properties["best_accuracy"] = 0.875
    state.properties["note"] = "fashion"
    state["flag"] = True  # ORT 1.15's item access on the state; a bool is stored as an int
    assert len(state.properties) == 4 and "epoch" in state.properties and "epoch" in state
    CheckpointState.save_checkpoint(state, tmp_path / "saved")
    loaded = CheckpointState.load_checkpoint(tmp_path / "saved")
    assert dict(loaded.properties.items()) == {"best_accuracy": 0.875, "epoch": 3, "flag": 1, "note": "fashion"}
    assert type(loaded.properties["epoch"]) is int and loaded["note"] == "fashion"
    with open(tmp_path / "saved", "rb") as file:
        from_bytes = CheckpointState.load_checkpoint(file.read())
    assert from_bytes.properties["epoch"] == 3
    for name, parameter in loaded.parameters:
        np.testing.assert_array_equal(parameter.data, state.parameters[name].data)


def test_steps_compute_what_numpy_computes(mlp_artifacts):
    state, module, _ = session(mlp_artifacts, optimizer=False)
    assert module.input_names() == ["input", "labels"] and module.output_names() == ["loss", "output"]
    expected_logits = mlp_forward(parameter_values(state), IMAGES)
    loss, logits = module(IMAGES, LABELS)
    np.testing.assert_allclose(logits, expected_logits, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(loss, cross_entropy(expected_logits, LABELS), rtol=1e-5)
    eval_loss, eval_logits = module.eval()(IMAGES, LABELS)
    assert module.training is False and module.input_names() == ["input", "labels"]
    np.testing.assert_allclose(eval_logits, expected_logits, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(eval_loss, loss, rtol=1e-6)


def test_inputs_in_any_layout_and_outputs_owned_by_the_caller(mlp_artifacts):
    _, module, _ = session(mlp_artifacts, optimizer=False)
    module.eval()
    _, logits = module(IMAGES, LABELS)
    for images in (np.asfortranarray(IMAGES), np.repeat(IMAGES, 2, axis=0)[::2]):
        np.testing.assert_array_equal(module(images, LABELS)[1], logits)
    kept = logits.copy()
    module(IMAGES[::-1].copy(), LABELS[::-1].copy())  # a later step does not overwrite earlier outputs
    np.testing.assert_array_equal(logits, kept)
    logits[:] = 0  # and outputs are writable arrays of their own
    assert not np.any(module(IMAGES, LABELS)[1] == 0)


def test_gradients_accumulate_until_lazy_reset_grad(tmp_path):
    paths = artifacts.generate_artifacts(str(MLP), MLP_PARAMETERS, loss=artifacts.LossType.CrossEntropyLoss,
                                         artifact_directory=tmp_path, optimizer=artifacts.OptimType.SGD)

    def update(train_steps):
        state, module, optimizer = session(paths)
        optimizer.set_learning_rate(0.1)
        before = module.get_contiguous_parameters()
        for _ in range(train_steps):
            module(IMAGES, LABELS)
        optimizer.step()
        module.lazy_reset_grad()
        return module.get_contiguous_parameters() - before

    once, twice = update(1), update(2)
    assert np.abs(once).max() > 1e-4
    np.testing.assert_allclose(twice, 2 * once, rtol=1e-4, atol=1e-7)


def test_linear_lr_scheduler_warms_up_then_decays_to_zero(mlp_artifacts):
    _, module, optimizer = session(mlp_artifacts)
    assert optimizer.get_learning_rate() == pytest.approx(1e-3)  # ORT's default
    optimizer.set_learning_rate(0.25)
    assert optimizer.get_learning_rate() == 0.25
    scheduler = LinearLRScheduler(optimizer, warmup_step_count=2, total_step_count=6, initial_lr=0.1)
    rates = [optimizer.get_learning_rate()]
    for _ in range(7):
        module(IMAGES, LABELS)
        optimizer.step()
        scheduler.step()
        module.lazy_reset_grad()
        rates.append(optimizer.get_learning_rate())
    np.testing.assert_allclose(rates, [0, 0.05, 0.1, 0.075, 0.05, 0.025, 0, 0], atol=1e-7)


def test_contiguous_parameters_round_trip(mlp_artifacts):
    state, module, _ = session(mlp_artifacts, optimizer=False)
    size = module.get_parameters_size()
    assert size == module.get_parameters_size(trainable_only=True) == 784 * 512 + 512 + 512 * 256 + 256 + 2570
    buffer = module.get_contiguous_parameters()
    assert buffer.shape == (size,) and buffer.dtype == np.float32
    values = parameter_values(state)  # in training-model order: net.1.weight, net.1.bias, net.3.weight, ...
    np.testing.assert_array_equal(buffer.numpy()[:512 * 784], values["net.1.weight"].ravel())
    np.testing.assert_array_equal(buffer[512 * 784:512 * 785], values["net.1.bias"])
    new_values = (np.arange(size) / size).astype(np.float32)
    module.copy_buffer_to_parameters(new_values)
    np.testing.assert_array_equal(state.parameters["net.1.bias"].data, new_values[512 * 784:512 * 785])


def test_resumed_training_continues_exactly(mlp_artifacts, tmp_path):
    def train(module, optimizer, steps):
        for step in range(steps):
            module(IMAGES[step::3], LABELS[step::3])
            optimizer.step()
            module.lazy_reset_grad()

    state, module, optimizer = session(mlp_artifacts)
    train(module, optimizer, 2)
    CheckpointState.save_checkpoint(state, tmp_path / "resume", include_optimizer_state=True)
    train(module, optimizer, 3)

    resumed = CheckpointState.load_checkpoint(tmp_path / "resume")
    module = Module(mlp_artifacts["training_model"], resumed, mlp_artifacts["eval_model"])
    train(module, Optimizer(mlp_artifacts["optimizer_model"], module), 3)
    for name, parameter in resumed.parameters:
        np.testing.assert_array_equal(parameter.data, state.parameters[name].data, err_msg=name)


def test_models_given_as_bytes(mlp_artifacts):
    def read(key):
        with open(mlp_artifacts[key], "rb") as file:
            return file.read()

    state = CheckpointState.load_checkpoint(read("checkpoint"))
    module = Module(read("training_model"), state, read("eval_model"))
    optimizer = Optimizer(read("optimizer_model"), module)
    loss, _ = module(IMAGES, LABELS)
    optimizer.step()
    assert np.isfinite(loss) and loss > 0


def test_export_for_inferencing_bakes_in_the_trained_parameters(mlp_artifacts, tmp_path):
    state, module, optimizer = session(mlp_artifacts)
    module(IMAGES, LABELS)
    optimizer.step()
    module.export_model_for_inferencing(tmp_path / "inference.onnx", ["output"])
    exported = onnx.load(tmp_path / "inference.onnx")
    onnx.checker.check_model(exported)
    assert [i.name for i in exported.graph.input] == ["input"] and [o.name for o in exported.graph.output] == ["output"]
    baked = {t.name: numpy_helper.to_array(t) for t in exported.graph.initializer}
    for name, parameter in state.parameters:
        np.testing.assert_array_equal(baked[name], parameter.data, err_msg=name)


def test_export_by_the_base_models_output_name_without_additional_outputs(tmp_path):
    plain = artifacts.generate_artifacts(str(MLP), MLP_PARAMETERS, loss=artifacts.LossType.CrossEntropyLoss,
                                         optimizer=artifacts.OptimType.AdamW, artifact_directory=tmp_path / "plain")
    state, module, optimizer = session(plain)
    module(IMAGES, LABELS)
    optimizer.step()
    module.export_model_for_inferencing(tmp_path / "inference.onnx", ["output"])
    exported = onnx.load(tmp_path / "inference.onnx")
    onnx.checker.check_model(exported)
    assert [o.name for o in exported.graph.output] == ["output"]
    assert exported.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    baked = {t.name: numpy_helper.to_array(t) for t in exported.graph.initializer}
    assert sorted(baked) == sorted(name for name, _ in state.parameters)
    for name, parameter in state.parameters:
        np.testing.assert_array_equal(baked[name], parameter.data, err_msg=name)
    with pytest.raises(edgetrain.InvalidArgument, match="has no output or value 'logits'"):
        module.export_model_for_inferencing(tmp_path / "never.onnx", ["logits"])
    assert not (tmp_path / "never.onnx").exists()


def expect_error(kind, message, call):
    with pytest.raises(kind) as raised:
        call()
    assert str(raised.value) == message
    return raised.value


def test_edgetrain_errors_are_python_exceptions_with_the_same_message(mlp_artifacts, tmp_path):
    state, module, optimizer = session(mlp_artifacts)
    training_model = mlp_artifacts["training_model"]
    images, labels = IMAGES[:4], LABELS[:4]

    error = expect_error(edgetrain.InvalidArgument,
                         f"{training_model}: input 'input' expects rank 4 (float32 [batch, 1, 28, 28]) but was fed "
                         "shape [4, 784]", lambda: module(images.reshape(4, 784), labels))
    assert isinstance(error, edgetrain.Error) and isinstance(error, RuntimeError) and isinstance(error, ValueError)
    expect_error(edgetrain.InvalidArgument,
                 f"{training_model}: input 'labels' expects int64 [batch] but was fed int32 [4]",
                 lambda: module(images, labels.astype(np.int32)))
    expect_error(edgetrain.InvalidArgument,
                 f"{training_model}: input 'labels': dimension 0 ('batch') is 5 but another input has 'batch' = 4",
                 lambda: module(images, LABELS[:5]))
    expect_error(edgetrain.InvalidArgument, "TrainStep: expected 2 inputs (input, labels), got 1",
                 lambda: module(images))
    expect_error(edgetrain.InvalidArgument, "TrainStep input 'input': NumPy element type complex64 is not supported",
                 lambda: module(images.astype(np.complex64), labels))

    missing = tmp_path / "missing" / "checkpoint"
    expect_error(edgetrain.IoError, f"cannot open checkpoint '{missing}': No such file or directory",
                 lambda: CheckpointState.load_checkpoint(missing))
    expect_error(edgetrain.InvalidModel,
                 "checkpoint '<checkpoint bytes>' is not an ODTC checkpoint (file identifier 'age ', expected 'ODTC')",
                 lambda: CheckpointState.load_checkpoint(b"garbage bytes"))
    expect_error(edgetrain.IoError, f"cannot open model file '{tmp_path}/none.onnx'",
                 lambda: Module(tmp_path / "none.onnx", state))

    # Unknown names in the mappings are KeyErrors that carry edgetrain's message.
    for call, message in [(lambda: state.parameters["nope"], "GetParameter: checkpoint has no parameter 'nope'"),
                          (lambda: state.parameters.__setitem__("nope", np.zeros(3, np.float32)),
                           "UpdateParameter: checkpoint has no parameter 'nope'"),
                          (lambda: state.properties["nope"], "checkpoint has no property 'nope'")]:
        with pytest.raises(KeyError) as raised:
            call()
        assert raised.value.args == (message,) and isinstance(raised.value.__cause__, edgetrain.InvalidArgument)
    expect_error(edgetrain.InvalidArgument,
                 "UpdateParameter: parameter 'net.1.bias' has shape [512], the new value has shape [3]",
                 lambda: state.parameters.__setitem__("net.1.bias", np.zeros(3, np.float32)))
    expect_error(TypeError, "property 'p': a value must be int, float or str, got list",
                 lambda: state.properties.__setitem__("p", [1]))

    expect_error(edgetrain.InvalidArgument, "SetLearningRate: the learning rate must be >= 0, got -1",
                 lambda: optimizer.set_learning_rate(-1.0))
    expect_error(edgetrain.InvalidArgument,
                 "CopyBufferToParameters: the buffer must be float32 with 535818 elements, got float32 [3]",
                 lambda: module.copy_buffer_to_parameters(np.zeros(3, np.float32)))
    expect_error(edgetrain.InvalidArgument,
                 f"ExportModelForInference: the eval model '{mlp_artifacts['eval_model']}' has no output or value "
                 "'nope'", lambda: module.export_model_for_inferencing(tmp_path / "inference.onnx", ["nope"]))
    expect_error(edgetrain.InvalidArgument, "EvalStep: this session has no eval model",
                 lambda: Module(training_model, state).eval()(images, labels))
    module(images, labels)
    expect_error(edgetrain.InvalidArgument,
                 "Optimizer: create it before the module's first train step, or after lazy_reset_grad (the gradients "
                 "accumulated so far would be lost)", lambda: Optimizer(mlp_artifacts["optimizer_model"], module))
    with pytest.raises(ValueError, match="edgetrain trains on the CPU only"):
        Module(training_model, state, device="cuda")


@pytest.fixture(scope="module")
def lenet_artifacts(tmp_path_factory):
    """LeNet-BN (convolutions and BatchNormalization)."""
    model = onnx.load(str(MLP.parent / "lenet_bn.onnx"))
    initializers = {t.name: t for t in model.graph.initializer}
    for node in [n for n in model.graph.node if n.op_type == "Identity" and n.input[0] in initializers]:
        copy = onnx.TensorProto()  # PyTorch's export shares equal BatchNorm statistics through Identity nodes
        copy.CopyFrom(initializers[node.input[0]])
        copy.name = node.output[0]
        model.graph.initializer.append(copy)
        model.graph.node.remove(node)
    statistics = ("running_mean", "running_var")
    names = [t.name for t in model.graph.initializer]
    return artifacts.generate_artifacts(model, requires_grad=[n for n in names if not n.endswith(statistics)],
                                        frozen_params=[n for n in names if n.endswith(statistics)],
                                        loss=artifacts.LossType.CrossEntropyLoss, optimizer=artifacts.OptimType.AdamW,
                                        artifact_directory=tmp_path_factory.mktemp("lenet"))


def budgeted_losses(paths, steps, memory_budget=None):
    """Module(..., memory_budget=...) trained `steps` steps: the losses, the parameters and the memory plan."""
    state = CheckpointState.load_checkpoint(paths["checkpoint"])
    module = Module(paths["training_model"], state, paths["eval_model"], memory_budget=memory_budget)
    optimizer = Optimizer(paths["optimizer_model"], module)
    losses = []
    for step in range(steps):
        losses.append(float(module(IMAGES, LABELS)))
        optimizer.step()
        module.lazy_reset_grad()
    return losses, module.get_contiguous_parameters().numpy(), module.memory_plan()


def test_memory_budget_recomputes_to_the_same_losses_and_names_the_smallest_that_fits(lenet_artifacts):
    expected_losses, expected_parameters, free_plan = budgeted_losses(lenet_artifacts, 2)
    assert free_plan["arena_bytes"] > 0 and free_plan["recomputed_values"] == 0

    state = CheckpointState.load_checkpoint(lenet_artifacts["checkpoint"])
    tiny = Module(lenet_artifacts["training_model"], state, memory_budget="1K")
    with pytest.raises(edgetrain.ResourceExhausted, match="the memory budget of 1024 bytes cannot be met") as raised:
        tiny(IMAGES, LABELS)
    smallest = int(str(raised.value).split("a budget of at least ")[1].split()[0])
    assert 1024 < smallest <= free_plan["arena_bytes"]

    losses, parameters, plan = budgeted_losses(lenet_artifacts, 2, memory_budget=smallest)
    assert losses == expected_losses  # recomputation, where the plan needs it, gives the same bits
    np.testing.assert_array_equal(parameters, expected_parameters)
    assert plan["arena_bytes"] == smallest
    # A size with a suffix: 64 MiB leaves room to keep everything.
    losses, _, plan = budgeted_losses(lenet_artifacts, 1, memory_budget="64M")
    assert losses == expected_losses[:1] and plan == free_plan


def test_memory_budget_rejects_what_is_not_a_positive_size(lenet_artifacts):
    state = CheckpointState.load_checkpoint(lenet_artifacts["checkpoint"])
    model = lenet_artifacts["training_model"]
    for bad, message in [(0, "memory_budget: must be a positive number of bytes, got 0"),
                         (-5, "memory_budget: must be a positive number of bytes, got -5"),
                         (2**63, f"memory_budget: {2**63} bytes is too large"),
                         ("0", "memory_budget: '0' is zero"),
                         ("-1G", "memory_budget: '-1G' is negative"),
                         ("12X", "memory_budget: '12X' has an unknown unit"),
                         ("lots", "memory_budget: 'lots' is not a byte size")]:
        with pytest.raises(edgetrain.InvalidArgument) as raised:
            Module(model, state, memory_budget=bad)
        assert str(raised.value).startswith(message), (bad, str(raised.value))
    for bad in (1.5e9, True, [1]):
        with pytest.raises(TypeError, match="memory_budget: expected None, an int of bytes or a str"):
            Module(model, state, memory_budget=bad)
    with pytest.raises(TypeError):  # keyword only: ORT's positional signature stays as it is
        Module(model, state, None, "cpu", None, 1 << 30)
