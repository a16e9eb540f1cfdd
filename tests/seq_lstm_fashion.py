"""Sequential Fashion-MNIST with an LSTM: each image is read row by row as a 28-step sequence of
28 pixels (nn.LSTM, 128 hidden units, batch_first, the last step's output into a Linear layer),
exported with torch.onnx.export, trained with `edgetrain generate-artifacts` + `edgetrain train`.
CI runs a few hundred steps and checks the test accuracy; --epochs 5 --test-samples 10000 is the full run.

Run: /usr/bin/python3 tests/seq_lstm_fashion.py --edgetrain build/edgetrain
"""
import argparse
import csv
import gzip
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

FASHION = "/usr/share/datasets/fashion-mnist"


class SequentialLSTM(torch.nn.Module):
    def __init__(self, hidden=128):
        super().__init__()
        self.lstm = torch.nn.LSTM(28, hidden, batch_first=True)
        self.head = torch.nn.Linear(hidden, 10)

    def forward(self, x):  # x: [batch, 28 rows, 28 pixels]
        return self.head(self.lstm(x)[0][:, -1])


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    rank = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(rank)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * rank).reshape(dims)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--edgetrain", required=True)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--train-samples", type=int, default=25600, help="0: all 60000")
    parser.add_argument("--test-samples", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--min-accuracy", type=float, default=0.68)
    args = parser.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        model_path = os.path.join(tmp, "seq_lstm.onnx")
        torch.onnx.export(SequentialLSTM().eval(), torch.zeros(2, 28, 28), model_path, opset_version=17,
                          do_constant_folding=False, input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
        art = os.path.join(tmp, "art")
        r = subprocess.run([args.edgetrain, "generate-artifacts", model_path, "-o", art, "--additional-output",
                            "output"], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"generate-artifacts failed: {r.stderr.strip()}")
        images = read_idx(f"{FASHION}/t10k-images-idx3-ubyte.gz")[:args.test_samples]
        labels = read_idx(f"{FASHION}/t10k-labels-idx1-ubyte.gz")[:args.test_samples]
        np.save(f"{tmp}/test_x.npy", images)
        np.save(f"{tmp}/test_y.npy", labels)
        metrics = os.path.join(tmp, "metrics.csv")
        command = [args.edgetrain, "train", art, "--data", f"input={FASHION}/train-images-idx3-ubyte.gz",
                   f"labels={FASHION}/train-labels-idx1-ubyte.gz", "--eval-data", f"input={tmp}/test_x.npy",
                   f"labels={tmp}/test_y.npy", "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
                   "--lr", str(args.lr), "--threads", str(args.threads), "--seed", "1", "--metrics", metrics]
        if args.train_samples:
            command += ["--limit", str(args.train_samples)]
        r = subprocess.run(command, capture_output=True, text=True)
        print(r.stdout, end="")
        if r.returncode != 0:
            sys.exit(f"edgetrain train failed: {r.stderr.strip()}")
        with open(metrics) as f:
            rows = list(csv.DictReader(f))
        accuracy = float(rows[-1]["eval_accuracy"])
        steps = int(rows[-1]["steps"])
        ok = accuracy >= args.min_accuracy
        print(f"{'PASS' if ok else 'FAIL'}: sequential Fashion-MNIST LSTM, {steps} steps, test accuracy "
              f"{100 * accuracy:.2f}% on {len(labels)} test images (at least {100 * args.min_accuracy:.0f}% required)")
        sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
