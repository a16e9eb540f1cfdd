"""`edgetrain train / eval / export / predict` on a slice of Fashion-MNIST: metrics, exact resume,
export that reproduces the eval graph, and the errors a user can cause.
Run: /usr/bin/python3 tests/train_cli_test.py --edgetrain build/edgetrain"""
import argparse
import filecmp
import gzip
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from checks import expect, summary

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MLP = os.path.join(ROOT, "models", "mlp.onnx")
FASHION = "/usr/share/datasets/fashion-mnist"
TRAIN = [f"input={FASHION}/train-images-idx3-ubyte.gz", f"labels={FASHION}/train-labels-idx1-ubyte.gz"]


def run(*args):
    return subprocess.run([EDGETRAIN, *map(str, args)], capture_output=True, text=True)



def expect_error(name, result, kind, *needles):
    text = result.stderr
    ok = result.returncode == 1 and f"error ({kind})" in text and all(n in text for n in needles)
    expect(name, ok, f"rc={result.returncode} stderr={text.strip()}")


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    rank = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(rank)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * rank).reshape(dims)


def train(art, *extra):
    # 2000 samples, 32 steps per epoch; the linear schedule spans 3 epochs whatever the run length.
    return run("train", art, "--data", *TRAIN, "--limit", 2000, "--batch-size", 64, "--seed", 3, "--threads", 2,
               "--scheduler", "linear", "--total-steps", 96, *extra)


def check_memory_budget(tmp, test):
    """--memory-budget on LeNet-BN: too small names the smallest budget, which then trains to the same bits."""
    lenet, recomputing = os.path.join(tmp, "lenet"), os.path.join(tmp, "lenet_recomputing")
    r = run("generate-artifacts", os.path.join(ROOT, "models", "lenet_bn.onnx"), "-o", recomputing)
    copies = sorted(n.op_type for n in onnx.load(f"{recomputing}/training_model.onnx").graph.node
                    if n.name.endswith("_recompute")) if r.returncode == 0 else []
    expect("generate-artifacts recomputes BatchNormalization and Relu in the backward pass",
           copies == ["BatchNormalization", "BatchNormalization", "Relu", "Relu"], copies)
    # Keeping them leaves the budget planner forward values to recompute (LeNet-BN's peak is then at the forward end).
    r = run("generate-artifacts", os.path.join(ROOT, "models", "lenet_bn.onnx"), "-o", lenet, "--keep-cheap-values")
    expect("generate-artifacts --keep-cheap-values keeps them",
           r.returncode == 0 and not any(n.name.endswith("_recompute")
                                         for n in onnx.load(f"{lenet}/training_model.onnx").graph.node), r.stderr)

    def train_lenet(name, *extra):
        return run("train", lenet, "--data", *test, "--limit", 96, "--batch-size", 32, "--seed", 5,
                   "--checkpoint-out", f"{tmp}/{name}.ckpt", *extra)

    r = train_lenet("free")
    expect("LeNet-BN trains without a budget and prints no memory plan",
           r.returncode == 0 and "memory plan" not in r.stdout, r.stdout + r.stderr)
    r = train_lenet("never", "--memory-budget", "1K")
    expect_error("a budget below the smallest plan", r, "ResourceExhausted",
                 "the memory budget of 1024 bytes cannot be met", "a budget of at least ")
    smallest = int(r.stderr.split("a budget of at least ")[1].split()[0]) if r.returncode == 1 else 0
    r = train_lenet("smallest", "--memory-budget", smallest)
    plan = r.stdout.split("memory plan: training arena ")[1].split() if "memory plan" in r.stdout else ["0"] * 5
    expect("the smallest budget trains, recomputing forward values within it",
           r.returncode == 0 and int(plan[0]) == smallest and int(plan[4]) > 0, r.stdout + r.stderr)
    expect("training under the smallest budget ends in the same checkpoint, byte for byte",
           os.path.exists(f"{tmp}/smallest.ckpt") and filecmp.cmp(f"{tmp}/free.ckpt", f"{tmp}/smallest.ckpt", shallow=False))
    r = train_lenet("roomy", "--memory-budget", "64M")
    expect("a budget with a suffix: 64M is 64 MiB, room enough to recompute nothing",
           r.returncode == 0 and "(budget 67108864), 0 forward values recomputed" in r.stdout, r.stdout + r.stderr)
    for bad, why in (("0", "is zero"), ("-1", "is negative"), ("12X", "has an unknown unit"),
                     ("lots", "is not a byte size"), ("0.1", "is less than one byte")):
        r = train_lenet("never", "--memory-budget", bad)
        expect_error(f"--memory-budget {bad} is refused", r, "InvalidArgument", f"--memory-budget: '{bad}' {why}")
    r = run("train", lenet, "--data", *test, "--memory-limit", "1.5G", "--limit", 32, "--batch-size", 32)
    expect("--memory-limit takes the same suffixes", r.returncode == 0, r.stderr)


