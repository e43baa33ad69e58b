"""What the solver makes visible of a method that misbehaves, and of how each search ended
(issue 50): a direction that is not a descent direction is counted, and where that is most
of the time the result says so (`Result.mostly_replaced`, `message`); a search's trial beyond
its cap is refused, never evaluated; each step records how its search ended
(`js.SearchEnd`), and a run that ends `LINESEARCH_FAILED` says why; a stochastic search's
failure does not end `run`."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js
import jaxsearch.internal as jsi

from ..problems import rosenbrock


class Uphill(js.AbstractMemorylessDirection):
    """A broken direction: d = +grad f, an ascent direction at every point."""

    supports_bounds = False

    def init(self, params, dtype):
        return None

    def compute(self, state, info):
        return info.grad, jnp.array(False), state, jsi.no_limit(info.dtype)


class Doubling(js.Backtracking):
    """A broken search: a trial with decrease is doubled, twice, without the cap."""

    def update(self, search, t, phi, dphi):
        decrease = jnp.isfinite(phi) & (phi < search.phi0)
        grow = decrease & (search.num_trials < 2)
        return jsi.after_trial(
            search,
            trial=jnp.where(grow, 2 * t, t),
            done=~grow,
            step=jnp.where(decrease & ~grow, t, 0),
            success=decrease & ~grow,
        )


def quadratic(x):
    return jnp.sum((x - 3.0) ** 2)


X0 = jnp.array([-1.2, 1.0])


REPLACED = "The direction was not a descent direction at {} of {} steps"


def test_an_uphill_direction_is_counted_recorded_and_said_in_the_result():
    """Every step's direction replaced by steepest descent: counted in the state and the
    result, cumulative in the history, and said by `mostly_replaced` (inside `jax.jit` too)
    and by the message (one per problem of a batch); no warning, no thread."""
    solver = js.Solver(Uphill(), js.Backtracking(), max_steps=20)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        result = solver.run(rosenbrock, X0, history=True)
    assert int(result.num_replaced) == int(result.num_steps) == 20
    # row 0 is x0, before any direction
    np.testing.assert_array_equal(result.history.to_numpy()["num_replaced"], np.arange(21))
    assert bool(result.mostly_replaced)
    assert result.message.startswith(js.Status.MAX_STEPS.message)
    assert REPLACED.format(20, 20) in result.message
    assert "jaxsearch.testing.check_direction" in result.message
    assert bool(jax.jit(lambda x: solver.run(rosenbrock, x).mostly_replaced)(X0))
    batch = jax.vmap(lambda x: solver.run(rosenbrock, x))(jnp.stack([X0, 2 * X0]))
    assert batch.mostly_replaced.tolist() == [True, True]
    assert [REPLACED.format(20, 20) in m for m in batch.message] == [True, True]


@pytest.mark.parametrize("x0", [X0, jnp.tile(X0, 5)], ids=["2-D", "10-D"])
def test_a_built_in_direction_on_rosenbrock_is_not_mostly_replaced(x0):
    result = js.Solver(js.LBFGS()).run(rosenbrock, x0, history=True)
    assert int(result.num_replaced) == 0
    assert not np.any(result.history.to_numpy()["num_replaced"])
    assert not bool(result.mostly_replaced)
    assert "not a descent direction" not in result.message


def test_mostly_replaced_is_two_steps_or_more_and_a_quarter_of_them():
    """Uphill at every 4th step (read from the direction's own step counter): 1 of 7 steps
    replaced is only counted, 2 of 8 is said."""

    class Sometimes(js.AbstractDirection):
        supports_bounds = False

        def init(self, params, dtype):
            return jnp.zeros((), jnp.int32)

        def compute(self, state, info):
            sign = jnp.where(state % 4 == 3, 1.0, -1.0).astype(info.dtype)
            d = jax.tree.map(lambda g: (sign * g).astype(g.dtype), info.grad)
            return d, jnp.array(False), state + 1, jsi.no_limit(info.dtype)

        def update(self, state, s, y, dtype, accept=True):
            return state

        def reset(self, state):
            return state

        def gradient_replaced(self, state):
            return state

    for steps, replaced in ((7, 1), (8, 2)):
        solver = js.Solver(Sometimes(), js.Backtracking(), max_steps=steps)
        result = solver.run(rosenbrock, X0)
        assert (int(result.num_replaced), int(result.num_steps)) == (replaced, steps)
        assert bool(result.mostly_replaced) is (replaced == 2)
        assert (REPLACED.format(replaced, steps) in result.message) is (replaced == 2)


@pytest.mark.parametrize("cap", ["static", "box"])
def test_a_trial_beyond_the_cap_is_refused(cap):
    """The broken search would step to 4 t; the solver refuses the trial beyond its cap
    (never evaluated), takes no step, and says so in the record and the message."""
    if cap == "static":
        solver = js.Solver(js.Gradient(), Doubling(max_step_size=0.05), max_steps=5)
        bounds = None
    else:  # the box's edge along d
        solver = js.Solver(js.Gradient(), Doubling(), max_steps=5)
        bounds = (jnp.full(2, -10.0), jnp.full(2, 1.3))
    x = jnp.array([1.0, 1.0])
    state = solver.init(x)
    new, state = solver.step(quadratic, x, state, bounds=bounds)
    new, state = solver.step(quadratic, new, state, bounds=bounds)
    assert float(state.step_size) == 0.0
    assert js.SearchEnd(int(state.search_end)) is js.SearchEnd.ABOVE_CAP
    assert js.Status(int(state.status)) is js.Status.LINESEARCH_FAILED
    np.testing.assert_array_equal(new, x)  # the first search (its first trial) was refused too
    result = solver.run(quadratic, x, bounds=bounds)
    assert "beyond its cap" in result.message and len(result.message) < 800


def test_a_search_within_its_cap_is_never_refused():
    solver = js.Solver(js.Gradient(), js.Backtracking(max_step_size=0.05), max_steps=30)
    result = solver.run(quadratic, jnp.array([1.0, 1.0]), history=True)
    ends = result.history.to_numpy()["search_end"]
    assert not np.any(ends == js.SearchEnd.ABOVE_CAP)
    assert np.all(result.history.to_numpy()["step_size"] <= 0.05)


def test_each_step_records_how_its_search_ended():
    """Success where a search's conditions held; no step by its trial budget (a cap far too
    large for f, two trials) names the budget in the message."""
    result = js.Solver(js.LBFGS(), js.Zoom(), max_steps=50).run(rosenbrock, X0, history=True)
    ends = result.history.to_numpy()["search_end"]
    assert ends[0] == js.SearchEnd.NOT_SEARCHED  # x0: no search
    assert np.all(ends[1:] == js.SearchEnd.SUCCESS)
    steep = js.Solver(
        js.Gradient(), js.Backtracking(max_trials=2), initial_step=js.InitialStatic(1e6)
    )
    failed = steep.run(quadratic, X0, history=True)
    assert js.Status(failed.status) is js.Status.LINESEARCH_FAILED
    assert js.SearchEnd(int(failed.state.search_end)) is js.SearchEnd.TRIAL_BUDGET
    assert "used its max_trials trials" in failed.message


def test_a_search_that_ends_on_values_that_are_not_finite_says_so():
    """f is NaN for x > 1; from 0 every trial of a search with a large fixed first step
    lands there: the search's cause is NONFINITE, named in the message."""

    def cliff(x):
        return jnp.where(x[0] > 1.0, jnp.nan, (x[0] - 3.0) ** 2)

    solver = js.Solver(js.Gradient(), js.Backtracking(max_trials=2, shrink=0.9))
    result = solver.run(cliff, jnp.zeros(1), history=True)
    assert js.SearchEnd(int(result.state.search_end)) is js.SearchEnd.NONFINITE
    assert js.Status(result.status) is js.Status.LINESEARCH_FAILED
    assert "not finite" in result.message


