"""edgetrain.federated with Flower: parameter round trips, refused updates, data splits, and a real federation
(SuperLink + SuperNodes, separate processes on loopback) with a late joiner, a killed client and a client sending
NaN / wrong-size updates. Run with the Flower venv's Python and the built package (ctest does this):
PYTHONPATH=build/python $EDGETRAIN_PEERS_DIR/venv-flower/bin/python -m pytest tests/federated"""
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict
from flwr.common import serde
from flwr.serverapp import strategy as strategies
from flwr.proto.recorddict_pb2 import ArrayRecord as ProtoArrayRecord
from flwr.supercore.task_identity import TaskIdentity

import edgetrain
from edgetrain.federated import (InvalidUpdate, LocalTrainer, check_update, dirichlet_shards, from_arrays, load_idx,
                                 to_arrays, validated)
from edgetrain.federated.client_app import EdgetrainClient, NativeWorkerClient
from edgetrain.federated.server_app import make_strategy

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("EDGETRAIN_CMAKE_BUILD_DIR", ROOT / "build"))
DATA = "/usr/share/datasets/fashion-mnist"


def generate(out, *options):
    subprocess.run([str(BUILD / "edgetrain"), "generate-artifacts", str(ROOT / "models" / "mlp.onnx"), "-o", str(out),
                    "--additional-output", "output", *options], check=True, stdout=subprocess.DEVNULL)
    return str(out)


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("mlp"))


@pytest.fixture(scope="module")
def head_only(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("head"), "--requires-grad", "net.5.weight", "net.5.bias")


@pytest.fixture(scope="module")
def fashion():
    images, labels = load_idx(f"{DATA}/t10k-images-idx3-ubyte.gz", f"{DATA}/t10k-labels-idx1-ubyte.gz")
    return images[:2000], labels[:2000]


def wire(record):
    """An ArrayRecord through Flower's protobuf wire format and back."""
    proto = ProtoArrayRecord()
    proto.ParseFromString(serde.array_record_to_proto(record).SerializeToString())
    return serde.array_record_from_proto(proto)


@pytest.mark.parametrize("trainable_only", [True, False])
def test_parameters_round_trip_bit_exact(mlp, trainable_only):
    sender, receiver = LocalTrainer(mlp, trainable_only), LocalTrainer(mlp, trainable_only)
    rng = np.random.default_rng(1)
    values = rng.standard_normal(sender.size).astype(np.float32)
    values[:4] = [np.float32(1e-45), -0.0, np.finfo(np.float32).max, np.float32(np.pi)]  # denormal, -0, extremes
    sender.set_parameters(values)
    received = from_arrays(wire(to_arrays(sender.get_parameters())))
    receiver.set_parameters(received)
    assert received.dtype == np.float32 and received.shape == (sender.size,)
    assert receiver.get_parameters().tobytes() == values.tobytes()
    assert sender.size == 535818  # the MLP trains every parameter


def test_head_only_sends_the_trainable_parameters(head_only):
    head = LocalTrainer(head_only)
    everything = LocalTrainer(head_only, trainable_only=False)
    assert head.size == 10 * 256 + 10  # kilobytes on the wire, not the 2 MB backbone
    assert everything.size == 535818
    record = to_arrays(head.get_parameters())
    assert sum(a.numpy().nbytes for a in record.values()) == 4 * 2570
    full, part = everything.get_parameters(), head.get_parameters()
    starts = [i for i in np.flatnonzero(full == part[0]) if np.array_equal(full[i:i + part.size], part)]
    assert len(starts) == 1  # the head's values, contiguous, inside the full buffer


def test_check_update_names_the_client():
    good = np.zeros(5, np.float32)
    check_update(good, 5, "3")
    cases = [(np.zeros(4, np.float32), "has shape [4], expected [5]"),
             (np.zeros((5, 1), np.float32), "has shape [5, 1], expected [5]"),
             (np.zeros(5, np.float64), "is float64, not float32"),
             (np.array([0, 0, np.nan, np.inf, 0], np.float32), "2 values that are not finite (the first at index 2"),
             ([0.0] * 5, "is a list, not an array")]
    for buffer, message in cases:
        with pytest.raises(InvalidUpdate) as error:
            check_update(buffer, 5, "7 (node 42)")
        assert "client 7 (node 42): " in str(error.value) and message in str(error.value)
        assert isinstance(error.value, edgetrain.InvalidArgument)


