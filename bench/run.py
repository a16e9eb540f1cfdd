#!/usr/bin/python3
"""Issue 6's performance benchmark: edgetrain against PyTorch, ONNX Runtime's training runtime and
ONNX Runtime's native inference, each row checked against the issue's target. Uses what the build
made (build/bench/train_step_bench, build/edgetrain, build/libedgetrain_*.a; build nothing here) and the
peers that scripts/setup.sh installs. Writes bench/results.md and prints it (--only: prints it).

    /usr/bin/python3 bench/run.py [--build DIR] [--quick] [--keep] [--only SECTION] [--rounds N]

Each side-by-side pair is measured in N rounds (default 3), edgetrain and the peer alternating, and
each side keeps its fastest round: a burst of other work on the machine then has to hit the same side
in every round to move a ratio. About 3-5 minutes on 2 cores without the `zoo` section (bench/zoo.py:
torchvision models at 224x224 against PyTorch and ORT's native training build, in the same rounds, much
longer). Peak RSS is each child process's getrusage maximum."""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo  # noqa: E402  (the model-zoo section, bench/zoo.py)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.normpath(os.path.join(ROOT, "..", "shared"))
TORCH_MODELS = os.path.join(SHARED, "peers", "torch_models.py")
ORT_SETS_DIR = os.path.join(SHARED, "ort-artifacts")
ORT_SETS = ["training_api", "lenet_cnn", "eeg_cnn", "ort_format", "mnist_webdemo_v1"]
PEERS_DIR = os.environ.get("EDGETRAIN_PEERS_DIR", os.path.expanduser("~/.cache/edgetrain-peers"))
PYTHON = "/usr/bin/python3"  # Debian's interpreter: the one that sees python3-torch
ORT_CHECKPOINT_VERSION = 2  # the only ODTC version onnxruntime-web 1.19 reads
CHECKPOINT_NAMES = ["checkpoint", "checkpoint.ckpt"]  # as ort_step_bench.js looks them up
SECTIONS = ["training", "ort", "inference", "sizes", "zoo", "zoo_memory"]

# name: (bundled forward model or None to export from torch_models.py, batch, one input sample's shape)
MODELS = {
    "mlp": ("models/mlp.onnx", 64, (1, 28, 28)),
    "cnn": ("models/lenet_bn.onnx", 64, (1, 28, 28)),
    "transformer": (None, 32, (64, 128)),
}
THREADS = [1, 2]
INFERENCE_BATCHES = [1, 64]


def log(message):
    print(f"[bench {time.strftime('%H:%M:%S')}] {message[:200]}", file=sys.stderr, flush=True)


class Result:
    """One child process: its JSON (or parsed) result, peak RSS in KiB, or the error it reported."""

    def __init__(self, data=None, rss_kb=None, error=None):
        self.data, self.rss_kb, self.error = data or {}, rss_kb, error

    @property
    def ok(self):
        return self.error is None

    def __getitem__(self, key):
        return self.data.get(key)


def run_child(cmd, threads=None, timeout=420, env=None):
    """Runs cmd (with `env` added to the environment); returns Result with the last JSON line of stdout and
    the child's peak RSS."""
    env = dict(os.environ, **(env or {}))
    if threads is not None:
        env.update(OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=ROOT)
        except OSError as e:
            return Result(error=f"cannot start {cmd[0]}: {e}")
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                os.wait4(proc.pid, 0)
                proc.returncode = -9
                return Result(error=f"timed out after {timeout} s")
            time.sleep(0.02)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    json_lines = [line for line in stdout.splitlines() if line.startswith("{")]
    data = json.loads(json_lines[-1]) if json_lines else {}
    if "error" in data:
        return Result(data, usage.ru_maxrss, error=data["error"])
    if proc.returncode != 0:
        tail = (stderr.strip() or stdout.strip()).splitlines()[-1:] or ["no output"]
        return Result(data, usage.ru_maxrss, error=f"exit status {proc.returncode}: {tail[0]}")
    data["stdout"] = stdout
    return Result(data, usage.ru_maxrss)


