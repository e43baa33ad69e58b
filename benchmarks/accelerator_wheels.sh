#!/usr/bin/env bash
# The wheels benchmarks/accelerator.sh installs on a machine without a package registry:
#
#     bash benchmarks/accelerator_wheels.sh WHEEL_DIR
#
# downloads, for a Linux x86_64 CPython target (TARGET_PYTHON, default 3.11), the wheels of
# what the accelerator tier and its benchmarks need beside jax and jaxlib (which that machine
# has), at the versions installed here, so that both machines run the same ones. Wheels are
# never committed (.whl-tpu/ is ignored).
set -euo pipefail
WHEEL_DIR=${1:?usage: bash benchmarks/accelerator_wheels.sh WHEEL_DIR}
PY=${PYTHON:-python3}
mkdir -p "$WHEEL_DIR"
for name in equinox jaxtyping wadler-lindig optax optimistix lineax beartype pytest-xdist \
    execnet absl-py typing_extensions; do
    version=$("$PY" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$name")
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "${TARGET_PYTHON:-3.11}" \
        --implementation cp --platform manylinux_2_17_x86_64 -d "$WHEEL_DIR" "$name==$version"
done
ls "$WHEEL_DIR"
