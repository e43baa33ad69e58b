"""The backtracking searches share one loop, `AbstractBacktracking`: Armijo's test against a
reference value R, phi(0) for `Backtracking` and `StochasticArmijo` (Nocedal & Wright,
algorithm 3.1), C_k for `NonmonotoneArmijo` (Zhang & Hager 2004). With eta = 0, C_k is
f(x_k) = phi(0), so the nonmonotone search is Armijo backtracking: the same trials, search
after search."""

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
