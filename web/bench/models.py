"""The three benchmark models (bench/run.py's: MLP and LeNet-BN CNN batch 64, transformer batch 32) for
web/bench/bench.mjs --models: one forward ONNX each (../shared/peers/torch_models.py), ONNX Runtime's
artifacts from its own generate_artifacts (onnxruntime-training 1.19.2) and edgetrain's from `edgetrain generate-artifacts` on that same model, both
CrossEntropy + AdamW, and one random batch. Run with the venv scripts/setup.sh makes:
  ~/.cache/edgetrain-peers/venv-ort-training/bin/python web/bench/models.py --edgetrain build/edgetrain --out DIR"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import onnx
from onnxruntime.training import artifacts

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TORCH_MODELS = os.path.join(ROOT, "..", "shared", "peers", "torch_models.py")
MODELS = {"mlp": (64, (1, 28, 28)), "cnn": (64, (1, 28, 28)), "transformer": (32, (64, 128))}


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--edgetrain", required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    out = os.path.abspath(a.out)
    config = []
    for name, (batch, shape) in MODELS.items():
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        forward = os.path.join(d, "forward.onnx")
        # The CNN in training mode (its BatchNormalization trains); the transformer at opset 14, where
        # LayerNorm is primitive ops (ORT's LayerNormalization gradient needs the outputs opset 17's lacks).
        extra = {"cnn": ["--training"], "transformer": ["--opset", "14"]}.get(name, [])
        subprocess.run(["/usr/bin/python3", TORCH_MODELS, "export", name, forward] + extra, check=True)
        model = onnx.load(forward)
        os.makedirs(os.path.join(d, "ort"), exist_ok=True)
        trainable = [i.name for i in model.graph.initializer
                     if i.data_type == onnx.TensorProto.FLOAT and "running_" not in i.name]
        artifacts.generate_artifacts(model, requires_grad=trainable,
                                     frozen_params=[i.name for i in model.graph.initializer if i.name not in trainable],
                                     loss=artifacts.LossType.CrossEntropyLoss, optimizer=artifacts.OptimType.AdamW,
                                     artifact_directory=os.path.join(d, "ort"))
        subprocess.run([a.edgetrain, "generate-artifacts", forward, "-o", os.path.join(d, "edgetrain"),
                        "--requires-grad", *trainable], check=True, stdout=subprocess.DEVNULL)
        rng = np.random.default_rng(0)
        rng.standard_normal((batch, *shape)).astype(np.float32).tofile(os.path.join(d, "input.bin"))
        (np.arange(batch) % 10).astype(np.int64).tofile(os.path.join(d, "labels.bin"))
        config.append({"name": name, "batch": batch, "inputs": [
            {"name": "input", "dtype": "float32", "shape": [batch, *shape], "file": f"{name}/input.bin"},
            {"name": "labels", "dtype": "int64", "shape": [batch], "file": f"{name}/labels.bin"}]})
        print(f"{name}: {len(trainable)} trainable parameters, artifacts in {d}/ort and {d}/edgetrain", file=sys.stderr)
    with open(os.path.join(out, "models.json"), "w") as f:
        json.dump(config, f, indent=1)


if __name__ == "__main__":
    main()
