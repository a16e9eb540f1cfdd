#!/usr/bin/python3
"""The model-zoo section of the benchmark (issue 14): torchvision's MobileNetV2, EfficientNet-B0,
ResNet-18 and ViT-B/32 at 224x224 (10 classes, random weights, Dropout at 0), full training and head-only
(only the classifier trains), batch 8, 1 and 2 threads. Three trainers on the same forward ONNX export:
edgetrain (`edgetrain generate-artifacts`, then `train_step_bench train`), PyTorch in its best
configuration (OpenBLAS forced onto this CPU's kernel with OPENBLAS_CORETYPE, the kernel it ran is printed)
and ONNX Runtime's native training build (onnxruntime-training-cpu 1.19.2 in the venv scripts/setup.sh
makes, with its own `generate_artifacts`). Step time (train step + optimizer step + lazy gradient reset,
AdamW, median) and each training process's peak RSS (getrusage; artifact generation runs in its own
process and is not counted).

    /usr/bin/python3 bench/zoo.py [--quick] [--models M ...] [--modes full head] [--threads 1 2] [--rounds N]
    /usr/bin/python3 bench/zoo.py memory [--models M ...] [--batches 8 32]   (peak RSS and per-sample slope)
    /usr/bin/python3 bench/zoo.py frozen [--models M ...] [--threads 1]      (head-only over an eval-mode backbone)

`--rounds N` runs the three trainers N times per row, their order rotating, and each keeps its fastest round (as
bench/run.py's pairs do): a slow spell of this shared machine then has to hit the same trainer in every round.

`frozen`: the backbone exported in eval mode (model.eval(), TrainingMode.PRESERVE) and kept so by
`generate-artifacts --frozen-backbone-as-exported`; edgetrain's head-only step without and with
`--cache-frozen-prefix` (the timed steps of the cached run are those of a later epoch: the warm-up steps fill
the cache) against PyTorch's head-only step with the backbone under torch.no_grad() in eval mode.

bench/run.py runs it as its `zoo` section. The sub-commands below are what the runs call in children.
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEERS_DIR = os.environ.get("EDGETRAIN_PEERS_DIR", os.path.expanduser("~/.cache/edgetrain-peers"))
ORT_TRAINING_PYTHON = os.path.join(PEERS_DIR, "venv-ort-training", "bin", "python")
PYTHON = "/usr/bin/python3"
CLASSES = 10
# name: (torchvision constructor, the classifier's parameters: what trains in head-only mode)
ZOO = {
    "mobilenet_v2": ("mobilenet_v2", ["classifier.1.weight", "classifier.1.bias"]),
    "efficientnet_b0": ("efficientnet_b0", ["classifier.1.weight", "classifier.1.bias"]),
    "resnet18": ("resnet18", ["fc.weight", "fc.bias"]),
    "vit_b_32": ("vit_b_32", ["heads.head.weight", "heads.head.bias"]),
}
HEAD_MODULE = {"mobilenet_v2": "classifier", "efficientnet_b0": "classifier", "resnet18": "fc", "vit_b_32": "heads"}


def openblas_coretype():
    """OpenBLAS's best kernel for this CPU (its generic fallback on this VM is Prescott): SkylakeX with
    AVX-512, Haswell with AVX2, None otherwise."""
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    if "avx512f" in flags:
        return "SkylakeX"
    if "avx2" in flags:
        return "Haswell"
    return None


def torch_env(threads=None):
    """The environment of a PyTorch peer process: OpenBLAS on this CPU's kernel, thread counts."""
    env = {}
    core = openblas_coretype()
    if core:
        env["OPENBLAS_CORETYPE"] = core
    if threads is not None:
        env.update(OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return env


def openblas_kernel():
    """The kernel the OpenBLAS loaded into this process runs (openblas_get_corename), or why unknown."""
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if "openblas" in line.lower() and line.split()[-1].startswith("/")}
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            return lib.openblas_get_corename().decode()
        except (OSError, AttributeError):
            continue
    return "no OpenBLAS loaded"


