"""The device side: a Flower ClientApp (``app``; ``dp_app`` adds Flower's fixedclipping_mod for client-side
clipping under differential privacy; ``secagg_app`` speaks Flower's SecAgg+ with server_app:secagg_app) and a
NumPyClient (``EdgetrainClient``) for Flower's older client API.

Run config (the Flower App's pyproject.toml): ``artifacts`` (directory), ``local-epochs``, ``batch-size``,
``lr`` (0: the artifacts' own), ``lr-decay`` (round r trains with lr * lr-decay^(r-1)), ``trainable-only``,
``threads``. Node config (flower-supernode --node-config):
``data-path`` (an .npz with ``images`` and ``labels``: this device's data), ``client-id``, ``native-worker`` (the
path of examples/c/federated_worker: train with it instead of in this process), and ``fault``, a test
hook that makes this client send corrupt updates ("nan", "wrong-size", or a comma-separated list of them,
one per round in turn)."""

import os

import numpy as np
from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.client import NumPyClient
from flwr.clientapp import ClientApp
from flwr.client.mod import secaggplus_mod
from flwr.clientapp.mod import fixedclipping_mod

from .. import InvalidArgument
from . import LocalTrainer, from_arrays, to_arrays


class EdgetrainClient(NumPyClient):
    """Flower's NumPyClient over a LocalTrainer: the parameters are one flat float32 array."""

    def __init__(self, trainer, images, labels, epochs=1, batch_size=64, lr=0.0, client_id=0, fault="", lr_decay=1.0):
        self.trainer, self.images, self.labels = trainer, images, labels
        self.epochs, self.batch_size, self.lr, self.lr_decay = epochs, batch_size, lr, lr_decay
        self.client_id, self.fault = client_id, fault
        self.from_float64 = False  # SecAgg+ hands out the dequantized global model in float64

    def get_parameters(self, config):
        return [self.trainer.get_parameters()]

    def fit(self, parameters, config):
        if self.from_float64:
            parameters = [np.asarray(p, np.float32) if p.dtype == np.float64 else p for p in parameters]
        if len(parameters) != 1:
            raise ValueError(f"client {self.client_id}: expected one parameter buffer, got {len(parameters)} arrays")
        self.trainer.set_parameters(parameters[0])
        server_round = int(config.get("server-round", 0))
        lr = (self.lr or self.trainer.base_lr) * self.lr_decay ** max(0, server_round - 1)
        loss = self.trainer.fit(self.images, self.labels, self.epochs, self.batch_size, lr,
                                seed=1000 * self.client_id + server_round,
                                proximal_mu=float(config.get("proximal-mu", 0.0)))
        buffer = self.trainer.get_parameters()
        faults = self.fault.split(",") if self.fault else []
        fault = faults[(server_round - 1) % len(faults)] if faults else ""
        if fault == "nan":
            buffer[::7] = np.nan
        elif fault == "wrong-size":
            buffer = buffer[:-10]
        elif fault:
            raise ValueError(f"client {self.client_id}: unknown fault '{fault}' (nan, wrong-size)")
        return [buffer], len(self.labels), {"train-loss": loss, "client-id": self.client_id}

    def evaluate(self, parameters, config):
        self.trainer.set_parameters(np.asarray(parameters[0], np.float32) if self.from_float64 else parameters[0])
        loss, accuracy = self.trainer.evaluate(self.images, self.labels)
        return loss, len(self.labels), {"accuracy": accuracy, "client-id": self.client_id}


