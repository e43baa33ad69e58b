"""What bounds a step: a scale-free first trial, the static cap, the trial budget."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js

from ..helpers import Endless


def scaled_parabola(x, scale):
    return scale * jnp.sum((x - 1) ** 2)


SCALES = [1e-50, 1.0, 1e50]
METHODS = {
    "bfgs": js.BFGS(),
    "cg": js.NonlinearCG(),
    "lbfgs": js.LBFGS(),
    "newton-cg": js.NewtonCG(),
}


@pytest.mark.parametrize("method", list(METHODS))
def test_initial_step_scaling(method, compiles):
    """scipy's test_initial_step_scaling: f = s (x - 1)^2 from x0 = -1 for s = 1e-50, 1, 1e50,
    gtol = 1e-8 s: converged at 1 within 3 steps, and multiplying f by a constant changes no
    iterate (the searches have no absolute cap on the step size): the same evaluations, and
    values that scale as s. (gtol and s are arrays: the three runs share one compiled
    program.)"""
    with jax.enable_x64(True):
        runs = {}
        for scale in SCALES:
            solver = js.Solver(METHODS[method], gtol=jnp.asarray(scale * 1e-8), ftol=0.0)
            args = (jnp.array([-1.0]), jnp.asarray(scale))
            runs[scale] = result = solver.run(scaled_parabola, *args, history=True)
            if scale == SCALES[0]:
                compiles.reset()
            assert js.Status(int(result.status)) == js.Status.CONVERGED_GTOL, result.message
            np.testing.assert_allclose(result.params, [1.0], rtol=1e-10)
            assert int(result.num_steps) <= 3, (scale, int(result.num_steps))
        assert compiles.count == 0
        reference = runs[1.0].history.to_numpy()
        for scale in (1e-50, 1e50):
            other = runs[scale].history.to_numpy()
            np.testing.assert_array_equal(other["num_fun_evals"], reference["num_fun_evals"])
            # f at every iterate, divided by the scale: the same iterates
            np.testing.assert_allclose(
                other["value"] / scale, reference["value"], rtol=1e-10, atol=1e-20
            )


def test_static_cap_below_the_resolution_takes_no_step():
    """float16 x = 200 (spacing 0.125) with |d| ~ 0.04: no step below 0.7 changes x, and the
    static cap is 1e-3. No trial above it is evaluated, no step is taken, and the run says
    STALLED (every step the search may take rounds away), not success."""
    x0 = jnp.array([200.0], jnp.float16)
    for search in [js.Backtracking(max_step_size=1e-3), js.Zoom(max_step_size=1e-3)]:
        solver = js.Solver(js.Gradient(), search, max_steps=5)
        result = solver.run(scaled_parabola, x0, jnp.asarray(1e-4, jnp.float16))
        assert js.Status(int(result.status)) == js.Status.STALLED, result.message
        np.testing.assert_array_equal(result.params, x0)
        assert int(result.num_fun_evals) == 1  # f at x0 only


def test_a_search_that_never_ends_is_cut_off_at_its_trial_budget():
    """The solver's inner loop is bounded by the search's `max_trials`: a search that never
    sets `done` ends its step there, with no step, as LINESEARCH_FAILED (it used to hang)."""
    solver = js.Solver(js.Gradient(), Endless(), max_steps=3)
    x0 = jnp.array([3.0, -2.0])
    result = solver.run(scaled_parabola, x0, jnp.asarray(1.0))
    assert js.Status(int(result.status)) == js.Status.LINESEARCH_FAILED
    assert int(result.num_fun_evals) == 1 + 7
    np.testing.assert_array_equal(result.params, x0)
    params, state = solver.step(scaled_parabola, x0, solver.init(x0), jnp.asarray(1.0))
    assert js.Status(int(state.status)) == js.Status.LINESEARCH_FAILED
    np.testing.assert_array_equal(params, x0)
