"""PyTorch parity: the reference models of shared/peers/torch_models.py, exported at opset 13 and 17
in eval and training mode, run by `edgetrain run`; outputs must match PyTorch within 1e-4 relative.
Training mode compares Dropout at p=0 (BatchNorm uses batch statistics, as in PyTorch).

Run with Debian's interpreter: /usr/bin/python3 tests/torch_parity.py --edgetrain build/edgetrain
"""
import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

RELATIVE_TOLERANCE = 1e-4


def load_torch_models(path):
    spec = importlib.util.spec_from_file_location("torch_models", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def zero_dropout(model):
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
        if isinstance(m, torch.nn.MultiheadAttention):
            m.dropout = 0.0


def check(tm, edgetrain, workdir, name, opset, training):
    model, x, _ = tm.make(name)
    zero_dropout(model)
    model.train(training)
    path = os.path.join(workdir, f"{name}_opset{opset}_{'train' if training else 'eval'}.onnx")
    mode = torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL
    torch.onnx.export(model, x[:2].clone(), path, opset_version=opset, training=mode,
                      do_constant_folding=not training, input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    batch = torch.randn(5, *x.shape[1:], generator=torch.Generator().manual_seed(opset))
    with torch.no_grad():
        expected = model(batch).numpy()
    input_path = os.path.join(workdir, "input.npy")
    np.save(input_path, batch.numpy())
    out_dir = os.path.join(workdir, "out")
    result = subprocess.run([edgetrain, "run", path, "--input", f"input={input_path}", "-o", out_dir],
                            capture_output=True, text=True)
    if result.returncode != 0:
        return False, f"edgetrain run failed: {result.stderr.strip()}"
    actual = np.load(os.path.join(out_dir, "output.npy"))
    if actual.shape != expected.shape:
        return False, f"shape {actual.shape}, expected {expected.shape}"
    error = float(np.max(np.abs(actual - expected)) / np.max(np.abs(expected)))
    return error <= RELATIVE_TOLERANCE, f"max error {error:.2e} of max |output|"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--edgetrain", required=True)
    parser.add_argument("--torch-models", default=os.path.join(here, "..", "..", "shared", "peers", "torch_models.py"))
    args = parser.parse_args()
    if not os.path.exists(args.torch_models):
        sys.exit(f"torch_models.py not found at {args.torch_models} (shared/ must sit beside the project)")
    tm = load_torch_models(args.torch_models)
    torch.manual_seed(0)
    passed = failed = 0
    with tempfile.TemporaryDirectory() as workdir:
        for name in ["mlp", "cnn", "transformer"]:
            for opset in [13, 17]:
                for training in [False, True]:
                    ok, detail = check(tm, args.edgetrain, workdir, name, opset, training)
                    passed += ok
                    failed += not ok
                    print(f"{'PASS' if ok else 'FAIL'} {name} opset {opset} {'training' if training else 'eval'}: {detail}",
                          flush=True)
    print(f"torch parity: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
