"""The README's main command and every example run and print what they promise."""

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run_example(name):
    completed = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


def test_quickstart():
    out = run_example("quickstart.py")
    assert out.count("status     : CONVERGED_") == 2, out  # Rosenbrock and logistic regression
    assert "MAX_STEPS" in out  # gradient descent on Rosenbrock is honest about being slow


def test_training_loop_compiles_once():
    out = run_example("training_loop.py")
    assert "compiles of the training step over 200 steps: 1" in out, out


@pytest.mark.parametrize("name", ["mixed_precision.py"])
def test_other_examples_run(name):
    out = run_example(name)
    assert "params dtype : bfloat16, value dtype: float32" in out, out