class NativeWorkerClient(NumPyClient):
    """A thin Flower client that drives a native edgetrain worker (examples/c/federated_worker.c, C ABI only): the
    shape of a device without Python, where this process only speaks Flower's protocol."""

    def __init__(self, worker, artifacts, images, labels, epochs=1, batch_size=64, lr=0.0, client_id=0,
                 lr_decay=1.0, timeout=600):
        self.worker, self.artifacts, self.timeout = worker, artifacts, timeout
        self.images, self.labels = np.ascontiguousarray(images, np.float32), np.ascontiguousarray(labels, np.int64)
        self.epochs, self.batch_size, self.lr, self.lr_decay = epochs, batch_size, lr, lr_decay
        self.client_id = client_id

    def _run(self, mode, parameters, extra):
        import subprocess
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            files = {name: os.path.join(tmp, name) for name in ("images", "labels", "in", "out")}
            self.images.tofile(files["images"])
            self.labels.tofile(files["labels"])
            np.ascontiguousarray(parameters, np.float32).tofile(files["in"])
            shape = "x".join(map(str, self.images.shape[1:]))
            cmd = [self.worker, mode, self.artifacts, shape, files["images"], files["labels"], files["in"]]
            done = subprocess.run(cmd + ([files["out"]] + extra if mode == "train" else []), capture_output=True,
                                  text=True, timeout=self.timeout)
            if done.returncode != 0:
                raise InvalidArgument(f"client {self.client_id}: the native worker failed: {done.stderr.strip()}")
            result = dict(item.split("=") for item in done.stdout.split())
            update = np.fromfile(files["out"], np.float32) if mode == "train" else None
        return update, int(result["samples"]), float(result["loss"]), float(result.get("accuracy", "nan"))

    def fit(self, parameters, config):
        server_round = int(config.get("server-round", 1))
        base_lr = self.lr or LocalTrainer(self.artifacts, threads=1).base_lr  # the artifacts' own rate
        lr = base_lr * self.lr_decay ** max(0, server_round - 1)
        update, count, loss, _ = self._run("train", parameters[0], [str(self.epochs), str(self.batch_size), repr(lr),
                                                                    str(1000 * self.client_id + server_round)])
        return [update], count, {"train-loss": loss, "client-id": self.client_id}

    def evaluate(self, parameters, config):
        _, count, loss, accuracy = self._run("eval", parameters[0], [])
        return loss, count, {"accuracy": accuracy, "client-id": self.client_id}


def client_from_context(context):
    """The EdgetrainClient a SuperNode's context describes (see the module's doc for the keys)."""
    run, node = context.run_config, context.node_config
    data = np.load(str(node["data-path"]))
    if node.get("native-worker"):
        return NativeWorkerClient(str(node["native-worker"]), str(run["artifacts"]), data["images"], data["labels"],
                                  epochs=int(run.get("local-epochs", 1)), batch_size=int(run.get("batch-size", 64)),
                                  lr=float(run.get("lr", 0.0)), client_id=int(node.get("client-id", 0)),
                                  lr_decay=float(run.get("lr-decay", 1.0)))
    trainer = LocalTrainer(str(run["artifacts"]), trainable_only=bool(run.get("trainable-only", True)),
                           threads=int(run.get("threads", 1)))
    return EdgetrainClient(trainer, data["images"], data["labels"], epochs=int(run.get("local-epochs", 1)),
                           batch_size=int(run.get("batch-size", 64)), lr=float(run.get("lr", 0.0)),
                           client_id=int(node.get("client-id", 0)), fault=str(node.get("fault", "")),
                           lr_decay=float(run.get("lr-decay", 1.0)))


def _train(message: Message, context: Context) -> Message:
    client = client_from_context(context)
    [buffer], count, metrics = client.fit([from_arrays(message.content["arrays"])],
                                          dict(message.content["config"]))
    content = RecordDict({"arrays": to_arrays(buffer),
                          "metrics": MetricRecord({**metrics, "num-examples": count})})
    return Message(content=content, reply_to=message)


def _evaluate(message: Message, context: Context) -> Message:
    client = client_from_context(context)
    loss, count, metrics = client.evaluate([from_arrays(message.content["arrays"])], {})
    content = RecordDict({"metrics": MetricRecord({**metrics, "eval-loss": loss, "num-examples": count})})
    return Message(content=content, reply_to=message)


def _make_app(mods):
    client_app = ClientApp(mods=mods)
    client_app.train()(_train)
    client_app.evaluate()(_evaluate)
    return client_app


app = _make_app([])
dp_app = _make_app([fixedclipping_mod])


def _secagg_client(context):
    client = client_from_context(context)
    client.from_float64 = True
    return client.to_client()


secagg_app = ClientApp(client_fn=_secagg_client, mods=[secaggplus_mod])
