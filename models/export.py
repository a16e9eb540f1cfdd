"""Regenerates the bundled models from the reference definitions in shared/peers/torch_models.py
(seeded, so the files are reproducible): /usr/bin/python3 models/export.py"""
import importlib.util
import os

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "torch_models", os.path.join(here, "..", "..", "shared", "peers", "torch_models.py"))
torch_models = importlib.util.module_from_spec(spec)
spec.loader.exec_module(torch_models)

for name, file in [("mlp", "mlp.onnx"), ("cnn", "lenet_bn.onnx")]:
    torch_models.export(name, os.path.join(here, file), opset=17, training=False)
    print("wrote", os.path.join(here, file))
