#!/usr/bin/python3
"""CPU time per step of a benchmark command, steadier than wall time on a shared machine: runs the command
with `{n}` replaced by each of two step counts, takes each process's CPU time (user + system, all threads,
from wait4's rusage) and prints (cpu(n2) - cpu(n1)) / (n2 - n1), so that start-up, loading and warm-up cancel.

    bench/cpu_step.py [--steps 2 5] [--rounds 1] -- build/bench/train_step_bench train DIR --batch 8 \
        --threads 1 --warmup 1 --min-steps {n} --max-steps {n} --create-repeats 1
    bench/cpu_step.py -- /usr/bin/python3 bench/zoo.py torch mobilenet_v2 --threads 1 --batch 8 --steps {n} --warmup 1
"""
import argparse
import os
import subprocess
import sys


def cpu_seconds(cmd, env=None):
    """CPU seconds (user + system, every thread) of running `cmd` to its end; exits on a failure."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit(f"cpu_step: {' '.join(cmd)} exited with {code}")
    return usage.ru_utime + usage.ru_stime


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, nargs=2, default=[2, 5], metavar=("N1", "N2"))
    p.add_argument("--rounds", type=int, default=1, help="repeat the pair; one line per round")
    p.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    n1, n2 = a.steps
    if not cmd or not any("{n}" in arg for arg in cmd):
        p.error("the command must contain {n} where the step count goes")
    if not 0 <= n1 < n2:
        p.error("--steps N1 N2 needs 0 <= N1 < N2")
    for r in range(a.rounds):
        t1 = cpu_seconds([arg.replace("{n}", str(n1)) for arg in cmd])
        t2 = cpu_seconds([arg.replace("{n}", str(n2)) for arg in cmd])
        print(f"round {r + 1}: {1e3 * (t2 - t1) / (n2 - n1):.2f} ms CPU per step "
              f"({n1} steps: {t1:.3f} s, {n2} steps: {t2:.3f} s)", flush=True)


if __name__ == "__main__":
    main()
