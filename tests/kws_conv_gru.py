"""Keyword spotting with a conv/GRU back-end on synthetic tones, trained through `edgetrain generate-artifacts`
and `edgetrain train`.

The model (built with onnx.helper, since torch.onnx cannot export torch.stft or a mel filterbank):
STFT (learnable Hann-initialised window, 64-point frames, hop 32) -> power -> MelWeightMatrix (16 bands) -> log
-> Conv 1-D over time (the mel bands as channels, kernel 3) -> Relu -> GRU over the frames (linear_before_reset,
PyTorch's form) -> last hidden state -> Linear. The six classes are noisy 0.2 s clips: a low tone, a high tone,
an up chirp, a down chirp, low-then-high and high-then-low; the last four pairs have the same spectrum on
average, so only a model that follows time separates them.

1. float64: one training step (`edgetrain run` of the training model) gives PyTorch's loss and the gradients
   of every parameter (window, conv, GRU W/R/B, linear) of the same model with torch.stft, conv1d and nn.GRU.
2. float32: `edgetrain train` (AdamW) on --train-clips clips; the held-out accuracy must reach --min-accuracy.

Run with Debian's interpreter: /usr/bin/python3 tests/kws_conv_gru.py --edgetrain build/edgetrain
"""
import argparse
import csv
import os
import subprocess
import sys
import tempfile

RATE, SAMPLES, FRAME, STEP, MELS, CHANNELS, HIDDEN, CLASSES = 4000, 800, 64, 32, 16, 16, 24, 6
FRAMES = (SAMPLES - FRAME) // STEP + 1
CLASS_NAMES = ["low", "high", "up chirp", "down chirp", "low then high", "high then low"]


def positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def fraction(text):
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must lie in [0, 1], got {value}")
    return value


def positive_float(text):
    value = float(text)
    if not value > 0.0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text}")
    return value


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--edgetrain", required=True)
    parser.add_argument("--train-clips", type=positive_int, default=768)
    parser.add_argument("--test-clips", type=positive_int, default=300)
    parser.add_argument("--epochs", type=positive_int, default=5)
    parser.add_argument("--batch-size", type=positive_int, default=16)
    parser.add_argument("--lr", type=positive_float, default=0.01)
    parser.add_argument("--threads", type=positive_int, default=1)
    parser.add_argument("--min-accuracy", type=fraction, default=0.9)
    return parser.parse_args(argv)


def clips(count, seed):
    """`count` noisy clips [count, SAMPLES, 1] of the six classes and their labels."""
    import numpy as np
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES, count)
    t = np.arange(SAMPLES) / RATE
    duration = SAMPLES / RATE
    audio = np.empty((count, SAMPLES))
    for i, c in enumerate(labels):
        low, high = rng.uniform(450, 550), rng.uniform(1150, 1250)
        start, end = {0: (low, low), 1: (high, high), 2: (low, high), 3: (high, low), 4: (low, high),
                      5: (high, low)}[int(c)]
        if c in (4, 5):  # a step at a random point near the middle
            switch = rng.uniform(0.35, 0.65) * duration
            freq = np.where(t < switch, start, end)
            phase = 2 * np.pi * np.cumsum(freq) / RATE
        else:  # linear chirp (a tone when start == end)
            phase = 2 * np.pi * (start * t + (end - start) * t * t / (2 * duration))
        audio[i] = rng.uniform(0.3, 1.0) * np.sin(phase + rng.uniform(0, 2 * np.pi))
    audio += 0.7 * rng.standard_normal(audio.shape)
    return audio[..., None], labels.astype(np.int64)


def initial_params(seed):
    import numpy as np
    rng = np.random.default_rng(seed)
    n = np.arange(FRAME)
    bound = 1 / np.sqrt(HIDDEN)
    return {"window": 0.5 - 0.5 * np.cos(2 * np.pi * n / FRAME),  # periodic Hann
            "conv_W": rng.uniform(-1, 1, (CHANNELS, MELS, 3)) / np.sqrt(3 * MELS),
            "conv_b": np.zeros(CHANNELS),
            "gru_W": rng.uniform(-bound, bound, (1, 3 * HIDDEN, CHANNELS)),  # ONNX gate order z, r, h
            "gru_R": rng.uniform(-bound, bound, (1, 3 * HIDDEN, HIDDEN)),
            "gru_B": rng.uniform(-bound, bound, (1, 6 * HIDDEN)),
            "fc_W": rng.uniform(-bound, bound, (HIDDEN, CLASSES)),
            "fc_b": np.zeros(CLASSES)}


