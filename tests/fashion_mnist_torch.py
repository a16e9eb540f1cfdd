"""The PyTorch side of the Fashion-MNIST recipe that `edgetrain train` is compared against.

Same data, initial weights, sample order and optimizer as edgetrain:
- data: the Debian dataset-fashion-mnist IDX files, pixels uint8 / 255 as float32 [N, 1, 28, 28],
  labels int64; --limit N keeps the first N training samples (the test set is always whole);
- weights: the initializers of an ONNX model (by PyTorch parameter name; BatchNorm running
  statistics included, also where the exporter made them Identity copies of another initializer);
- order: epoch e (from 0) visits the samples in ShuffledOrder(n, seed, e) of tools/dataset.hpp,
  in batches of --batch-size, the last one partial;
- AdamW(lr, betas 0.9/0.999, eps 1e-8, weight_decay 0.01), CrossEntropyLoss (mean over the batch),
  model.train() for the steps and model.eval() for the test pass; with --scheduler linear the
  learning rate follows ORT's linear schedule to 0 at the last step (edgetrain's LRScheduler::Linear).
One JSON line per epoch: epoch (from 1), train_loss (mean of the step losses), test_loss (mean
over the test samples), test_accuracy, seconds (the training steps of the epoch, not the test pass).

Run with Debian's interpreter (it sees python3-torch):
  /usr/bin/python3 tests/fashion_mnist_torch.py --model mlp --epochs 1 --threads 2
  /usr/bin/python3 tests/fashion_mnist_torch.py --self-test
"""
import argparse
import gzip
import importlib.util
import json
import os
import sys
import time

import numpy as np
import onnx
import onnx.numpy_helper
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DATA = "/usr/share/datasets/fashion-mnist"
DEFAULT_INIT = {"mlp": "models/mlp.onnx", "cnn": "models/lenet_bn.onnx"}

MASK64 = (1 << 64) - 1
GOLDEN_GAMMA = 0x9E3779B97F4A7C15


