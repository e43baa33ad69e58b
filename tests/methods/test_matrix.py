"""Every direction with every line search solves the shared problems (issue 3, item 1)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js

from ..helpers import LEAN, pairs, solver
from ..problems import logistic, logistic_data, quadratic, rosenbrock, spd_quadratic_data

# The registry's directions (tests/helpers.py) but the compact L-BFGS form, with every search
# that tests convergence (FixedStep does not); a subset, to keep the suite's time down. Every
# run is compiled with the lean options (`LEAN`): "auto" chooses them for all the runs here but
# the float64 logistic one (its transcendentals at a budget of 100 000 steps), and nearly all
# of this file's time is compiling.
DIRECTION_NAMES = ["Gradient", "LBFGS", "BFGS", "NonlinearCG", "NewtonCG"]
SEARCH_NAMES = ["Zoom", "Backtracking", "MoreThuente", "HagerZhang"]
CELLS = pairs(DIRECTION_NAMES, SEARCH_NAMES)
QUASI_NEWTON = ("LBFGS", "LBFGS-compact", "BFGS", "NewtonCG")  # must converge in float32


def problems(dtype):
    x, y = logistic_data()
    a, b, _ = spd_quadratic_data(n=100, cond=1e4)
    return {
        "rosenbrock": (rosenbrock, jnp.array([-1.2, 1.0], dtype), ()),
        "quadratic": (
            quadratic,
            jnp.zeros(100, dtype),
            (jnp.asarray(a, dtype), jnp.asarray(b, dtype)),
        ),
        "logistic": (
            logistic,
            jnp.zeros(10, dtype),
            (jnp.asarray(x, dtype), jnp.asarray(y, dtype), 1e-2),
        ),
    }


@pytest.mark.parametrize("direction,search", CELLS)
def test_float64_reaches_gtol(direction, search):
    method = solver(direction, search, gtol=1e-6, ftol=0.0, max_steps=100_000)
    with jax.enable_x64(True):
        for name, (fn, x0, args) in problems(jnp.float64).items():
            result = method.run(fn, x0, *args, compiler_options=LEAN)
            assert result.status == js.Status.CONVERGED_GTOL, (name, result.message)
            grad = jax.grad(fn)(result.params, *args)
            assert float(jnp.max(jnp.abs(grad))) <= 1e-6, name


@pytest.mark.parametrize("direction,search", CELLS)
def test_float32_converges_or_says_why(direction, search):
    """float32 to gtol 1e-3; quasi-Newton directions must converge, the others may end
    honestly (slow gradient descent, Armijo-only CG) but never with a worse or non-finite point."""
    method = solver(direction, search, gtol=1e-3, max_steps=20_000)
    for name, (fn, x0, args) in problems(jnp.float32).items():
        result = method.run(fn, x0, *args, compiler_options=LEAN)
        assert bool(jnp.all(jnp.isfinite(result.params))), name
        assert float(result.value) <= float(fn(x0, *args)), name
        if direction in QUASI_NEWTON or name == "logistic":
            assert result.success, (name, result.message)
        else:
            assert js.Status(int(result.status)) in {
                js.Status.CONVERGED_GTOL,
                js.Status.CONVERGED_FTOL,
                js.Status.STALLED,
                js.Status.MAX_STEPS,
            }, (name, result.message)
            np.testing.assert_array_less(float(result.value), 0.05)
