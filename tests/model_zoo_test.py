"""The model zoo: one small member of every torchvision classification family (random weights,
Dropout and stochastic depth at 0), exported in training mode, goes through
`edgetrain generate-artifacts` for full training and for head-only training (`--requires-grad` on
the classifier). Its training model is run by `edgetrain run` with both kernel backends (the default
and EDGETRAIN_KERNELS=reference) and by ONNX Runtime's native inference build (npm onnxruntime-node).
Every run's loss and trainable gradients are measured against PyTorch autograd in float64: the error
of each (max |g - g64|) must be at most 10x float32 PyTorch's own error (the worst of a few equally valid
float32 runs, see references()), floored at float32's epsilon times max |g64| (an exactly computed
reference would otherwise allow no round-off).
Errors are printed relative to max |g64| and as the worst multiple of float32 PyTorch's error.

Run with Debian's interpreter: /usr/bin/python3 tests/model_zoo_test.py --edgetrain build/edgetrain
With --opset 18..21 the opset-17 export (the newest Debian's torch 1.13 writes) is converted by onnx's version
converter, as PyTorch 2's exporters would write it (Reduce* axes as inputs, Pad-18/19, ScatterND-18, ...); that needs
onnx >= 1.16: run it with scripts/setup.sh's venv-onnx-testdata interpreter (onnx 1.17 over Debian's torch).
"""
import argparse
import warnings
import copy
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnx.numpy_helper
import torch
import torchvision.models as tvm
from torchvision.models.convnext import CNBlockConfig
from torchvision.ops import StochasticDepth

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gradient_parity import ORT_NODE, ort_native_outputs, safe  # noqa: E402

FACTOR = 10.0
FLOOR = float(np.finfo(np.float32).eps)
BATCH = 4


def efficientnet_small_variant():  # EfficientNet-B0's blocks at half width and depth
    setting, last_channel = tvm.efficientnet._efficientnet_conf("efficientnet_b0", width_mult=0.5, depth_mult=0.5)
    return tvm.EfficientNet(setting, dropout=0.0, stochastic_depth_prob=0.0, num_classes=10, last_channel=last_channel)


def regnet_small_variant():  # RegNetY's design space (grouped convs, squeeze-excitation), six blocks
    params = tvm.regnet.BlockParams.from_init_params(depth=6, w_0=16, w_a=8.0, w_m=2.0, group_width=8, se_ratio=0.25)
    return tvm.RegNet(params, num_classes=10)


def convnext_small_variant():
    blocks = [CNBlockConfig(32, 64, 1), CNBlockConfig(64, 128, 1), CNBlockConfig(128, None, 1)]
    return tvm.ConvNeXt(blocks, stochastic_depth_prob=0.0, num_classes=10)


# name: (constructor, image size, classifier parameters for head-only training)
ZOO = {
    "resnet18": (lambda: tvm.resnet18(num_classes=10), 64, ["fc.weight", "fc.bias"]),
    "mobilenet_v2": (lambda: tvm.mobilenet_v2(num_classes=10, width_mult=0.5), 64,
                     ["classifier.1.weight", "classifier.1.bias"]),
    "mobilenet_v3_small": (lambda: tvm.mobilenet_v3_small(num_classes=10, width_mult=0.5), 64,
                           ["classifier.3.weight", "classifier.3.bias"]),
    "efficientnet": (efficientnet_small_variant, 64, ["classifier.1.weight", "classifier.1.bias"]),
    "mnasnet0_5": (lambda: tvm.mnasnet0_5(num_classes=10), 64, ["classifier.1.weight", "classifier.1.bias"]),
    "regnet_y": (regnet_small_variant, 64, ["fc.weight", "fc.bias"]),
    "shufflenet_v2_x0_5": (lambda: tvm.shufflenet_v2_x0_5(num_classes=10), 64, ["fc.weight", "fc.bias"]),
    "squeezenet1_1": (lambda: tvm.squeezenet1_1(num_classes=10), 64, ["classifier.1.weight", "classifier.1.bias"]),
    "densenet": (lambda: tvm.DenseNet(growth_rate=8, block_config=(2, 2, 2, 2), num_init_features=16, bn_size=2,
                                      num_classes=10), 64, ["classifier.weight", "classifier.bias"]),
    "googlenet": (lambda: tvm.googlenet(num_classes=10, aux_logits=False, transform_input=False, init_weights=True),
                  64, ["fc.weight", "fc.bias"]),
    "convnext": (convnext_small_variant, 32, ["classifier.2.weight", "classifier.2.bias"]),
    "vit": (lambda: tvm.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=64,
                                          mlp_dim=128, num_classes=10), 32, ["heads.head.weight", "heads.head.bias"]),
    "swin": (lambda: tvm.SwinTransformer(patch_size=[4, 4], embed_dim=32, depths=[2, 2], num_heads=[2, 4],
                                         window_size=[4, 4], stochastic_depth_prob=0.0, num_classes=10),
             32, ["head.weight", "head.bias"]),
}
# The batch's random seed, 1 unless named here. GoogLeNet at 64 px has ReLU inputs and max-pool runner-ups
# within about 2e-7 of their kinks (relative to the layer's largest value) for every seed: at seed 1 ONNX
# Runtime's float32 kernels on an AVX-512 CPU tip one that none of the five float32 PyTorch runs tips (its
# gradients upstream of inception4b.branch1 then miss the float64 ones by 2e-2 to 2e-1, 1577x PyTorch's own
# error; edgetrain's are at 1.1x). Seed 2 has the widest margin of seeds 1-15 (6.4e-7).
DATA_SEEDS = {"googlenet": 2}


