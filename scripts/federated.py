"""Federated learning on one machine with Flower's Deployment Runtime: one SuperLink and one SuperNode per client,
separate processes on loopback, each client training the bundled MLP with edgetrain on its own non-IID
(Dirichlet label skew) shard of Fashion-MNIST. Prints the global model's test accuracy per round, writes
rounds.jsonl, events.jsonl, accuracy.png, the final global checkpoint and an inference ONNX model into --out.
Faults on request: --kill-every K (a client is killed mid-round every K rounds and restarted), --late-join N
(N clients start after round 1), --bad-client nan|wrong-size (one client sends corrupt updates);
--native-clients K: K clients train with the native C worker (examples/c/federated_worker.c) instead.
Run it with scripts/federated.sh (the Flower venv and the built package)."""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = "/usr/share/datasets/fashion-mnist"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Federation:
    """The processes of one federation; each in its own process group, all ended by stop()."""

    def __init__(self, out, env):
        self.out, self.env, self.procs, self.nodes = out, env, [], {}
        self.port = free_port()

    def spawn(self, name, cmd):
        log = open(os.path.join(self.out, "logs", name + ".log"), "ab")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        self.procs.append(proc)
        return proc

    def start_superlink(self):
        self.spawn("superlink", ["flower-superlink", "--insecure", "--port", str(self.port),
                                 "--disable-runtime-dependency-installation"])
        deadline = time.time() + 60
        while time.time() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.2)
        raise RuntimeError(f"the SuperLink did not open port {self.port} within 60 s (logs/superlink.log)")

    def start_client(self, client_id, fault="", native_worker=""):
        config = f'data-path="{self.out}/data/client-{client_id}.npz" client-id={client_id}'
        if native_worker:
            config += f' native-worker="{native_worker}"'
        if fault:
            config += f' fault="{fault}"'
        self.nodes[client_id] = self.spawn(f"client-{client_id}", [
            "flower-supernode", "--insecure", "--superlink", f"127.0.0.1:{self.port}", "--port", str(free_port()),
            "--node-config", config, "--max-wait-time", "120"])

    def kill_client(self, client_id):
        os.killpg(self.nodes[client_id].pid, signal.SIGKILL)  # the SuperNode and its ClientApp process
        self.nodes[client_id].wait()

    def detached(self):
        """Processes of this federation outside our process groups (Flower starts its SuperExec in a new session):
        found by the FLWR_HOME every one of them inherits."""
        marker = f"FLWR_HOME={self.env['FLWR_HOME']}".encode()
        found = []
        for entry in os.listdir("/proc"):
            try:
                if entry.isdigit() and marker in open(f"/proc/{entry}/environ", "rb").read().split(b"\0"):
                    found.append(int(entry))
            except OSError:
                pass
        return [pid for pid in found if pid != os.getpid()]

    def stop(self):
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.time() + 10
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in self.detached():
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
            deadline = time.time() + 5
            while self.detached() and time.time() < deadline:
                time.sleep(0.1)


def prepare_data(args, out):
    from edgetrain.federated import dirichlet_shards, load_idx
    images, labels = load_idx(f"{DATA}/train-images-idx3-ubyte.gz", f"{DATA}/train-labels-idx1-ubyte.gz")
    test_images, test_labels = load_idx(f"{DATA}/t10k-images-idx3-ubyte.gz", f"{DATA}/t10k-labels-idx1-ubyte.gz")
    if args.samples:
        images, labels = images[:args.samples], labels[:args.samples]
    if args.test_samples:
        test_images, test_labels = test_images[:args.test_samples], test_labels[:args.test_samples]
    os.makedirs(f"{out}/data", exist_ok=True)
    shards = dirichlet_shards(labels, args.clients, args.alpha, seed=args.seed)
    for i, shard in enumerate(shards):
        np.savez(f"{out}/data/client-{i}.npz", images=images[shard], labels=labels[shard])
        counts = np.bincount(labels[shard], minlength=10)
        print(f"client {i}: {len(shard)} samples, per class {counts.tolist()}")
    np.savez(f"{out}/data/test.npz", images=test_images, labels=test_labels)


