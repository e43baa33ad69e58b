"""Steps below the precision of the params are never tried: they would change nothing."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js
from jaxsearch._misc import tree_min_step

from ..problems import rosenbrock


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16, jnp.float32])
def test_steps_below_min_step_change_nothing(dtype):
    key_x, key_d, key_s = jax.random.split(jax.random.key(0), 3)
    x = {
        "a": (jax.random.normal(key_x, (200,)) * 10.0).astype(dtype),
        "b": jnp.array([1.0, 2.0, 0.5, -4.0], dtype),  # powers of two: smaller spacing below
    }
    d = {
        "a": jax.random.normal(key_d, (200,)).astype(dtype),
        "b": jnp.array([-1.0, -3.0, 0.25, 7.0], dtype),
    }
    t_min = tree_min_step(x, d, jnp.float32)
    assert 0 < float(t_min) < np.inf
    for fraction in np.linspace(0.01, 0.999, 25):
        t = (t_min * fraction).astype(jnp.float32)
        moved = js._misc.tree_add_scaled(x, t, d)
        assert all(
            bool(jnp.all(m == x0))
            for m, x0 in zip(jax.tree.leaves(moved), jax.tree.leaves(x), strict=True)
        )
    # ... and the bound is not vacuous: 8 times it moves some coordinate.
    moved = js._misc.tree_add_scaled(x, (8 * t_min).astype(jnp.float32), d)
    assert not all(
        bool(jnp.all(m == x0))
        for m, x0 in zip(jax.tree.leaves(moved), jax.tree.leaves(x), strict=True)
    )


@pytest.mark.parametrize("search", [js.Zoom(), js.Backtracking()], ids=["zoom", "backtracking"])
@pytest.mark.parametrize("guess", [1e-9, 1.0])
def test_searches_never_try_below_min_step(search, guess):
    """phi that only increases: both searches shrink toward 0 and must stop at min_step."""
    dtype = jnp.float32
    min_step = jnp.asarray(1e-3, dtype)
    s = search.start(
        search.init(dtype),
        jnp.zeros((), dtype),
        -jnp.ones((), dtype),
        jnp.asarray(guess, dtype),
        min_step,
    )
    trials = []
    while not bool(s.done):
        t = s.trial
        trials.append(float(t))
        s = search.update(s, t, (t * t + t).astype(dtype), (2 * t + 1).astype(dtype))
    assert min(trials) >= float(min_step)
    assert float(s.step) == 0.0
    assert float(s.trial) < float(min_step)  # it gave up because of the resolution
    assert len(trials) < 25


@pytest.mark.parametrize("search", [js.Zoom(), js.Backtracking()], ids=["zoom", "backtracking"])
def test_bfloat16_rosenbrock_stalls_cheaply(search):
    """On bfloat16 Rosenbrock the params' grid stops progress in the valley; the solver says
    STALLED after a few evaluations instead of spending a full failing search."""
    result = js.Solver(js.LBFGS(), search, max_steps=100).run(
        rosenbrock, jnp.array([-1.2, 1.0], jnp.bfloat16)
    )
    assert result.status == js.Status.STALLED, result.message
    assert int(result.num_fun_evals) <= 3 * int(result.num_steps) + 4


def test_zero_params_with_zero_direction_entries():
    """spacing(0) is subnormal and may flush to zero; a zero direction entry must not turn
    that into 0/0."""
    x = jnp.array([0.0, 1.0, 0.0], jnp.float32)
    d = jnp.array([0.0, -1.0, 0.5], jnp.float32)
    t_min = tree_min_step(x, d, jnp.float32)
    assert bool(jnp.isfinite(t_min)) and float(t_min) >= 0.0
    assert float(tree_min_step(x, jnp.zeros(3, jnp.float32), jnp.float32)) == np.inf


def test_run_through_an_exactly_zero_parameter():
    """f = x0^2 + (x1 - 1)^2: the first Newton-like step lands x0 on exactly 0."""

    def fn(x):
        return x[0] ** 2 + (x[1] - 1.0) ** 2

    with jax.enable_x64(True):
        result = js.Solver(js.BFGS(), js.Zoom(), gtol=1e-8).run(fn, jnp.array([0.0, 3.0]))
        assert result.status == js.Status.CONVERGED_GTOL, result.message
