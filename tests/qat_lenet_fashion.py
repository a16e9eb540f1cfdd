"""int8 quantization-aware fine-tune of the bundled LeNet-BN on Fashion-MNIST, deployed to ONNX Runtime.

1. The float model (models/lenet_bn.onnx) is trained by `edgetrain generate-artifacts` + `edgetrain train` and
   exported by `edgetrain export`.
2. PyTorch's QAT flow on those weights: torch.ao.quantization.fuse_modules (Conv+BatchNorm+ReLU folded into
   one conv, Linear+ReLU), prepare_qat with per-channel symmetric int8 weights and per-tensor uint8
   activations, --calibration-batches training batches through the observers, observers off (the scales are
   fixed from here on), torch.onnx.export with its QuantizeLinear/DequantizeLinear pairs.
3. edgetrain fine-tunes the QDQ model (`generate-artifacts`, `train`: the weights train through the
   straight-through estimator) and `edgetrain export` writes the QDQ inference model.
4. ONNX Runtime (the InferenceSession of scripts/setup.sh's venv-ort-training; its graph optimizer turns the
   QDQ pairs into int8 QLinear* kernels) runs the float model, the QDQ model before the fine-tune and after it
   on the test images. Checks: ORT's outputs match `edgetrain run` of the same QDQ model, and the QDQ model
   loses at most --max-drop points of accuracy against the float model.

CI runs a small scale; the full run is
/usr/bin/python3 tests/qat_lenet_fashion.py --edgetrain build/edgetrain --train-samples 0 --test-samples 10000 \
    --float-epochs 5 --qat-epochs 1 --min-accuracy 0.9
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import warnings

warnings.filterwarnings("ignore", category=UserWarning)  # torch.onnx's notes on prim::Constant shape inference

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
FASHION = "/usr/share/datasets/fashion-mnist"
PEERS = os.environ.get("EDGETRAIN_PEERS_DIR", os.path.expanduser("~/.cache/edgetrain-peers"))
ORT_PYTHON = os.path.join(PEERS, "venv-ort-training", "bin", "python")  # ORT 1.19.2, made by scripts/setup.sh
# Runs each model of a JSON job (one line on stdin) on the test images; saves the outputs and the kinds of the
# optimized graph's nodes. Started first, so that its imports overlap the training.
ORT_JOB = """
import collections, json, sys, numpy as np, onnx, onnxruntime as ort
job = json.loads(sys.stdin.readline())
x = np.load(job["images"])
for name, model in job["models"].items():
    options = ort.SessionOptions()
    options.optimized_model_filepath = job["out"] + name + ".optimized.onnx"
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    outputs = np.concatenate([session.run(None, {"input": x[i:i + 500]})[0] for i in range(0, len(x), 500)])
    np.save(job["out"] + name + ".npy", outputs)
    ops = collections.Counter(n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node)
    print(json.dumps({"model": name, "ops": ops}), flush=True)
