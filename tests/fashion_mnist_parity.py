"""Real data, end to end: the bundled MLP and LeNet-BN trained on Fashion-MNIST (60k train, 10k test) by
`edgetrain train` for 5 epochs, and the same recipe in PyTorch (same initial weights, same sample order,
AdamW with the same linear decay; tests/fashion_mnist_torch.py). Asserts the issue's targets: MLP >= 88%,
LeNet-BN >= 90% test accuracy after 5 epochs, and PyTorch within 0.5 points of edgetrain.
Run: /usr/bin/python3 tests/fashion_mnist_parity.py --edgetrain build/edgetrain [--models mlp cnn]"""
import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DATA = "/usr/share/datasets/fashion-mnist"
# model: (bundled ONNX, learning rate, target accuracy); batch 64, 5 epochs, linear decay, seed 0. One thread each:
# ctest runs another test beside this one on CI's two cores, and two threads took twice the CPU time.
RECIPES = {"mlp": ("mlp.onnx", 1e-3, 0.88), "cnn": ("lenet_bn.onnx", 3e-3, 0.90)}
EPOCHS, BATCH, SEED, THREADS = 5, 64, 0, 1


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr}")
    return r.stdout


def edgetrain_accuracies(edgetrain, model_file, lr, tmp):
    art = os.path.join(tmp, "artifacts")
    run([edgetrain, "generate-artifacts", os.path.join(ROOT, "models", model_file), "-o", art,
         "--additional-output", "output"])
    metrics = os.path.join(tmp, "metrics.csv")
    run([edgetrain, "train", art, "--data", f"input={DATA}/train-images-idx3-ubyte.gz",
         f"labels={DATA}/train-labels-idx1-ubyte.gz", "--eval-data", f"input={DATA}/t10k-images-idx3-ubyte.gz",
         f"labels={DATA}/t10k-labels-idx1-ubyte.gz", "--epochs", str(EPOCHS), "--batch-size", str(BATCH),
         "--lr", str(lr), "--scheduler", "linear", "--seed", str(SEED), "--threads", str(THREADS),
         "--metrics", metrics])
    return [(float(row["train_loss"]), float(row["eval_accuracy"])) for row in csv.DictReader(open(metrics))]


def torch_accuracies(model, lr):
    out = run(["/usr/bin/python3", os.path.join(ROOT, "tests", "fashion_mnist_torch.py"), "--model", model,
               "--epochs", str(EPOCHS), "--batch-size", str(BATCH), "--lr", str(lr), "--scheduler", "linear",
               "--seed", str(SEED), "--threads", str(THREADS)])
    return [(r["train_loss"], r["test_accuracy"]) for r in map(json.loads, out.split("\n")[:-1])]


def main(edgetrain, models):
    failures = []
    for model in models:
        model_file, lr, target = RECIPES[model]
        with tempfile.TemporaryDirectory() as tmp:
            ours = edgetrain_accuracies(edgetrain, model_file, lr, tmp)
        theirs = torch_accuracies(model, lr)
        print(f"{model}: epoch  edgetrain loss / accuracy   PyTorch loss / accuracy")
        for epoch, ((lo, ao), (lt, at)) in enumerate(zip(ours, theirs), 1):
            print(f"{model}: {epoch:5d}  {lo:.4f} / {100 * ao:.2f}%         {lt:.4f} / {100 * at:.2f}%")
        final, torch_final = ours[-1][1], theirs[-1][1]
        checks = [(f"{model}: edgetrain reaches {100 * target:.0f}% in {EPOCHS} epochs ({100 * final:.2f}%)",
                   final >= target),
                  (f"{model}: PyTorch within 0.5 points ({100 * torch_final:.2f}% vs {100 * final:.2f}%)",
                   abs(final - torch_final) <= 0.005),
                  (f"{model}: {EPOCHS} epochs each", len(ours) == EPOCHS and len(theirs) == EPOCHS)]
        for name, ok in checks:
            print(("PASS " if ok else "FAIL ") + name)
            if not ok:
                failures.append(name)
    return 1 if failures else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--edgetrain", required=True)
    parser.add_argument("--models", nargs="+", choices=list(RECIPES), default=list(RECIPES))
    a = parser.parse_args()
    sys.exit(main(os.path.abspath(a.edgetrain), a.models))