def huge_pages():
    """This machine's transparent huge page mode (always, madvise or never), which the step times depend on:
    edgetrain asks for huge pages on its tensors of 4 MiB and more (madvise), PyTorch 1.13 and ORT do not."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return next((w[1:-1] for w in f.read().split() if w.startswith("[")), "?")
    except OSError:
        return "unknown"


def make_model(name):
    import torch
    import torchvision.models as tvm
    torch.manual_seed(0)
    model = getattr(tvm, ZOO[name][0])(num_classes=CLASSES)
    for m in model.modules():
        if isinstance(m, (torch.nn.Dropout, tvm.efficientnet.StochasticDepth)):
            m.p = 0.0
    return model.train()


def timed_steps(step, steps, warmup):
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    return {"median_ms": statistics.median(times), "min_ms": min(times), "steps": steps}


# -- children ---------------------------------------------------------------------------------------

def cmd_export(a):
    import torch
    model = make_model(a.model)
    if a.eval:
        model.eval()
    x = torch.randn(2, 3, a.image, a.image)
    mode = torch.onnx.TrainingMode.PRESERVE if a.eval else torch.onnx.TrainingMode.TRAINING
    torch.onnx.export(model, x, a.path, opset_version=17, training=mode,
                      do_constant_folding=False, input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    with open(a.path + ".parameters.json", "w") as f:  # what trains in full mode (not BatchNorm's statistics)
        json.dump([name for name, _ in model.named_parameters()], f)
    print(json.dumps({"path": a.path}))


def cmd_torch(a):
    import torch
    torch.set_num_threads(a.threads)
    model = make_model(a.model)
    head = set(ZOO[a.model][1])
    for name, p in model.named_parameters():
        p.requires_grad_(a.mode == "full" or name in head)
    x = torch.rand(a.batch, 3, a.image, a.image)
    y = torch.arange(a.batch) % CLASSES
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    if a.mode == "frozen":  # what a PyTorch user does: the backbone in eval mode under no_grad, the head trains
        model.eval()
        classifier = getattr(model, HEAD_MODULE[a.model])
        setattr(model, HEAD_MODULE[a.model], torch.nn.Identity())
        classifier.train()

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.no_grad():
                features = model(x)
            loss_fn(classifier(features), y).backward()
            opt.step()

    result = timed_steps(step, a.steps, a.warmup)
    result["openblas_kernel"] = openblas_kernel()
    print(json.dumps(result))


def cmd_ort_generate(a):
    import onnx
    from onnxruntime.training import artifacts
    model = onnx.load(a.model_path)
    with open(a.model_path + ".parameters.json") as f:
        parameters = set(json.load(f))
    initializers = [i.name for i in model.graph.initializer if i.data_type == onnx.TensorProto.FLOAT]
    trainable = [p for p in initializers if p in parameters and (a.mode == "full" or p in set(a.head))]
    artifacts.generate_artifacts(model, requires_grad=trainable,
                                 frozen_params=[p for p in initializers if p not in trainable],
                                 loss=artifacts.LossType.CrossEntropyLoss, optimizer=artifacts.OptimType.AdamW,
                                 artifact_directory=a.out)
    print(json.dumps({"out": a.out}))


def cmd_ort_train(a):
    import numpy as np
    import onnxruntime
    from onnxruntime.training.api import CheckpointState, Module, Optimizer
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = a.threads
    options.inter_op_num_threads = 1
    state = CheckpointState.load_checkpoint(os.path.join(a.dir, "checkpoint"))
    # No eval model: ORT 1.19 writes an eval model of a training-mode export that it cannot load itself
    # (BatchNormalization keeps its 3 outputs with training_mode 0).
    module = Module(os.path.join(a.dir, "training_model.onnx"), state, session_options=options)
    optimizer = Optimizer(os.path.join(a.dir, "optimizer_model.onnx"), module)
    x = np.random.RandomState(0).rand(a.batch, 3, a.image, a.image).astype(np.float32)
    y = np.arange(a.batch, dtype=np.int64) % CLASSES
    module.train()

    def step():
        module(x, y)
        optimizer.step()
        module.lazy_reset_grad()

    print(json.dumps(timed_steps(step, a.steps, a.warmup)))


# -- the section --------------------------------------------------------------------------------------

class ZooBench:
    """Measures every (model, mode, threads) with the three trainers; `rows` holds the results."""

    def __init__(self, run_child, build, work, quick, models=None, modes=("full", "head"), threads=(1, 2),
                 batch=8, image=224, log=print, rounds=1):
        self.run_child, self.build, self.work, self.quick = run_child, build, work, quick
        self.models, self.modes, self.threads = list(models or ZOO), list(modes), list(threads)
        self.batch, self.image, self.log = batch, image, log
        self.rounds = 1 if quick else rounds
        self.rows = []

    def steps(self):
        return ["--steps", "3", "--warmup", "1"] if self.quick else ["--steps", "10", "--warmup", "2"]

    def measure(self):
        bench_bin = os.path.join(self.build, "bench", "train_step_bench")
        cli = os.path.join(self.build, "edgetrain")
        me = os.path.abspath(__file__)
        for name in self.models:
            forward = os.path.join(self.work, f"zoo_{name}.onnx")
            exported = self.run_child([PYTHON, me, "export", name, forward, "--image", str(self.image)], timeout=900)
            for mode in self.modes:
                head = ZOO[name][1]
                ours_dir = os.path.join(self.work, f"zoo_{name}_{mode}_edgetrain")
                ort_dir = os.path.join(self.work, f"zoo_{name}_{mode}_ort")
                gen = ort_gen = exported
                if exported.ok:
                    gen = self.run_child([cli, "generate-artifacts", forward, "--out", ours_dir]
                                         + (["--requires-grad", *head] if mode == "head" else []), timeout=900)
                    os.makedirs(ort_dir, exist_ok=True)
                    ort_gen = self.run_child([ORT_TRAINING_PYTHON, me, "ort-generate", forward, ort_dir, "--mode", mode,
                                              "--head", *head], timeout=900)
                for t in self.threads:
                    timing = ["--warmup", "1", "--min-steps", "3", "--max-steps", "3", "--budget-s", "0.1"] \
                        if self.quick else ["--warmup", "2", "--min-steps", "10", "--max-steps", "30", "--budget-s", "10"]
                    trainers = [
                        lambda: gen if not gen.ok else self.run_child(
                            [bench_bin, "train", ours_dir, "--batch", str(self.batch), "--threads", str(t), *timing],
                            threads=t, timeout=900),
                        lambda: self.run_child([PYTHON, me, "torch", name, "--mode", mode, "--threads", str(t),
                                                "--batch", str(self.batch), "--image", str(self.image), *self.steps()],
                                               threads=t, timeout=900, env=torch_env(t)),
                        lambda: ort_gen if not ort_gen.ok else self.run_child(
                            [ORT_TRAINING_PYTHON, me, "ort-train", ort_dir, "--threads", str(t), "--batch",
                             str(self.batch), "--image", str(self.image), *self.steps()], threads=t, timeout=900)]
                    # Rounds rotate the order of the three, so that a slow spell of the machine lands on each in turn.
                    results = [[], [], []]
                    for r in range(self.rounds):
                        for i in [(r + k) % 3 for k in range(3)]:
                            results[i].append(trainers[i]())
                        self.log(f"zoo {name} {mode} T={t} round {r + 1}: edgetrain {cell_ms(results[0][-1])}, "
                                 f"PyTorch {cell_ms(results[1][-1])} ({results[1][-1]['openblas_kernel']}), "
                                 f"ORT training {cell_ms(results[2][-1])}")
                    ours, theirs, ort = (fastest(side) for side in results)
                    self.rows.append((name, mode, t, ours, theirs, ort))

    def report(self, check):
        """Markdown lines; check(what, value, limit) -> (shown, met) records a target."""
        kernels = sorted({r[4]["openblas_kernel"] for r in self.rows if r[4].ok and r[4]["openblas_kernel"]})
        lines = [f"## Model zoo: torchvision models at {self.image}x{self.image} (issue 14)", "",
                 f"Batch {self.batch}, AdamW, 10 classes, random weights, Dropout 0; head-only trains the classifier "
                 "alone. PyTorch runs with OPENBLAS_CORETYPE="
                 f"{openblas_coretype() or '(unset: no AVX2)'}; the OpenBLAS kernel it ran: {', '.join(kernels) or '?'}. "
                 "ORT: onnxruntime-training-cpu 1.19.2 with its own generate_artifacts on the same forward model. "
                 f"Transparent huge pages: {huge_pages()} (edgetrain asks for them on its large tensors; PyTorch "
                 "1.13 and ORT do not). "
                 "Targets: full step <= 0.5x PyTorch and <= 0.5x ORT, head-only <= 0.3x PyTorch, peak RSS <= 0.6x "
                 "PyTorch's.", ""]
        header = ["model", "mode", "threads", "edgetrain", "PyTorch", "ORT training", "vs PyTorch", "vs ORT",
                  "RSS edgetrain", "RSS PyTorch", "RSS ORT", "RSS vs PyTorch"]
        rows = []
        for name, mode, t, ours, theirs, ort in self.rows:
            limit = 0.5 if mode == "full" else 0.3
            vs_torch = check(f"zoo {name} {mode} T={t} <= {limit}x PyTorch", ratio(ours, theirs), limit)
            vs_ort = check(f"zoo {name} {mode} T={t} <= 0.5x ORT", ratio(ours, ort), 0.5) if mode == "full" \
                else ("-", "")
            rss = (ours.rss_kb / theirs.rss_kb) if ours.ok and theirs.ok and theirs.rss_kb else None
            vs_rss = check(f"zoo {name} {mode} T={t} RSS <= 0.6x PyTorch", rss, 0.6)
            rows.append([name, mode, t, cell_ms(ours), cell_ms(theirs), cell_ms(ort), " ".join(vs_torch).strip(),
                         " ".join(vs_ort).strip(), cell_mib(ours), cell_mib(theirs), cell_mib(ort),
                         " ".join(vs_rss).strip()])
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
        return lines + [""]


class FrozenHeadBench:
    """Head-only training over an eval-mode backbone: edgetrain without and with the frozen prefix cache against
    PyTorch's head step with the backbone under no_grad (target: 0.3x)."""

    TARGET = 0.3

    def __init__(self, run_child, build, work, models=None, threads=(1,), batch=8, image=224, log=print):
        self.run_child, self.build, self.work = run_child, build, work
        self.models, self.threads, self.batch, self.image, self.log = list(models or ZOO), list(threads), batch, image, log
        self.rows = []  # (model, threads, edgetrain, edgetrain cached, PyTorch)

    def measure(self):
        bench_bin = os.path.join(self.build, "bench", "train_step_bench")
        cli = os.path.join(self.build, "edgetrain")
        me = os.path.abspath(__file__)
        for name in self.models:
            forward = os.path.join(self.work, f"zoo_{name}_eval.onnx")
            art = os.path.join(self.work, f"zoo_{name}_frozen_edgetrain")
            gen = self.run_child([PYTHON, me, "export", name, forward, "--image", str(self.image), "--eval"], timeout=900)
            if gen.ok:
                gen = self.run_child([cli, "generate-artifacts", forward, "--out", art, "--frozen-backbone-as-exported",
                                      "--requires-grad", *ZOO[name][1]], timeout=900)
            for t in self.threads:
                timing = ["--warmup", "2", "--min-steps", "10", "--max-steps", "30", "--budget-s", "10",
                          "--create-repeats", "1"]
                runs = []
                for extra in ([], ["--cache-frozen-prefix", str(1 << 30)], ["--frozen-prefix", "0"]):
                    runs.append(gen if not gen.ok else self.run_child(
                        [bench_bin, "train", art, "--batch", str(self.batch), "--threads", str(t), *timing, *extra],
                        threads=t, timeout=900))
                theirs = self.run_child([PYTHON, me, "torch", name, "--mode", "frozen", "--threads", str(t), "--batch",
                                         str(self.batch), "--image", str(self.image), "--steps", "10", "--warmup", "2"],
                                        threads=t, timeout=900, env=torch_env(t))
                self.log(f"zoo frozen {name} T={t}: edgetrain {cell_ms(runs[0])}, cached {cell_ms(runs[1])}, "
                         f"prefix not split {cell_ms(runs[2])}, PyTorch {cell_ms(theirs)}")
                self.rows.append((name, t, runs[0], runs[1], runs[2], theirs))

    def report(self, check):
        lines = [f"## Model zoo: head-only training over an eval-mode backbone at {self.image}x{self.image} (issue 14)",
                 "", f"Batch {self.batch}, AdamW, the classifier trains; the backbone exported under model.eval() "
                 "(TrainingMode.PRESERVE) and kept in eval mode (`generate-artifacts --frozen-backbone-as-exported`). "
                 "edgetrain runs the frozen prefix as inference (BatchNorm folded, activations fused); cached: "
                 "`--cache-frozen-prefix`, the step of a later epoch (every sample's backbone output cached). PyTorch: "
                 "the backbone in eval mode under torch.no_grad(), the head trained. Target: <= "
                 f"{self.TARGET}x PyTorch.", ""]
        header = ["model", "threads", "edgetrain, prefix not split", "edgetrain (prefix as inference)",
                  "edgetrain cached", "PyTorch", "uncached vs PyTorch", "cached vs PyTorch", "prefix nodes",
                  "cache hits / misses"]
        rows = []
        for name, t, ours, cached, whole, theirs in self.rows:
            plain = check(f"zoo frozen {name} T={t} uncached <= {self.TARGET}x PyTorch", ratio(ours, theirs), self.TARGET)
            fast = check(f"zoo frozen {name} T={t} cached <= {self.TARGET}x PyTorch", ratio(cached, theirs), self.TARGET)
            fast_ratio = ratio(cached, theirs)
            fast_cell = f"{fast_ratio:.4f}x {fast[1]}" if fast_ratio is not None else " ".join(fast).strip()
            nodes = f"{ours['frozen_prefix_nodes']:.0f}" if ours.ok else "-"
            hits = f"{cached['prefix_cache_hits']:.0f} / {cached['prefix_cache_misses']:.0f}" if cached.ok else "-"
            rows.append([name, t, cell_ms(whole), cell_ms(ours), cell_ms(cached), cell_ms(theirs),
                         " ".join(plain).strip(), fast_cell, nodes, hits])
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
        return lines + [""]


