"""Compile-once tests for `Solver.run` (the `step` half is in `test_compile.py`; two files so
that pytest-xdist can run them in parallel).

For the cells listed in CELLS below: `run` called twice with new x0 and new data of the same
shapes compiles two programs in total (the run and the fresh state it starts from), a run
resumed from a result's state compiles nothing more (fresh and resumed runs share one
program), and an equal `Solver` built anew reuses those programs. Every input is made before
`compiles.reset()` (eager array operations compile small programs too).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js

from ..compile_kit import (
    GTOL,
    SETTINGS,
    block,
    leaf_dtypes,
    make_solver,
    rosenbrock_f64,
    shifted_rosenbrock,
    weak_leaves,
)
from ..helpers import DIRECTIONS, SEARCHES

# Every setting for the core pairs; every other direction (with Zoom) and every other search
# (with L-BFGS) in float32 and the mixed pytree (a compiled `run` differs from a compiled
# `step` only in the outer loop; test_compile.py covers every pair of direction, search and
# setting for `step`, and a recompile comes from one part's state, not from a pairing).
CORE = {"Gradient", "LBFGS"}, {"Zoom", "Backtracking"}
CELLS = [
    (direction, search, setting)
    for direction in DIRECTIONS
    for search in SEARCHES
    for setting in SETTINGS
    if (direction in CORE[0] and search in CORE[1])
    or (setting.name in ("float32", "mixed_bf16_f32") and "Zoom" == search)
    or (setting.name in ("float32", "mixed_bf16_f32") and "LBFGS" == direction)
]


@pytest.mark.parametrize("direction,search,setting", CELLS, ids=lambda v: getattr(v, "name", v))
def test_run_compiles_once(direction, search, setting, compiles):
    with jax.enable_x64(setting.x64):
        solver = make_solver(direction, search)
        x0s = [setting.params(seed) for seed in (10, 11, 12)]
        data = [setting.data(seed) for seed in (10, 11, 12)]
        counts = {}

        def run(solver, i):
            out = solver.run(shifted_rosenbrock, x0s[i], data[i], value_dtype=setting.value_dtype)
            return block(out)

        # Two runs from new x0 with new data: the first compiles (its fresh state and the
        # run), the second adds nothing, nor does a run resumed from the first's state.
        compiles.reset()
        first = run(solver, 0)
        counts["run_first"] = compiles.count
        second = run(solver, 1)
        counts["run_both"] = compiles.count
        resumed = solver.run(
            shifted_rosenbrock,
            first.iterate,
            data[0],
            value_dtype=setting.value_dtype,
            state=first.state,
        )
        block(resumed)
        counts["resumed"] = compiles.count

        # An equal solver, built anew, reuses the compiled run.
        rebuilt = make_solver(direction, search)
        compiles.reset()
        run(rebuilt, 2)
        counts["rebuilt"] = compiles.count

        assert counts == {"run_first": 2, "run_both": 2, "resumed": 2, "rebuilt": 0}
        assert int(resumed.num_steps) >= int(first.num_steps)

        for result, x0 in [(first, x0s[0]), (second, x0s[1])]:
            assert jax.tree.structure(result.params) == jax.tree.structure(x0)
            assert leaf_dtypes(result.params) == leaf_dtypes(x0)
            assert leaf_dtypes(result.grad) == leaf_dtypes(x0)
            assert result.value.dtype == setting.expected_value_dtype()
            assert weak_leaves(result) == []
            assert int(result.num_steps) >= 1
        # The new x0 and data were used, not baked into the program as constants.
        assert not all(
            bool(jnp.array_equal(a, b))
            for a, b in zip(
                jax.tree.leaves(first.params), jax.tree.leaves(second.params), strict=True
            )
        )


@pytest.mark.parametrize("search", list(SEARCHES))
def test_run_casts_float64_value_and_compiles_once(search, compiles):
    """fn returns float64 on float32 params (x64 on); run(value_dtype=float32) casts it."""
    with jax.enable_x64(True):
        solver = make_solver("LBFGS", search)
        x0s = [jnp.asarray([-1.2, 1.0], jnp.float32), jnp.asarray([-1.0, 1.2], jnp.float32)]
        compiles.reset()
        results = [block(solver.run(rosenbrock_f64, x0, value_dtype=jnp.float32)) for x0 in x0s]
        assert compiles.count == 2  # the run and its fresh state
        for result in results:
            assert result.value.dtype == jnp.float32
            assert result.params.dtype == jnp.float32 and result.grad.dtype == jnp.float32
            assert weak_leaves(result) == []


def quartic_for_spellings(x):
    """Used by one test only, so that its first compile is counted there."""
    return jnp.sum((x - 1.0) ** 4 + x**2)


def test_value_dtype_spellings_share_one_program(compiles):
    import numpy as np

    solver = make_solver("LBFGS", "Zoom")
    x0 = jnp.array([0.5, -0.5], jnp.float32)
    compiles.reset()
    for spelling in (jnp.float32, np.float32, "float32", np.dtype("float32")):
        block(solver.run(quartic_for_spellings, x0, value_dtype=spelling))
    assert compiles.count == 2  # the run and its fresh state


def quartic_per_dtype(x):
    """Used by one test only, so that its first compile is counted there."""
    return jnp.sum((x.astype(jnp.float32) - 1.0) ** 4)


def test_once_per_dtype_setting(compiles):
    """ "Compiles once" is per dtype setting: each params dtype compiles its program (the run
    and its fresh state) once, and later runs in any dtype already seen compile nothing."""
    solver = make_solver("LBFGS", "Zoom")
    starts = {d: [jnp.full(3, v, d) for v in (0.5, -0.5)] for d in (jnp.float32, jnp.bfloat16)}
    for dtype, x0s in starts.items():
        compiles.reset()
        block(solver.run(quartic_per_dtype, x0s[0]))
        assert compiles.count == 2, dtype  # a dtype setting of its own
    compiles.reset()
    for x0s in starts.values():
        for x0 in x0s:
            block(solver.run(quartic_per_dtype, x0))
    assert compiles.count == 0


def _quadratic(x, scale):
    return jnp.sum(scale * (x - 1.0) ** 2)


def test_run_dispatch_paths():
    """Arrays everywhere and a hashable fn: `run` goes through jax.jit (not equinox's
    filtering); any other leaf (here a Python float in args, a function in params) takes the
    filtered path. Both solve the same problem to the same point."""
    from jaxsearch._compile import seam

    solver = make_solver("LBFGS", "Zoom")
    x0, scale = jnp.array([3.0, -2.0]), jnp.asarray(2.0)

    def filtered_runs(dispatched):
        return [1 for d in dispatched if d.name == "compiled_run" and d.filtered]

    with seam.dispatches() as dispatched:
        fast = solver.run(_quadratic, x0, scale)
        assert filtered_runs(dispatched) == []
        slow = solver.run(_quadratic, x0, 2.0)
        assert filtered_runs(dispatched) == [1]
        mixed = solver.run(
            lambda p: _quadratic(p["x"], 2.0) + 0 * p["f"](0.0), {"x": x0, "f": jnp.tanh}
        )
        assert filtered_runs(dispatched) == [1, 1]
    # Three programs (the scale an argument, or a constant XLA may fold), which need not agree
    # bit for bit: each stopped by gtol at the same minimiser, 1. Near 1, grad f = 4 (x - 1)
    # is exact in float32 (x - 1 by Sterbenz, times a power of two), so |x - 1| <= GTOL / 4.
    for result in (fast, slow, mixed):
        assert result.status == js.Status.CONVERGED_GTOL
    for params in (fast.params, slow.params, mixed.params["x"]):
        np.testing.assert_allclose(params, 1.0, rtol=0, atol=GTOL / 4)