class Bench:
    def __init__(self, args):
        self.build = os.path.abspath(args.build)
        self.quick = args.quick
        self.bench_bin = os.path.join(self.build, "bench", "train_step_bench")
        self.work = tempfile.mkdtemp(prefix="edgetrain-bench-")
        self.keep = args.keep
        self.rounds = 1 if self.quick else args.rounds

    def paired(self, ours, theirs):
        """(ours(), theirs()) over self.rounds alternating rounds, each side's round with the lowest median
        time (the first failure when no round of that side succeeded)."""
        results = [(ours(), theirs()) for _ in range(self.rounds)]
        return tuple(zoo.fastest([r[side] for r in results]) for side in (0, 1))

    def timing_args(self, budget_s, warmup=3, min_steps=20, max_steps=200):
        if self.quick:
            budget_s, warmup, min_steps, max_steps = 0.3, 1, 3, 10
        return ["--warmup", str(warmup), "--min-steps", str(min_steps), "--max-steps", str(max_steps),
                "--budget-s", str(budget_s)]

    def edgetrain(self, mode, *args, threads=None, budget_s=3.0):
        timing = self.timing_args(budget_s) if mode in ("train", "infer", "sgemm") else []
        thread_args = ["--threads", str(threads)] if threads is not None and mode != "sgemm" else []
        return run_child([self.bench_bin, mode, *args, *thread_args, *timing], threads=threads)

    def node(self, script, *args, threads=1, budget_s=3.0):
        return run_child(["node", os.path.join(ROOT, "bench", script), *args, *self.timing_args(budget_s)],
                         threads=threads)

    def torch_step(self, name, threads):
        steps, warmup = (3, 1) if self.quick else ((20, 2) if name == "transformer" else (50, 5))
        r = run_child([PYTHON, TORCH_MODELS, "bench", name, "--threads", str(threads), "--steps", str(steps),
                       "--warmup", str(warmup)], threads=threads, timeout=600, env=zoo.torch_env())
        if r.ok:
            m = re.search(r"median step ([0-9.]+) ms", r["stdout"])
            if not m:
                return Result(rss_kb=r.rss_kb, error="no 'median step' line in torch_models.py's output")
            r.data["median_ms"] = float(m.group(1))
        return r

    # -- the measurements --------------------------------------------------------------------------

    def prepare_models(self):
        """Forward ONNX per model -> artifacts + inference export (train_step_bench generate)."""
        self.generated = {}
        for name, (bundled, batch, _) in MODELS.items():
            forward = os.path.join(ROOT, bundled) if bundled else os.path.join(self.work, f"{name}.onnx")
            if not bundled:
                r = run_child([PYTHON, TORCH_MODELS, "export", name, forward])
                if not r.ok:
                    self.generated[name] = r
                    continue
            self.generated[name] = self.edgetrain("generate", forward, os.path.join(self.work, name),
                                                  "--batch", str(batch))
            log(f"artifacts {name}: {self.generated[name].error or 'ok'}")

    def artifacts_dir(self, name):
        return os.path.join(self.work, name) if self.generated[name].ok else None

    def measure_training(self):
        self.sgemm = {t: self.edgetrain("sgemm", "--batch", str(MODELS["mlp"][1]), threads=t, budget_s=2.0)
                      for t in THREADS}
        self.train = {}
        for name, (_, batch, _) in MODELS.items():
            for t in THREADS:
                d = self.artifacts_dir(name)
                ours, theirs = self.paired(
                    lambda: (self.edgetrain("train", d, "--batch", str(batch), threads=t) if d
                             else Result(error=self.generated[name].error)),
                    lambda: self.torch_step(name, t))
                log(f"{name} threads={t}: edgetrain {ms(ours)}; pytorch {ms(theirs)}")
                self.train[name, t] = (ours, theirs)

    def measure_ort_training(self):
        self.ort_train = {}
        for set_name in ORT_SETS:
            set_dir = os.path.join(ORT_SETS_DIR, set_name)
            inputs, batch = ort_reference_inputs(set_dir)
            if not inputs:
                missing = Result(error=f"{set_dir} has no reference.json with inputs")
                self.ort_train[set_name] = (None, missing, missing, None)
                continue
            specs = [a for spec in inputs for a in ("--input", spec)]
            ort_dir, note = self.ort_readable_set(set_name, set_dir)
            ours, theirs = self.paired(
                lambda: self.edgetrain("train", set_dir, *specs, threads=1, budget_s=2.0),
                lambda: (self.node("ort_step_bench.js", ort_dir, *specs, budget_s=2.0) if ort_dir
                         else Result(error=note)))
            log(f"ORT set {set_name}: edgetrain {ms(ours)}; ORT {ms(theirs)}")
            self.ort_train[set_name] = (batch, ours, theirs, note if ort_dir else None)

    def ort_readable_set(self, set_name, set_dir):
        """(directory ORT can load, note or None): the set itself, or when its checkpoint has a version ORT 1.19
        refuses, a work directory of symlinks to the set's files plus the checkpoint re-saved by edgetrain
        (None and the error when that fails)."""
        checkpoint = next((n for n in CHECKPOINT_NAMES if os.path.exists(os.path.join(set_dir, n))), None)
        version = checkpoint_version(os.path.join(set_dir, checkpoint)) if checkpoint else None
        if version is None or version == ORT_CHECKPOINT_VERSION:
            return set_dir, None
        ort_dir = os.path.join(self.work, f"ort-{set_name}")
        os.makedirs(ort_dir)
        for entry in os.listdir(set_dir):
            if not entry.startswith(checkpoint):  # the checkpoint and its external data file
                os.symlink(os.path.join(set_dir, entry), os.path.join(ort_dir, entry))
        resaved = self.edgetrain("resave-checkpoint", os.path.join(set_dir, checkpoint),
                                 os.path.join(ort_dir, checkpoint))
        if not resaved.ok:
            return None, f"re-saving the version-{version} checkpoint as version 2 failed: {resaved.error}"
        return ort_dir, (f"ORT 1.19 refuses version-{version} checkpoints; ORT ran on the same model files with "
                         f"the checkpoint re-saved as version 2 by edgetrain (`train_step_bench "
                         f"resave-checkpoint`), while edgetrain ran on the original version-{version} checkpoint.")

    def measure_inference(self):
        self.inference = {}
        for name, (_, _, sample_shape) in MODELS.items():
            gen = self.generated[name]
            for batch in INFERENCE_BATCHES:
                for t in THREADS:
                    if not gen.ok:
                        self.inference[name, batch, t] = (gen, gen)
                        continue
                    model = gen["inference_model"]
                    shape = ",".join(map(str, (batch, *sample_shape)))
                    ours, theirs = self.paired(
                        lambda: self.edgetrain("infer", model, "--batch", str(batch), threads=t, budget_s=1.0),
                        lambda: self.node("ort_infer_bench.js", model, "--shape", shape, "--threads", str(t),
                                          threads=t, budget_s=1.0))
                    self.inference[name, batch, t] = (ours, theirs)
            log(f"inference {name}: done")

    def measure_sizes(self):
        self.sizes = []
        for label, path in [("libedgetrain_device.a (the device runtime)",
                             os.path.join(self.build, "libedgetrain_device.a")),
                            ("libedgetrain_offline.a (the offline library)",
                             os.path.join(self.build, "libedgetrain_offline.a")),
                            ("edgetrain CLI", os.path.join(self.build, "edgetrain"))]:
            if not os.path.exists(path):
                self.sizes.append((label, None, None, f"{path} not built"))
                continue
            copy = os.path.join(self.work, os.path.basename(path) + ".stripped")
            shutil.copyfile(path, copy)
            strip = subprocess.run(["strip", "--strip-unneeded", copy], capture_output=True, text=True)
            stripped = os.path.getsize(copy) if strip.returncode == 0 else None
            self.sizes.append((label, os.path.getsize(path), stripped, strip.stderr.strip()[:200]))

    def measure_zoo(self):
        self.zoo = zoo.ZooBench(run_child, self.build, self.work, self.quick, log=log, rounds=self.rounds)
        self.zoo.measure()

    def measure_zoo_memory(self):
        self.zoo_memory = zoo.MemoryBench(run_child, self.build, self.work, log=log)
        self.zoo_memory.measure()

    def cleanup(self):
        if self.keep:
            log(f"kept the work directory {self.work}")
        else:
            shutil.rmtree(self.work, ignore_errors=True)