def test_search_end_orders_its_rules():
    """The pure rule `search_end`: a step with and without the search's conditions, and
    each cause of no step."""
    from jaxsearch._stopping import search_end

    def state(done, step, success, trial=0.5, min_step=0.0):
        f32 = jnp.float32
        return jsi.SearchState(
            trial=jnp.asarray(trial, f32),
            done=jnp.asarray(done),
            step=jnp.asarray(step, f32),
            success=jnp.asarray(success),
            num_trials=jnp.asarray(3, jnp.int32),
            min_step=jnp.asarray(min_step, f32),
            max_step=jnp.asarray(jnp.inf, f32),
        )

    no, yes = jnp.array(False), jnp.array(True)
    cases = [
        ((state(True, 0.5, True), no, no, None, yes), js.SearchEnd.SUCCESS),
        ((state(True, 0.5, False), no, no, None, yes), js.SearchEnd.FALLBACK),
        ((state(True, 0.0, False), yes, no, None, yes), js.SearchEnd.ABOVE_CAP),
        ((state(False, 0.0, False), no, no, yes, yes), js.SearchEnd.OUT_OF_EVALS),
        ((state(True, 0.0, False), no, yes, None, no), js.SearchEnd.NONFINITE),
        ((state(False, 0.0, False), no, yes, None, yes), js.SearchEnd.TRIAL_BUDGET),
        ((state(True, 0.0, False, 1e-9, 1e-8), no, no, None, yes), js.SearchEnd.BELOW_RESOLUTION),
        ((state(True, 0.0, False), no, no, None, yes), js.SearchEnd.GAVE_UP),
    ]
    for arguments, expected in cases:
        assert js.SearchEnd(int(search_end(*arguments))) is expected, expected


