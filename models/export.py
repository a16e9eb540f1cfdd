"""Regenerates the bundled models from the reference definitions in shared/peers/torch_models.py
(seeded, so the files are reproducible): /usr/bin/python3 models/export.py

Exported in eval mode, preserving the module structure and without constant folding, so BatchNorm
stays a layer of its own (inference form) and every
parameter keeps its PyTorch name (what training artifacts need)."""
import importlib.util
import os

import torch

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "torch_models", os.path.join(here, "..", "..", "shared", "peers", "torch_models.py"))
torch_models = importlib.util.module_from_spec(spec)
spec.loader.exec_module(torch_models)

for name, file in [("mlp", "mlp.onnx"), ("cnn", "lenet_bn.onnx")]:
    model, x, _ = torch_models.make(name)
    model.eval()
    path = os.path.join(here, file)
    torch.onnx.export(model, x[:2].clone(), path, opset_version=17, training=torch.onnx.TrainingMode.PRESERVE,
                      do_constant_folding=False, input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    print("wrote", path)
