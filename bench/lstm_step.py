#!/usr/bin/python3
"""One training step of the sequential Fashion-MNIST LSTM (issue 19): batch 64, 28 steps of 28 inputs,
nn.LSTM with 128 hidden units, the last step into a Linear layer, cross-entropy, AdamW; 1 thread.
edgetrain (`edgetrain generate-artifacts`, then `train_step_bench train`: train step + optimizer step +
lazy gradient reset) against PyTorch's `nn.LSTM` in its best configuration (OpenBLAS forced onto this
CPU's kernel with OPENBLAS_CORETYPE as bench/zoo.py does; the kernel it ran is printed), in alternating
rounds, each round's median step and the ratio of each round. Target: edgetrain <= 0.5x PyTorch.
--cpu measures CPU time per step instead of wall time (steadier on a shared machine): each side runs
10 and 60 steps and the difference of the two processes' CPU time is divided by 50 (bench/cpu_step.py).

    /usr/bin/python3 bench/lstm_step.py [--build build] [--rounds 5] [--quick] [--cpu]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import zoo  # noqa: E402  (torch_env, openblas_kernel: the PyTorch peer's configuration)
from cpu_step import cpu_seconds  # noqa: E402

BATCH, STEPS, FEATURES, HIDDEN, CLASSES = 64, 28, 28, 128, 10


def make_model():
    import torch

    class SequentialLSTM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(FEATURES, HIDDEN, batch_first=True)
            self.head = torch.nn.Linear(HIDDEN, CLASSES)

        def forward(self, x):
            return self.head(self.lstm(x)[0][:, -1])

    torch.manual_seed(0)
    return SequentialLSTM()


def cmd_export(a):
    import torch
    torch.onnx.export(make_model().eval(), torch.zeros(2, STEPS, FEATURES), a.path, opset_version=17,
                      do_constant_folding=False, input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})


def cmd_torch(a):
    import torch
    torch.set_num_threads(1)
    model = make_model().train()
    x = torch.rand(BATCH, STEPS, FEATURES)
    y = torch.arange(BATCH) % CLASSES
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    times = []
    deadline = time.perf_counter() + a.budget_s
    while len(times) < a.min_steps or (time.perf_counter() < deadline and len(times) < a.max_steps):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    print(json.dumps({"median_ms": statistics.median(times), "steps": len(times),
                      "openblas_kernel": zoo.openblas_kernel(), "torch": torch.__version__,
                      "mkldnn": torch.backends.mkldnn.is_available()}))


def run_json(cmd, env=None):
    full_env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    full_env.update(env or {})
    r = subprocess.run(cmd, capture_output=True, text=True, env=full_env)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}): {(r.stderr or r.stdout).strip()[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(os.path.dirname(HERE), "build"))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--budget-s", type=float, default=3.0, help="timed seconds per side and round")
    p.add_argument("--quick", action="store_true", help="check the harness only (one short round)")
    p.add_argument("--cpu", action="store_true", help="CPU time per step (60-step minus 10-step run) instead of wall")
    sub = p.add_subparsers(dest="child")
    e = sub.add_parser("export")
    e.add_argument("path")
    t = sub.add_parser("torch")
    for name, default in (("--warmup", 3), ("--min-steps", 10), ("--max-steps", 200)):
        t.add_argument(name, type=int, default=default)
    t.add_argument("--budget-s", type=float, default=3.0)
    a = p.parse_args()
    if a.child == "export":
        return cmd_export(a)
    if a.child == "torch":
        return cmd_torch(a)

    build = os.path.abspath(a.build)
    cli, bench_bin = os.path.join(build, "edgetrain"), os.path.join(build, "bench", "train_step_bench")
    rounds, budget = (1, 0.3) if a.quick else (a.rounds, a.budget_s)
    timing = ["--warmup", "1" if a.quick else "3", "--min-steps", "3" if a.quick else "10", "--max-steps", "200",
              "--budget-s", str(budget)]
    with tempfile.TemporaryDirectory(prefix="edgetrain-lstm-bench-") as work:
        forward, art = os.path.join(work, "seq_lstm.onnx"), os.path.join(work, "art")
        subprocess.run([sys.executable, __file__, "export", forward], check=True, capture_output=True)
        subprocess.run([cli, "generate-artifacts", forward, "-o", art], check=True, capture_output=True)
        ours_ms, theirs_ms, kernel = [], [], None
        ours_cmd = [bench_bin, "train", art, "--batch", str(BATCH), "--threads", "1"]
        theirs_cmd = [sys.executable, __file__, "torch"]
        if a.cpu:
            torch_env = dict(os.environ, **zoo.torch_env(1))
            theirs = run_json(theirs_cmd + ["--min-steps", "1", "--max-steps", "1"], env=zoo.torch_env(1))
            kernel = theirs["openblas_kernel"]
        for k in range(rounds):
            if a.cpu:
                n1, n2 = (2, 6) if a.quick else (10, 60)
                per_step = []
                for cmd, env in ((ours_cmd, dict(os.environ, OMP_NUM_THREADS="1")), (theirs_cmd, torch_env)):
                    t1, t2 = (cpu_seconds(cmd + ["--warmup", "3", "--min-steps", str(n), "--max-steps", str(n),
                                                 "--budget-s", "0"], env=env) for n in (n1, n2))
                    per_step.append(1e3 * (t2 - t1) / (n2 - n1))
                ours_ms.append(per_step[0])
                theirs_ms.append(per_step[1])
                print(f"round {k + 1}: CPU per step edgetrain {per_step[0]:.2f} ms, PyTorch {per_step[1]:.2f} ms, "
                      f"ratio {per_step[0] / per_step[1]:.2f}x", flush=True)
                continue
            ours = run_json(ours_cmd + timing)
            theirs = run_json(theirs_cmd + timing, env=zoo.torch_env(1))
            ours_ms.append(ours["median_ms"])
            theirs_ms.append(theirs["median_ms"])
            kernel = theirs["openblas_kernel"]
            print(f"round {k + 1}: edgetrain {ours['median_ms']:.2f} ms ({ours.get('steps', '?')} steps), "
                  f"PyTorch {theirs['median_ms']:.2f} ms ({theirs['steps']} steps), "
                  f"ratio {ours['median_ms'] / theirs['median_ms']:.2f}x", flush=True)
    ratios = [o / t for o, t in zip(ours_ms, theirs_ms)]
    env = zoo.torch_env(1)
    print(f"PyTorch {theirs['torch']} with OPENBLAS_CORETYPE={env.get('OPENBLAS_CORETYPE', '(unset)')}: "
          f"OpenBLAS ran its {kernel} kernel; mkldnn available: {theirs['mkldnn']}")
    what = "CPU time per training step" if a.cpu else "LSTM training step"
    print(f"{what}, batch {BATCH}, 1 thread, {rounds} rounds: edgetrain {min(ours_ms):.2f}-"
          f"{max(ours_ms):.2f} ms, PyTorch {min(theirs_ms):.2f}-{max(theirs_ms):.2f} ms; ratio per round "
          f"{', '.join(f'{r:.2f}' for r in ratios)} (median {statistics.median(ratios):.2f}x, "
          f"best-vs-best {min(ours_ms) / min(theirs_ms):.2f}x); target <= 0.5x: "
          f"{'met' if statistics.median(ratios) <= 0.5 else 'MISSED'}")


if __name__ == "__main__":
    main()