class MemoryBench:
    """Peak RSS of the training process at two batch sizes (1 thread, full training, one step after one warm-up
    step), edgetrain beside PyTorch, and the per-sample slope between them: the issue's memory targets are
    RSS at the small batch <= 0.6x PyTorch's and slope <= 0.7x PyTorch's."""

    RSS_TARGET, SLOPE_TARGET = 0.6, 0.7

    def __init__(self, run_child, build, work, models=None, batches=(8, 32), image=224, log=print):
        self.run_child, self.build, self.work = run_child, build, work
        self.models, self.batches, self.image, self.log = list(models or ZOO), list(batches), image, log
        self.rows = []  # (model, {batch: edgetrain Result}, {batch: PyTorch Result})

    def measure(self):
        bench_bin = os.path.join(self.build, "bench", "train_step_bench")
        cli = os.path.join(self.build, "edgetrain")
        me = os.path.abspath(__file__)
        for name in self.models:
            forward = os.path.join(self.work, f"zoo_{name}.onnx")
            art = os.path.join(self.work, f"zoo_{name}_full_edgetrain")
            prepared = self.run_child([PYTHON, me, "export", name, forward, "--image", str(self.image)], timeout=900)
            if prepared.ok and not os.path.exists(os.path.join(art, "training_model.onnx")):
                prepared = self.run_child([cli, "generate-artifacts", forward, "--out", art], timeout=900)
            ours, theirs = {}, {}
            for batch in self.batches:
                ours[batch] = prepared if not prepared.ok else self.run_child(
                    [bench_bin, "train", art, "--batch", str(batch), "--threads", "1", "--warmup", "1", "--min-steps",
                     "1", "--max-steps", "1", "--budget-s", "0.1", "--create-repeats", "1"], threads=1, timeout=1800)
                theirs[batch] = self.run_child([PYTHON, me, "torch", name, "--threads", "1", "--batch", str(batch),
                                                "--image", str(self.image), "--steps", "1", "--warmup", "1"],
                                               threads=1, timeout=1800, env=torch_env(1))
                self.log(f"zoo memory {name} batch {batch}: edgetrain {cell_mib(ours[batch])}, "
                         f"PyTorch {cell_mib(theirs[batch])}")
            self.rows.append((name, ours, theirs))

    def slope_mib(self, results):
        small, large = self.batches[0], self.batches[-1]
        if not (results[small].ok and results[large].ok):
            return None
        return (results[large].rss_kb - results[small].rss_kb) / 1024 / (large - small)

    def report(self, check):
        small, large = self.batches[0], self.batches[-1]
        lines = [f"## Model zoo: peak RSS of the training process at {self.image}x{self.image} (issue 14)", "",
                 f"Full training, AdamW, 1 thread, one step after one warm-up step; getrusage's peak of each training "
                 f"process (PyTorch's interpreter and libraries included). Slope: (RSS at batch {large} - RSS at batch "
                 f"{small}) / {large - small}. Targets: RSS at batch {small} <= {self.RSS_TARGET}x PyTorch's, slope <= "
                 f"{self.SLOPE_TARGET}x PyTorch's.", ""]
        header = ["model", f"edgetrain b{small}", f"PyTorch b{small}", f"RSS b{small} vs PyTorch",
                  f"edgetrain b{large}", f"PyTorch b{large}", "slope edgetrain", "slope PyTorch", "slope vs PyTorch",
                  f"arena b{small}", f"arena b{large}"]
        rows = []
        for name, ours, theirs in self.rows:
            rss = ours[small].rss_kb / theirs[small].rss_kb if ours[small].ok and theirs[small].ok else None
            ours_slope, theirs_slope = self.slope_mib(ours), self.slope_mib(theirs)
            slope = ours_slope / theirs_slope if ours_slope is not None and theirs_slope else None
            vs_rss = check(f"zoo memory {name} RSS b{small} <= {self.RSS_TARGET}x PyTorch", rss, self.RSS_TARGET)
            vs_slope = check(f"zoo memory {name} slope <= {self.SLOPE_TARGET}x PyTorch", slope, self.SLOPE_TARGET)
            arena = [f"{r['training_arena_bytes'] / 2**20:.0f} MiB" if r.ok and r["training_arena_bytes"] else "-"
                     for r in (ours[small], ours[large])]
            slope_cell = [f"{v:.1f} MiB" if v is not None else "-" for v in (ours_slope, theirs_slope)]
            rows.append([name, cell_mib(ours[small]), cell_mib(theirs[small]), " ".join(vs_rss).strip(),
                         cell_mib(ours[large]), cell_mib(theirs[large]), *slope_cell, " ".join(vs_slope).strip(),
                         *arena])
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
        return lines + [""]


