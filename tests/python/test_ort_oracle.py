"""ONNX Runtime as the oracle: ort_oracle_script.py, an onnxruntime.training script, run on ORT 1.19.2
(onnxruntime-training-cpu from PyPI, in the venv scripts/setup.sh makes) and on edgetrain with only its imports
changed, computes the same artifacts' numbers: losses, gradients, learning rates, parameters, eval outputs."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
PEERS = pathlib.Path(os.environ.get("EDGETRAIN_PEERS_DIR", pathlib.Path.home() / ".cache" / "edgetrain-peers"))
ORT_PYTHON = PEERS / "venv-ort-training" / "bin" / "python"


def run(python, backend):
    done = subprocess.run([str(python), str(HERE / "ort_oracle_script.py"), backend], capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, f"{backend} failed:\n{done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_same_script_computes_ort_numbers():
    assert ORT_PYTHON.exists(), f"{ORT_PYTHON} is missing: scripts/setup.sh installs onnxruntime-training-cpu there"
    ort, ours = run(ORT_PYTHON, "ort"), run(sys.executable, "edgetrain")
    assert sorted(ours) == sorted(ort)
    for case, expected in ort.items():
        got = ours[case]
        for key in ("parameter_names", "requires_grad", "size", "trainable_size", "train_inputs", "eval_inputs"):
            assert got[key] == expected[key], (case, key)
        for key in ("losses", "learning_rates", "grad_w1", "eval_loss", "eval_output", "parameters", "w2"):
            np.testing.assert_allclose(got[key], expected[key], rtol=2e-5, atol=2e-6, err_msg=f"{case}: {key}")
        assert expected["losses"][2] < expected["losses"][0], case  # it trains: the comparison is not vacuous