def _shifted(x, s):
    return 1e5 * jnp.sum((x - s) ** 2) / 2


def test_a_failed_stochastic_search_does_not_end_run():
    """StochasticArmijo's failures carry a shrunk step on (its method): its first search
    fails at f = 1e5 |x - s|^2 / 2, and `run` goes on as a loop of `step`s does, to the
    same values, instead of stopping LINESEARCH_FAILED at step 1."""
    s = jnp.arange(8.0)
    solver = js.Solver(js.Gradient(), js.StochasticArmijo(), max_steps=60)
    result = solver.run(_shifted, jnp.zeros(8), s, history=True)
    rows = result.history.to_numpy()
    assert js.SearchEnd(int(rows["search_end"][1])) is js.SearchEnd.TRIAL_BUDGET  # step 1
    assert rows["step_size"][1] == 0 and rows["step_size"][2] > 0
    assert bool(result.success), result.message
    assert float(result.value) < 1e-3 * float(_shifted(jnp.zeros(8), s))
    x, state = jnp.zeros(8), solver.init(jnp.zeros(8))
    values = []
    for _ in range(5):
        x, state = solver.step(_shifted, x, state, s)
        values.append(float(state.value))
    np.testing.assert_allclose(rows["value"][1:6], values, rtol=1e-5)


def test_a_deterministic_search_failure_still_ends_run():
    steep = js.Solver(
        js.Gradient(), js.Backtracking(max_trials=2), initial_step=js.InitialStatic(1e6)
    )
    result = steep.run(quadratic, X0)
    assert int(result.num_steps) == 1
    assert js.Status(result.status) is js.Status.LINESEARCH_FAILED


def test_search_end_is_part_of_a_resumable_state():
    """The new fields resume: a run in two halves equals one run."""
    solver = js.Solver(js.LBFGS(), max_steps=10)
    whole = solver.run(rosenbrock, X0)
    half = js.Solver(js.LBFGS(), max_steps=5)
    first = half.run(rosenbrock, X0)
    second = half.run(rosenbrock, first.iterate, state=first.state)
    for name in ("num_fun_evals", "num_grad_evals", "num_replaced", "search_end"):
        assert int(getattr(second.state, name)) == int(getattr(whole.state, name)), name
