"""The `edgetrain` CLI: inspect and run on the bundled model, and its error messages and exit codes.
Run: /usr/bin/python3 tests/cli_test.py --edgetrain build/edgetrain"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MLP = os.path.join(ROOT, "models", "mlp.onnx")
failures = []
checks = 0


def run(*args):
    return subprocess.run([EDGETRAIN, *args], capture_output=True, text=True)


def expect(name, condition, detail=""):
    global checks
    checks += 1
    print(f"{'PASS' if condition else 'FAIL'} {name}" + (f": {detail}" if not condition else ""))
    if not condition:
        failures.append(name)


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

    print(f"cli: {checks - len(failures)} passed, {len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--edgetrain", required=True)
    EDGETRAIN = parser.parse_args().edgetrain
    main()
