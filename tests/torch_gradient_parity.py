"""Gradient parity with PyTorch autograd: the reference models of shared/peers/torch_models.py
(exported in training mode at opset 13 and 17, Dropout at p=0) go through
`edgetrain generate-artifacts`; their training model, run by `edgetrain run`, must give PyTorch's
CrossEntropy loss and every parameter gradient within 1e-4 relative.

Run with Debian's interpreter: /usr/bin/python3 tests/torch_gradient_parity.py --edgetrain build/edgetrain
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnx.numpy_helper
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_parity import load_torch_models, zero_dropout  # noqa: E402

RELATIVE_TOLERANCE = 1e-4
ZERO_GRADIENT = 1e-6  # gradients below this in PyTorch are float32 round-off of an exact zero


def safe(name):
    return name.replace("/", "_").replace(":", "_") + ".npy"


def relative_error(actual, expected):
    return float(np.max(np.abs(actual - expected)) / max(np.max(np.abs(expected)), 1e-12))


def check(tm, edgetrain, workdir, name, opset):
    model, x, _ = tm.make(name)
    zero_dropout(model)
    model.train(True)
    path = os.path.join(workdir, f"{name}_{opset}.onnx")
    torch.onnx.export(model, x[:2].clone(), path, opset_version=opset, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False, input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    art = os.path.join(workdir, f"art_{name}_{opset}")
    r = subprocess.run([edgetrain, "generate-artifacts", path, "--out", art], capture_output=True, text=True)
    if r.returncode != 0:
        return [f"generate-artifacts failed: {r.stderr.strip()}"]

    batch = torch.randn(6, *x.shape[1:], generator=torch.Generator().manual_seed(opset))
    labels = torch.arange(6) % 10
    feeds = {"input": batch.numpy(), "labels": labels.numpy()}
    for init in onnx.load(path).graph.initializer:
        feeds[init.name] = onnx.numpy_helper.to_array(init)
    training_model = os.path.join(art, "training_model.onnx")
    training_inputs = {i.name for i in onnx.load(training_model).graph.input}
    args = [edgetrain, "run", training_model, "-o", os.path.join(art, "out")]
    for key, value in feeds.items():
        if key not in training_inputs:  # e.g. num_batches_tracked, which edgetrain does not train
            continue
        file = os.path.join(art, "feed_" + safe(key))
        np.save(file, value)
        args += ["--input", f"{key}={file}"]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        return [f"edgetrain run failed: {r.stderr.strip()}"]

    loss = torch.nn.functional.cross_entropy(model(batch), labels)
    model.zero_grad()
    loss.backward()
    problems = []
    out = os.path.join(art, "out")
    worst = relative_error(np.load(os.path.join(out, "loss.npy")), loss.detach().numpy())
    if worst > RELATIVE_TOLERANCE:
        problems.append(f"loss differs by {worst:.2e}")
    checked = 0
    for pname, param in model.named_parameters():
        grad_file = os.path.join(out, safe(pname + "_grad"))
        if not os.path.exists(grad_file):
            problems.append(f"no gradient for {pname}")
            continue
        actual, expected = np.load(grad_file), param.grad.numpy()
        if np.max(np.abs(expected)) < ZERO_GRADIENT:
            # Mathematically zero (a conv bias right before BatchNorm): compare absolutely.
            if np.max(np.abs(actual)) >= ZERO_GRADIENT:
                problems.append(f"{pname}_grad should be ~0, is {np.max(np.abs(actual)):.2e}")
            checked += 1
            continue
        err = relative_error(actual, expected)
        worst = max(worst, err)
        checked += 1
        if err > RELATIVE_TOLERANCE:
            problems.append(f"{pname}_grad differs by {err:.2e}")
    return problems or [f"ok: loss and {checked} parameter gradients, worst relative error {worst:.2e}"]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--edgetrain", required=True)
    parser.add_argument("--torch-models", default=os.path.join(here, "..", "..", "shared", "peers", "torch_models.py"))
    args = parser.parse_args()
    if not os.path.exists(args.torch_models):
        sys.exit(f"torch_models.py not found at {args.torch_models} (shared/ must sit beside the project)")
    tm = load_torch_models(args.torch_models)
    passed = failed = 0
    with tempfile.TemporaryDirectory() as workdir:
        for name in ["mlp", "cnn", "transformer"]:
            for opset in [13, 17]:
                result = check(tm, args.edgetrain, workdir, name, opset)
                ok = result[0].startswith("ok")
                passed += ok
                failed += not ok
                print(f"{'PASS' if ok else 'FAIL'} {name} opset {opset}: {'; '.join(result)}", flush=True)
    print(f"torch gradient parity: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
