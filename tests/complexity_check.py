#!/usr/bin/env python3
"""Cognitive complexity of the functions issue 21 split (clang-tidy's
readability-function-cognitive-complexity): fails when one exceeds its limit, half of the issue's
baseline, or is no longer found. Usage: complexity_check.py SOURCE_DIR BUILD_DIR [NAME=LIMIT ...]
(the build's compile_commands.json; NAME=LIMIT checks only those functions, with those limits)."""
import concurrent.futures
import re
import shutil
import subprocess
import sys

# function -> (file, limit, the baseline). A name may be defined in its file only once.
LIMITS = {
    "ExpandNodes": ("src/onnx/importer.cpp", 39, 79),
    "TopologicalOrder": ("src/ir/graph.cpp", 35, 71),
    "Compile": ("src/runtime/session.cpp", 34, 69),  # GraphExecutor::Compile
    "BindTrainingModel": ("src/training/training_session.cpp", 32, 65),
    "GemmForward": ("src/ops/matmul.cpp", 50, 100),
}
CHECK = "readability-function-cognitive-complexity"
WARNING = re.compile(r"^(\S+?):(\d+):\d+: warning: function '([^']+)' has cognitive complexity of (\d+)")


def measure(tidy, source_dir, build_dir, path):
    config = "{CheckOptions: [{key: %s.Threshold, value: 0}]}" % CHECK
    run = subprocess.run([tidy, "-p", build_dir, "--quiet", "--checks=-*," + CHECK, "--config=" + config,
                          f"{source_dir}/{path}"], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"clang-tidy failed on {path} (exit {run.returncode}):\n{run.stdout}{run.stderr}")
    found = {}
    for line in run.stdout.splitlines():
        m = WARNING.match(line)
        if m and m.group(1).endswith(path):
            found.setdefault(m.group(3), []).append((int(m.group(2)), int(m.group(4))))
    return found


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    source_dir, build_dir = sys.argv[1], sys.argv[2]
    limits = dict(LIMITS)
    if len(sys.argv) > 3:
        limits = {}
        for arg in sys.argv[3:]:
            name, limit = arg.split("=")
            limits[name] = (LIMITS[name][0], int(limit), LIMITS[name][2])
    tidy = shutil.which("clang-tidy")
    if not tidy:
        sys.exit("clang-tidy is not installed (scripts/setup.sh installs Debian's clang-tidy)")
    files = sorted({path for path, _, _ in limits.values()})
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        measured = dict(zip(files, pool.map(lambda f: measure(tidy, source_dir, build_dir, f), files)))
    failures = []
    for name, (path, limit, baseline) in limits.items():
        hits = measured[path].get(name, [])
        if not hits:
            failures.append(f"{path}: function '{name}' not found")
            continue
        for line, value in hits:
            verdict = "ok" if value <= limit else "OVER"
            print(f"{path}:{line}: {name}: {value} (limit {limit}, issue baseline {baseline}) {verdict}")
            if value > limit:
                failures.append(f"{path}:{line}: {name} has cognitive complexity {value}, more than {limit}")
    if failures:
        sys.exit("\n".join(failures))


if __name__ == "__main__":
    main()
