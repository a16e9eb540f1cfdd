"""Federated learning with Flower (``pip install edgetrain[flwr]``): edgetrain trains on each device, Flower runs
the rounds, the strategies (FedAvg, FedProx, FedAdam, ...), differential privacy and the failure handling.

The model travels as one float32 array, the session's flat parameter buffer (``Module.get_contiguous_parameters``):
by default the trainable parameters only, so head-only personalization sends the head and not the frozen backbone.
Any artifact set works, ours or ONNX Runtime's: ``training_model.onnx``, ``eval_model.onnx``,
``optimizer_model.onnx`` and ``checkpoint`` in one directory.

    client:  edgetrain.federated.client_app:app  (a Flower ClientApp; EdgetrainClient is the NumPyClient)
    server:  edgetrain.federated.server_app:app  (a Flower ServerApp)
    scripts/federated.sh starts a SuperLink and one SuperNode per client on loopback and runs both.
"""

import gzip
import logging
import math
import os

import numpy as np

from .. import InvalidArgument
from ..api import CheckpointState, Module, Optimizer

__all__ = ["ARRAY_KEY", "InvalidUpdate", "LocalTrainer", "check_update", "dirichlet_shards", "load_idx", "to_arrays",
           "from_arrays", "validated"]

ARRAY_KEY = "parameters"  # the name of the one array of an ArrayRecord
logger = logging.getLogger("edgetrain.federated")


class InvalidUpdate(InvalidArgument):
    """A client's update the server refuses: wrong element type or size, or values that are not finite."""


def check_update(buffer, expected_size, client):
    """Raises InvalidUpdate naming ``client`` unless ``buffer`` is a finite float32 vector of ``expected_size``."""
    if not isinstance(buffer, np.ndarray):
        raise InvalidUpdate(f"client {client}: the update is a {type(buffer).__name__}, not an array")
    if buffer.dtype != np.float32:
        raise InvalidUpdate(f"client {client}: the parameter buffer is {buffer.dtype}, not float32")
    if buffer.ndim != 1 or buffer.size != expected_size:
        raise InvalidUpdate(f"client {client}: the parameter buffer has shape {list(buffer.shape)}, "
                            f"expected [{expected_size}]")
    bad = np.count_nonzero(~np.isfinite(buffer))
    if bad:
        first = int(np.flatnonzero(~np.isfinite(buffer))[0])
        raise InvalidUpdate(f"client {client}: the parameter buffer has {bad} values that are not finite "
                            f"(the first at index {first}: {buffer[first]})")


def to_arrays(buffer):
    """A flat parameter buffer as a Flower ArrayRecord (one array, ARRAY_KEY)."""
    from flwr.app import Array, ArrayRecord
    return ArrayRecord({ARRAY_KEY: Array(np.ascontiguousarray(buffer, dtype=np.float32))})


def from_arrays(record):
    """The flat parameter buffer an ArrayRecord carries (InvalidUpdate when it carries anything else)."""
    if list(record.keys()) != [ARRAY_KEY]:
        raise InvalidUpdate(f"the ArrayRecord holds {list(record.keys())}, expected ['{ARRAY_KEY}']")
    return record[ARRAY_KEY].numpy()


class LocalTrainer:
    """One device's model: a TrainingSession over an artifact directory, trained and evaluated on NumPy data.

    Args:
        artifacts: the directory with training_model.onnx, eval_model.onnx, optimizer_model.onnx, checkpoint.
        trainable_only: the buffer exchanged holds the trainable parameters only (else every parameter).
        threads: intra-op threads (0: every core).
    """

    def __init__(self, artifacts, trainable_only=True, threads=0):
        paths = {name: os.path.join(artifacts, name) for name in
                 ("checkpoint", "training_model.onnx", "eval_model.onnx", "optimizer_model.onnx")}
        for path in paths.values():
            if not os.path.exists(path):
                raise InvalidArgument(f"federated: artifact '{path}' does not exist")
        self.artifacts = artifacts
        self.trainable_only = trainable_only
        self.state = CheckpointState.load_checkpoint(paths["checkpoint"])
        options = type("SessionOptions", (), {"intra_op_num_threads": threads})()
        self.module = Module(paths["training_model.onnx"], self.state, paths["eval_model.onnx"],
                             session_options=options)
        self.optimizer = Optimizer(paths["optimizer_model.onnx"], self.module)
        self.base_lr = self.optimizer.get_learning_rate()

    @property
    def size(self):
        return self.module.get_parameters_size(self.trainable_only)

    def get_parameters(self):
        return np.array(self.module.get_contiguous_parameters(self.trainable_only), dtype=np.float32)

    def set_parameters(self, buffer):
        check_update(buffer, self.size, "server")
        self.module.copy_buffer_to_parameters(np.ascontiguousarray(buffer), self.trainable_only)

    def fit(self, images, labels, epochs=1, batch_size=64, lr=None, seed=0, proximal_mu=0.0):
        """Trains ``epochs`` passes over the shuffled data; returns the mean train loss. With ``proximal_mu`` (FedProx)
        each optimizer step is followed by a decoupled proximal step w -= lr * mu * (w - w_start)."""
        if lr:
            self.optimizer.set_learning_rate(lr)
        lr = self.optimizer.get_learning_rate()
        start_weights = self.get_parameters() if proximal_mu > 0 else None
        rng = np.random.default_rng(seed)
        self.module.train()
        losses = []
        for _ in range(epochs):
            order = rng.permutation(len(labels))
            for start in range(0, len(order), batch_size):
                batch = order[start:start + batch_size]
                outputs = self.module(images[batch], labels[batch])
                loss = outputs[0] if isinstance(outputs, tuple) else outputs
                losses.append(float(loss))
                self.optimizer.step()
                self.module.lazy_reset_grad()
                if start_weights is not None:
                    weights = self.get_parameters()
                    weights -= np.float32(lr * proximal_mu) * (weights - start_weights)
                    self.module.copy_buffer_to_parameters(weights, self.trainable_only)
        return float(np.mean(losses)) if losses else math.nan

    def evaluate(self, images, labels, batch_size=1000):
        """(mean loss, accuracy) with the eval model; accuracy is NaN when the eval model returns no logits."""
        self.module.eval()
        loss_sum, correct, have_logits = 0.0, 0, False
        for start in range(0, len(labels), batch_size):
            x, y = images[start:start + batch_size], labels[start:start + batch_size]
            outputs = self.module(x, y)
            outputs = outputs if isinstance(outputs, tuple) else (outputs,)
            loss_sum += float(outputs[0]) * len(y)
            if len(outputs) > 1 and outputs[1].ndim == 2:
                have_logits = True
                correct += int(np.count_nonzero(outputs[1].argmax(axis=1) == y))
        self.module.train()
        return loss_sum / len(labels), (correct / len(labels) if have_logits else math.nan)

    def save(self, checkpoint_path, inference_model_path=None, output_names=("output",)):
        """Writes the current parameters as an edgetrain checkpoint and, if asked, an inference ONNX model."""
        CheckpointState.save_checkpoint(self.state, checkpoint_path)
        if inference_model_path:
            self.module.export_model_for_inferencing(inference_model_path, list(output_names))


