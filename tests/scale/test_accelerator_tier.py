"""The accelerator tier (tests/accelerator/, `pytest -m accelerator`) on a CPU-only machine, as
CI runs it: every test of it is collected, carries the marker and is skipped, not failed,
with the reason; and collecting and skipping it compiles nothing."""

import os
import pathlib
import re
import subprocess
import sys

from ..accelerator.conftest import ON_CPU_VARIABLE, SKIP_REASON

ROOT = pathlib.Path(__file__).resolve().parents[2]

# pytest in-process, with a count of XLA backend compiles from the start.
SCRIPT = """
import sys

import jax
import pytest

compiles = []
jax.monitoring.register_event_duration_secs_listener(
    lambda event, duration, **kwargs: compiles.append(event)
    if event == "/jax/core/compile/backend_compile_duration"
    else None
)
code = pytest.main(sys.argv[1:])
print("compiles:", len(compiles))
sys.exit(code)
"""


def test_tier_is_skipped_on_the_cpu():
    env = {k: v for k, v in os.environ.items() if k != ON_CPU_VARIABLE}
    env["JAX_PLATFORMS"] = "cpu"
    args = ["tests/accelerator", "-n", "0", "-p", "no:randomly", "-p", "no:cacheprovider", "-rs"]
    completed = subprocess.run(
        [sys.executable, "-c", SCRIPT, *args, "-m", "accelerator"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = completed.stdout + completed.stderr
    assert completed.returncode == 0, out
    # The last summary line, e.g. "== 43 skipped in 3.10s ==" ("-q" drops the "=="s).
    (summary,) = re.findall(r"^=*\s*(\d+ \w+(?:, \d+ \w+)*) in [\d.]+s", out, re.M)
    outcomes = {word: int(count) for count, word in re.findall(r"(\d+) (\w+)", summary)}
    assert set(outcomes) == {"skipped"} and outcomes["skipped"] >= 20, summary  # none deselected
    assert SKIP_REASON in " ".join(out.split()), out
    assert "compiles: 0" in out, out