"""


def positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_float(text):
    value = float(text)
    if not 0.0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text}")
    return value


def fraction(text):
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must lie in [0, 1], got {text}")
    return value


def points(text):
    value = float(text)
    if not 0.0 <= value <= 100.0:
        raise argparse.ArgumentTypeError(f"must lie in [0, 100] accuracy points, got {text}")
    return value


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--edgetrain", required=True)
    parser.add_argument("--train-samples", type=int, default=3000, help="first N training images; 0: all 60000")
    parser.add_argument("--test-samples", type=positive_int, default=1000, help="first N test images (at most 10000)")
    parser.add_argument("--float-epochs", type=positive_int, default=1)
    parser.add_argument("--qat-epochs", type=positive_int, default=1)
    parser.add_argument("--batch-size", type=positive_int, default=64)
    parser.add_argument("--float-lr", type=positive_float, default=3e-3)
    parser.add_argument("--qat-lr", type=positive_float, default=1e-4)
    parser.add_argument("--calibration-batches", type=positive_int, default=8)
    parser.add_argument("--threads", type=positive_int, default=1)
    parser.add_argument("--min-accuracy", type=fraction, default=0.7, help="the float and the QDQ model reach it")
    parser.add_argument("--max-drop", type=points, default=1.0, help="QDQ accuracy loss allowed, in points")
    args = parser.parse_args(argv)
    if not 0 <= args.train_samples <= 60000:
        parser.error(f"argument --train-samples: must lie in [0, 60000], got {args.train_samples}")
    if args.calibration_batches * args.batch_size > (args.train_samples or 60000):
        parser.error(f"argument --calibration-batches: {args.calibration_batches} batches of {args.batch_size} "
                     f"exceed the {args.train_samples or 60000} training samples")
    if args.test_samples > 10000:
        parser.error(f"argument --test-samples: the test set has 10000 images, got {args.test_samples}")
    return args


def lenet_bn():
    """shared/peers/torch_models.py's LeNetBN (the module names are models/lenet_bn.onnx's parameter names)."""
    import torch.nn as nn
    model = nn.Module()
    model.features = nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2))
    model.classifier = nn.Sequential(nn.Flatten(), nn.Linear(16 * 5 * 5, 120), nn.ReLU(),
                                     nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))
    return model


def qat_model(float_onnx, calibration):
    """The float weights in PyTorch's QAT flow: fused, prepared, calibrated, observers off."""
    import torch
    import torch.ao.quantization as tq
    from fashion_mnist_torch import load_onnx_weights

    class Quantized(torch.nn.Module):
        def __init__(self, net):
            super().__init__()
            self.quant, self.net, self.dequant = tq.QuantStub(), net, tq.DeQuantStub()

        def forward(self, x):
            net = self.net
            return self.dequant(net.classifier(net.features(self.quant(x))))

    net = lenet_bn()
    load_onnx_weights(net, float_onnx)
    net.eval()  # eval-mode fusion folds BatchNorm's running statistics into the conv weights
    tq.fuse_modules(net, [["features.0", "features.1", "features.2"], ["features.4", "features.5", "features.6"],
                          ["classifier.1", "classifier.2"], ["classifier.3", "classifier.4"]], inplace=True)
    model = Quantized(net).train()
    model.qconfig = tq.QConfig(
        activation=tq.FakeQuantize.with_args(observer=tq.MovingAverageMinMaxObserver, quant_min=0, quant_max=127,
                                             dtype=torch.quint8),
        weight=tq.FakeQuantize.with_args(observer=tq.MovingAveragePerChannelMinMaxObserver, quant_min=-128,
                                         quant_max=127, dtype=torch.qint8, qscheme=torch.per_channel_symmetric))
    tq.prepare_qat(model, inplace=True)
    with torch.no_grad():
        for batch in calibration:
            model(batch)
    model.apply(tq.disable_observer)
    return model


def initializer_value(graph, name):
    """The constant behind `name`: an initializer, possibly through the exporter's Cast/Identity nodes."""
    from onnx import numpy_helper
    for t in graph.initializer:
        if t.name == name:
            return numpy_helper.to_array(t)
    node = next((n for n in graph.node if name in n.output and n.op_type in ("Cast", "Identity")), None)
    if node is None:
        raise RuntimeError(f"'{name}' is not a constant")
    return initializer_value(graph, node.input[0])