def fastest(results):
    """The successful result with the lowest median step time, else the first failure."""
    ok = [r for r in results if r.ok and r["median_ms"] is not None]
    return min(ok, key=lambda r: r["median_ms"]) if ok else results[0]


def ratio(a, b):
    return a["median_ms"] / b["median_ms"] if a.ok and b.ok and a["median_ms"] and b["median_ms"] else None


def cell_ms(r):
    return f"{r['median_ms']:.1f} ms" if r.ok and r["median_ms"] is not None else f"error: {str(r.error)[:120]}"


def cell_mib(r):
    return f"{r.rss_kb / 1024:.0f} MiB" if r.ok and r.rss_kb else "-"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd")
    e = sub.add_parser("export")
    e.add_argument("model", choices=ZOO)
    e.add_argument("path")
    e.add_argument("--image", type=int, default=224)
    e.add_argument("--eval", action="store_true", help="export in eval mode (TrainingMode.PRESERVE after model.eval())")
    for name in ("torch", "ort-train"):
        s = sub.add_parser(name)
        s.add_argument("model" if name == "torch" else "dir")
        s.add_argument("--mode", choices=["full", "head", "frozen"], default="full")
        s.add_argument("--threads", type=int, default=1)
        s.add_argument("--batch", type=int, default=8)
        s.add_argument("--image", type=int, default=224)
        s.add_argument("--steps", type=int, default=10)
        s.add_argument("--warmup", type=int, default=2)
    g = sub.add_parser("ort-generate")
    g.add_argument("model_path")
    g.add_argument("out")
    g.add_argument("--mode", choices=["full", "head"], default="full")
    g.add_argument("--head", nargs="*", default=[])
    r = sub.add_parser("run", help="measure and print the section (the default)")
    r.add_argument("--build", default=os.path.join(ROOT, "build"))
    r.add_argument("--quick", action="store_true", help="3 steps each: checks the harness, not the numbers")
    r.add_argument("--models", nargs="*", choices=list(ZOO), default=list(ZOO))
    r.add_argument("--modes", nargs="*", choices=["full", "head"], default=["full", "head"])
    r.add_argument("--threads", nargs="*", type=int, default=[1, 2])
    r.add_argument("--batch", type=int, default=8)
    r.add_argument("--image", type=int, default=224)
    r.add_argument("--rounds", type=int, default=1,
                   help="rounds of the three trainers, their order rotating; each keeps its fastest (default 1)")
    mem = sub.add_parser("memory", help="peak RSS at two batch sizes and the per-sample slope, against PyTorch")
    mem.add_argument("--build", default=os.path.join(ROOT, "build"))
    mem.add_argument("--models", nargs="*", choices=list(ZOO), default=list(ZOO))
    mem.add_argument("--batches", nargs=2, type=int, default=[8, 32])
    mem.add_argument("--image", type=int, default=224)
    mem.add_argument("--work", help="keep exports and artifacts here (default: a temporary directory)")
    fr = sub.add_parser("frozen", help="head-only over an eval-mode backbone, with and without the prefix cache")
    fr.add_argument("--build", default=os.path.join(ROOT, "build"))
    fr.add_argument("--models", nargs="*", choices=list(ZOO), default=list(ZOO))
    fr.add_argument("--threads", nargs="*", type=int, default=[1])
    fr.add_argument("--batch", type=int, default=8)
    fr.add_argument("--image", type=int, default=224)
    a = p.parse_args(sys.argv[1:] or ["run"])
    if a.cmd == "export":
        cmd_export(a)
    elif a.cmd == "torch":
        cmd_torch(a)
    elif a.cmd == "ort-generate":
        cmd_ort_generate(a)
    elif a.cmd == "ort-train":
        cmd_ort_train(a)
    elif a.cmd == "frozen":
        sys.path.insert(0, HERE)
        import run as bench_run
        with tempfile.TemporaryDirectory(prefix="edgetrain-zoo-frozen-") as work:
            bench = FrozenHeadBench(bench_run.run_child, os.path.abspath(a.build), work, a.models, a.threads, a.batch,
                                    a.image, log=bench_run.log)
            bench.measure()
            print("\n".join(bench.report(lambda what, value, limit: bench_run.verdict(value, limit))))
    elif a.cmd == "memory":
        sys.path.insert(0, HERE)
        import run as bench_run
        with tempfile.TemporaryDirectory(prefix="edgetrain-zoo-memory-") as tmp:
            work = a.work or tmp
            os.makedirs(work, exist_ok=True)
            bench = MemoryBench(bench_run.run_child, os.path.abspath(a.build), work, a.models, sorted(a.batches),
                                a.image, log=bench_run.log)
            bench.measure()
            print("\n".join(bench.report(lambda what, value, limit: bench_run.verdict(value, limit))))
    else:
        sys.path.insert(0, HERE)
        import run as bench_run
        if not os.path.exists(ORT_TRAINING_PYTHON):
            sys.exit(f"zoo: {ORT_TRAINING_PYTHON} missing (scripts/setup.sh makes the venv)")
        with tempfile.TemporaryDirectory(prefix="edgetrain-zoo-") as work:
            zoo = ZooBench(bench_run.run_child, os.path.abspath(a.build), work, a.quick, a.models, a.modes, a.threads,
                           a.batch, a.image, log=bench_run.log, rounds=max(1, a.rounds))
            zoo.measure()
            print("\n".join(zoo.report(lambda what, value, limit: bench_run.verdict(value, limit))))


if __name__ == "__main__":
    main()