def test_from_arrays_refuses_other_records():
    with pytest.raises(InvalidUpdate, match=r"holds \['0', '1'\], expected \['parameters'\]"):
        from_arrays(ArrayRecord([np.zeros(2, np.float32), np.zeros(3, np.float32)]))


def reply(node_id, buffer, count, client_id):
    """The reply of node ``node_id`` to a train message, as the ServerApp receives it."""
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 0  # as in a ServerApp process
    request = Message(RecordDict({}), dst_node_id=node_id, message_type="train")
    record = ArrayRecord({"parameters": Array(buffer)})  # as sent, whatever its type
    return Message(RecordDict({"arrays": record, "metrics": MetricRecord({"num-examples": count,
                                                                          "client-id": client_id})}),
                   reply_to=request)


@pytest.mark.parametrize("strategy", [strategies.FedAvg(), strategies.FedProx(proximal_mu=0.1),
                                      strategies.FedMedian()])
def test_validated_strategy_refuses_bad_updates_and_keeps_the_average(strategy, caplog):
    events = []
    strategy = validated(strategy, 4, events.append)
    a, b = np.array([1, 2, 3, 4], np.float32), np.array([3, 2, 1, 0], np.float32)
    replies = [reply(11, a, 100, 0), reply(12, b, 100, 1),
               reply(13, np.array([1, np.nan, 0, 0], np.float32), 100, 2),
               reply(14, np.zeros(3, np.float32), 100, 3),
               reply(15, np.zeros(4, np.float64), 100, 4)]
    with caplog.at_level("ERROR", logger="edgetrain.federated"):
        arrays, metrics = strategy.aggregate_train(1, replies)
    np.testing.assert_array_equal(from_arrays(arrays), [2, 2, 2, 2])
    assert [e["message"].split(":")[0] for e in events] == ["client 2 (node 13)", "client 3 (node 14)",
                                                            "client 4 (node 15)"]
    assert all(e["error"] == "InvalidUpdate" and e["round"] == 1 for e in events)
    assert "update refused: InvalidUpdate: client 2 (node 13): the parameter buffer has 1 values" in caplog.text
    assert metrics["client-id"] == 0.5  # the metrics too come from the two accepted replies only


def test_validated_strategy_with_only_bad_updates_keeps_no_aggregate():
    strategy = validated(strategies.FedAvg(), 2)
    arrays, _ = strategy.aggregate_train(3, [reply(1, np.array([np.inf, 0], np.float32), 10, 0)])
    assert arrays is None  # Strategy.start keeps the previous global model


def test_make_strategy_configures_flower(tmp_path):
    assert type(make_strategy({"strategy": "fedadam", "server-lr": 0.05})).__name__ == "FedAdam"
    prox = make_strategy({"strategy": "FedProx", "proximal-mu": 0.3, "min-nodes": 4}, expected_size=3)
    assert isinstance(prox, strategies.FedProx) and prox.proximal_mu == 0.3 and prox.min_available_nodes == 4
    dp = make_strategy({"dp-noise": 0.5, "dp-clip": 2.0}, expected_size=3)
    assert isinstance(dp, strategies.DifferentialPrivacyClientSideFixedClipping)
    assert dp.clipping_norm == 2.0 and dp.noise_multiplier == 0.5
    with pytest.raises(ValueError, match="unknown strategy 'fedfoo'"):
        make_strategy({"strategy": "fedfoo"})


def test_client_fits_and_evaluates(mlp, fashion):
    images, labels = fashion
    client = EdgetrainClient(LocalTrainer(mlp, threads=1), images[:500], labels[:500], client_id=4)
    [start] = client.get_parameters({})
    [trained], count, metrics = client.fit([start], {"server-round": 1})
    assert count == 500 and metrics["client-id"] == 4 and 0 < metrics["train-loss"] < 2.4
    assert trained.shape == start.shape and np.isfinite(trained).all() and not np.array_equal(trained, start)
    loss, count, metrics = client.evaluate([trained], {})
    assert count == 500 and loss < 1.5 and metrics["accuracy"] > 0.5
    with pytest.raises(InvalidUpdate, match=r"client server: the parameter buffer has shape \[3\]"):
        client.fit([np.zeros(3, np.float32)], {})
    with pytest.raises(ValueError, match="expected one parameter buffer, got 2 arrays"):
        client.fit([start, start], {})