def load_torch_models():
    spec = importlib.util.spec_from_file_location(
        "torch_models", os.path.join(REPO, "..", "shared", "peers", "torch_models.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def splitmix64(seed):
    """SplitMix64 as in tools/dataset.hpp: an endless generator of uint64 values."""
    state = seed & MASK64
    while True:
        state = (state + GOLDEN_GAMMA) & MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        yield z ^ (z >> 31)


def shuffled_order(n, seed, epoch):
    """ShuffledOrder of tools/dataset.hpp: Fisher-Yates from the back with SplitMix64."""
    rng = splitmix64(seed ^ ((epoch * GOLDEN_GAMMA) & MASK64))
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        j = next(rng) % (i + 1)
        order[i], order[j] = order[j], order[i]
    return order


IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    if len(data) < 4 or data[:2] != b"\0\0" or data[2] not in IDX_TYPES:
        sys.exit(f"{path}: not an IDX file")
    rank = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(rank)]
    return np.frombuffer(data, dtype=IDX_TYPES[data[2]], offset=4 + 4 * rank).reshape(shape)


def read_split(split, limit=None):
    images = read_idx(os.path.join(DATA, f"{split}-images-idx3-ubyte.gz"))[:limit]
    labels = read_idx(os.path.join(DATA, f"{split}-labels-idx1-ubyte.gz"))[:limit]
    x = torch.from_numpy(images.astype(np.float32) / 255).reshape(-1, 1, 28, 28)
    return x, torch.from_numpy(labels.astype(np.int64))


def load_onnx_weights(model, path):
    """Sets every parameter and buffer of `model` from the ONNX initializer of the same name."""
    graph = onnx.load(path).graph
    values = {t.name: onnx.numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:  # the exporter shares equal initializers through Identity nodes
        if node.op_type == "Identity" and node.input[0] in values:
            values[node.output[0]] = values[node.input[0]]
    state = model.state_dict()
    missing = [k for k in state if k not in values and not k.endswith("num_batches_tracked")]
    if missing:
        sys.exit(f"{path} has no initializer for {', '.join(missing)}")
    for key, tensor in state.items():
        if key in values:
            if tuple(values[key].shape) != tuple(tensor.shape):
                sys.exit(f"{path}: '{key}' has shape {list(values[key].shape)}, the model needs {list(tensor.shape)}")
            state[key] = torch.from_numpy(values[key].copy())
    model.load_state_dict(state)


def evaluate(model, loss_fn, x, y, batch_size):
    model.eval()
    total_loss, correct = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(x), batch_size):
            logits = model(x[start:start + batch_size])
            labels = y[start:start + batch_size]
            total_loss += loss_fn(logits, labels).item() * len(labels)
            correct += (logits.argmax(dim=1) == labels).sum().item()
    return total_loss / len(x), correct / len(x)


def train(args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model = load_torch_models().MODELS[args.model][0]()
    load_onnx_weights(model, args.init or os.path.join(REPO, DEFAULT_INIT[args.model]))
    x_train, y_train = read_split("train", args.limit)
    x_test, y_test = read_split("t10k")
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    loss_fn = nn.CrossEntropyLoss()
    scheduler = None
    if args.scheduler == "linear":  # ORT's LinearLRScheduler over the whole run, stepped after each update
        total = args.epochs * ((len(x_train) + args.batch_size - 1) // args.batch_size)
        warmup = args.warmup
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: step / max(1, warmup) if step < warmup
            else max(0.0, (total - step) / max(1, total - warmup)))
    for epoch in range(args.epochs):
        order = torch.tensor(shuffled_order(len(x_train), args.seed, epoch))
        model.train()
        started = time.perf_counter()
        step_losses = []
        for start in range(0, len(order), args.batch_size):
            batch = order[start:start + args.batch_size]
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x_train[batch]), y_train[batch])
            loss.backward()
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            step_losses.append(loss.item())
        seconds = time.perf_counter() - started
        test_loss, test_accuracy = evaluate(model, loss_fn, x_test, y_test, args.batch_size)
        print(json.dumps({"epoch": epoch + 1, "train_loss": sum(step_losses) / len(step_losses),
                          "test_loss": test_loss, "test_accuracy": test_accuracy, "seconds": round(seconds, 3)}),
              flush=True)


def self_test():
    """Pins the sample order to the sequence tools/dataset.cpp produces (tests/dataset_test.cpp)."""
    rng = splitmix64(1234567)
    assert [next(rng) for _ in range(3)] == [6457827717110365317, 3203168211198807973, 9817491932198370423]
    assert shuffled_order(100, 42, 0)[:10] == [91, 99, 1, 14, 65, 55, 78, 70, 66, 9]
    assert shuffled_order(5, 7, 3) == [3, 2, 4, 1, 0]
    assert sorted(shuffled_order(1000, 3, 2)) == list(range(1000))
    x, y = read_split("t10k")
    assert tuple(x.shape) == (10000, 1, 28, 28) and x.dtype == torch.float32 and float(x.max()) == 1.0
    assert y[:3].tolist() == [9, 2, 1] and int(y.max()) == 9
    print("self-test passed")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--init", help="ONNX model with the initial weights (default: the bundled one of --model)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scheduler", choices=["none", "linear"], default="none",
                   help="linear: ORT's linear decay to 0 over the run (edgetrain train --scheduler linear)")
    p.add_argument("--warmup", type=int, default=0, help="linear: warmup steps")
    p.add_argument("--limit", type=int, help="train on the first N samples only")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--self-test", action="store_true", help="check the sample order and the data reader, then exit")
    args = p.parse_args()
    if args.self_test:
        self_test()
    else:
        for name in ("epochs", "batch_size", "threads"):
            if getattr(args, name) < 1:
                p.error(f"--{name.replace('_', '-')} must be at least 1")
        if args.limit is not None and args.limit < 1:
            p.error("--limit must be at least 1")
        train(args)


if __name__ == "__main__":
    main()
