"""Demo helper: writes Fashion-MNIST test images as .npy for `edgetrain run`, and with --check reads
edgetrain's logits back and reports predictions against the labels."""
import gzip
import os
import sys

import numpy as np

DATA = "/usr/share/datasets/fashion-mnist"
CLASSES = ["T-shirt", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Boot"]
COUNT = 256


def read_idx(name):
    with gzip.open(os.path.join(DATA, name)) as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


out = sys.argv[1]
labels = read_idx("t10k-labels-idx1-ubyte.gz")[:COUNT]
if "--check" not in sys.argv:
    images = read_idx("t10k-images-idx3-ubyte.gz")[:COUNT].astype(np.float32) / 255.0
    np.save(os.path.join(out, "images.npy"), images.reshape(COUNT, 1, 28, 28))
    import shutil
    shutil.copy(os.path.join(os.path.dirname(__file__), "..", "models", "mlp.onnx"), os.path.join(out, "mlp.onnx"))
else:
    logits = np.load(os.path.join(out, "output.npy"))
    predicted = logits.argmax(axis=1)
    print(f"ran {COUNT} Fashion-MNIST test images: logits {logits.shape}, "
          f"accuracy {np.mean(predicted == labels):.1%} (untrained weights: on-device training is the next milestone)")
    for i in range(5):
        print(f"  image {i}: predicted {CLASSES[predicted[i]]}, label {CLASSES[labels[i]]}")
