"""Gradient parity of RNN/GRU/LSTM with PyTorch in float64: nn.LSTM, nn.GRU and nn.RNN (multi-layer,
bidirectional, batch_first, learned initial states) exported with torch.onnx.export go through
`edgetrain generate-artifacts --loss mse`; the training model, run by `edgetrain run`, must give
PyTorch's loss and every parameter gradient within 1e-4 relative (float64 on both sides).

Run with Debian's interpreter: /usr/bin/python3 tests/recurrent_torch_parity.py --edgetrain build/edgetrain
--float32 checks the float32 LSTM fast path instead: nn.LSTM at the sequential Fashion-MNIST sizes (28 steps,
batch 64, 28 inputs, 128 hidden) in float32 on both sides, within 1e-4 relative.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnx.numpy_helper
import torch

RELATIVE_TOLERANCE = 1e-4


class Recurrent(torch.nn.Module):
    def __init__(self, kind, layers, bidirectional, batch_first, initial_state, inputs=5, hidden=4, last_step=False,
                 **extra):
        super().__init__()
        cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn": torch.nn.RNN}[kind]
        self.kind, self.batch_first, self.last_step = kind, batch_first, last_step
        self.rnn = cls(inputs, hidden, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first,
                       **extra)
        states = layers * (2 if bidirectional else 1)
        self.h0 = torch.nn.Parameter(0.5 * torch.randn(states, 1, hidden)) if initial_state else None
        self.c0 = (torch.nn.Parameter(0.5 * torch.randn(states, 1, hidden)) if initial_state and kind == "lstm"
                   else None)

    def forward(self, x):
        if self.h0 is None:
            y = self.rnn(x)[0]
        else:
            batch = x.shape[0] if self.batch_first else x.shape[1]
            h0 = self.h0.expand(-1, batch, -1).contiguous()
            state = (h0, self.c0.expand(-1, batch, -1).contiguous()) if self.kind == "lstm" else h0
            y = self.rnn(x, state)[0]
        if not self.last_step:
            return y
        return y[:, -1] if self.batch_first else y[-1]  # the sequence classifier's read of the last step


# (name, kind, layers, bidirectional, batch_first, initial_state, extra, last_step): last_step reads only
# Y's last time step (`y[:, -1]`), which generate-artifacts turns into a read of Y_h where the direction is
# single (the training model's last recurrent node then writes no Y); a bidirectional Y's last step stays.
CONFIGS = [
    ("lstm_2layer_bidirectional_batch_first", "lstm", 2, True, True, True, {}, False),
    ("lstm_1layer_forward", "lstm", 1, False, False, False, {}, False),
    ("gru_2layer_bidirectional", "gru", 2, True, False, True, {}, False),
    ("gru_1layer_batch_first", "gru", 1, False, True, False, {}, False),
    ("rnn_2layer_bidirectional_batch_first", "rnn", 2, True, True, True, {}, False),
    ("rnn_relu", "rnn", 1, True, False, False, {"nonlinearity": "relu"}, False),
    ("lstm_last_step_batch_first", "lstm", 1, False, True, False, {}, True),
    ("gru_2layer_last_step_initial_states", "gru", 2, False, False, True, {}, True),
    ("rnn_last_step_bidirectional", "rnn", 1, True, True, False, {}, True),
]
# The float32 fast path at the sequential Fashion-MNIST sizes: (seq, batch, inputs), hidden.
FLOAT32_CONFIGS = [
    ("lstm_float32_batch_first", "lstm", 1, False, True, False, {}, False),
    ("lstm_float32_2layer_bidirectional_initial_states", "lstm", 2, True, False, True, {}, False),
    ("lstm_float32_last_step_batch_first", "lstm", 1, False, True, False, {}, True),
]
FLOAT32_SIZES = ((28, 64, 28), 128)


def check(edgetrain, workdir, name, kind, layers, bidirectional, batch_first, initial_state, extra, last_step,
          float32=False):
    torch.manual_seed(len(name))
    dtype, np_dtype = (torch.float32, np.float32) if float32 else (torch.float64, np.float64)
    (seq, batch, inputs), hidden = FLOAT32_SIZES if float32 else ((7, 3, 5), 4)
    model = Recurrent(kind, layers, bidirectional, batch_first, initial_state, inputs, hidden, last_step,
                      **extra).to(dtype)
    shape = (batch, seq, inputs) if batch_first else (seq, batch, inputs)
    x = torch.randn(*shape, dtype=dtype)
    path = os.path.join(workdir, f"{name}.onnx")
    torch.onnx.export(model, x, path, opset_version=17, do_constant_folding=False,
                      training=torch.onnx.TrainingMode.TRAINING, input_names=["input"], output_names=["output"])
    art = os.path.join(workdir, f"art_{name}")
    r = subprocess.run([edgetrain, "generate-artifacts", path, "--out", art, "--loss", "mse"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return [f"generate-artifacts failed: {r.stderr.strip()}"]
    target = torch.randn(*model(x).shape, dtype=dtype)
    training_model = os.path.join(art, "training_model.onnx")
    recurrent = [n for n in onnx.load(training_model).graph.node if n.op_type in ("LSTM", "GRU", "RNN")]
    writes_y = bool(recurrent[-1].output) and recurrent[-1].output[0] != ""
    if writes_y == (last_step and not bidirectional):
        return [f"the last recurrent node {'writes' if writes_y else 'does not write'} Y"]
    feeds = {}
    for init in onnx.load(path).graph.initializer:
        feeds[init.name] = onnx.numpy_helper.to_array(init)
    inputs = [i.name for i in onnx.load(training_model).graph.input]
    feeds["input"] = x.numpy()
    rest = [i for i in inputs if i not in feeds]
    if len(rest) != 1:
        return [f"expected one target input, the training model has {rest}"]
    feeds[rest[0]] = target.numpy()
    out = os.path.join(art, "out")
    args = [edgetrain, "run", training_model, "-o", out]
    for key in inputs:
        file = os.path.join(art, "feed_" + key.replace("/", "_").replace(":", "_") + ".npy")
        np.save(file, feeds[key])
        args += ["--input", f"{key}={file}"]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        return [f"edgetrain run failed: {r.stderr.strip()}"]

    loss = torch.nn.functional.mse_loss(model(x), target)
    model.zero_grad()
    loss.backward()
    problems, worst, checked = [], 0.0, 0
    ours = float(np.load(os.path.join(out, "loss.npy")))
    if abs(ours - loss.item()) > RELATIVE_TOLERANCE * abs(loss.item()):
        problems.append(f"loss {ours} vs PyTorch {loss.item()}")
    for pname, param in model.named_parameters():
        grad_file = os.path.join(out, pname.replace("/", "_").replace(":", "_") + "_grad.npy")
        if not os.path.exists(grad_file):
            problems.append(f"no gradient for {pname}")
            continue
        actual, expected = np.load(grad_file), param.grad.numpy()
        if actual.dtype != np_dtype or actual.shape != expected.shape:
            problems.append(f"{pname}_grad is {actual.dtype} {actual.shape}, PyTorch's {expected.shape}")
            continue
        error = float(np.max(np.abs(actual - expected))) / max(float(np.max(np.abs(expected))), 1e-12)
        worst = max(worst, error)
        checked += 1
        if error > RELATIVE_TOLERANCE:
            problems.append(f"{pname}_grad differs by {error:.2e}")
    return problems or [f"ok: loss and {checked} parameter gradients match, worst relative error {worst:.2e}"]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--edgetrain", required=True)
    parser.add_argument("--float32", action="store_true", help="the float32 LSTM fast path at full sizes instead")
    args = parser.parse_args()
    passed = failed = 0
    with tempfile.TemporaryDirectory() as workdir:
        for config in FLOAT32_CONFIGS if args.float32 else CONFIGS:
            result = check(args.edgetrain, workdir, *config, float32=args.float32)
            ok = result[0].startswith("ok")
            passed += ok
            failed += not ok
            print(f"{'PASS' if ok else 'FAIL'} {config[0]}: {'; '.join(result)}", flush=True)
    print(f"recurrent torch parity: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
