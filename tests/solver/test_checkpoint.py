"""Checkpoints of a step loop (docs/training-loops.md, "Checkpoints"): (params, state) saved
with `eqx.tree_serialise_leaves` and loaded in a new process into the template that
`solver.init` builds continue bit for bit; a checkpoint that does not fit the solver is an
error that names the leaf."""

import pathlib
import subprocess
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js

from ..problems import rosenbrock

ROOT = pathlib.Path(__file__).resolve().parents[2]

# The loop both processes run: the same solver, objective and jitted step.
LOOP = """
import equinox as eqx
import jax
import jax.numpy as jnp
import jaxsearch as js


def objective(params, shift):
    x = jnp.concatenate([params["a"].astype(jnp.float32), params["b"].astype(jnp.float32)])
    x = x - shift
    return jnp.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def start(dtypes):
    return {"a": jnp.array([-1.2, 1.0], dtypes[0]), "b": jnp.array([0.5, -0.4], dtypes[1])}


solver = js.Solver(js.LBFGS(memory_size=5), js.Zoom())
shift = jnp.array([0.1, -0.1, 0.05, 0.0], jnp.float32)


@eqx.filter_jit
def step(params, state):
    return solver.step(objective, params, state, shift)


def steps(params, state, k):
    for _ in range(k):
        params, state = step(params, state)
    return params, state
"""

RESUME = """
import sys
import jax
if sys.argv[3] == "x64":
    jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp
import equinox as eqx
dtypes = tuple(getattr(jnp, name) for name in sys.argv[4].split(","))
template = start(dtypes)
template = (template, solver.init(template, value_dtype=jnp.float32))
params, state = eqx.tree_deserialise_leaves(sys.argv[1], template)
params, state = steps(params, state, 12)
eqx.tree_serialise_leaves(sys.argv[2], (params, state))
"""

namespace: dict = {}
exec(compile(LOOP, "checkpoint_loop", "exec"), namespace)


def leaves_equal(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(np.asarray(x, np.float64), np.asarray(y, np.float64))


@pytest.mark.parametrize(
    "dtypes, x64",
    [(("float32", "float32"), False), (("float64", "float64"), True)],
    ids=["float32", "float64"],
)
def test_a_checkpoint_resumes_bit_for_bit_in_a_new_process(tmp_path, dtypes, x64):
    """12 steps, a checkpoint, 12 more steps in a fresh Python process: the same params and
    state as 24 steps without a break (the same compiled program, so the same bits)."""
    ns = namespace
    with jax.enable_x64(x64):
        params = ns["start"](tuple(getattr(jnp, d) for d in dtypes))
        state = ns["solver"].init(params, value_dtype=jnp.float32)
        params, state = ns["steps"](params, state, 12)
        eqx.tree_serialise_leaves(tmp_path / "at12.eqx", (params, state))
        whole = ns["steps"](params, state, 12)
        assert int(whole[1].num_steps) == 24
    script = LOOP + RESUME
    completed = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            str(tmp_path / "at12.eqx"),
            str(tmp_path / "at24.eqx"),
            "x64" if x64 else "x32",
            ",".join(dtypes),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    with jax.enable_x64(x64):
        resumed = eqx.tree_deserialise_leaves(tmp_path / "at24.eqx", whole)
    leaves_equal(resumed, whole)


def _checkpoint(path, solver, x):
    eqx.tree_serialise_leaves(path, (x, solver.init(x, fn=rosenbrock)))


def test_a_checkpoint_of_another_memory_size_names_the_leaf(tmp_path):
    x = jnp.array([-1.2, 1.0], jnp.float32)
    _checkpoint(tmp_path / "m10.eqx", js.Solver(js.LBFGS(memory_size=10)), x)
    template = (x, js.Solver(js.LBFGS(memory_size=5)).init(x))
    with pytest.raises(RuntimeError, match=r"direction.*changed shape from \(5, 2\).*\(10, 2\)"):
        eqx.tree_deserialise_leaves(tmp_path / "m10.eqx", template)


def test_a_checkpoint_of_other_dtypes_names_the_leaf(tmp_path):
    x = jnp.array([-1.2, 1.0], jnp.float32)
    _checkpoint(tmp_path / "f32.eqx", js.Solver(), x)
    low = x.astype(jnp.float16)
    with pytest.raises(RuntimeError, match="changed dtype from float16 in `like` to float32"):
        eqx.tree_deserialise_leaves(tmp_path / "f32.eqx", (low, js.Solver().init(low)))


def test_a_checkpoint_with_a_best_point_does_not_load_without_one(tmp_path):
    """`return_best` decides whether the state holds a best point: the leaves then differ."""
    x = jnp.array([-1.2, 1.0], jnp.float32)
    _checkpoint(tmp_path / "best.eqx", js.Solver(), x)
    template = (x, js.Solver(return_best=False).init(x))
    with pytest.raises(RuntimeError, match="Deserialised leaf"):
        eqx.tree_deserialise_leaves(tmp_path / "best.eqx", template)