def check_frozen_prefix_cache(tmp, test):
    """--cache-frozen-prefix: head-only training reads the frozen layers' outputs from the cache in later epochs."""
    head = os.path.join(tmp, "head")
    r = run("generate-artifacts", MLP, "-o", head, "--requires-grad", "net.5.weight,net.5.bias")
    expect("generate-artifacts of the MLP's head exits 0", r.returncode == 0, r.stderr)

    def train_head(name, *extra):
        return run("train", head, "--data", *test, "--limit", 256, "--batch-size", 32, "--epochs", 2, "--seed", 5,
                   "--checkpoint-out", f"{tmp}/{name}.ckpt", *extra)

    r = train_head("uncached")
    expect("head-only training without the cache prints no cache line",
           r.returncode == 0 and "frozen prefix cache" not in r.stdout, r.stdout + r.stderr)
    r = train_head("cached", "--cache-frozen-prefix", "16M")
    expect("the second epoch reads all 256 samples from the cache",
           r.returncode == 0 and "frozen prefix cache: 256 samples" in r.stdout and "256 hits, 256 misses" in r.stdout,
           r.stdout + r.stderr)
    # The cache holds each sample's prefix output from its first batch; oneDNN's GEMM rounds a row differently
    # by its position in the batch, so the head agrees to float rounding, not to the bit.
    heads = []
    for name in ("uncached", "cached"):
        r = run("export", head, "--checkpoint", f"{tmp}/{name}.ckpt", "--output", "output", "--out", f"{tmp}/{name}.onnx")
        heads.append({i.name: numpy_helper.to_array(i) for i in onnx.load(f"{tmp}/{name}.onnx").graph.initializer}
                     if r.returncode == 0 else {})
    differences = {k: float(np.abs(heads[0][k] - heads[1][k]).max()) for k in heads[0] if k in heads[1]}
    expect("cached training ends with the same frozen layers and a head within 1e-6",
           len(differences) == 6 and max(differences.values()) < 1e-6 and
           differences["net.1.weight"] == differences["net.3.weight"] == 0, differences)
    r = train_head("never", "--cache-frozen-prefix", "0")
    expect_error("--cache-frozen-prefix 0 is refused", r, "InvalidArgument", "--cache-frozen-prefix: '0' is zero")

    lenet_head = os.path.join(tmp, "lenet_head")
    r = run("generate-artifacts", os.path.join(ROOT, "models", "lenet_bn.onnx"), "-o", lenet_head,
            "--requires-grad", "classifier.5.weight,classifier.5.bias")
    r = run("train", lenet_head, "--data", *test, "--limit", 64, "--batch-size", 32, "--cache-frozen-prefix", "16M")
    expect_error("a prefix with training-mode BatchNormalization cannot be cached, and the node is named", r,
                 "InvalidArgument", "BatchNormalization")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        art = os.path.join(tmp, "art")
        r = run("generate-artifacts", MLP, "-o", art, "--additional-output", "output")
        expect("generate-artifacts exits 0", r.returncode == 0, r.stderr)

        # Test slice as .npy: uint8 images [1000, 28, 28] and uint8 labels.
        images = read_idx(f"{FASHION}/t10k-images-idx3-ubyte.gz")[:1000]
        labels = read_idx(f"{FASHION}/t10k-labels-idx1-ubyte.gz")[:1000]
        np.save(f"{tmp}/x.npy", images)
        np.save(f"{tmp}/y.npy", labels)
        test = [f"input={tmp}/x.npy", f"labels={tmp}/y.npy"]

        # --- train, metrics, progress lines ---
        metrics = f"{tmp}/metrics.csv"
        r = train(art, "--epochs", 2, "--checkpoint-out", f"{tmp}/two.ckpt", "--metrics", metrics,
                  "--eval-data", *test)
        expect("train 2 epochs exits 0", r.returncode == 0, r.stderr)
        expect("train prints one summary line per epoch with eval accuracy",
               r.stdout.count("accuracy") == 2 and "epoch 2: train loss" in r.stdout, r.stdout)
        expect("off a terminal, progress comes as plain lines with loss, samples/s and ETA",
               "epoch 1/2 32/32 loss" in r.stderr and "samples/s ETA" in r.stderr and "\r" not in r.stderr, r.stderr)
        rows = [line.split(",") for line in open(metrics).read().split()]
        expect("metrics CSV has a header and one row per epoch",
               rows[0][:5] == ["epoch", "steps", "train_loss", "eval_loss", "eval_accuracy"] and len(rows) == 3, rows)
        lr_after_two = float(rows[2][5])
        expect("the linear schedule's learning rate after 64 of 96 steps is 1e-3 * 32/96",
               abs(lr_after_two - 1e-3 * 32 / 96) < 1e-9, rows[2])
        loss1, loss2 = float(rows[1][2]), float(rows[2][2])
        expect("training lowers the loss", loss2 < loss1 < 2.3, rows)

        # --- resume is exact: 2 epochs + 1 resumed == 3 straight, byte for byte ---
        r = train(art, "--epochs", 1, "--resume", f"{tmp}/two.ckpt", "--checkpoint-out", f"{tmp}/resumed.ckpt")
        expect("resume exits 0 and continues at epoch 3", r.returncode == 0 and "epoch 3:" in r.stdout,
               r.stdout + r.stderr)
        r = train(art, "--epochs", 3, "--checkpoint-out", f"{tmp}/straight.ckpt")
        expect("straight 3 epochs exits 0", r.returncode == 0, r.stderr)
        expect("resumed checkpoint equals the uninterrupted one bit for bit",
               filecmp.cmp(f"{tmp}/resumed.ckpt", f"{tmp}/straight.ckpt", shallow=False))

        # --- eval, export, predict with the exported model ---
        r = run("eval", art, "--checkpoint", f"{tmp}/straight.ckpt", "--data", *test)
        expect("eval exits 0 and reports loss and accuracy", r.returncode == 0 and "accuracy" in r.stdout, r.stderr)
        eval_accuracy = r.stdout.split("accuracy ")[1].split("%")[0] if r.returncode == 0 else "?"
        model = f"{tmp}/trained.onnx"
        r = run("export", art, "--checkpoint", f"{tmp}/straight.ckpt", "--out", model)
        expect("export exits 0", r.returncode == 0, r.stderr)
        m = onnx.load(model)
        onnx.checker.check_model(m, full_check=True)
        expect("exported model is plain inference ONNX: input 'input', output 'output', 6 weights",
               [i.name for i in m.graph.input] == ["input"] and [o.name for o in m.graph.output] == ["output"]
               and len(m.graph.initializer) == 6, str(m.graph.input))
        r = run("predict", model, "--data", f"{tmp}/x.npy", "--labels", f"{tmp}/y.npy", "--out", f"{tmp}/pred.npy")
        expect("predict with the exported model gives eval's accuracy",
               r.returncode == 0 and f"accuracy {eval_accuracy}%" in r.stdout, r.stdout + r.stderr)
        pred = np.load(f"{tmp}/pred.npy")
        expect("predict writes one class per sample", pred.shape == (1000,) and pred.max() <= 9)

        check_frozen_prefix_cache(tmp, test)

        # --- bad input: each error names what is wrong ---
        r = run("train", art, "--data", f"image={tmp}/x.npy", f"labels={tmp}/y.npy")
        expect_error("unknown input name", r, "InvalidArgument", "'input'")
        np.save(f"{tmp}/small.npy", images[:, :27, :27])
        r = run("train", art, "--data", f"input={tmp}/small.npy", f"labels={tmp}/y.npy")
        expect_error("images of the wrong size", r, "InvalidArgument", "input", "small.npy")
        np.save(f"{tmp}/few.npy", labels[:10])
        r = run("train", art, "--data", f"input={tmp}/x.npy", f"labels={tmp}/few.npy")
        expect_error("sample counts differ", r, "InvalidArgument", "x.npy", "few.npy")
        r = run("train", art, "--data", f"input={tmp}/x.npy", f"labels={tmp}/y.npy", f"{tmp}/y.npy")
        expect_error("more files than inputs", r, "InvalidArgument", "more files than model inputs")
        r = run("train", art, "--data", *test, "--memory-limit", 1000)
        expect_error("a memory limit below the parameters", r, "ResourceExhausted", "training_model.onnx",
                     "more than the memory limit of 1000 bytes")
        r = run("train", art, "--data", *test, "--memory-limit", 0)
        expect("--memory-limit 0 is refused", r.returncode != 0 and "--memory-limit" in r.stderr, r.stderr)
        check_memory_budget(tmp, test)
        r = run("train", f"{tmp}/nowhere", "--data", f"{tmp}/x.npy")
        expect_error("missing artifact directory", r, "IoError", "nowhere")
        with open(f"{tmp}/two.ckpt", "rb") as f:
            ckpt = f.read()
        with open(f"{tmp}/cut.ckpt", "wb") as f:
            f.write(ckpt[: len(ckpt) // 3])
        r = run("train", art, "--data", *test, "--resume", f"{tmp}/cut.ckpt")
        expect_error("truncated checkpoint", r, "InvalidModel", "cut.ckpt")
        r = run("export", art, "--checkpoint", f"{tmp}/absent.ckpt", "--out", f"{tmp}/never.onnx")
        expect_error("export from a missing checkpoint", r, "IoError", "absent.ckpt")
        expect("a failed export writes nothing", not os.path.exists(f"{tmp}/never.onnx"))
        r = run("export", art, "--out", f"{tmp}/never.onnx", "--output", "logits")
        expect_error("export of an unknown output", r, "InvalidArgument", "'logits'")
        no_opt = os.path.join(tmp, "no_opt")
        shutil.copytree(art, no_opt)
        os.remove(os.path.join(no_opt, "optimizer_model.onnx"))
        r = run("train", no_opt, "--data", *test)
        expect_error("training without an optimizer model", r, "IoError", "optimizer_model.onnx")
        r = run("predict", model, "--data", f"{tmp}/x.npy", "--labels", f"{tmp}/few.npy")
        expect_error("predict with too few labels", r, "InvalidArgument", "few.npy")
        not_a_classifier = helper.make_model(helper.make_graph(
            [helper.make_node("ReduceMax", ["input"], ["top"], axes=[1, 2], keepdims=0)], "top",
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 28, 28])],
            [helper.make_tensor_value_info("top", TensorProto.FLOAT, ["batch"])]),
            opset_imports=[helper.make_opsetid("", 17)])
        onnx.save(not_a_classifier, f"{tmp}/not_a_classifier.onnx")
        r = run("predict", f"{tmp}/not_a_classifier.onnx", "--data", f"{tmp}/x.npy")
        expect_error("predict with a model that outputs no class scores", r, "InvalidArgument",
                     "must be float32 scores [batch, classes]")

    return summary("train_cli")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--edgetrain", required=True)
    EDGETRAIN = os.path.abspath(parser.parse_args().edgetrain)
    sys.exit(main())