def deterministic(model):
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
        if isinstance(m, StochasticDepth):
            m.p = 0.0
        if isinstance(m, torch.nn.MultiheadAttention):
            m.dropout = 0.0
        if hasattr(m, "attention_dropout"):  # torchvision's Swin attention
            m.attention_dropout = 0.0
    return model.train(True)


def absolute_error(actual, expected):
    return float(np.max(np.abs(actual.astype(np.float64) - expected))) if expected.size else 0.0


def allowance(name, truth, torch_error, scale):
    """10x float32 PyTorch's absolute error on `name`, floored at float32's epsilon times the
    gradient's size (or, for an exactly zero gradient, a ten-thousandth of the model's largest)."""
    size = max(float(np.max(np.abs(truth[name]))) if truth[name].size else 0.0, 1e-4 * scale)
    return FACTOR * max(torch_error[name], FLOOR * size), size


def gradients(model, batch, labels, dtype, perturb=None, channels_last=False):
    m = copy.deepcopy(model).to(dtype)
    x = batch.to(dtype).clone()
    if perturb is not None:  # every input and parameter off by at most one float32 rounding (relative 2^-24)
        with torch.no_grad():
            for t in [x] + list(m.parameters()):
                t.mul_(1 + (torch.rand(t.shape, generator=perturb, dtype=dtype) * 2 - 1) * 2.0 ** -24)
    if channels_last:
        m, x = m.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)
    loss = torch.nn.functional.cross_entropy(m(x), labels)
    m.zero_grad()
    loss.backward()
    grads = {"loss": loss.detach().numpy()}
    grads.update({n: p.grad.contiguous().numpy().copy() for n, p in m.named_parameters()})
    return grads


def references(model, batch, labels):
    """float64 autograd (the truth: {name: array}, with 'loss') and float32 PyTorch's own error on each
    ({name: max |g32 - g64|}): the worst of equally valid float32 runs (as is, channels-last, and three with
    every input and parameter moved by one float32 rounding), since a ReLU input or a max-pool tie within
    round-off of its kink makes a float32 gradient jump for whichever run it happens to tip."""
    truth = gradients(model, batch, labels, torch.float64)
    runs = [gradients(model, batch, labels, torch.float32),
            gradients(model, batch, labels, torch.float32, channels_last=True)]
    runs += [gradients(model, batch, labels, torch.float32, perturb=torch.Generator().manual_seed(seed))
             for seed in range(3)]
    return truth, {n: max(absolute_error(run[n], truth[n]) for run in runs) for n in truth}


def run_edgetrain(edgetrain, training_model, feeds, workdir, backend):
    args = [edgetrain, "run", training_model, "-o", workdir]
    for key, value in feeds.items():
        file = os.path.join(workdir, "feed_" + safe(key))
        np.save(file, value)
        args += ["--input", f"{key}={file}"]
    env = dict(os.environ)
    env.pop("EDGETRAIN_KERNELS", None)
    if backend == "reference":
        env["EDGETRAIN_KERNELS"] = "reference"
    r = subprocess.run(args, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"edgetrain run ({backend}) failed: {r.stderr.strip()}")
    return {name[:-4]: np.load(os.path.join(workdir, name)) for name in os.listdir(workdir)
            if name.endswith(".npy") and not name.startswith("feed_")}


def judge(runner, outputs, trainable, truth, torch_error):
    """Problems of one runner's outputs and its worst error relative to float32 PyTorch's."""
    problems, worst_ratio, worst_error = [], 0.0, 0.0
    scale = max(float(np.max(np.abs(truth[n]))) for n in trainable)
    for name in ["loss"] + trainable:
        key = "loss" if name == "loss" else name + "_grad"
        actual = outputs.get(safe(key)[:-4])
        if actual is None:
            problems.append(f"{runner}: no output {key}")
            continue
        if actual.shape != truth[name].shape:
            problems.append(f"{runner}: {key} has shape {actual.shape}, PyTorch's {truth[name].shape}")
            continue
        error = absolute_error(actual, truth[name])
        allowed, size = allowance(name, truth, torch_error, scale)
        worst_error = max(worst_error, error / size)
        worst_ratio = max(worst_ratio, error / allowed * FACTOR)
        if error > allowed:
            problems.append(f"{runner}: {key} error {error / size:.2e} > {allowed / size:.2e} "
                            f"(10x float32 PyTorch's), relative to {size:.1e}")
    return problems, worst_error, worst_ratio


def convert_opset(path, opset):
    import onnx.version_converter
    model = onnx.version_converter.convert_version(onnx.load(path), opset)
    onnx.checker.check_model(model)
    onnx.save(model, path)


