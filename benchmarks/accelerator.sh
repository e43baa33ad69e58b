#!/usr/bin/env bash
# The accelerator tier and the accelerator benchmarks on a machine with a GPU or TPU and no
# package registry (issue 48, item 2):
#
#     bash benchmarks/accelerator.sh [WHEEL_DIR] [OUT_DIR] [PYTEST_ARGS...]
#
# WHEEL_DIR (default .whl-tpu) holds the wheels of what the tier needs beyond jax and jaxlib,
# which the machine has (benchmarks/accelerator_wheels.sh downloads them on a machine with a
# registry; carry the folder with the tree). They are installed into a temporary folder put on
# PYTHONPATH with the repository root, never into the machine's Python. Then: the device and
# the versions (OUT_DIR/environment.txt), the tier (`pytest -m accelerator tests/accelerator`,
# OUT_DIR/accelerator.xml and .log), and the benchmarks (`python -m
# benchmarks.studies.tpu_vmap_failures`, `python -m benchmarks.studies.engine --quick`, `python -m
# benchmarks.suite.networks`, `python -m benchmarks.suite.first_call`, into OUT_DIR). PYTEST_ARGS
# go to pytest (e.g. `-k vmap`).
#
# Exits with the tier's status: 0 when it passed, 3 when the default backend is the CPU (the
# tier would only be skipped; JAXSEARCH_ACCELERATOR_ON_CPU=1 runs it there at small sizes). A
# benchmark that fails or times out is reported and does not change the exit status.
#
# Settings (environment): PYTHON (python3), TIER_TIMEOUT (seconds, 1500), BENCH (1 on an
# accelerator, 0 on the CPU: run the benchmarks), BENCH_TIMEOUT (seconds each, 600),
# FIRST_CALL_TIMEOUT (seconds, 1500: first_call starts 24 processes, each opening the chip).
#
# Here in benchmarks/ rather than .ci/: CI has no accelerator and never runs it; like the other
# scripts here it is run by hand on a machine with the hardware, and writes measurements.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
WHEEL_DIR=${1:-.whl-tpu}
OUT_DIR=${2:-${OUT:-/tmp/jaxsearch-accelerator}}
shift $(($# < 2 ? $# : 2))
PY=${PYTHON:-python3}
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
: >"$OUT_DIR/summary.txt"

SITE=$(mktemp -d "${TMPDIR:-/tmp}/jaxsearch-site.XXXXXX")
trap 'rm -rf "$SITE"' EXIT
shopt -s nullglob
wheels=("$WHEEL_DIR"/*.whl)
if ((${#wheels[@]})); then
    PIP_CONFIG_FILE=/dev/null "$PY" -m pip install --isolated -q --no-index --no-deps \
        --no-compile --no-cache-dir --upgrade --target "$SITE" "${wheels[@]}" ||
        { echo "installing the wheels of $WHEEL_DIR failed" >&2; exit 1; }
else
    echo "no wheels in $WHEEL_DIR: using what $PY has" >&2
fi
export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"

"$PY" - <<'EOF' | tee "$OUT_DIR/environment.txt"
import importlib.metadata as metadata
import platform
import sys

import jax

print("python", sys.version.split()[0], platform.machine())
print("backend", jax.default_backend(), "devices", jax.devices())
for name in ("jax", "jaxlib", "numpy", "equinox", "jaxtyping", "optax", "optimistix", "lineax",
             "beartype", "pytest", "pytest-xdist"):
    try:
        found = metadata.distribution(name)
        print(name, found.version, found.locate_file(""))
    except metadata.PackageNotFoundError:
        print(name, "absent")
EOF
backend=$("$PY" -c "import jax; print(jax.default_backend())") || exit 1
if [[ $backend == cpu && ${JAXSEARCH_ACCELERATOR_ON_CPU:-} != 1 ]]; then
    echo "JAX's default backend is the CPU: the tier would only be skipped (set" \
        "JAXSEARCH_ACCELERATOR_ON_CPU=1 to run it here at small sizes)" >&2
    exit 3
fi

# pyproject's addopts hold `-n 2` (pytest-xdist): without xdist, replace them.
if "$PY" -c "import xdist" 2>/dev/null; then
    options=(-n 0)
else
    options=(-o "addopts=-q")
fi
timeout "${TIER_TIMEOUT:-1500}" "$PY" -m pytest -m accelerator "${options[@]}" \
    -p no:cacheprovider -p no:randomly tests/accelerator -q -rfEs --durations=20 \
    --junitxml="$OUT_DIR/accelerator.xml" "$@" 2>&1 | tee "$OUT_DIR/accelerator.log"
tier=${PIPESTATUS[0]}
echo "tier: exit status $tier" | tee -a "$OUT_DIR/summary.txt"

if [[ ${BENCH:-$([[ $backend == cpu ]] && echo 0 || echo 1)} == 1 ]]; then
    timeout "${BENCH_TIMEOUT:-600}" "$PY" -m benchmarks.studies.tpu_vmap_failures 2>&1 |
        tee "$OUT_DIR/tpu_vmap_failures.txt"
    echo "studies.tpu_vmap_failures: exit status ${PIPESTATUS[0]}" | tee -a "$OUT_DIR/summary.txt"
    timeout "${BENCH_TIMEOUT:-600}" "$PY" -m benchmarks.studies.engine --quick --out "$OUT_DIR/engine" \
        2>&1 | tee "$OUT_DIR/engine.log"
    echo "studies.engine --quick: exit status ${PIPESTATUS[0]}" | tee -a "$OUT_DIR/summary.txt"
    timeout "${BENCH_TIMEOUT:-600}" "$PY" -m benchmarks.suite.networks --out "$OUT_DIR/networks" \
        2>&1 | tee "$OUT_DIR/networks.log"
    echo "suite.networks: exit status ${PIPESTATUS[0]}" | tee -a "$OUT_DIR/summary.txt"
    timeout "${FIRST_CALL_TIMEOUT:-1500}" "$PY" -m benchmarks.suite.first_call \
        --out "$OUT_DIR/first_call" 2>&1 | tee "$OUT_DIR/first_call.log"
    echo "suite.first_call: exit status ${PIPESTATUS[0]}" | tee -a "$OUT_DIR/summary.txt"
fi
exit "$tier"
