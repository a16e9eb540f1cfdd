"""A Fashion-MNIST training script written for ONNX Runtime's on-device training API, in the style of ORT's
documentation. Moving it to edgetrain took one edit: its imports, `onnxruntime.training` -> `edgetrain`.
It trains the bundled MLP (models/mlp.onnx) for 5 epochs, batch 64, AdamW at lr 1e-3 decaying linearly to
0, and must reach 88% test accuracy."""

import gzip
import os
import pathlib

import numpy as np
import onnx

from edgetrain import artifacts  # ORT: from onnxruntime.training import artifacts
from edgetrain.api import CheckpointState, LinearLRScheduler, Module, Optimizer  # ORT: onnxruntime.training.api

MODEL_PATH = pathlib.Path(__file__).resolve().parents[2] / "models" / "mlp.onnx"
DATA_DIR = os.environ.get("EDGETRAIN_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
EPOCHS, BATCH_SIZE, LEARNING_RATE = 5, 64, 1e-3


def load_fashion_mnist(kind):
    with gzip.open(os.path.join(DATA_DIR, f"{kind}-images-idx3-ubyte.gz")) as file:
        images = np.frombuffer(file.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(os.path.join(DATA_DIR, f"{kind}-labels-idx1-ubyte.gz")) as file:
        labels = np.frombuffer(file.read(), np.uint8, offset=8)
    return (images / np.float32(255)).astype(np.float32), labels.astype(np.int64)


def test_ort_training_script_reaches_88_percent(tmp_path):
    artifact_directory = str(tmp_path)
    train_images, train_labels = load_fashion_mnist("train")
    test_images, test_labels = load_fashion_mnist("t10k")

    # Generate the training artifacts from the forward-only model.
    onnx_model = onnx.load(MODEL_PATH)
    requires_grad = [param.name for param in onnx_model.graph.initializer]
    frozen_params = []
    artifacts.generate_artifacts(
        onnx_model,
        requires_grad=requires_grad,
        frozen_params=frozen_params,
        loss=artifacts.LossType.CrossEntropyLoss,
        optimizer=artifacts.OptimType.AdamW,
        artifact_directory=artifact_directory,
        additional_output_names=["output"],
    )

    # Load the checkpoint state and create the module, the optimizer and the learning-rate scheduler.
    state = CheckpointState.load_checkpoint(os.path.join(artifact_directory, "checkpoint"))
    model = Module(
        os.path.join(artifact_directory, "training_model.onnx"),
        state,
        os.path.join(artifact_directory, "eval_model.onnx"),
    )
    optimizer = Optimizer(os.path.join(artifact_directory, "optimizer_model.onnx"), model)
    steps_per_epoch = -(-len(train_images) // BATCH_SIZE)
    scheduler = LinearLRScheduler(optimizer, 0, EPOCHS * steps_per_epoch, LEARNING_RATE)
    order = np.random.default_rng(0)

    def train(epoch):
        model.train()
        losses = []
        permutation = order.permutation(len(train_images))
        for start in range(0, len(train_images), BATCH_SIZE):
            batch = permutation[start:start + BATCH_SIZE]
            forward_inputs = [train_images[batch], train_labels[batch]]
            train_loss, _ = model(*forward_inputs)
            optimizer.step()
            scheduler.step()
            model.lazy_reset_grad()
            losses.append(train_loss)
        print(f"Epoch: {epoch + 1}, Train Loss: {sum(losses) / len(losses):.4f}, "
              f"Learning Rate: {optimizer.get_learning_rate():.6f}")

    def evaluate(epoch):
        model.eval()
        losses, correct = [], 0
        for start in range(0, len(test_images), 1000):
            forward_inputs = [test_images[start:start + 1000], test_labels[start:start + 1000]]
            test_loss, logits = model(*forward_inputs)
            losses.append(test_loss)
            correct += int((logits.argmax(axis=1) == forward_inputs[1]).sum())
        accuracy = correct / len(test_images)
        print(f"Epoch: {epoch + 1}, Test Loss: {sum(losses) / len(losses):.4f}, Accuracy: {accuracy:.4f}")
        return accuracy

    for epoch in range(EPOCHS):
        train(epoch)
        accuracy = evaluate(epoch)

    state.properties["epochs"] = EPOCHS
    state.properties["test_accuracy"] = accuracy
    CheckpointState.save_checkpoint(state, os.path.join(artifact_directory, "trained_checkpoint"))
    model.export_model_for_inferencing(os.path.join(artifact_directory, "inference_model.onnx"), ["output"])

    assert accuracy >= 0.88
    assert optimizer.get_learning_rate() == 0.0
    trained = CheckpointState.load_checkpoint(os.path.join(artifact_directory, "trained_checkpoint"))
    assert trained.properties["epochs"] == EPOCHS
    inference_model = onnx.load(os.path.join(artifact_directory, "inference_model.onnx"))
    assert [output.name for output in inference_model.graph.output] == ["output"]
