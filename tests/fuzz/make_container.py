#!/usr/bin/env python3
"""Builds inputs of the training-artifact harness: uint32 LE model size, model, checkpoint.
With --flips N --count K it writes K variants with N random bits flipped in the model part."""
import argparse, os, random, struct

p = argparse.ArgumentParser()
p.add_argument("model")
p.add_argument("checkpoint")
p.add_argument("-o", "--out", required=True, help="output file, or directory with --count")
p.add_argument("--count", type=int, default=0)
p.add_argument("--flips", type=int, default=1)
p.add_argument("--seed", type=int, default=1)
a = p.parse_args()
model = open(a.model, "rb").read()
ckpt = open(a.checkpoint, "rb").read()
if not a.count:
    open(a.out, "wb").write(struct.pack("<I", len(model)) + model + ckpt)
else:
    os.makedirs(a.out, exist_ok=True)
    rng = random.Random(a.seed)
    for k in range(a.count):
        m = bytearray(model)
        for _ in range(a.flips):
            i = rng.randrange(len(m))
            m[i] ^= 1 << rng.randrange(8)
        open(os.path.join(a.out, "flip%04d" % k), "wb").write(struct.pack("<I", len(m)) + bytes(m) + ckpt)
