#!/usr/bin/env bash
# Runs a federation of edgetrain clients with Flower on this machine (scripts/federated.py --help for options).
# Needs scripts/setup.sh (the Flower venv and build/python).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${EDGETRAIN_PEERS_DIR:-$HOME/.cache/edgetrain-peers}/venv-flower"
[ -x "$venv/bin/flower-superlink" ] || { echo "federated: no Flower venv at $venv (run scripts/setup.sh)" >&2; exit 1; }
[ -f "$root/build/python/edgetrain/__init__.py" ] || { echo "federated: build/python is missing (ninja -C build edgetrain_python)" >&2; exit 1; }
export PATH="$venv/bin:$PATH" PYTHONPATH="$root/build/python${PYTHONPATH:+:$PYTHONPATH}"
exec "$venv/bin/python" "$root/scripts/federated.py" "$@"
