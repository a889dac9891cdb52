#!/usr/bin/env bash
# bench/gpu_mfu.py on a GPU machine that has its own Python and CUDA torch, no network and no millrace
# environment: the pure-Python dependencies travel as wheels (`make gpu-wheels` fills .whl/ beforehand).
# Run from anywhere; arguments go to gpu_mfu.py:  bash bench/gpu_mfu_device.sh --out "$OUT"
# WHEELS (default .whl), SITE (the install target, default /tmp/millrace-site) and PYTHON (default python3)
# can be set in the environment.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=${WHEELS:-.whl}
SITE=${SITE:-/tmp/millrace-site}
PYTHON=${PYTHON:-python3}
if ! ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    echo "gpu_mfu_device.sh: no wheels in $WHEELS; run 'make gpu-wheels' on a machine with network first" >&2
    exit 2
fi
"$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$WHEELS"/*.whl
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
exec "$PYTHON" bench/gpu_mfu.py "$@"
