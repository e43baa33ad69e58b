"""The backtracking searches share one loop, `AbstractBacktracking`: Armijo's test against a
reference value R, phi(0) for `Backtracking` and `StochasticArmijo` (Nocedal & Wright,
algorithm 3.1), C_k for `NonmonotoneArmijo` (Zhang & Hager 2004). With eta = 0, C_k is
f(x_k) = phi(0), so the nonmonotone search is Armijo backtracking: the same trials, search
after search."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js
from jaxsearch._linesearch._backtracking import AbstractBacktracking


def test_the_backtracking_searches_share_the_base_and_its_loop():
    for search in (js.Backtracking(), js.StochasticArmijo(), js.NonmonotoneArmijo()):
        assert isinstance(search, AbstractBacktracking)
        assert type(search).update is AbstractBacktracking.update
    for search in (js.Zoom(), js.MoreThuente(), js.HagerZhang(), js.FixedStep(1.0)):
        assert not isinstance(search, AbstractBacktracking)


def rosenbrock(x):
    return jnp.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def quartic(x):
    return jnp.sum((x - 2.0) ** 4) + jnp.sum(jnp.cosh(x))


def quadratic(x):
    return 0.5 * jnp.sum(jnp.logspace(0, 3, x.size, dtype=x.dtype) * (x - 1) ** 2)


PROBLEMS = {
    "rosenbrock": (rosenbrock, [-1.2, 1.0, -1.2, 1.0]),
    "quartic": (quartic, [0.0, 3.0, -1.0]),
    "quadratic": (quadratic, [0.0] * 6),
}


def trials_along_steepest_descent(search, fn, x0, dtype, searches=12, guess=3.0):
    """Every trial of `searches` searches in a row along -g, as the solver drives them: the
    state between searches carried by `finish`, phi(0) the value at the point reached."""
    value_and_grad = jax.jit(jax.value_and_grad(fn))
    x = jnp.asarray(x0, dtype)
    state, trials = search.init(dtype), []
    for _ in range(searches):
        f, g = value_and_grad(x)
        d = -g
        record = search.start(state, f, g @ d, jnp.asarray(guess, dtype), jnp.zeros((), dtype))
        while not bool(record.done):
            t = record.trial
            trials.append(t)
            ft, gt = value_and_grad(x + t * d)
            record = search.update(record, t, ft, gt @ d)
        state = search.finish(state, record)
        x = x + record.step * d
    return np.asarray(trials), x


@pytest.mark.parametrize("name", list(PROBLEMS))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_nonmonotone_search_with_eta_zero_takes_backtrackings_trials(name, dtype):
    fn, x0 = PROBLEMS[name]
    with jax.enable_x64(dtype == "float64"):
        ours, x_ours = trials_along_steepest_descent(js.NonmonotoneArmijo(eta=0.0), fn, x0, dtype)
        armijo, x_armijo = trials_along_steepest_descent(
            js.Backtracking(epsilon=0.0), fn, x0, dtype
        )
    assert len(ours) > 12  # some searches backtrack
    np.testing.assert_array_equal(ours, armijo)
    np.testing.assert_array_equal(x_ours, x_armijo)


@pytest.mark.parametrize("name", list(PROBLEMS))
@pytest.mark.parametrize("direction", [js.LBFGS, js.BarzilaiBorwein])
def test_nonmonotone_runs_with_eta_zero_are_backtrackings(name, direction):
    fn, x0 = PROBLEMS[name]
    with jax.enable_x64(True):
        x0 = jnp.asarray(x0, jnp.float64)
        ours = js.Solver(direction(), js.NonmonotoneArmijo(eta=0.0), max_steps=200).run(fn, x0)
        armijo = js.Solver(direction(), js.Backtracking(epsilon=0.0), max_steps=200).run(fn, x0)
    np.testing.assert_array_equal(ours.params, armijo.params)
    assert int(ours.num_steps) == int(armijo.num_steps)
    assert int(ours.num_fun_evals) == int(armijo.num_fun_evals)


# Backtracking's conditions (jaxopt's `condition`), each against a NumPy transcription of its
# textbook inequality (Nocedal & Wright, 2nd ed., eqs. 3.4, 3.11, 3.6, 3.7).
CONDITIONS = ("armijo", "goldstein", "wolfe", "strong-wolfe")


def textbook(condition, phi0, dphi0, t, phi, dphi, c1, c2):
    armijo = phi <= phi0 + c1 * t * dphi0
    if condition == "goldstein":
        return armijo & (phi >= phi0 + (1 - c1) * t * dphi0)
    if condition == "wolfe":
        return armijo & (dphi >= c2 * dphi0)
    if condition == "strong-wolfe":
        return armijo & (np.abs(dphi) <= c2 * np.abs(dphi0))
    return armijo


LINES_1D = {
    "quadratic": lambda t: ((t - 2) ** 2 - 4, 2 * (t - 2)),
    "quartic": lambda t: ((t - 0.7) ** 4 - 0.7**4 - t, 4 * (t - 0.7) ** 3 - 1),
    "wiggly": lambda t: (0.5 * t**2 - np.sin(3 * t), t - 3 * np.cos(3 * t)),
}


def judged(search, line, t, dtype):
    """Whether `search` accepts the single trial t on `line` (its first trial is t)."""
    c = lambda v: jnp.asarray(np.asarray(v, np.float64).astype(dtype))  # noqa: E731
    phi0, dphi0 = line(0.0)
    record = search.start(search.init(dtype), c(phi0), c(dphi0), c(t), c(0.0))
    assert float(record.trial) == float(c(t))
    phi, dphi = line(float(c(t)))
    record = search.update(record, record.trial, c(phi), c(dphi))
    return bool(record.success)


@pytest.mark.parametrize("condition", CONDITIONS)
@pytest.mark.parametrize("line", list(LINES_1D))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_each_condition_accepts_exactly_what_the_textbook_inequality_accepts(
    condition, line, dtype
):
    c1, c2 = (0.2, 0.6) if condition != "armijo" else (0.3, 0.9)
    search = js.Backtracking(condition=condition, c1=c1, c2=c2, epsilon=0.0, max_trials=1)
    fn = LINES_1D[line]
    with jax.enable_x64(dtype == "float64"):
        verdicts, expected = [], []
        for t in np.linspace(0.01, 3.0, 61):
            verdicts.append(judged(search, fn, t, dtype))
            cast = lambda v: np.asarray(v, np.float64).astype(dtype)  # noqa: E731
            t_ = cast(t)
            phi0, dphi0 = (cast(v) for v in fn(0.0))
            phi, dphi = (cast(v) for v in fn(float(t_)))
            expected.append(bool(textbook(condition, phi0, dphi0, t_, phi, dphi, c1, c2)))
    assert verdicts == expected
    assert any(expected) and not all(expected)  # the grid crosses the condition's edges


@pytest.mark.parametrize("condition", CONDITIONS)
def test_armijo_is_the_weakest_condition_and_the_default(condition):
    assert js.Backtracking().condition == "armijo"
    fn = LINES_1D["wiggly"]
    with jax.enable_x64(True):
        for t in np.linspace(0.01, 3.0, 31):
            if judged(js.Backtracking(condition=condition, epsilon=0.0), fn, t, "float64"):
                assert judged(js.Backtracking(epsilon=0.0), fn, t, "float64")


def test_where_values_are_lost_in_rounding_goldstein_tests_slopes():
    """phi = phi(0) + tiny changes: every change of f is within epsilon C, so the bounds are
    (1 - 2 c1) phi'(0) <= phi'(t) <= (2 c1 - 1) phi'(0), as they read for a quadratic."""
    scale = 1e-12
    line = lambda t: (1.0 + scale * ((t - 1) ** 2 - 1), scale * 2 * (t - 1))  # noqa: E731
    search = js.Backtracking(condition="goldstein", c1=0.25, max_trials=1)
    with jax.enable_x64(True):
        for t in np.linspace(0.05, 2.0, 40):
            slope = line(t)[1]
            expected = 0.5 * (-2 * scale) <= slope <= -0.5 * (-2 * scale)
            assert judged(search, line, t, "float64") == expected, t