def test_client_faults_alternate(mlp, fashion):
    images, labels = fashion
    client = EdgetrainClient(LocalTrainer(mlp, threads=1), images[:64], labels[:64], fault="nan,wrong-size")
    [start] = client.get_parameters({})
    [first], _, _ = client.fit([start], {"server-round": 1})
    [second], _, _ = client.fit([start], {"server-round": 2})
    assert np.isnan(first).sum() == len(range(0, len(start), 7)) and second.size == start.size - 10
    with pytest.raises(ValueError, match="unknown fault 'crash'"):
        EdgetrainClient(client.trainer, images[:64], labels[:64], fault="crash").fit([start], {"server-round": 1})


def test_fedprox_proximal_step_pulls_towards_the_global_model(mlp, fashion):
    images, labels = fashion
    free, prox = LocalTrainer(mlp, threads=1), LocalTrainer(mlp, threads=1)
    start = free.get_parameters()
    free.fit(images[:256], labels[:256], seed=3)
    prox.fit(images[:256], labels[:256], seed=3, proximal_mu=50.0)
    assert np.linalg.norm(prox.get_parameters() - start) < 0.9 * np.linalg.norm(free.get_parameters() - start)


def test_dirichlet_shards():
    labels = np.repeat(np.arange(10), 100)
    shards = dirichlet_shards(labels, 5, 0.5, seed=2)
    joined = np.concatenate(shards)
    assert sorted(joined.tolist()) == list(range(1000))  # a partition: every sample once
    assert min(map(len, shards)) >= 10
    skew = max(np.bincount(labels[s], minlength=10).max() / len(s) for s in shards)
    assert skew > 0.25  # label skew (IID would give about 0.1 per class)
    np.testing.assert_array_equal(dirichlet_shards(labels, 5, 0.5, seed=2)[3], shards[3])
    for clients, alpha in [(0, 0.5), (3, 0.0), (3, -1.0)]:
        with pytest.raises(edgetrain.InvalidArgument, match="need num_clients >= 1 and alpha > 0"):
            dirichlet_shards(labels, clients, alpha)
    with pytest.raises(edgetrain.InvalidArgument, match="no Dirichlet"):
        dirichlet_shards(labels[:30], 5, 0.5, min_size=10)


def test_bad_inputs_are_named(tmp_path, mlp):
    with pytest.raises(edgetrain.InvalidArgument, match="artifact '.*missing/checkpoint' does not exist"):
        LocalTrainer(str(tmp_path / "missing"))
    (tmp_path / "images").write_bytes(b"\0\0\x08\x03" + (5).to_bytes(4, "big") + (2).to_bytes(4, "big") * 2 + b"\0")
    (tmp_path / "labels").write_bytes(b"\0\0\x08\x01" + (5).to_bytes(4, "big") + b"\0" * 5)
    with pytest.raises(edgetrain.InvalidArgument, match="holds 1 bytes, its header says \\[5, 2, 2\\]"):
        load_idx(str(tmp_path / "images"), str(tmp_path / "labels"))
    with pytest.raises(edgetrain.InvalidArgument, match="is not an IDX file"):
        load_idx(str(ROOT / "README.md"), str(tmp_path / "labels"))


def test_federation_on_loopback_survives_faults(tmp_path):
    """3 clients, 3 rounds, real processes: client 0 sends NaN then a wrong-size buffer, client 1 trains with the
    native C worker, client 3 joins after round 1, a client is killed (SIGKILL) in round 2 and restarted. Every
    round completes, the bad updates are refused naming client 0, the global model stays finite and learns, and no
    process outlives the script."""
    out = tmp_path / "federation"
    cmd = [sys.executable, str(ROOT / "scripts" / "federated.py"), "--clients", "4", "--late-join", "1",
           "--rounds", "3", "--samples", "4000", "--test-samples", "2000", "--bad-client", "nan,wrong-size",
           "--kill-every", "2", "--kill-delay", "0.5", "--restart-after", "3", "--round-timeout", "30",
           "--fraction-evaluate", "1", "--timeout", "230", "--edgetrain", str(BUILD / "edgetrain"), "--out", str(out),
           "--native-worker", str(BUILD / "examples" / "federated_worker"), "--native-clients", "1"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=270)
    print(result.stdout, result.stderr[-3000:])
    assert result.returncode == 0
    rounds = [json.loads(line) for line in open(out / "rounds.jsonl")]
    assert [r["round"] for r in rounds] == [0, 1, 2, 3]
    accuracies = [r["accuracy"] for r in rounds]
    assert accuracies[0] < 0.2 and accuracies[3] > 0.45 and accuracies[3] > accuracies[1]
    assert rounds[1]["nodes"] == 3 and max(r["nodes"] for r in rounds[2:]) >= 4  # the late joiner is in
    refused = [e for e in map(json.loads, open(out / "events.jsonl")) if e["event"] == "refused"]
    assert [(e["round"], e["message"].split(" (")[0]) for e in refused] == [(1, "client 0"), (2, "client 0"),
                                                                           (3, "client 0")]
    assert "not finite" in refused[0]["message"] and "has shape [535808], expected [535818]" in refused[1]["message"]
    assert "killing client" in result.stdout and "client 3 joins late" in result.stdout
    assert "client 1: native worker" in result.stdout
    assert (out / "accuracy.png").stat().st_size > 1000
    final = LocalTrainer(str(out / "artifacts"))
    state = edgetrain.api.CheckpointState.load_checkpoint(str(out / "global_checkpoint"))
    final_weights = np.concatenate([state.parameters[n].data.ravel() for n in ("net.1.weight", "net.1.bias",
                                    "net.3.weight", "net.3.bias", "net.5.weight", "net.5.bias")])
    assert np.isfinite(final_weights).all() and not np.array_equal(final_weights, final.get_parameters())
    assert (out / "global_model.onnx").stat().st_size > 2_000_000
    assert processes_with_env(f"FLWR_HOME={out}/flwr-home") == []