def int32_biases(path, out):
    """ORT's int8 kernels (QLinearConv, QGemm) take the bias as int32 with scale = input scale x weight scale
    behind a DequantizeLinear, as ORT's own quantizer writes it; PyTorch's export keeps it float. Returns
    the number of biases converted."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper
    model = onnx.load(path)
    graph = model.graph
    producer = {o: n for n in graph.node for o in n.output}
    floats = {t.name for t in graph.initializer}

    def scale_of(name, through):  # the scale of the DequantizeLinear that feeds `name`
        node = producer.get(name)
        while node is not None and node.op_type in through:
            node = producer.get(node.input[0])
        if node is None or node.op_type != "DequantizeLinear":
            raise RuntimeError(f"{path}: '{name}' does not come from a DequantizeLinear")
        return initializer_value(graph, node.input[1]).astype(np.float64)

    converted = 0
    for index, node in enumerate(list(graph.node)):
        if node.op_type not in ("Conv", "Gemm") or len(node.input) < 3 or node.input[2] not in floats:
            continue
        bias = initializer_value(graph, node.input[2]).astype(np.float64)
        scale = np.broadcast_to(scale_of(node.input[0], ("MaxPool", "Flatten")) * scale_of(node.input[1], ()),
                                bias.shape)
        name = node.input[2]
        graph.initializer.extend([
            numpy_helper.from_array(np.round(bias / scale).astype(np.int32), name + ".int32"),
            numpy_helper.from_array(scale.astype(np.float32), name + ".scale"),
            numpy_helper.from_array(np.zeros(bias.shape, np.int32), name + ".zero_point")])
        graph.node.insert(index + converted, helper.make_node(
            "DequantizeLinear", [name + ".int32", name + ".scale", name + ".zero_point"], [name + ".dequantized"],
            axis=0))
        node.input[2] = name + ".dequantized"
        converted += 1
    onnx.save(model, out)
    return converted


def run(command):
    try:
        r = subprocess.run(command, capture_output=True, text=True)
    except OSError as e:
        raise RuntimeError(f"{command[0]} could not start: {e}")
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:2])} failed: {r.stderr.strip()}")
    return r.stdout


def train(args, model, art, tmp, epochs, lr, test_files):
    run([args.edgetrain, "generate-artifacts", model, "--out", art, "--additional-output", "output"])
    checkpoint = os.path.join(art, "trained_checkpoint")
    command = [args.edgetrain, "train", art, "--data", f"input={FASHION}/train-images-idx3-ubyte.gz",
               f"labels={FASHION}/train-labels-idx1-ubyte.gz", "--eval-data", f"input={test_files[0]}",
               f"labels={test_files[1]}", "--epochs", str(epochs), "--batch-size", str(args.batch_size),
               "--lr", str(lr), "--scheduler", "linear", "--threads", str(args.threads), "--seed", "0",
               "--checkpoint-out", checkpoint, "--metrics", os.path.join(art, "metrics.csv")]
    if args.train_samples:
        command += ["--limit", str(args.train_samples)]
    run(command)
    exported = os.path.join(tmp, os.path.basename(art) + ".onnx")
    run([args.edgetrain, "export", art, "--checkpoint", checkpoint, "-o", exported, "--output", "output"])
    return exported


def main():
    args = parse_args()
    try:
        ort_process = subprocess.Popen([ORT_PYTHON, "-c", ORT_JOB], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
    except OSError as e:
        sys.exit(f"ONNX Runtime ({ORT_PYTHON}, made by scripts/setup.sh) could not start: {e}")
    import numpy as np
    import onnx
    import torch
    sys.path.insert(0, HERE)
    from fashion_mnist_torch import read_idx
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    images = read_idx(f"{FASHION}/t10k-images-idx3-ubyte.gz")[:args.test_samples]
    labels = read_idx(f"{FASHION}/t10k-labels-idx1-ubyte.gz")[:args.test_samples].astype(np.int64)
    results, problems = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        test_files = (os.path.join(tmp, "test_x.npy"), os.path.join(tmp, "test_y.npy"))
        x = images.astype(np.float32).reshape(-1, 1, 28, 28) / 255
        np.save(test_files[0], x)
        np.save(test_files[1], labels)
        float_onnx = train(args, os.path.join(REPO, "models", "lenet_bn.onnx"), os.path.join(tmp, "float"), tmp,
                           args.float_epochs, args.float_lr, test_files)

        train_images = read_idx(f"{FASHION}/train-images-idx3-ubyte.gz")
        order = np.random.default_rng(0).permutation(len(train_images) if not args.train_samples
                                                     else args.train_samples)
        calibration = [torch.from_numpy(train_images[order[i:i + args.batch_size]].astype(np.float32)
                                        .reshape(-1, 1, 28, 28) / 255)
                       for i in range(0, args.calibration_batches * args.batch_size, args.batch_size)]
        model = qat_model(float_onnx, calibration)
        qdq_onnx = os.path.join(tmp, "qdq.onnx")
        torch.onnx.export(model, calibration[0][:2], qdq_onnx, opset_version=13, do_constant_folding=False,
                          input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
        pairs = sum(n.op_type == "QuantizeLinear" for n in onnx.load(qdq_onnx).graph.node)
        qat_onnx = train(args, qdq_onnx, os.path.join(tmp, "qat"), tmp, args.qat_epochs, args.qat_lr, test_files)
        exported_pairs = sum(n.op_type == "QuantizeLinear" for n in onnx.load(qat_onnx).graph.node)
        if exported_pairs != pairs:
            problems.append(f"the exported model has {exported_pairs} QuantizeLinear nodes, the QAT export {pairs}")

        calibrated_int8, finetuned_int8 = os.path.join(tmp, "calibrated_int8.onnx"), os.path.join(tmp, "int8.onnx")
        biases = int32_biases(qdq_onnx, calibrated_int8)
        int32_biases(qat_onnx, finetuned_int8)
        job = {"images": test_files[0], "out": os.path.join(tmp, "ort_"),
               "models": {"float": float_onnx, "calibrated_int8": calibrated_int8, "finetuned_qdq": qat_onnx,
                          "finetuned_int8": finetuned_int8}}
        stdout, stderr = ort_process.communicate(json.dumps(job) + "\n")
        if ort_process.returncode != 0:
            sys.exit(f"ONNX Runtime failed: {stderr.strip()}")
        for line in stdout.splitlines():
            row = json.loads(line)
            outputs = np.load(job["out"] + row["model"] + ".npy")
            results[row["model"]] = (float(np.mean(outputs.argmax(1) == labels)), row["ops"], outputs)

        out = os.path.join(tmp, "edgetrain_out")
        run([args.edgetrain, "run", qat_onnx, "--input", f"input={test_files[0]}", "-o", out])
        ours = np.load(os.path.join(out, "output.npy"))
        graph = onnx.load(qat_onnx).graph
        output_scale = float(initializer_value(graph, next(n for n in graph.node if "output" in n.output).input[1]))
        worst = {}
        for name in ("finetuned_qdq", "finetuned_int8"):
            worst[name] = float(np.max(np.abs(ours - results[name][2]))) / output_scale
        agree = float(np.mean(ours.argmax(1) == results["finetuned_int8"][2].argmax(1)))

    accuracy = {name: value[0] for name, value in results.items()}
    int8_ops = {k: v for k, v in results["finetuned_int8"][1].items() if k.startswith("Q") and k != "QuantizeLinear"}
    drop = 100 * (accuracy["float"] - accuracy["finetuned_int8"])
    print(f"float model after {args.float_epochs} epochs of edgetrain train, in ORT: {100 * accuracy['float']:.2f}% "
          f"on {len(labels)} test images")
    print(f"QDQ model ({pairs} QuantizeLinear) as calibrated, before the fine-tune, ORT int8: "
          f"{100 * accuracy['calibrated_int8']:.2f}%")
    print(f"after {args.qat_epochs} QAT epochs of edgetrain train: QDQ model {100 * accuracy['finetuned_qdq']:.2f}%, "
          f"with int32 biases ({biases}) on ORT's int8 kernels {int8_ops}: {100 * accuracy['finetuned_int8']:.2f}% "
          f"({-drop:+.2f} points against the float model)")
    print(f"edgetrain run vs ORT, in output quantization steps ({output_scale:.4g}): QDQ model "
          f"{worst['finetuned_qdq']:.3f}, int8 kernels {worst['finetuned_int8']:.3f}; same class on {100 * agree:.2f}%")
    if min(accuracy["float"], accuracy["finetuned_int8"]) < args.min_accuracy:
        problems.append(f"accuracy below {args.min_accuracy}")
    if drop > args.max_drop:
        problems.append(f"the int8 model loses {drop:.2f} points (at most {args.max_drop})")
    if sum(int8_ops.get(op, 0) for op in ("QLinearConv", "QGemm")) < 4:
        problems.append(f"ORT ran the convolutions and linear layers without int8 kernels: {int8_ops}")
    if worst["finetuned_qdq"] > 1.001:
        problems.append(f"edgetrain and ORT differ by {worst['finetuned_qdq']:.3f} output steps on the QDQ model")
    if worst["finetuned_int8"] > 3.001 or agree < 0.99:
        problems.append("edgetrain and ORT's int8 kernels differ by more than 3 output steps or 1% of classes")
    for p in problems:
        print("FAIL " + p)
    print("PASS" if not problems else "FAIL", flush=True)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    try:
        main()
    except RuntimeError as e:  # a failed edgetrain command or a model the script cannot convert
        sys.exit(f"FAIL {e}")