def checkpoint_version(path):
    """The `version` field of an ODTC checkpoint (FlatBuffers root table, field 0), or None if it is no ODTC file."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        if data[4:8] != b"ODTC":
            return None
        table = struct.unpack_from("<I", data, 0)[0]
        vtable = table - struct.unpack_from("<i", data, table)[0]
        vtable_bytes = struct.unpack_from("<H", data, vtable)[0]
        version_offset = struct.unpack_from("<H", data, vtable + 4)[0] if vtable_bytes > 4 else 0
        return struct.unpack_from("<i", data, table + version_offset)[0] if version_offset else 0
    except (OSError, struct.error):
        return None


def ort_reference_inputs(set_dir):
    """--input specs from the set's reference run (ORT 1.19's, else an older ORT's), and the batch."""
    for file in sorted(f for f in os.listdir(set_dir) if f.startswith("reference") and f.endswith(".json")):
        ref = json.load(open(os.path.join(set_dir, file)))
        if ref.get("inputs"):
            specs = [f"{i['name']}={i['dtype']}:{','.join(map(str, i['shape']))}:"
                     f"{os.path.join(set_dir, 'ref_inputs', i['file'])}" for i in ref["inputs"]]
            return specs, ref["inputs"][0]["shape"][0]
    return None, None


