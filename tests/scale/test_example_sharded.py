"""examples/sharded_logistic.py runs on 8 simulated devices and agrees with single-device runs."""

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_sharded_logistic_example():
    completed = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "sharded_logistic.py")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    out = completed.stdout
    assert completed.returncode == 0, out + completed.stderr
    assert "8 devices: cpu" in out, out
    for label in ("data-parallel", "model-parallel"):
        assert f"{label}: status CONVERGED_" in out, out
        match = re.search(rf"{label}: max \|w - w_single\| = (\S+)", out)
        assert match is not None, out
        assert float(match.group(1)) < 1e-6, out
    assert "model-parallel: params sharding PartitionSpec('x',)" in out or (
        "model-parallel: params sharding P('x',)" in out
    ), out