def write_app(args, out, artifacts):
    """The Flower App: only a pyproject.toml; its components come from the installed edgetrain package."""
    clientapp = "dp_app" if args.dp_noise > 0 else "secagg_app" if args.secagg else "app"
    serverapp = "secagg_app" if args.secagg else "app"
    fraction_evaluate = args.fraction_evaluate
    config = {"artifacts": artifacts, "out-dir": out, "test-data": f"{out}/data/test.npz",
              "num-rounds": args.rounds, "strategy": args.strategy, "local-epochs": args.local_epochs,
              "batch-size": args.batch_size, "lr": args.lr, "lr-decay": args.lr_decay, "min-nodes": args.min_nodes,
              "fraction-train": 1.0, "fraction-evaluate": fraction_evaluate, "round-timeout": args.round_timeout,
              "proximal-mu": args.proximal_mu, "server-lr": args.server_lr, "dp-noise": args.dp_noise,
              "dp-clip": args.dp_clip, "trainable-only": True, "threads": 1}
    lines = ["[build-system]", 'requires = ["hatchling"]', 'build-backend = "hatchling.build"', "",
             "[project]", 'name = "edgetrain-federated"', 'version = "1.0.0"',
             'description = "edgetrain devices training one model with Flower"', 'license = "Apache-2.0"',
             "dependencies = []", "", "[tool.flwr.app]", 'publisher = "edgetrain"', "",
             "[tool.flwr.app.components]", f'serverapp = "edgetrain.federated.server_app:{serverapp}"',
             f'clientapp = "edgetrain.federated.client_app:{clientapp}"', "", "[tool.flwr.app.config]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in config.items()]
    os.makedirs(f"{out}/app", exist_ok=True)
    with open(f"{out}/app/pyproject.toml", "w") as f:
        f.write("\n".join(lines) + "\n")


def plot(png, runs, title):
    """Test accuracy per round of each (label, rounds) in ``runs``, into ``png``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=100)
    for label, rounds in runs:
        ax.plot([r["round"] for r in rounds], [100 * r["accuracy"] for r in rounds], marker="o", markersize=3,
                label=label)
    ax.axhline(85, color="gray", linestyle="--", linewidth=1)
    ax.set_ylim(bottom=50)
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    if len(runs) > 1:
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(png)


def read_jsonl(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.endswith("\n")]


def run(args):
    out = os.path.abspath(args.out)
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(f"{out}/logs")
    artifacts = os.path.abspath(args.artifacts) if args.artifacts else f"{out}/artifacts"
    if not args.artifacts:
        subprocess.run([args.edgetrain, "generate-artifacts", os.path.join(ROOT, "models", "mlp.onnx"), "-o",
                        artifacts, "--additional-output", "output"], check=True, stdout=subprocess.DEVNULL)
    prepare_data(args, out)
    late = set(range(args.clients - args.late_join, args.clients))
    args.min_nodes = args.min_nodes or args.clients - len(late)
    write_app(args, out, artifacts)
    env = dict(os.environ, FLWR_HOME=f"{out}/flwr-home", PYTHONUNBUFFERED="1",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))  # Flower's commands
    fed = Federation(out, env)
    os.makedirs(env["FLWR_HOME"])
    with open(f"{env['FLWR_HOME']}/config.toml", "w") as f:
        f.write(f'[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = "127.0.0.1:{fed.port}"\n'
                "insecure = true\n")
    first_native = 1 if args.bad_client else 0  # native clients: the first healthy ones

    def native(i):
        return os.path.abspath(args.native_worker) if first_native <= i < first_native + args.native_clients else ""

    for i in range(args.clients):
        if native(i):
            print(f"client {i}: native worker {native(i)}")
    deadline = time.time() + args.timeout
    failure = None
    try:
        fed.start_superlink()
        for i in range(args.clients):
            if i not in late:
                fed.start_client(i, args.bad_client if args.bad_client and i == 0 else "", native(i))
        runner = fed.spawn("flwr-run", ["flwr", "run", f"{out}/app", "local", "--stream"])
        printed, killed, restarts = 0, {}, []
        rng = np.random.default_rng(args.seed)
        while True:
            rounds = read_jsonl(f"{out}/rounds.jsonl")
            for r in rounds[printed:]:
                print(f"round {r['round']:3d}: test accuracy {100 * r['accuracy']:.2f}%  loss {r['loss']:.4f}  "
                      f"({r['nodes']} clients connected, {r['time']:.1f} s)", flush=True)
                if r["round"] == 1 and late:
                    for i in sorted(late):
                        print(f"  client {i} joins late", flush=True)
                        fed.start_client(i, native_worker=native(i))
                next_round = r["round"] + 1
                if args.kill_every and next_round % args.kill_every == 0 and next_round <= args.rounds:
                    healthy = [i for i in fed.nodes if i not in killed and (i != 0 or not args.bad_client)]
                    restarts.append((time.time() + args.kill_delay, int(rng.choice(healthy)), next_round))
            printed = len(rounds)
            for when, victim, rnd in list(restarts):
                if time.time() >= when and victim not in killed:
                    print(f"  killing client {victim} (SIGKILL) in the middle of round {rnd}", flush=True)
                    fed.kill_client(victim)
                    killed[victim] = time.time()
                    restarts.remove((when, victim, rnd))
            for victim, at in list(killed.items()):
                if time.time() - at > args.restart_after:
                    print(f"  client {victim} restarts", flush=True)
                    fed.start_client(victim, native_worker=native(victim))
                    del killed[victim]
            if any(e.get("event") == "done" for e in read_jsonl(f"{out}/events.jsonl")):
                break
            if runner.poll() is not None and printed == len(read_jsonl(f"{out}/rounds.jsonl")):
                time.sleep(1)
                if not any(e.get("event") == "done" for e in read_jsonl(f"{out}/events.jsonl")):
                    failure = f"flwr run exited with {runner.returncode} before the last round (logs/flwr-run.log)"
                    break
            if time.time() > deadline:
                failure = f"the federation did not finish within {args.timeout} s"
                break
            time.sleep(0.2)
    finally:
        fed.stop()
    for e in read_jsonl(f"{out}/events.jsonl"):
        if e.get("event") == "refused":
            print(f"round {e['round']}: refused an update: {e['error']}: {e['message']}")
    rounds = read_jsonl(f"{out}/rounds.jsonl")
    if rounds:
        label = f"{args.strategy}" + (f", a client killed every {args.kill_every} rounds" if args.kill_every else "")
        with open(f"{out}/label.txt", "w") as f:
            f.write(label)
        plot(f"{out}/accuracy.png", [(label, rounds)],
             f"Fashion-MNIST MLP, {args.clients} clients, Dirichlet alpha {args.alpha}: {label}")
    if failure:
        sys.exit(f"federated: {failure}")
    best = max(r["accuracy"] for r in rounds)
    print(f"final test accuracy {100 * rounds[-1]['accuracy']:.2f}% (best {100 * best:.2f}%) after "
          f"{rounds[-1]['round']} rounds; plot {out}/accuracy.png, model {out}/global_model.onnx")
    if args.target and rounds[-1]["accuracy"] < args.target:
        sys.exit(f"federated: final accuracy {100 * rounds[-1]['accuracy']:.2f}% is below the target "
                 f"{100 * args.target:.0f}%")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--clients", type=int, default=10)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--alpha", type=float, default=0.5, help="Dirichlet concentration (smaller: more skewed)")
    p.add_argument("--strategy", default="fedavg")
    p.add_argument("--local-epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=0.0, help="client learning rate (0: the artifacts')")
    p.add_argument("--lr-decay", type=float, default=0.9, help="round r trains with lr * lr_decay^(r-1)")
    p.add_argument("--proximal-mu", type=float, default=0.01)
    p.add_argument("--server-lr", type=float, default=0.01)
    p.add_argument("--dp-noise", type=float, default=0.0, help="> 0: Flower's client-side fixed-clipping DP")
    p.add_argument("--dp-clip", type=float, default=1.0)
    p.add_argument("--secagg", action="store_true", help="FedAvg under Flower's SecAgg+ (no per-update checks)")
    p.add_argument("--fraction-evaluate", type=float, default=0.0, help="clients that also evaluate on their data")
    p.add_argument("--min-nodes", type=int, default=0, help="clients a round needs (0: all but the late ones)")
    p.add_argument("--round-timeout", type=float, default=120.0, help="seconds a round waits for its clients")
    p.add_argument("--kill-every", type=int, default=0)
    p.add_argument("--kill-delay", type=float, default=1.0, help="seconds into the round the client is killed")
    p.add_argument("--restart-after", type=float, default=5.0)
    p.add_argument("--late-join", type=int, default=0)
    p.add_argument("--bad-client", default="", help="client 0 sends corrupt updates: nan, wrong-size, or both "
                   "alternating (nan,wrong-size)")
    p.add_argument("--native-clients", type=int, default=0, help="clients that train with the native C worker")
    p.add_argument("--native-worker", default=os.path.join(ROOT, "build", "examples", "federated_worker"))
    p.add_argument("--samples", type=int, default=0, help="use the first N training images only (0: all)")
    p.add_argument("--test-samples", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", type=float, default=0.0, help="fail below this final test accuracy (0..1)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds before everything is stopped")
    p.add_argument("--artifacts", default="", help="an artifact directory (default: the MLP's, generated)")
    p.add_argument("--edgetrain", default=os.path.join(ROOT, "build", "edgetrain"))
    p.add_argument("--out", default=os.path.join(ROOT, "build", "federated"))
    p.add_argument("--plot-only", nargs="+", metavar="DIR", help="only plot these earlier runs together into --out")
    args = p.parse_args()
    if args.plot_only:
        runs = [(open(f"{d}/label.txt").read(), read_jsonl(f"{d}/rounds.jsonl")) for d in args.plot_only]
        plot(args.out, runs, "Fashion-MNIST MLP, federated on Flower (test accuracy of the global model)")
    else:
        run(args)


if __name__ == "__main__":
    main()
