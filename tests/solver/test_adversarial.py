"""Objectives that try to break a solver: NaN regions, cliffs, flat regions, kinks, no lower
bound, NaN at the start. Every direction with its default line search, and LBFGS with each
line search (the registry's, tests/helpers.py), in float32 with n = 3 and max_steps=200.

Whatever the objective does, a run must end with a defined `js.Status` within max_steps,
`result.params` finite, `result.value` no higher than f(x0) where that is finite, and (as
`js.Result` documents) every accepted point finite and no higher than the one before it (with
the nonmonotone search, than the highest before it).

All objectives are branches of one function `objective(x, case)` selected by `lax.switch` on
an array argument, so each solver compiles once for every case (a compile per (solver,
objective) pair would take minutes). Each branch is also a module-level function, for a
stand-alone reproducer: `js.Solver(direction, search, max_steps=200).run(f, x0)`.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jaxsearch as js

from ..helpers import DIRECTIONS, SEARCHES, pairs

MAX_STEPS = 200
F32 = jnp.float32

# Every direction of the registry (tests/helpers.py) with its default search (None), and L-BFGS
# with every search it is paired with there.
SOLVERS = {
    **{name: (make(), None) for name, make in DIRECTIONS.items()},
    **{f"LBFGS+{s}": (DIRECTIONS[d](), SEARCHES[s]()) for d, s in pairs(["LBFGS"])},
}


def nan_region(x):
    """(a) Smooth inside the box |x - 0.5| < 0.4, NaN outside. From X0["nan_region"] the first
    trial of every solver but NewtonCG lands outside: a unit-length step along -grad leaves
    the box. (The exact Newton step of log-cosh, whose curvature vanishes away from the
    minimiser, overshoots too, but NewtonCG's truncated CG stops short of it: its first trial
    is inside, and six later trials are NaN.)"""
    u = 10 * (x - 0.5)
    inside = jnp.all(jnp.abs(x - 0.5) < 0.4)
    return jnp.where(inside, jnp.sum(jnp.logaddexp(u, -u) - jnp.log(2.0)) / 10, jnp.nan)


def cliff(x):
    """(b) A quadratic with its minimiser at x = 2 behind a wall: +Inf for x[0] >= 1."""
    return jnp.where(x[0] < 1, jnp.sum((x - 2) ** 2), jnp.inf)


def flat(x):
    """(c) Zero gradient wherever sum(x^2) > 1."""
    return jnp.minimum(jnp.sum(x**2), 1.0)


def kink(x):
    """(d) Non-smooth at the minimiser x = 1."""
    return jnp.sum(jnp.abs(x - 1))


def linear(x):
    """(e) Unbounded below, constant gradient."""
    return -jnp.sum(x)


def cubic(x):
    """(e) Unbounded below along x[0] -> -inf, curvature growing with |x[0]|."""
    return x[0] ** 3 + jnp.sum(x[1:] ** 2)


def nan_at_x0(x):
    """(f) NaN at x0 (log of a negative number)."""
    return jnp.sum(x**2) + jnp.log(x[0])


CASES = {
    "nan_region": (nan_region, [0.85, 0.6, 0.45]),
    "cliff": (cliff, [0.0, 0.0, 0.0]),
    "flat": (flat, [2.0, 2.0, 2.0]),
    "kink": (kink, [0.0, -0.5, 2.5]),
    "linear": (linear, [0.0, 0.0, 0.0]),
    "cubic": (cubic, [-0.5, 1.0, 1.0]),
    "nan_at_x0": (nan_at_x0, [-1.0, 1.0, 1.0]),
}
_BRANCHES = [fn for fn, _ in CASES.values()]


def objective(x, case):
    return lax.switch(case, _BRANCHES, x)


def run(solver_name, case_name):
    direction, search = SOLVERS[solver_name]
    solver = js.Solver(direction, search, max_steps=MAX_STEPS)
    x0 = jnp.array(CASES[case_name][1], F32)
    case = jnp.array(list(CASES).index(case_name), jnp.int32)
    return x0, solver.run(objective, x0, case, history=True)


def f_at(case_name, x):
    return float(CASES[case_name][0](jnp.asarray(x, F32)))


def check_common(solver_name, case_name, x0, result):
    """What every run must satisfy, whatever the objective."""
    status = js.Status(int(result.status))  # raises ValueError for an undefined code
    assert status != js.Status.RUNNING
    assert 0 <= int(result.num_steps) <= MAX_STEPS
    params = np.asarray(result.params)
    assert params.dtype == np.float32
    assert np.all(np.isfinite(params)), f"non-finite params {params} ({status.name})"
    f0 = f_at(case_name, x0)
    if np.isfinite(f0):
        assert np.isfinite(float(result.value)), (float(result.value), status.name)
        assert float(result.value) <= f0
    history = result.history.to_numpy()
    assert len(history["value"]) == int(result.num_steps) + 1
    # Row 0 is x0 (step 0), with f there, NaN or not.
    assert history["step"][0] == 0
    np.testing.assert_allclose(history["value"][0], f0, rtol=1e-6, equal_nan=True)
    values = history["value"][1:]  # the accepted iterates
    assert not np.any(np.isnan(values)), f"an accepted iterate has value NaN: {values}"
    assert np.all(np.isfinite(values)), f"an accepted iterate is not finite: {values}"
    # f never rises, except within the searches' rounding allowance: where the change of f is
    # lost in rounding (|change| <= epsilon C_k, C_k an average of |f| over the iterates, so
    # at most the largest |f| so far) they judge a step by its slope (Hager & Zhang 2005, 4).
    # A nonmonotone search lets f rise up to its reference value, a weighted average of the
    # values so far: never above the highest of them.
    direction, search = SOLVERS[solver_name]
    nonmonotone = isinstance(js.Solver(direction, search).linesearch, js.NonmonotoneArmijo)
    epsilon = max(1e-6, float(np.finfo(np.float32).eps) ** 0.5)
    seen = np.concatenate([[f0], values])
    scale = np.maximum.accumulate(np.abs(seen))[1:-1]
    before = np.maximum.accumulate(seen)[1:-1] if nonmonotone else values[:-1]
    increases = np.flatnonzero(values[1:] - before > epsilon * scale)
    assert increases.size == 0, (
        f"f rose at accepted steps {increases + 2}: "
        f"{[(float(values[i]), float(values[i + 1])) for i in increases[:5]]}"
    )
    return status


ALL = list(SOLVERS)


def params(names, marks=None):
    marks = marks or {}
    return [pytest.param(n, id=n, marks=marks.get(n, [])) for n in names]


# ------------------------------------------------------------------------------ (a) NaN region


@pytest.mark.parametrize("solver_name", params(ALL))
def test_nan_region(solver_name):
    x0, result = run(solver_name, "nan_region")
    check_common(solver_name, "nan_region", x0, result)
    assert np.all(np.abs(np.asarray(result.params) - 0.5) < 0.4)


# ----------------------------------------------------------------------------------- (b) cliff


@pytest.mark.parametrize("solver_name", params(ALL))
def test_cliff(solver_name):
    x0, result = run(solver_name, "cliff")
    check_common(solver_name, "cliff", x0, result)
    assert float(np.asarray(result.params)[0]) < 1


# ------------------------------------------------------------------------------------ (c) flat


@pytest.mark.parametrize("solver_name", params(ALL))
def test_flat(solver_name):
    """A zero gradient is what gtol means: a clean stop at x0, with no step."""
    x0, result = run(solver_name, "flat")
    status = check_common(solver_name, "flat", x0, result)
    assert status == js.Status.CONVERGED_GTOL
    assert int(result.num_steps) == 0
    np.testing.assert_array_equal(np.asarray(result.params), np.asarray(x0))
    assert float(result.value) == 1.0


# ------------------------------------------------------------------------------------ (d) kink


@pytest.mark.parametrize("solver_name", params(ALL))
def test_kink(solver_name):
    x0, result = run(solver_name, "kink")
    status = check_common(solver_name, "kink", x0, result)
    assert status != js.Status.NONFINITE


# ------------------------------------------------------------------------- (e) unbounded below


@pytest.mark.parametrize("case_name", ["linear", "cubic"])
@pytest.mark.parametrize("solver_name", params(ALL))
def test_unbounded_below(solver_name, case_name):
    x0, result = run(solver_name, case_name)
    status = check_common(solver_name, case_name, x0, result)
    assert not status.converged, f"{status.name} on an objective with no minimiser"
    assert status != js.Status.NONFINITE
    assert float(result.value) < f_at(case_name, x0)


# ------------------------------------------------------------------------------ (f) NaN at x0


@pytest.mark.parametrize("solver_name", params(ALL))
def test_nan_at_x0(solver_name):
    x0, result = run(solver_name, "nan_at_x0")
    status = check_common(solver_name, "nan_at_x0", x0, result)
    assert status == js.Status.NONFINITE
    assert int(result.num_steps) == 0
    assert int(result.num_fun_evals) == 1
    np.testing.assert_array_equal(np.asarray(result.params), np.asarray(x0))
    assert np.isnan(float(result.value))


def test_branches_are_what_they_claim():
    """The cases are adversarial as described (guards the test itself)."""
    assert np.isnan(f_at("nan_region", [0.05, 0.5, 0.5]))
    assert np.isinf(f_at("cliff", [1.0, 0.0, 0.0]))
    g = jax.grad(flat)(jnp.array(CASES["flat"][1], F32))
    assert float(jnp.max(jnp.abs(g))) == 0.0
    assert np.isnan(f_at("nan_at_x0", CASES["nan_at_x0"][1]))
    # nan_region: a unit-length step along -grad from x0 (the first trial of an unscaled
    # direction) leaves the box, and so does the exact Newton step.
    x0 = jnp.array(CASES["nan_region"][1], F32)
    g = jax.grad(nan_region)(x0)
    assert np.isnan(f_at("nan_region", x0 - g / jnp.linalg.norm(g)))
    h = jax.hessian(nan_region)(x0)
    assert np.isnan(f_at("nan_region", x0 - jnp.linalg.solve(h, g)))