def load_idx(images_path, labels_path):
    """An IDX image/label pair (gzip or not) as float32 images [N, 1, rows, cols] in [0, 1] and int64 labels."""
    def read(path):
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as f:
            data = f.read()
        if len(data) < 4 or data[:2] != b"\0\0" or data[2] != 8:
            raise InvalidArgument(f"federated: '{path}' is not an IDX file of unsigned bytes")
        dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(data[3])]
        body = np.frombuffer(data, np.uint8, offset=4 + 4 * len(dims))
        if body.size != np.prod(dims):
            raise InvalidArgument(f"federated: '{path}' holds {body.size} bytes, its header says {dims}")
        return body.reshape(dims)
    images, labels = read(images_path), read(labels_path)
    if len(images) != len(labels):
        raise InvalidArgument(f"federated: {len(images)} images in '{images_path}' but {len(labels)} labels")
    return (images.reshape(len(images), 1, *images.shape[1:]).astype(np.float32) / 255.0,
            labels.astype(np.int64))


def dirichlet_shards(labels, num_clients, alpha, seed=0, min_size=10):
    """Label-skewed non-IID split: each class is divided among the clients in Dirichlet(alpha) proportions
    (resampled until every client holds at least ``min_size`` samples). Returns one index array per client."""
    if num_clients < 1 or alpha <= 0:
        raise InvalidArgument(f"federated: need num_clients >= 1 and alpha > 0, got {num_clients} and {alpha}")
    rng = np.random.default_rng(seed)
    for _ in range(100):
        shards = [[] for _ in range(num_clients)]
        for label in np.unique(labels):
            members = rng.permutation(np.flatnonzero(labels == label))
            cuts = (np.cumsum(rng.dirichlet([alpha] * num_clients)) * len(members)).astype(int)[:-1]
            for shard, part in zip(shards, np.split(members, cuts)):
                shard.extend(part.tolist())
        if min(map(len, shards)) >= min_size:
            return [np.array(sorted(shard), dtype=np.int64) for shard in shards]
    raise InvalidArgument(f"federated: no Dirichlet({alpha}) split gives {num_clients} clients {min_size} samples each")


def validated(strategy, expected_size, events=None):
    """Wraps a Flower strategy so that every client update is checked before it is aggregated: an update of the
    wrong size or type, or with NaN/Inf, is refused (InvalidUpdate logged, naming the client) and the round goes
    on with the others. ``events(dict)``, if given, receives each refusal."""
    base = type(strategy)

    class Validated(base):
        def aggregate_train(self, server_round, replies):
            accepted = []
            for reply in list(replies):
                if reply.has_error():
                    accepted.append(reply)  # Flower logs and drops failed replies itself
                    continue
                client = f"node {reply.metadata.src_node_id}"
                try:
                    metrics = [r for r in reply.content.metric_records.values()]
                    if metrics and "client-id" in metrics[0]:
                        client = f"{int(metrics[0]['client-id'])} ({client})"
                    records = list(reply.content.array_records.values())
                    if len(records) != 1:
                        raise InvalidUpdate(f"client {client}: the reply holds {len(records)} ArrayRecords, not 1")
                    try:
                        buffer = from_arrays(records[0])
                    except InvalidUpdate as error:
                        raise InvalidUpdate(f"client {client}: {error}") from error
                    check_update(buffer, expected_size, client)
                    accepted.append(reply)
                except InvalidUpdate as error:
                    logger.error("round %d: update refused: InvalidUpdate: %s", server_round, error)
                    if events:
                        events({"event": "refused", "round": server_round, "error": "InvalidUpdate",
                                "message": str(error)})
            arrays, metrics = base.aggregate_train(self, server_round, accepted)
            if arrays is not None:
                try:
                    check_update(from_arrays(arrays), expected_size, "aggregate")
                except InvalidUpdate as error:  # keep the previous global model
                    logger.error("round %d: aggregate refused: InvalidUpdate: %s", server_round, error)
                    return None, metrics
            return arrays, metrics

    strategy.__class__ = Validated
    return strategy