def kws_model(path, elem, params):
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    from audio_torch_parity import save_model
    t = TensorProto.DOUBLE if elem == np.float64 else TensorProto.FLOAT
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)
    i32 = lambda name, v: numpy_helper.from_array(np.array(v, np.int32), name)
    f = lambda name, v: numpy_helper.from_array(np.array(v, elem), name)
    constant = lambda name, v: helper.make_node("Constant", [], [name], value=f(name, v))
    nodes = [
        constant("low", 0.0), constant("high", RATE / 2), constant("eps", 1e-6),
        helper.make_node("STFT", ["audio", "step", "window"], ["spec"]),
        helper.make_node("Mul", ["spec", "spec"], ["squares"]),
        helper.make_node("ReduceSum", ["squares", "last_axis"], ["power"], keepdims=0),
        helper.make_node("MelWeightMatrix", ["mels", "dft", "rate", "low", "high"], ["mel_matrix"],
                         output_datatype=t),
        helper.make_node("MatMul", ["power", "mel_matrix"], ["mel"]),
        helper.make_node("Add", ["mel", "eps"], ["mel_eps"]),
        helper.make_node("Log", ["mel_eps"], ["log_mel"]),                       # [batch, frames, mels]
        helper.make_node("Transpose", ["log_mel"], ["bands"], perm=[0, 2, 1]),   # [batch, mels, frames]
        helper.make_node("Conv", ["bands", "conv_W", "conv_b"], ["conv"], pads=[1, 1], name="conv"),
        helper.make_node("Relu", ["conv"], ["conv_relu"]),
        helper.make_node("Transpose", ["conv_relu"], ["sequence"], perm=[2, 0, 1]),  # [frames, batch, channels]
        helper.make_node("GRU", ["sequence", "gru_W", "gru_R", "gru_B"], ["", "gru_h"], hidden_size=HIDDEN,
                         linear_before_reset=1, name="gru"),
        helper.make_node("Squeeze", ["gru_h", "first_axis"], ["last_h"]),
        helper.make_node("Gemm", ["last_h", "fc_W", "fc_b"], ["logits"]),
    ]
    initializers = [f(k, v) for k, v in params.items()]
    initializers += [i64("step", STEP), i64("last_axis", [-1]), i64("first_axis", [0]), i32("mels", MELS),
                     i32("dft", FRAME), i32("rate", RATE)]
    save_model(path, nodes, [helper.make_tensor_value_info("audio", t, ["batch", SAMPLES, 1])],
               [helper.make_tensor_value_info("logits", t, ["batch", CLASSES])], initializers, 17)


def torch_kws(audio, p):
    """The same model in PyTorch (float64); `p` holds leaf tensors in the ONNX layouts."""
    import torch
    from audio_torch_parity import mel_matrix
    spec = torch.stft(audio[..., 0], n_fft=FRAME, hop_length=STEP, window=p["window"], center=False,
                      onesided=True, return_complex=True).transpose(1, 2)
    power = spec.real ** 2 + spec.imag ** 2
    mel = power @ torch.from_numpy(mel_matrix(MELS, FRAME, RATE, 0.0, RATE / 2))
    bands = torch.log(mel + 1e-6).transpose(1, 2)
    sequence = torch.relu(torch.nn.functional.conv1d(bands, p["conv_W"], p["conv_b"], padding=1)).permute(2, 0, 1)
    z, r, h = range(3)  # ONNX gate blocks; nn.GRU wants r, z, n
    block = lambda w, g: w[g * HIDDEN:(g + 1) * HIDDEN]
    to_torch = lambda w: torch.cat([block(w, r), block(w, z), block(w, h)])
    gru = torch.nn.GRU(CHANNELS, HIDDEN).double()
    for name in list(gru._parameters):  # replace the module's parameters by functions of our leaves
        del gru._parameters[name]
    gru.weight_ih_l0 = to_torch(p["gru_W"][0])
    gru.weight_hh_l0 = to_torch(p["gru_R"][0])
    gru.bias_ih_l0 = to_torch(p["gru_B"][0, :3 * HIDDEN])
    gru.bias_hh_l0 = to_torch(p["gru_B"][0, 3 * HIDDEN:])
    gru._flat_weights = [gru.weight_ih_l0, gru.weight_hh_l0, gru.bias_ih_l0, gru.bias_hh_l0]
    _, last = gru(sequence)
    return last[0] @ p["fc_W"] + p["fc_b"]


