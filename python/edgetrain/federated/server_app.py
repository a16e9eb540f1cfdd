"""The server side: a Flower ServerApp running one of Flower's strategies on edgetrain parameter buffers.

Run config (the Flower App's pyproject.toml, or ``flwr run --run-config``): ``artifacts``, ``num-rounds``,
``strategy`` (fedavg, fedprox, fedadam, fedavgm, fedyogi, fedadagrad, fedmedian, fedtrimmedavg), ``proximal-mu``,
``server-lr``, ``fraction-train``, ``fraction-evaluate``, ``min-nodes``, ``round-timeout`` (seconds a round
waits for late or dead clients), ``dp-noise`` and ``dp-clip`` (Flower's client-side fixed-clipping DP; use
``client_app:dp_app``), ``test-data`` (.npz with images and labels: the global model's test set) and ``out-dir``
(rounds.jsonl, events.jsonl, the final global_checkpoint and global_model.onnx)."""

import json
import os
import time

import numpy as np
from flwr.app import ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp import strategy as strategies

from . import LocalTrainer, from_arrays, to_arrays, validated

STRATEGIES = {"fedavg": strategies.FedAvg, "fedprox": strategies.FedProx, "fedadam": strategies.FedAdam,
              "fedavgm": strategies.FedAvgM, "fedyogi": strategies.FedYogi, "fedadagrad": strategies.FedAdagrad,
              "fedmedian": strategies.FedMedian, "fedtrimmedavg": strategies.FedTrimmedAvg}


def make_strategy(run, events=None, expected_size=None):
    """The configured Flower strategy, with DP if asked, wrapped so that invalid updates are refused."""
    name = str(run.get("strategy", "fedavg")).lower()
    if name not in STRATEGIES:
        raise ValueError(f"run config 'strategy': unknown strategy '{name}' (known: {', '.join(STRATEGIES)})")
    min_nodes = int(run.get("min-nodes", 2))
    fraction_evaluate = float(run.get("fraction-evaluate", 0.0))
    kwargs = dict(fraction_train=float(run.get("fraction-train", 1.0)), fraction_evaluate=fraction_evaluate,
                  min_train_nodes=min_nodes, min_available_nodes=min_nodes,
                  min_evaluate_nodes=min_nodes if fraction_evaluate > 0 else 0)
    if name == "fedprox":
        kwargs["proximal_mu"] = float(run.get("proximal-mu", 0.01))
    if name in ("fedadam", "fedyogi", "fedadagrad"):
        kwargs["eta"] = float(run.get("server-lr", 0.01))
    if name == "fedavgm":
        kwargs["server_learning_rate"] = float(run.get("server-lr", 1.0))
    strategy = STRATEGIES[name](**kwargs)
    if float(run.get("dp-noise", 0.0)) > 0:
        strategy = strategies.DifferentialPrivacyClientSideFixedClipping(
            strategy, noise_multiplier=float(run["dp-noise"]), clipping_norm=float(run.get("dp-clip", 1.0)),
            num_sampled_clients=min_nodes)
    return validated(strategy, expected_size, events) if expected_size is not None else strategy


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    run = context.run_config
    out_dir = str(run["out-dir"])
    os.makedirs(out_dir, exist_ok=True)
    started = time.time()

    def write(name, record):
        with open(os.path.join(out_dir, name), "a") as f:
            f.write(json.dumps({"time": round(time.time() - started, 3), **record}) + "\n")

    trainer = LocalTrainer(str(run["artifacts"]), trainable_only=bool(run.get("trainable-only", True)),
                           threads=int(run.get("threads", 1)))
    test = np.load(str(run["test-data"]))
    strategy = make_strategy(run, lambda event: write("events.jsonl", event), trainer.size)

    def evaluate(server_round, arrays):
        trainer.set_parameters(from_arrays(arrays))
        loss, accuracy = trainer.evaluate(test["images"], test["labels"])
        write("rounds.jsonl", {"round": server_round, "accuracy": accuracy, "loss": loss,
                               "nodes": len(list(grid.get_node_ids()))})
        return MetricRecord({"accuracy": accuracy, "loss": loss})

    config = {k: run[k] for k in ("local-epochs", "batch-size") if k in run}
    result = strategy.start(grid=grid, initial_arrays=to_arrays(trainer.get_parameters()),
                            num_rounds=int(run.get("num-rounds", 3)), timeout=float(run.get("round-timeout", 600)),
                            train_config=ConfigRecord(config), evaluate_fn=evaluate)
    trainer.set_parameters(from_arrays(result.arrays))
    trainer.save(os.path.join(out_dir, "global_checkpoint"), os.path.join(out_dir, "global_model.onnx"))
    write("events.jsonl", {"event": "done", "rounds": int(run.get("num-rounds", 3))})


secagg_app = ServerApp()


@secagg_app.main()
def secagg_main(grid: Grid, context: Context) -> None:
    """FedAvg under Flower's SecAgg+ (its legacy workflow API, the only one that has it): the server sees the sum of
    the masked, quantized updates only, so updates cannot be checked one by one here. Pair with client_app:secagg_app.
    Extra run config: ``secagg-shares`` and ``secagg-threshold``."""
    from flwr.common import ndarrays_to_parameters
    from flwr.server import LegacyContext, ServerConfig
    from flwr.server.strategy import FedAvg as LegacyFedAvg
    from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow

    run = context.run_config
    out_dir = str(run["out-dir"])
    os.makedirs(out_dir, exist_ok=True)
    started = time.time()
    trainer = LocalTrainer(str(run["artifacts"]), threads=int(run.get("threads", 1)))
    test = np.load(str(run["test-data"]))

    def evaluate(server_round, ndarrays, config):
        trainer.set_parameters(np.asarray(ndarrays[0], np.float32))  # SecAgg+ dequantizes to float64
        loss, accuracy = trainer.evaluate(test["images"], test["labels"])
        with open(os.path.join(out_dir, "rounds.jsonl"), "a") as f:
            f.write(json.dumps({"time": round(time.time() - started, 3), "round": server_round, "accuracy": accuracy,
                                "loss": loss, "nodes": len(list(grid.get_node_ids()))}) + "\n")
        return loss, {"accuracy": accuracy}

    min_nodes = int(run.get("min-nodes", 2))
    strategy = LegacyFedAvg(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=min_nodes,
                            min_available_clients=min_nodes, evaluate_fn=evaluate,
                            initial_parameters=ndarrays_to_parameters([trainer.get_parameters()]))
    rounds = int(run.get("num-rounds", 3))
    legacy = LegacyContext(context=context, strategy=strategy,
                           config=ServerConfig(num_rounds=rounds, round_timeout=float(run.get("round-timeout", 600))))
    fit = SecAggPlusWorkflow(num_shares=int(run.get("secagg-shares", min_nodes)),
                             reconstruction_threshold=int(run.get("secagg-threshold", max(2, min_nodes - 1))),
                             timeout=float(run.get("round-timeout", 600)))
    DefaultWorkflow(fit_workflow=fit)(grid, legacy)
    trainer.set_parameters(legacy.state.array_records["parameters"].to_numpy_ndarrays()[0].astype(np.float32))
    trainer.save(os.path.join(out_dir, "global_checkpoint"), os.path.join(out_dir, "global_model.onnx"))
    with open(os.path.join(out_dir, "events.jsonl"), "a") as f:
        f.write(json.dumps({"event": "done", "rounds": rounds}) + "\n")