# -- the report -------------------------------------------------------------------------------------

def ms(r):
    return f"{r['median_ms']:.3g} ms" if r.ok else error_cell(r.error)


def mib(kb):
    return f"{kb / 1024:.0f} MiB" if kb else "—"


def error_cell(message):
    message = " ".join(str(message).replace(ORT_SETS_DIR + "/", "").split()).replace("|", "\\|")
    return f"error: {message[:160]}{'…' if len(message) > 160 else ''}"


def verdict(value, limit):
    if value is None:
        return "—", "n/a"
    return f"{value:.2f}x", "yes" if value <= limit else "**no**"


def losses_agree(a, b, rel_tol=1e-4):
    return abs(a - b) <= rel_tol * max(abs(a), abs(b), 1.0)


def ratio(a, b, key="median_ms"):
    if not (a.ok and b.ok) or not b[key]:
        return None
    return a[key] / b[key]


class Report:
    def __init__(self, bench):
        self.b = bench
        self.lines = []
        self.checks = []  # (description, met: True/False/None)

    def table(self, header, rows):
        self.lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        self.lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
        self.lines.append("")

    def check(self, what, value, limit):
        shown, met = verdict(value, limit)
        self.checks.append((what, None if met == "n/a" else met == "yes"))
        return shown, met

    def training(self):
        self.lines += ["## 1. Full training step (train step + optimizer step + lazy reset, AdamW, fixed batch)", "",
                       "Median step time; PyTorch: `torch_models.py bench` (zero_grad, forward, CrossEntropy, "
                       "backward, AdamW step) with OMP/OpenBLAS threads = T. Target: edgetrain <= 0.5x PyTorch.", ""]
        rows = []
        for (name, t), (ours, theirs) in self.b.train.items():
            shown, met = self.check(f"step {name} T={t} <= 0.5x PyTorch", ratio(ours, theirs), 0.5)
            rows.append([name, MODELS[name][1], t, ms(ours), ms(theirs), shown, "<= 0.5x", met])
        self.table(["model", "batch", "threads", "edgetrain", "PyTorch", "ratio", "target", "met"], rows)

        self.lines += ["Peak RSS of the whole training process (getrusage): edgetrain's benchmark process "
                       "(checkpoint load, 5 session creations, the steps) vs the PyTorch process (interpreter "
                       "and torch included). Target: <= 0.25x PyTorch.", ""]
        rows = []
        for (name, t), (ours, theirs) in self.b.train.items():
            value = ours.rss_kb / theirs.rss_kb if ours.ok and theirs.ok and theirs.rss_kb else None
            shown, met = self.check(f"peak RSS {name} T={t} <= 0.25x PyTorch", value, 0.25)
            rows.append([name, t, mib(ours.rss_kb) if ours.ok else error_cell(ours.error),
                         mib(theirs.rss_kb) if theirs.ok else error_cell(theirs.error), shown, "<= 0.25x", met])
        self.table(["model", "threads", "edgetrain peak RSS", "PyTorch peak RSS", "ratio", "target", "met"], rows)

        mlp_flops = None
        rows = []
        for t in THREADS:
            sg, (ours, _) = self.b.sgemm[t], self.b.train["mlp", t]
            # the fastest GEMM pass seen with at most t threads: a loaded machine cannot make the target easier
            fastest = [self.b.sgemm[u] for u in THREADS if u <= t and self.b.sgemm[u].ok]
            gemm_ms = min(r["min_ms"] for r in fastest) if fastest else None
            if sg.ok:
                mlp_flops = sg["gemm_flops"]
            value = ours["median_ms"] / gemm_ms if gemm_ms and ours.ok else None
            shown, met = self.check(f"MLP step T={t} within 1.4x of its GEMM-FLOP time", value, 1.4)
            rate = f"{mlp_flops / (gemm_ms * 1e6):.1f} GFLOP/s" if gemm_ms else error_cell(sg.error)
            median_rate = f"{sg['gflops_per_s']:.1f} GFLOP/s" if sg.ok else error_cell(sg.error)
            rows.append([t, rate, median_rate, f"{gemm_ms:.3g} ms" if gemm_ms else "—", ms(ours), shown, "<= 1.4x",
                         met])
        self.lines += ["MLP step vs its GEMM FLOPs: oneDNN `dnnl_sgemm` (OMP threads = T) timed in the same run "
                       "over the step's GEMM shapes at batch 64: forward X·Wᵀ for 784x512, 512x256, 256x10, "
                       "backward dY·W and dYᵀ·X for each layer"
                       + (f" ({mlp_flops / 1e6:.1f} MFLOP = 3x the forward FLOPs)" if mlp_flops else "")
                       + ". GEMM-FLOP time = FLOPs / the best rate measured with at most T threads (the fastest "
                       "pass, so that load on the machine cannot make the target easier); the median rate is "
                       "shown for reference. Target: edgetrain's median step <= 1.4x that time.", ""]
        self.table(["threads", "best sgemm rate", "median sgemm rate", "GEMM-FLOP time", "edgetrain MLP step",
                    "ratio", "target", "met"], rows)

        self.lines += ["Session creation (checkpoint load + TrainingSession with training, eval and optimizer "
                       "models) of the MNIST MLP, 1 thread: the first in the process (what an app pays once; "
                       "judged) and the median of 5. Target: < 20 ms.", ""]
        ours = self.b.train["mlp", 1][0]
        first = ours["create_first_ms"] if ours.ok else None
        met = "n/a" if first is None else ("yes" if first < 20 else "**no**")
        self.checks.append(("MLP artifact load + session creation < 20 ms", None if first is None else first < 20))
        self.table(["first", "median of 5", "target", "met"],
                   [[f"{first:.3g} ms" if first else error_cell(ours.error),
                     f"{ours['create_median_ms']:.3g} ms" if ours.ok else "—", "< 20 ms", met]])

        rows = []
        for name, gen in self.b.generated.items():
            if gen.ok:
                rows.append([name, MODELS[name][1], f"{gen['training_arena_bytes'] / 2**20:.2f} MiB",
                             f"{gen['inference_arena_bytes'] / 2**20:.2f} MiB", f"{gen['generate_ms']:.0f} ms"])
            else:
                rows.append([name, MODELS[name][1], error_cell(gen.error), "—", "—"])
        self.lines += ["Planned intermediate arena (`Session::planned_peak_bytes`) of the training graph and of "
                       "the inference export at the training batch, and artifact generation time (no target).", ""]
        self.table(["model", "batch", "training arena", "inference arena", "generate-artifacts"], rows)

    def ort_training(self):
        self.lines += ["## 2. ONNX Runtime's training runtime on its own artifacts", "",
                       "onnxruntime-web 1.19.2 (wasm CPU, 1 thread, in node) vs edgetrain's TrainingSession "
                       "(1 thread) on the same files and the reference batch (`ref_inputs/`): median of "
                       "trainStep + optimizerStep + lazyResetGrad. The first step's loss shows that both "
                       "computed the same thing. Target: <= 0.2x ORT.", ""]
        rows, notes = [], []
        for set_name, (batch, ours, theirs, note) in self.b.ort_train.items():
            shown, met = self.check(f"ORT set {set_name} <= 0.2x ORT training", ratio(ours, theirs), 0.2)
            losses = " / ".join(f"{r['first_loss']:.6g}" if r.ok else "—" for r in (ours, theirs))
            if ours.ok and theirs.ok and not losses_agree(ours["first_loss"], theirs["first_loss"]):
                losses += " (**differ**)"
            if note:
                notes.append(note)
                set_name += f" [{len(notes)}]"
            rows.append([set_name, batch or "—", ms(ours), ms(theirs), shown, "<= 0.2x", met, losses])
        self.table(["artifact set", "batch", "edgetrain", "ORT training (web 1.19.2)", "ratio", "target", "met",
                    "first loss (edgetrain / ORT)"], rows)
        if notes:
            self.lines += [f"[{i}] {note}" for i, note in enumerate(notes, 1)] + [""]

    def inference(self):
        self.lines += ["## 3. Inference of the exported models", "",
                       "edgetrain `Session` on the model `TrainingSession::ExportModelForInference` wrote vs "
                       "onnxruntime-node (native CPU, intra-op threads = T, all graph optimizations) on the same "
                       "file: median latency of one run. Target: <= 1.0x ORT.", ""]
        rows = []
        for (name, batch, t), (ours, theirs) in self.b.inference.items():
            shown, met = self.check(f"inference {name} batch {batch} T={t} <= 1.0x ORT native",
                                    ratio(ours, theirs), 1.0)
            rows.append([name, batch, t, ms(ours), ms(theirs), shown, "<= 1.0x", met])
        self.table(["model", "batch", "threads", "edgetrain", "ORT native", "ratio", "target", "met"], rows)

    def sizes(self):
        self.lines += ["## 4. Binary size", "", "`strip --strip-unneeded` on a copy (no target in the issue; the "
                       "CLI links protobuf, ONNX and zlib dynamically).", ""]
        rows = [[label, f"{size / 2**20:.2f} MiB" if size else error_cell(note),
                 f"{stripped / 2**20:.2f} MiB" if stripped else (error_cell(note) if size else "—")]
                for label, size, stripped, note in self.b.sizes]
        self.table(["artifact", "size", "stripped"], rows)

    def zoo(self):
        self.lines += self.b.zoo.report(self.check)

    def render(self, header, sections):
        for section in sections:
            {"training": self.training, "ort": self.ort_training, "inference": self.inference,
             "sizes": self.sizes, "zoo": self.zoo,
             "zoo_memory": lambda: self.lines.extend(self.b.zoo_memory.report(self.check))}[section]()
        met = sum(1 for _, m in self.checks if m)
        failed = sum(1 for _, m in self.checks if m is False)
        unmeasured = sum(1 for _, m in self.checks if m is None)
        summary = [f"**Targets met: {met} of {len(self.checks)}** ({failed} not met, "
                   f"{unmeasured} not measurable in this run)", ""]
        return "\n".join(header + summary + self.lines)