def check_gradients(edgetrain, workdir):
    import numpy as np
    import torch
    from audio_torch_parity import compare, generate, run_training_model
    params = initial_params(1)
    path = os.path.join(workdir, "kws_gru64.onnx")
    kws_model(path, np.float64, params)
    art = os.path.join(workdir, "art_kws_gru64")
    generate(edgetrain, path, art, "cross_entropy")
    audio, labels = clips(12, 2)
    result = run_training_model(edgetrain, art, {"audio": audio, "target": labels, **params})
    tp = {k: torch.from_numpy(v).requires_grad_() for k, v in params.items()}
    loss = torch.nn.functional.cross_entropy(torch_kws(torch.from_numpy(audio), tp), torch.from_numpy(labels))
    loss.backward()
    return compare(float(result("loss")), loss.item(),
                   [(k + "_grad", result(k + "_grad"), tp[k].grad.numpy()) for k in params])


def check_training(args, workdir):
    import numpy as np
    path = os.path.join(workdir, "kws_gru32.onnx")
    kws_model(path, np.float32, initial_params(1))
    art = os.path.join(workdir, "art_kws_gru32")
    r = subprocess.run([args.edgetrain, "generate-artifacts", path, "--out", art, "--loss", "cross_entropy",
                        "--optimizer", "adamw", "--additional-output", "logits"], capture_output=True, text=True)
    if r.returncode != 0:
        return [f"generate-artifacts failed: {r.stderr.strip()}"]
    files = {}
    for split, (count, seed) in {"train": (args.train_clips, 3), "test": (args.test_clips, 4)}.items():
        audio, labels = clips(count, seed)
        files[split] = (os.path.join(workdir, f"{split}_audio.npy"), os.path.join(workdir, f"{split}_labels.npy"))
        np.save(files[split][0], audio.astype(np.float32))
        np.save(files[split][1], labels)
    metrics = os.path.join(workdir, "kws_gru_metrics.csv")
    command = [args.edgetrain, "train", art, "--data", f"audio={files['train'][0]}", f"labels={files['train'][1]}",
               "--eval-data", files["test"][0], files["test"][1], "--epochs", str(args.epochs),
               "--batch-size", str(args.batch_size), "--lr", str(args.lr), "--scheduler", "linear",
               "--threads", str(args.threads), "--seed", "1", "--metrics", metrics]
    r = subprocess.run(command, capture_output=True, text=True)
    if r.returncode != 0:
        return [f"edgetrain train failed: {r.stderr.strip()}"]
    with open(metrics) as f:
        rows = list(csv.DictReader(f))
    losses = [float(row["train_loss"]) for row in rows]
    accuracies = [float(row["eval_accuracy"]) for row in rows]
    print("epoch accuracies: " + " ".join(f"{100 * a:.1f}%" for a in accuracies), flush=True)
    problems = []
    if not losses[-1] < 0.5 * losses[0]:
        problems.append(f"train loss did not halve: {losses}")
    if accuracies[-1] < args.min_accuracy:
        problems.append(f"held-out accuracy {accuracies[-1]:.3f} < {args.min_accuracy}")
    return problems or [f"ok: {args.train_clips} clips x {len(rows)} epochs, train loss {losses[0]:.4f} -> "
                        f"{losses[-1]:.4f}, held-out accuracy {100 * accuracies[-1]:.2f}% on {args.test_clips} clips"]


def main():
    args = parse_args()
    import torch
    torch.set_num_threads(1)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    failed = 0
    with tempfile.TemporaryDirectory() as workdir:
        for name, fn in [("kws_gru_gradients", lambda: check_gradients(args.edgetrain, workdir)),
                         ("kws_gru_training", lambda: check_training(args, workdir))]:
            try:
                result = fn()
            except (RuntimeError, OSError) as e:  # a failed or missing edgetrain
                result = [str(e)]
            ok = result[0].startswith("ok")
            failed += not ok
            print(f"{'PASS' if ok else 'FAIL'} {name}: {'; '.join(result)}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
