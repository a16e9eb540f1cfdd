"""The package installs with pip and nothing from a package index (--no-index): pyproject.toml's in-tree
backend builds it with the project's CMake build. Installed into a temporary --target folder (Debian's Python
refuses plain installs without --break-system-packages), it imports from there and trains.
ctest sets EDGETRAIN_CMAKE_BUILD_DIR to its build folder, so the backend reuses that build."""

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

CHECK = """
import os, sys, numpy as np
import edgetrain
from edgetrain import artifacts
from edgetrain.api import CheckpointState, Module, Optimizer
assert edgetrain.__file__.startswith(sys.argv[1]), edgetrain.__file__
parameters = [f"net.{layer}.{kind}" for layer in (1, 3, 5) for kind in ("weight", "bias")]
paths = artifacts.generate_artifacts(sys.argv[2], parameters, loss=artifacts.LossType.CrossEntropyLoss,
                                     optimizer=artifacts.OptimType.AdamW, artifact_directory="artifacts")
module = Module(paths["training_model"], CheckpointState.load_checkpoint(paths["checkpoint"]), paths["eval_model"])
optimizer = Optimizer(paths["optimizer_model"], module)
loss = module(np.zeros((2, 1, 28, 28), np.float32), np.array([3, 7], np.int64))
optimizer.step()
print("trained, loss", float(loss))
"""


def test_pip_installs_offline_into_a_target_folder(tmp_path):
    target = tmp_path / "site-packages"
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--no-cache-dir",
                              "--target", str(target), str(ROOT)], env=environment, capture_output=True, text=True)
    assert install.returncode == 0, install.stdout + install.stderr

    sources = sorted(p.relative_to(ROOT / "python").as_posix() for p in (ROOT / "python" / "edgetrain").rglob("*.py"))
    installed = sorted(p.relative_to(target).as_posix() for p in (target / "edgetrain").rglob("*.py"))
    assert installed == sources
    assert len(list((target / "edgetrain").glob("_edgetrain.*.so"))) == 1
    assert (target / "edgetrain-0.1.0.dist-info" / "RECORD").is_file()

    check = subprocess.run([sys.executable, "-c", CHECK, str(target), str(ROOT / "models" / "mlp.onnx")],
                           env={**environment, "PYTHONPATH": str(target)}, cwd=tmp_path, capture_output=True,
                           text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "trained, loss" in check.stdout