def environment_header(bench, started, load_before):
    def capture(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=60).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return "?"
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    commit = capture(["git", "rev-parse", "--short", "HEAD"])
    changed = capture(["git", "status", "--porcelain", "--untracked-files=no"]).splitlines()
    dirty = " (with uncommitted changes)" if [c for c in changed if not c.endswith("bench/results.md")] else ""
    torch_version = capture([PYTHON, "-c", "import torch; print(torch.__version__)"])
    kernel = subprocess.run([PYTHON, "-c", "import sys, torch; sys.path.insert(0, 'bench'); import zoo; "
                             "torch.ones(64, 64) @ torch.ones(64, 64); print(zoo.openblas_kernel())"],
                            capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, **zoo.torch_env())).stdout.strip()
    load_after = os.getloadavg()[0]
    return ["# edgetrain performance (issue 6)", "",
            f"`/usr/bin/python3 bench/run.py` on {started:%Y-%m-%d %H:%M}, commit {commit}{dirty}"
            + (" — **quick mode: too few steps to trust**" if bench.quick else "") + ".",
            f"CPU: {cpu}, {os.cpu_count()} cores; 1-minute load average {load_before:.2f} before, "
            f"{load_after:.2f} after, the benchmark's own processes included (other work on the machine skews "
            "every number, the 2-thread ones most"
            + (": **the machine was busy when the run started, so these numbers are not reliable**"
               if load_before > 0.5 * os.cpu_count() else "") + ").",
            f"Peers: PyTorch {torch_version} (OPENBLAS_CORETYPE={zoo.openblas_coretype()}: OpenBLAS ran its "
            f"{kernel or '?'} kernel), onnxruntime-web 1.19.2 (training), onnxruntime-node "
            f"{package_version('onnxruntime-node')} (inference), node {capture(['node', '--version'])}; "
            f"transparent huge pages: {zoo.huge_pages()}. "
            f"Times are medians of >= 20 steps after warm-up; each side's fastest of {bench.rounds} alternating "
            "rounds.", ""]


