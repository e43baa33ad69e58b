"""Property-based test (hypothesis) of box constraints: on random SPD quadratics and random
boxes (some sides infinite, some cutting off the minimiser, x0 possibly outside), every point
`step` returns lies in the box as given, is finite, and f never rises beyond rounding.

The problem data go through `args` and the bounds are arrays, so each (direction, search,
dtype) compiles one program that every example reuses. Profiles: tests/helpers.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import jaxsearch as js

from ..helpers import PROFILE_SETTINGS, solver

N = 5
NUM_STEPS = 20


def quadratic(x, A, b):
    return 0.5 * (x @ (A @ x)) - b @ x


@st.composite
def bounded_problems(draw):
    seed = draw(st.integers(0, 2**32 - 1))
    log_cond = draw(st.floats(0.0, 4.0))
    log_scale = draw(st.floats(-2.0, 2.0))
    rng = np.random.default_rng(seed)
    q, r = np.linalg.qr(rng.standard_normal((N, N)))
    q = q * np.sign(np.diag(r))
    a = (q * 10.0 ** (log_scale - np.linspace(0.0, log_cond, N))) @ q.T
    a = 0.5 * (a + a.T)
    xstar = rng.standard_normal(N)
    centre = xstar + rng.standard_normal(N)  # the box may or may not hold the minimiser
    lower = centre - rng.uniform(0.0, 1.5, N)
    upper = centre + rng.uniform(0.0, 1.5, N)
    lower[rng.uniform(size=N) < 0.2] = -np.inf
    upper[rng.uniform(size=N) < 0.2] = np.inf
    x0 = centre + 2 * rng.standard_normal(N)  # often outside: step projects it
    return a, a @ xstar, x0, lower, upper


PAIRS = [("LBFGS", "Zoom"), ("LBFGS", "MoreThuente"), ("Gradient", "Backtracking")]
SOLVERS = {f"{d}-{s}": solver(d, s, gtol=0.0, ftol=0.0) for d, s in PAIRS}


def _step(solver, x, state, a, b, lower, upper):
    return solver.step(quadratic, x, state, a, b, bounds=(lower, upper))


STEP = jax.jit(_step, static_argnums=0)


@pytest.mark.parametrize(
    ("case", "dtype_name"),
    [
        ("LBFGS-MoreThuente", "float32"),
        ("LBFGS-MoreThuente", "float64"),
        ("LBFGS-Zoom", "float64"),
        ("Gradient-Backtracking", "float32"),
    ],
)
def test_iterates_stay_in_random_boxes(case, dtype_name):
    solver = SOLVERS[case]

    @PROFILE_SETTINGS
    @given(problem=bounded_problems())
    def run(problem):
        a, b, x0, lower, upper = problem
        dtype = jnp.dtype(dtype_name)
        eps = float(jnp.finfo(dtype).eps)
        with jax.enable_x64(dtype_name == "float64"):
            args = tuple(jnp.asarray(v, dtype) for v in (a, b))
            box = tuple(jnp.asarray(v, dtype) for v in (lower, upper))
            lo, up = (np.asarray(v, np.float64) for v in box)  # the bounds as given
            x = jnp.asarray(x0, dtype)
            state = solver.init(x, bounds=box)
            previous = None
            for k in range(NUM_STEPS):
                x, state = STEP(solver, x, state, *args, *box)
                x64 = np.asarray(x, np.float64)
                assert np.all(np.isfinite(x64)), (case, k, x64)
                assert np.all(x64 >= lo) and np.all(x64 <= up), (case, k, x64)
                value = float(state.value)
                if previous is not None:
                    slack = 100 * eps * (abs(previous) + 1)
                    assert value <= previous + slack, (case, k, previous, value)
                previous = value
                if int(state.status) != js.Status.RUNNING:
                    break

    run()
