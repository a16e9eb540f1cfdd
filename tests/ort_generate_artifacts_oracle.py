"""ONNX Runtime's own generate_artifacts (onnxruntime-training-cpu 1.19.2, in the venv scripts/setup.sh makes) as
the oracle for ORT's artifacts of real models: a small transformer block exported by PyTorch, whose ORT training
graph holds com.microsoft QuickGelu, Gelu, ConcatTraining, SplitTraining, QuickGeluGrad, GeluGrad and FusedMatMul,
and torchvision's ResNet-18 (ConvGrad, BatchNormInternal, BatchNormalizationGrad, ReluGrad) train 5 steps in ORT
and on edgetrain (tests/ort_sequence_runner) from the same artifacts. Train losses, the eval loss and the
parameter sums must agree within 1e-4 relative.
Run: /usr/bin/python3 tests/ort_generate_artifacts_oracle.py --runner build/tests/ort_sequence_runner"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

PEERS = os.environ.get("EDGETRAIN_PEERS_DIR", os.path.expanduser("~/.cache/edgetrain-peers"))
ORT_PYTHON = os.path.join(PEERS, "venv-ort-training", "bin", "python")
EXPECTED_OPS = {
    "transformer": {"QuickGelu", "Gelu", "ConcatTraining", "SplitTraining", "QuickGeluGrad", "GeluGrad", "FusedMatMul"},
    "resnet18": {"ConvGrad", "BatchNormInternal", "BatchNormalizationGrad", "ReluGrad"},
}
INPUT_SHAPES = {"transformer": (4, 5, 8), "resnet18": (8, 3, 32, 32)}
# ORT 1.19.2 cannot load the eval model it generates from a training-mode export with BatchNormalization.
WITH_EVAL = {"transformer": True, "resnet18": False}
STEPS = 5
# ResNet-18 trains with ORT's SGD artifacts (SGDOptimizerV2; its optimizer model declares a first_order_moments input
# that no node reads). With AdamW its first steps move every parameter by about the learning rate whatever the size
# of its gradient, so gradients at round-off level, equally valid in either runtime, set full-size updates: 1e-6
# apart at step 1 became 3e-3 apart at step 3 on an AVX-512 machine. AdamW stays covered by the transformer.
# At SGD's learning rate 2e-3 or more the batch is memorized within three steps and round-off grows about 200x per
# step: from step 4 ORT's losses are 2e-3 apart from edgetrain's with its direct or its Winograd convolutions alike
# (which agree within 1e-6). At 1e-3 all three stay within 1e-5.
OPTIMIZER = {"transformer": "AdamW", "resnet18": "SGD"}
LR = {"transformer": 1e-3, "resnet18": 1e-3}


def ort_side(work, name):
    """In ORT's venv: export the model, generate ORT's artifacts, train them with ORT; writes ref.json."""
    import numpy as np
    import onnx
    import torch
    import torchvision
    from onnxruntime.training import api, artifacts

    torch.manual_seed(0)

    class Block(torch.nn.Module):
        def __init__(self, d=16, classes=4):
            super().__init__()
            self.inp = torch.nn.Linear(8, d)
            self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
            self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
            self.fc1, self.fc2, self.head = torch.nn.Linear(d, 32), torch.nn.Linear(32, d), torch.nn.Linear(d, classes)

        def forward(self, x):
            h = self.inp(x)
            q, k, v = self.qkv(self.ln1(h)).chunk(3, dim=-1)
            h = h + self.proj(torch.softmax(q @ k.transpose(1, 2) / 4.0, dim=-1) @ v)
            m = self.fc1(self.ln2(h))
            m = m * torch.sigmoid(1.702 * m)  # ORT fuses this into QuickGelu
            h = h + self.fc2(torch.nn.functional.gelu(m))
            h = torch.cat([h[:, :1], h[:, 1:]], dim=1)  # its gradient graph turns this into ConcatTraining
            return self.head(h.mean(dim=1))

    model_path, art = os.path.join(work, "model.onnx"), os.path.join(work, "artifacts")
    os.makedirs(art, exist_ok=True)
    net = Block() if name == "transformer" else torchvision.models.resnet18(num_classes=4)
    net.train()
    torch.onnx.export(net, torch.randn(*INPUT_SHAPES[name]), model_path, input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}}, opset_version=14,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    model = onnx.load(model_path)
    trainable = [i.name for i in model.graph.initializer if i.data_type == 1 and "running_" not in i.name]
    artifacts.generate_artifacts(model, requires_grad=trainable,
                                 loss=artifacts.LossType.CrossEntropyLoss,
                                 optimizer=getattr(artifacts.OptimType, OPTIMIZER[name]),
                                 artifact_directory=art)
    training = onnx.load(os.path.join(art, "training_model.onnx")).graph
    ops = sorted({n.op_type for n in training.node if n.domain == "com.microsoft"})

    rng = np.random.default_rng(0)
    x = rng.standard_normal(INPUT_SHAPES[name]).astype(np.float32)
    labels = rng.integers(0, 4, size=(INPUT_SHAPES[name][0],)).astype(np.int64)
    x.tofile(os.path.join(work, "x.bin"))
    labels.tofile(os.path.join(work, "labels.bin"))

    state = api.CheckpointState.load_checkpoint(os.path.join(art, "checkpoint"))
    module = api.Module(os.path.join(art, "training_model.onnx"), state,
                        os.path.join(art, "eval_model.onnx") if WITH_EVAL[name] else None)
    optimizer = api.Optimizer(os.path.join(art, "optimizer_model.onnx"), module)
    optimizer.set_learning_rate(LR[name])
    initial = float(module.get_contiguous_parameters(trainable_only=True).numpy().sum())
    module.train()
    losses = []
    for k in range(STEPS):
        if k > 0:
            optimizer.step()
            module.lazy_reset_grad()
        losses.append(float(module(x, labels)))
    eval_loss = None
    if WITH_EVAL[name]:
        module.eval()
        eval_loss = float(module(x, labels))
    ref = {"ops": ops, "input_names": module.input_names(), "train_losses": losses, "eval_loss": eval_loss,
           "param_sum_initial_trainable": initial,
           "param_sum_final_trainable": float(module.get_contiguous_parameters(trainable_only=True).numpy().sum())}
    with open(os.path.join(work, "ref.json"), "w") as f:
        json.dump(ref, f)


def close(a, b, rel=1e-4):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-6)


def check_model(name, runner):
    """ORT's artifacts of model `name` trained by ORT and by edgetrain; returns the failures."""
    work = tempfile.mkdtemp(prefix=f"ort_oracle_{name}_")
    done = subprocess.run([ORT_PYTHON, os.path.abspath(__file__), "--ort-side", f"{work},{name}"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        print(done.stdout[-3000:], done.stderr[-3000:])
        return [f"{name}: ORT's side (export, generate_artifacts, training) failed"]
    with open(os.path.join(work, "ref.json")) as f:
        ref = json.load(f)
    failures = []
    missing = EXPECTED_OPS[name] - set(ref["ops"])
    if missing:
        failures.append(f"{name}: ORT's training graph lacks {sorted(missing)}: the oracle no longer covers them")
    print(f"{name}: com.microsoft ops in ORT's training graph:", ", ".join(ref["ops"]))
    if ref["input_names"] != ["input", "labels"]:
        failures.append(f"{name}: ORT's training inputs are {ref['input_names']}, expected input, labels")

    art = os.path.join(work, "artifacts")
    command = [runner, "--train", os.path.join(art, "training_model.onnx"),
               "--optimizer", os.path.join(art, "optimizer_model.onnx"),
               "--checkpoint", os.path.join(art, "checkpoint"), "--steps", str(STEPS), "--lr", str(LR[name]),
               "--input", f"input=float32:{','.join(map(str, INPUT_SHAPES[name]))}:{os.path.join(work, 'x.bin')}",
               "--input", f"labels=int64:{INPUT_SHAPES[name][0]}:{os.path.join(work, 'labels.bin')}"]
    if WITH_EVAL[name]:
        command += ["--eval", os.path.join(art, "eval_model.onnx")]
    run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0:
        print(run.stderr)
        return [f"{name}: edgetrain could not train ORT's artifacts"]
    ours = json.loads(run.stdout)
    for k, (a, b) in enumerate(zip(ours["train_losses"], ref["train_losses"])):
        print(f"step {k + 1}: loss edgetrain {a:.7f}, ORT {b:.7f}")
        if not close(a, b):
            failures.append(f"{name}: train loss {k + 1}: edgetrain {a}, ORT {b}")
    if len(ours["train_losses"]) != STEPS:
        failures.append(f"{name}: {len(ours['train_losses'])} train losses, expected {STEPS}")
    for key in ["eval_loss"] * WITH_EVAL[name] + ["param_sum_initial_trainable", "param_sum_final_trainable"]:
        print(f"{key}: edgetrain {ours[key]:.7f}, ORT {ref[key]:.7f}")
        if not close(ours[key], ref[key]):
            failures.append(f"{name}: {key}: edgetrain {ours[key]}, ORT {ref[key]}")
    if ref["train_losses"][-1] >= ref["train_losses"][0]:
        failures.append(f"{name}: ORT's loss did not decrease: the sequence trains nothing")
    if failures:
        print(f"{name}: files kept in {work}")
    else:
        shutil.rmtree(work)
    return failures


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runner")
    parser.add_argument("--ort-side", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ort_side:
        ort_side(*args.ort_side.split(","))
        return 0
    if not os.path.exists(ORT_PYTHON):
        print(f"FAIL: {ORT_PYTHON} is missing: scripts/setup.sh installs onnxruntime-training-cpu==1.19.2 there")
        return 1
    failures = []
    for name in EXPECTED_OPS:
        failures += check_model(name, args.runner)
    for failure in failures:
        print("FAIL:", failure)
    print("ok" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