def package_version(name):
    try:
        return json.load(open(os.path.join(PEERS_DIR, "node_modules", name, "package.json")))["version"]
    except OSError:
        return "(not installed)"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"), help="build directory (default build/)")
    p.add_argument("--quick", action="store_true", help="a few steps each: checks the harness, not the numbers")
    p.add_argument("--keep", action="store_true", help="keep the work directory of generated artifacts")
    p.add_argument("--only", choices=SECTIONS, action="append",
                   help="measure only this section (repeatable); the report is then printed, not written, "
                        "unless --out is given")
    p.add_argument("--out", help="markdown report path (default bench/results.md for a full run)")
    p.add_argument("--rounds", type=int, default=3,
                   help="alternating rounds per side-by-side pair; each side keeps its fastest (default 3)")
    args = p.parse_args()
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    sections = [s for s in SECTIONS if s in (args.only or SECTIONS)]
    if args.out is None and not args.only:
        args.out = os.path.join(ROOT, "bench", "results.md")
    bench = Bench(args)
    missing = [path for path in (bench.bench_bin, TORCH_MODELS, os.path.join(PEERS_DIR, "node_modules"))
               if not os.path.exists(path)]
    if missing:
        sys.exit("bench: missing " + ", ".join(missing) +
                 " (run scripts/setup.sh, which installs the peers and builds train_step_bench)")
    started, load_before = datetime.datetime.now(), os.getloadavg()[0]
    try:
        if "training" in sections or "inference" in sections:
            bench.prepare_models()
        measures = {"training": bench.measure_training, "ort": bench.measure_ort_training,
                    "inference": bench.measure_inference, "sizes": bench.measure_sizes,
                    "zoo": bench.measure_zoo, "zoo_memory": bench.measure_zoo_memory}
        for section in sections:
            measures[section]()
        report = Report(bench).render(environment_header(bench, started, load_before), sections)
    finally:
        bench.cleanup()
    print(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report + "\n")
        log(f"wrote {os.path.relpath(args.out, ROOT)} in {(datetime.datetime.now() - started).seconds} s")


if __name__ == "__main__":
    main()
