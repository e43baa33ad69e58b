"""Value-only trials (`AbstractLineSearch.slope_needed`, `Backtracking(slopes="first")`):
the solver evaluates f alone at the trials a search judges without their slope, and f with
its gradient once more at the trial it accepts; counts apart in `num_grad_evals`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js
from jaxsearch.testing import check_line_search

from ..problems import rosenbrock


def steep(x):
    """f = 32 x^2 (jaxopt's Armijo test problem)."""
    return 32.0 * jnp.sum(x**2)


def _solver(slopes, **kw):
    search = js.Backtracking(shrink=0.8, slopes=slopes)
    return js.Solver(js.Gradient(), search, initial_step=js.InitialStatic(1.0), **kw)


def test_trials_after_the_first_compute_no_gradient():
    """From x = 1 along d = -64 the unit step backtracks by 0.8 until Armijo's test holds:
    the same trials and step as with every slope, with 3 gradients (x0, the first trial and
    the accepted one) where every trial had one, and one evaluation more (the accepted
    trial's gradient)."""
    with jax.enable_x64(True):
        x0 = jnp.ones(1, jnp.float64)
        every = _solver("every", max_steps=1).run(steep, x0)
        first = _solver("first", max_steps=1).run(steep, x0)
        # the same trial sequence: t = 0.8^k, the first with 32 (1 - 64 t)^2 <= 32 - 1e-4 64^2 t
        t = 0.8 ** np.arange(60)
        k = int(np.argmax(32 * (1 - 64 * t) ** 2 <= 32 - 1e-4 * 64**2 * t))
        assert float(every.state.step_size) == pytest.approx(t[k], rel=1e-12)
        assert float(first.state.step_size) == float(every.state.step_size)
        np.testing.assert_allclose(first.params, every.params, rtol=1e-15)
        assert int(every.num_fun_evals) == int(every.num_grad_evals) == k + 2
        assert int(first.num_fun_evals) == k + 3
        assert int(first.num_grad_evals) == 3


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_a_run_with_value_only_trials_reaches_the_same_point(dtype):
    """L-BFGS on Rosenbrock: the same minimiser, fewer gradients than evaluations."""
    with jax.enable_x64(dtype == jnp.float64):
        x0 = jnp.array([-1.2, 1.0], dtype)
        runs = {
            slopes: js.Solver(js.LBFGS(), js.Backtracking(slopes=slopes)).run(rosenbrock, x0)
            for slopes in ("every", "first")
        }
        for result in runs.values():
            assert bool(result.success), result.message
            np.testing.assert_allclose(result.params, [1, 1], atol=1e-3)
        first = runs["first"]
        assert int(first.num_grad_evals) < int(first.num_fun_evals)


def test_the_step_loop_counts_value_only_trials_as_run_does():
    solver = _solver("first", max_steps=1)
    x = jnp.ones(1)
    state = solver.init(x)
    x, state = solver.step(steep, x, state)
    result = solver.run(steep, jnp.ones(1))
    assert int(state.num_fun_evals) == int(result.num_fun_evals)
    assert int(state.num_grad_evals) == int(result.num_grad_evals)
    np.testing.assert_allclose(x, result.params, rtol=1e-6)


def test_a_trial_lost_in_rounding_is_asked_for_again_with_its_slope():
    """A value-only trial (phi'(t) = NaN) whose change of f is within the rounding allowance
    cannot be judged on f: the search asks for the same t again, not done; given its slope
    there, it judges it on the slope (Hager & Zhang's test)."""
    search = js.Backtracking(slopes="first")
    f32 = jnp.float32
    state = search.init(f32)
    phi0, dphi0 = jnp.asarray(1.0, f32), jnp.asarray(-1e-6, f32)
    started = search.start(state, phi0, dphi0, jnp.asarray(1.0, f32), jnp.asarray(0.0, f32))
    assert bool(search.slope_needed(started))  # the first trial has its slope
    # the first trial fails on its slope; the next (t = 0.5) needs none
    second = search.update(started, started.trial, phi0 + 1e-7, jnp.asarray(1e-6, f32))
    assert not bool(second.done) and not bool(search.slope_needed(second))
    t = second.trial
    again = search.update(second, t, phi0 + 1e-8, jnp.asarray(jnp.nan, f32))
    assert not bool(again.done) and float(again.trial) == float(t)
    judged = search.update(again, t, phi0 + 1e-8, jnp.asarray(-1e-6, f32))
    assert bool(judged.done) and float(judged.step) == float(t)


def test_a_value_only_trial_outside_rounding_is_judged_on_f():
    search = js.Backtracking(slopes="first")
    f32 = jnp.float32
    phi0, dphi0 = jnp.asarray(1.0, f32), jnp.asarray(-1.0, f32)
    started = search.start(
        search.init(f32), phi0, dphi0, jnp.asarray(1.0, f32), jnp.asarray(0.0, f32)
    )
    second = search.update(started, started.trial, jnp.asarray(5.0, f32), jnp.asarray(3.0, f32))
    nan = jnp.asarray(jnp.nan, f32)
    passed = search.update(second, second.trial, jnp.asarray(0.5, f32), nan)
    assert bool(passed.done) and float(passed.step) == 0.5
    failed = search.update(second, second.trial, jnp.asarray(0.99999, f32), nan)
    assert not bool(failed.done) and float(failed.trial) == 0.25


def test_an_accepted_trial_whose_gradient_is_not_finite_is_not_taken():
    """f is finite everywhere but its gradient is NaN at x < 0.5: a value-only trial
    accepted there is evaluated with its gradient, and the step is refused (NONFINITE)."""

    @jax.custom_jvp
    def f(x):
        return jnp.sum(x**2)

    @f.defjvp
    def f_jvp(primals, tangents):
        (x,), (dx,) = primals, tangents
        g = jnp.where(x < 0.5, jnp.nan, 2 * x)
        return f(x), jnp.sum(g * dx)

    solver = js.Solver(
        js.Gradient(),
        js.Backtracking(slopes="first", shrink=0.5),
        initial_step=js.InitialStatic(1.0),
        max_steps=1,
    )
    result = solver.run(f, jnp.ones(1))  # trials 1 (x = -1), 0.5 (x = 0): f(0) < f(1)
    assert float(result.state.step_size) == 0.0
    assert js.SearchEnd(int(result.state.search_end)) is js.SearchEnd.NONFINITE
    np.testing.assert_array_equal(result.params, jnp.ones(1))


def test_under_vmap_every_trial_has_its_slope():
    """A branch under vmap computes both sides: the program gives every trial its slope."""
    x0 = jnp.stack([jnp.ones(1), 2 * jnp.ones(1)])
    batch = jax.vmap(lambda x: _solver("first", max_steps=1).run(steep, x))(x0)
    np.testing.assert_array_equal(batch.num_grad_evals, batch.num_fun_evals)


def test_slopes_is_checked():
    with pytest.raises(ValueError, match="slopes must be 'every'"):
        js.Backtracking(slopes="some")


@pytest.mark.parametrize("condition", ["armijo", "goldstein"])
def test_the_kit_drives_value_only_trials(condition):
    check_line_search(js.Backtracking(slopes="first", condition=condition))


def test_the_kit_catches_a_search_that_cannot_judge_on_f_alone():
    """A search that says its later trials need no slope but rejects every trial without
    one (here: Backtracking told that no trial came without its slope)."""

    class Unjudging(js.Backtracking):
        def value_only_trial(self, search, dphi):
            return jnp.array(False)

    with pytest.raises(AssertionError, match="Unjudging .* slope_needed") as info:
        check_line_search(Unjudging(slopes="first"))
    assert len(str(info.value)) < 800


def test_wolfe_conditions_refuse_value_only_trials():
    with pytest.raises(ValueError, match="cannot do"):
        js.Backtracking(slopes="first", condition="wolfe")