def processes_with_env(entry):
    found = []
    for proc in pathlib.Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and entry.encode() in (proc / "environ").read_bytes().split(b"\0"):
                found.append(int(proc.name))
        except OSError:
            pass
    return found


@pytest.fixture(scope="module")
def worker():
    path = BUILD / "examples" / "federated_worker"
    assert path.exists(), f"{path} is not built (ninja -C build federated_worker)"
    return str(path)


def test_native_worker_trains_like_the_python_client(mlp, fashion, worker):
    """One full-batch step: the C worker and the in-process client start from the same buffer and agree (to float
    rounding: a few weights differ in the last bits)."""
    images, labels = fashion
    images, labels = images[:256], labels[:256]
    native = NativeWorkerClient(worker, mlp, images, labels, batch_size=256, lr=1e-3, client_id=2)
    local = EdgetrainClient(LocalTrainer(mlp, threads=1), images, labels, batch_size=256, lr=1e-3, client_id=2)
    [start] = local.get_parameters({})
    [ours], count, metrics = native.fit([start], {"server-round": 1})
    [theirs], _, local_metrics = local.fit([start], {"server-round": 1})
    assert count == 256 and metrics["client-id"] == 2 and ours.shape == start.shape
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5)
    assert metrics["train-loss"] == pytest.approx(local_metrics["train-loss"], rel=1e-5)
    loss, count, metrics = native.evaluate([ours], {})
    local_loss, _, local_metrics = local.evaluate([ours], {})
    assert count == 256 and loss == pytest.approx(local_loss, rel=1e-5)
    assert metrics["accuracy"] == local_metrics["accuracy"]


def test_native_worker_errors_name_the_file(mlp, fashion, worker, tmp_path):
    images, labels = fashion
    native = NativeWorkerClient(worker, mlp, images[:8], labels[:8], client_id=5, lr=1e-3)
    with pytest.raises(edgetrain.InvalidArgument, match=r"client 5: the native worker failed: .*'.*/in' holds 12 "
                       r"bytes, the trainable buffer is 535818 floats"):
        native.fit([np.zeros(3, np.float32)], {})
    broken = NativeWorkerClient(worker, str(tmp_path), images[:8], labels[:8], client_id=6, lr=1e-3)
    with pytest.raises(edgetrain.InvalidArgument,
                       match=r"client 6: the native worker failed: federated_worker: load checkpoint: cannot open "):
        broken.evaluate([np.zeros(3, np.float32)], {})
    usage = subprocess.run([worker, "train", mlp], capture_output=True, text=True)
    assert usage.returncode == 2 and "usage: federated_worker train" in usage.stderr


def test_secagg_client_takes_the_dequantized_float64_model(mlp, fashion):
    images, labels = fashion
    client = EdgetrainClient(LocalTrainer(mlp, threads=1), images[:64], labels[:64])
    [start] = client.get_parameters({})
    with pytest.raises(InvalidUpdate, match="is float64, not float32"):
        client.fit([start.astype(np.float64)], {})
    client.from_float64 = True  # as client_app:secagg_app sets it
    [trained], count, _ = client.fit([start.astype(np.float64)], {"server-round": 1})
    assert trained.dtype == np.float32 and count == 64 and np.isfinite(trained).all()