@pytest.mark.parametrize("condition", ["wolfe", "strong-wolfe"])
def test_wolfe_curvature_is_on_slopes_also_where_values_are_lost(condition):
    scale = 1e-12
    line = lambda t: (1.0 + scale * ((t - 1) ** 2 - 1), scale * 2 * (t - 1))  # noqa: E731
    search = js.Backtracking(condition=condition, c1=0.25, c2=0.6, max_trials=1)
    with jax.enable_x64(True):
        for t in np.linspace(0.05, 2.0, 40):
            dphi0, dphi = -2 * scale, line(t)[1]
            decrease = dphi <= -0.5 * dphi0
            curvature = dphi >= 0.6 * dphi0 if condition == "wolfe" else abs(dphi) <= -0.6 * dphi0
            assert judged(search, line, t, "float64") == (decrease and curvature), t


def test_a_backtracking_wolfe_search_only_shrinks_where_zoom_expands():
    """phi = (t - 100)^2: every trial up to 1 is too short for the curvature condition and
    (with c1 = 1/4) for Goldstein's lower bound, so backtracking from 1 takes no step, where
    Zoom and MoreThuente expand and succeed (the docstring's pointer to them)."""
    from jaxsearch.testing import drive

    line = lambda t: ((t - 100) ** 2, 2 * (t - 100))  # noqa: E731
    line.__name__ = "far"
    with jax.enable_x64(True):
        for condition in ("wolfe", "strong-wolfe", "goldstein"):
            search = js.Backtracking(condition=condition, c1=0.25)
            _, _, record = drive(search, line, np.float64)
            assert float(record.step) == 0 and not bool(record.success)
        for bracketing in (js.Zoom(), js.MoreThuente()):
            _, _, record = drive(bracketing, line, np.float64)
            assert bool(record.success) and float(record.step) > 1


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"condition": "wolf"}, "condition must be one of 'armijo', 'goldstein', 'wolfe'"),
        ({"condition": "goldstein", "c1": 0.5}, "c1 must lie in (0, 1/2)"),
        ({"condition": "goldstein", "c1": 0.7}, "c1 must lie in (0, 1/2)"),
        ({"condition": "wolfe", "c1": 0.5, "c2": 0.4}, "c2 must lie in (c1, 1)"),
        ({"condition": "strong-wolfe", "c2": 1.0}, "c2 must lie in (c1, 1)"),
    ],
)
def test_bad_conditions_and_constants_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        js.Backtracking(**kwargs)


def test_c2_is_not_checked_where_it_is_not_used():
    js.Backtracking(c1=0.95)  # Armijo's test with a c1 above the default c2
    js.Backtracking(condition="goldstein", c1=0.4, c2=0.1)


@pytest.mark.parametrize("condition", CONDITIONS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_run_with_each_condition_converges(condition, dtype):
    """On a quadratic (condition number 1000). (On Rosenbrock from (-1.2, 1), L-BFGS meets a
    step where its unit step is too short for the curvature condition and Goldstein's lower
    bound, and a backtracking search, which only shrinks, takes no step there.)"""
    with jax.enable_x64(dtype == "float64"):
        solver = js.Solver(js.LBFGS(), js.Backtracking(condition=condition), max_steps=300)
        x0 = jnp.zeros(6, dtype)
        result = solver.run(quadratic, x0)
        assert bool(result.success), result.message
        np.testing.assert_allclose(result.params, np.ones(6), atol=1e-3)


@pytest.mark.parametrize("condition", CONDITIONS)
def test_each_condition_passes_the_conformance_kit(condition):
    from jaxsearch.testing import check_line_search

    check_line_search(js.Backtracking(condition=condition))
