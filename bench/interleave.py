#!/usr/bin/env python3
"""oneDNN against the own kernels on one training step, interleaved: each round runs
`BIN train DIR --batch B --threads T --budget-s S --min-steps 5` with EDGETRAIN_KERNELS=dnnl and =reference for
every BIN (the order reversed every other round), then prints per BIN the median steps and the per-round ratios.
On a shared machine only ratios within one run mean anything.

  bench/interleave.py --rounds 7 --budget-s 2 --threads 1 --batch 64 DIR BIN [BIN...]
"""
import argparse, json, os, statistics, subprocess

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("dir")
p.add_argument("bins", nargs="+")
p.add_argument("--rounds", type=int, default=5)
p.add_argument("--budget-s", default="2")
p.add_argument("--threads", default="1")
p.add_argument("--batch", default="64")
a = p.parse_args()
kernels = ("dnnl", "reference")
steps = {(b, k): [] for b in a.bins for k in kernels}
for r in range(a.rounds):
    order = [(b, k) for b in a.bins for k in kernels]
    for b, k in (reversed(order) if r % 2 else order):
        out = subprocess.run([b, "train", a.dir, "--batch", a.batch, "--threads", a.threads, "--budget-s", a.budget_s,
                              "--min-steps", "5"], env=dict(os.environ, EDGETRAIN_KERNELS=k), capture_output=True,
                             text=True, check=True).stdout
        steps[(b, k)].append(json.loads(out.strip().splitlines()[-1])["median_ms"])
for b in a.bins:
    dnnl, own = steps[(b, "dnnl")], steps[(b, "reference")]
    ratios = sorted(o / d for d, o in zip(dnnl, own))
    print(f"{b} ({a.threads} thread(s)): oneDNN {statistics.median(dnnl):.2f} ms, own {statistics.median(own):.2f} ms, "
          f"ratio {statistics.median(ratios):.2f}x ({', '.join(f'{x:.2f}' for x in ratios)})")
