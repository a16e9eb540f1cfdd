"""Gradient parity with PyTorch autograd: the reference models of shared/peers/torch_models.py
(exported in training mode at opset 13 and 17, Dropout at p=0) go through
`edgetrain generate-artifacts`; their training model, run by `edgetrain run`, must give PyTorch's
CrossEntropy loss and every parameter gradient within 1e-4 relative. The artifacts must pass
onnx.checker, and ONNX Runtime's native inference build (npm onnxruntime-node) must compute the same
outputs from the training model.

Run with Debian's interpreter: /usr/bin/python3 tests/torch_gradient_parity.py --edgetrain build/edgetrain
"""
import argparse
import json
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
ORT_NODE = os.environ.get("EDGETRAIN_ORT_NODE",
                          os.path.expanduser("~/.cache/edgetrain-peers/node_modules/onnxruntime-node"))
ZERO_GRADIENT = 1e-6  # references below this are float32 round-off of an exact zero


def safe(name):
    return name.replace("/", "_").replace(":", "_") + ".npy"


def compare(actual, expected):
    """(ok, error): relative error, or the absolute one where the reference is float32 round-off of
    an exact zero (a conv bias right before BatchNorm has a zero gradient)."""
    if actual.shape != expected.shape:
        return False, float("inf")
    reference = float(np.max(np.abs(expected))) if expected.size else 0.0
    difference = float(np.max(np.abs(actual - expected))) if expected.size else 0.0
    if reference < ZERO_GRADIENT:
        return difference < ZERO_GRADIENT, difference
    return difference <= RELATIVE_TOLERANCE * reference, difference / reference


def ort_native_outputs(model, feeds, workdir):
    """The model's outputs as computed by ONNX Runtime's native inference build."""
    manifest = []
    for key, value in feeds.items():
        file = os.path.join(workdir, "ort_feed_" + safe(key))
        np.ascontiguousarray(value).tofile(file)
        manifest.append({"name": key, "dtype": str(value.dtype), "shape": list(value.shape), "file": file})
    manifest_path = os.path.join(workdir, "ort_manifest.json")
    with open(manifest_path, "w") as f:
        json.dump(manifest, f)
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ort_native_run.js")
    r = subprocess.run(["node", script, model, manifest_path, workdir], capture_output=True, text=True,
                       env=dict(os.environ, ORT_NODE_MODULE=ORT_NODE))
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip())
    with open(os.path.join(workdir, "outputs.json")) as f:
        described = json.load(f)
    dtypes = {"float32": np.float32, "int64": np.int64, "bool": np.bool_}
    return {o["name"]: np.fromfile(o["file"], dtype=dtypes[o["dtype"]]).reshape(o["shape"]) for o in described}


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
    for artifact in ["training_model.onnx", "eval_model.onnx", "optimizer_model.onnx"]:
        try:
            onnx.checker.check_model(onnx.load(os.path.join(art, artifact)), full_check=True)
        except Exception as e:  # the checker's own exception types vary by version
            return [f"onnx.checker rejects {artifact}: {e}"]

    batch = torch.randn(6, *x.shape[1:], generator=torch.Generator().manual_seed(opset))
    labels = torch.arange(6) % 10
    feeds = {"input": batch.numpy(), "labels": labels.numpy()}
    for init in onnx.load(path).graph.initializer:
        feeds[init.name] = onnx.numpy_helper.to_array(init)
    training_model = os.path.join(art, "training_model.onnx")
    training_inputs = {i.name for i in onnx.load(training_model).graph.input}
    args = [edgetrain, "run", training_model, "-o", os.path.join(art, "out")]
    feeds = {k: v for k, v in feeds.items() if k in training_inputs}  # drops e.g. num_batches_tracked
    for key, value in feeds.items():
        file = os.path.join(art, "feed_" + safe(key))
        np.save(file, value)
        args += ["--input", f"{key}={file}"]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        return [f"edgetrain run failed: {r.stderr.strip()}"]

    # ONNX Runtime's native build runs the same training graph: every output must agree.
    out = os.path.join(art, "out")
    ort_outputs = ort_native_outputs(training_model, feeds, art)
    ort_worst = 0.0
    for output_name, value in ort_outputs.items():
        ok, error = compare(np.load(os.path.join(out, safe(output_name))), value)
        if not ok:
            return [f"onnxruntime-node's {output_name} differs from edgetrain's by {error:.2e}"]
        ort_worst = max(ort_worst, error)

    loss = torch.nn.functional.cross_entropy(model(batch), labels)
    model.zero_grad()
    loss.backward()
    problems = []
    ok, worst = compare(np.load(os.path.join(out, "loss.npy")), loss.detach().numpy())
    if not ok:
        problems.append(f"loss differs by {worst:.2e}")
    checked = 0
    for pname, param in model.named_parameters():
        grad_file = os.path.join(out, safe(pname + "_grad"))
        if not os.path.exists(grad_file):
            problems.append(f"no gradient for {pname}")
            continue
        ok, error = compare(np.load(grad_file), param.grad.numpy())
        worst = max(worst, error)
        checked += 1
        if not ok:
            problems.append(f"{pname}_grad differs by {error:.2e}")
    return problems or [f"ok: onnx.checker accepts the artifacts; onnxruntime-node agrees ({ort_worst:.1e}); "
                        f"loss and {checked} parameter gradients match PyTorch, worst relative error {worst:.2e}"]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--edgetrain", required=True)
    parser.add_argument("--torch-models", default=os.path.join(here, "..", "..", "shared", "peers", "torch_models.py"))
    args = parser.parse_args()
    if not os.path.exists(ORT_NODE):
        sys.exit(f"onnxruntime-node not found at {ORT_NODE} (scripts/setup.sh installs it)")
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
