"""The `edgetrain` CLI: inspect and run on the bundled model, and its error messages and exit codes.
Run: /usr/bin/python3 tests/cli_test.py --edgetrain build/edgetrain"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

from checks import expect, summary

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MLP = os.path.join(ROOT, "models", "mlp.onnx")


def run(*args):
    return subprocess.run([EDGETRAIN, *args], capture_output=True, text=True)



def main():
    r = run("inspect", MLP)
    expect("inspect exits 0", r.returncode == 0, r.stderr)
    for needle in ["input: float32 [batch, 1, 28, 28]", "output: float32 [batch, 10]", "ai.onnx=17", "Gemm: 3",
                   "parameters: 6 tensors, 535818 elements, 2143272 bytes"]:
        expect(f"inspect prints '{needle}'", needle in r.stdout, r.stdout)

    with tempfile.TemporaryDirectory() as tmp:
        x = np.random.default_rng(0).random((3, 1, 28, 28), dtype=np.float32)
        np.save(os.path.join(tmp, "x.npy"), x)
        r = run("run", MLP, "--input", f"input={tmp}/x.npy", "-o", tmp)
        expect("run exits 0", r.returncode == 0, r.stderr)
        out = np.load(os.path.join(tmp, "output.npy"))
        expect("run writes output.npy [3, 10] of finite values", out.shape == (3, 10) and np.isfinite(out).all())

        np.save(os.path.join(tmp, "bad.npy"), x[0, 0])
        r = run("run", MLP, "--input", f"input={tmp}/bad.npy", "-o", tmp)
        expect("wrong rank is an InvalidArgument naming the input", r.returncode == 1 and
               "error (InvalidArgument)" in r.stderr and "input 'input' expects rank 4" in r.stderr, r.stderr)
        r = run("run", MLP, "-o", tmp)
        expect("missing feed is named", r.returncode == 1 and "missing input 'input'" in r.stderr, r.stderr)
        r = run("run", MLP, "--input", f"{tmp}/x.npy")
        expect("malformed --input is explained", r.returncode == 1 and "NAME=FILE.npy" in r.stderr, r.stderr)

        with open(MLP, "rb") as f:
            data = f.read()
        with open(os.path.join(tmp, "cut.onnx"), "wb") as f:
            f.write(data[: len(data) // 2])
        r = run("inspect", os.path.join(tmp, "cut.onnx"))
        expect("truncated model is an InvalidModel naming the file", r.returncode == 1 and
               "error (InvalidModel)" in r.stderr and "cut.onnx" in r.stderr, r.stderr)
        r = run("run", os.path.join(tmp, "missing.onnx"))
        expect("missing model is an IoError", r.returncode == 1 and "error (IoError)" in r.stderr, r.stderr)

        art = os.path.join(tmp, "art")
        r = run("generate-artifacts", MLP, "--out", art, "--frozen", "net.1.weight,net.1.bias", "--optimizer", "sgd",
                "--momentum", "0.9", "--prefix", "mlp_")
        expect("generate-artifacts exits 0", r.returncode == 0, r.stderr)
        for name in ["training_model.onnx", "eval_model.onnx", "optimizer_model.onnx", "checkpoint"]:
            expect(f"generate-artifacts writes mlp_{name}", os.path.exists(os.path.join(art, "mlp_" + name)))
        r = run("inspect", os.path.join(art, "mlp_training_model.onnx"))
        expect("the training model returns gradients of the trainable parameters only",
               "net.3.weight_grad" in r.stdout and "net.1.weight_grad" not in r.stdout, r.stdout)
        r = run("check-gradients", art, "--prefix", "mlp_", "--samples", "4")
        expect("check-gradients passes on the MLP", r.returncode == 0 and "net.5.bias" in r.stdout, r.stdout + r.stderr)

        # PyTorch shares BatchNorm's initial weight with its running variance (both ones); they must
        # still become a trainable parameter and a separate state.
        cnn_art = os.path.join(tmp, "cnn_art")
        r = run("generate-artifacts", os.path.join(ROOT, "models", "lenet_bn.onnx"), "--out", cnn_art)
        expect("generate-artifacts on the bundled LeNet-BN exits 0", r.returncode == 0, r.stderr)
        r = run("inspect", os.path.join(cnn_art, "training_model.onnx"))
        expect("BatchNorm scale trains and its running variance is written back as state",
               "features.1.weight_grad" in r.stdout and "features.1.running_var.updated" in r.stdout and
               "features.1.weight.updated" not in r.stdout, r.stdout)

        # Export by the base model's own output name, from artifacts made without --additional-output.
        plain = os.path.join(tmp, "plain_art")
        r = run("generate-artifacts", MLP, "--out", plain)
        expect("generate-artifacts without additional outputs exits 0", r.returncode == 0, r.stderr)
        exported = os.path.join(tmp, "exported.onnx")
        r = run("export", plain, "--output", "output", "--out", exported)
        expect("export --output output works on plain artifacts", r.returncode == 0, r.stderr)
        os.makedirs(os.path.join(tmp, "exp"))
        r = run("run", exported, "--input", f"input={tmp}/x.npy", "-o", os.path.join(tmp, "exp"))
        original = os.path.join(tmp, "orig")
        os.makedirs(original)
        r2 = run("run", MLP, "--input", f"input={tmp}/x.npy", "-o", original)
        expect("the exported model computes the base model's output",
               r.returncode == 0 and r2.returncode == 0 and np.array_equal(
                   np.load(os.path.join(tmp, "exp", "output.npy")), np.load(os.path.join(original, "output.npy"))),
               r.stderr + r2.stderr)
        r = run("export", plain, "--output", "logits", "--out", exported)
        expect("export of an unknown value names it", r.returncode == 1 and "'logits'" in r.stderr, r.stderr)

        r = run("generate-artifacts", MLP, "--out", art, "--frozen", "net.9.weight")
        expect("an unknown parameter is named", r.returncode == 1 and
               "frozen parameter 'net.9.weight' is not an initializer" in r.stderr, r.stderr)
        r = run("generate-artifacts", MLP, "--out", art, "--loss", "hinge")
        expect("an unknown loss lists the valid ones", r.returncode == 1 and "hinge" in r.stderr and
               "cross_entropy" in r.stderr, r.stderr)
        r = run("generate-artifacts", MLP, "--out", art, "--loss-input", "logits")
        expect("an unknown loss input is named", r.returncode == 1 and "loss input 'logits'" in r.stderr, r.stderr)
        r = run("generate-artifacts", MLP, "--out", art, "--loss", "mse", "--requires-grad", "net.5.bias",
                "--frozen", "net.5.bias")
        expect("a parameter both frozen and trainable is refused", r.returncode == 1 and
               "both as requires-grad and as frozen" in r.stderr, r.stderr)

    sys.exit(summary("cli"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--edgetrain", required=True)
    EDGETRAIN = parser.parse_args().edgetrain
    main()
