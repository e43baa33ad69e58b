"""The accelerator tier (`pytest -m accelerator`): its tests run where JAX's default backend is
not the CPU, and are skipped, not failed, on a CPU-only machine (CI), unless the environment
variable JAXSEARCH_ACCELERATOR_ON_CPU=1 asks for them there (at the smaller sizes of
tests/accelerator/kit.py), to check the tier itself. Deciding costs no compile: the backend's
name only."""

import os

import jax
import pytest

ON_CPU_VARIABLE = "JAXSEARCH_ACCELERATOR_ON_CPU"
SKIP_REASON = (
    "accelerator tier: JAX's default backend is the CPU; run it on a GPU or TPU, or set "
    f"{ON_CPU_VARIABLE}=1 to run it on the CPU at small sizes"
)


def pytest_collection_modifyitems(config, items):
    # A conftest hook sees every collected item of the session, not only this folder's:
    # only the items marked `accelerator` are skipped.
    if jax.default_backend() != "cpu" or os.environ.get(ON_CPU_VARIABLE) == "1":
        return
    skip = pytest.mark.skip(reason=SKIP_REASON)
    for item in items:
        if item.get_closest_marker("accelerator") is not None:
            item.add_marker(skip)