def check_model(name, edgetrain, workdir, modes, backends, use_ort, opset=17):
    ctor, size, head = ZOO[name]
    torch.manual_seed(0)
    model = deterministic(ctor())
    generator = torch.Generator().manual_seed(DATA_SEEDS.get(name, 1))
    batch = torch.randn(BATCH, 3, size, size, generator=generator)
    labels = torch.arange(BATCH) % 10
    path = os.path.join(workdir, f"{name}.onnx")
    torch.onnx.export(copy.deepcopy(model), batch[:2].clone(), path, opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    if opset != 17:
        convert_opset(path, opset)
    truth, torch_error = references(model, batch, labels)
    initializers = {i.name: onnx.numpy_helper.to_array(i) for i in onnx.load(path).graph.initializer}
    lines, failed = [], False
    for mode in modes:
        art = os.path.join(workdir, f"art_{name}_{mode}")
        trainable = [n for n, _ in model.named_parameters()] if mode == "full" else head
        cmd = [edgetrain, "generate-artifacts", path, "--out", art]
        if mode == "head":
            cmd += ["--requires-grad"] + head
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            lines.append(f"FAIL {name} {mode}: generate-artifacts failed: {r.stderr.strip()}")
            failed = True
            continue
        training_model = os.path.join(art, "training_model.onnx")
        inputs = {i.name for i in onnx.load(training_model, load_external_data=False).graph.input}
        feeds = {"input": batch.numpy(), "labels": labels.numpy()}
        feeds.update(initializers)
        feeds = {k: v for k, v in feeds.items() if k in inputs}
        missing = inputs - set(feeds)
        if missing:
            lines.append(f"FAIL {name} {mode}: training model inputs without a value: {sorted(missing)}")
            failed = True
            continue
        runners = [(f"edgetrain[{b}]", b) for b in backends] + ([("onnxruntime-node", None)] if use_ort else [])
        summary, problems = [], []
        for runner, backend in runners:
            out = os.path.join(art, runner.replace("[", "_").replace("]", ""))
            os.makedirs(out, exist_ok=True)
            try:
                if backend is None:
                    outputs = {safe(k)[:-4]: v for k, v in ort_native_outputs(training_model, feeds, out).items()}
                else:
                    outputs = run_edgetrain(edgetrain, training_model, feeds, out, backend)
            except RuntimeError as e:
                problems.append(f"{runner}: {str(e)[:400]}")
                continue
            p, worst, ratio = judge(runner, outputs, trainable, truth, torch_error)
            problems += p
            summary.append(f"{runner} worst {worst:.1e} ({ratio:.1f}x torch32)")
        scale = max(float(np.max(np.abs(truth[n]))) for n in trainable)
        torch_worst = max(torch_error[n] / allowance(n, truth, torch_error, scale)[1]
                          for n in ["loss"] + trainable)
        status = "FAIL" if problems else "PASS"
        failed |= bool(problems)
        lines.append(f"{status} {name} {mode}: {len(trainable)} gradients; torch32 worst {torch_worst:.1e}; "
                     + "; ".join(summary) + ("\n    " + "\n    ".join(problems[:12]) if problems else ""))
    return lines, failed


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--edgetrain", required=True)
    parser.add_argument("--models", nargs="*", default=list(ZOO), choices=list(ZOO))
    parser.add_argument("--modes", nargs="*", default=["full", "head"], choices=["full", "head"])
    parser.add_argument("--backends", nargs="*", default=["default", "reference"], choices=["default", "reference"])
    parser.add_argument("--no-ort", action="store_true", help="skip onnxruntime-node (for local debugging only)")
    parser.add_argument("--opset", type=int, default=17, choices=range(17, 22),
                        help="convert the opset-17 export to this opset (onnx >= 1.16's version converter)")
    args = parser.parse_args()
    if args.opset > 17 and int(onnx.__version__.split(".")[1]) < 16:
        sys.exit(f"--opset {args.opset} needs onnx >= 1.16's version converter, this is onnx {onnx.__version__} "
                 "(run with scripts/setup.sh's venv-onnx-testdata interpreter)")
    if not args.no_ort and not os.path.exists(ORT_NODE):
        sys.exit(f"onnxruntime-node not found at {ORT_NODE} (scripts/setup.sh installs it)")
    torch.set_num_threads(2)
    warnings.filterwarnings("ignore")
    passed = failed = 0
    with tempfile.TemporaryDirectory() as workdir:
        for name in args.models:
            start = time.time()
            try:
                lines, bad = check_model(name, args.edgetrain, workdir, args.modes, args.backends, not args.no_ort,
                                         args.opset)
            except Exception as e:  # an export or reference failure is this model's failure, not the run's
                lines, bad = [f"FAIL {name}: {type(e).__name__}: {e}"], True
            for line in lines:
                print(line.replace(f"{name} ", f"{name} opset {args.opset} ", 1) if args.opset != 17 else line,
                      f"[{time.time() - start:.0f}s]", flush=True)
                passed += line.startswith("PASS")
                failed += not line.startswith("PASS")
    print(f"model zoo: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
