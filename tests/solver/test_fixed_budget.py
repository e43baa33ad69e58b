"""Fixed budgets: `throw="failures"` raises on a real failure (LINESEARCH_FAILED, NONFINITE,
STALLED) while a run that uses up `max_steps` returns MAX_STEPS as a normal end."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js

from ..problems import nan_away_from, rosenbrock

X0 = jnp.array([-1.2, 1.0], jnp.float32)


@pytest.fixture(scope="module")
def budget():
    return js.Solver(max_steps=5, throw="failures")


def test_a_run_to_its_budget_is_a_normal_end(budget):
    result = budget.run(rosenbrock, X0)
    assert result.status == js.Status.MAX_STEPS and int(result.num_steps) == 5
    # The same run as without throw: nothing but the error check differs.
    plain = js.Solver(max_steps=5).run(rosenbrock, X0)
    np.testing.assert_array_equal(result.params, plain.params)
    assert int(result.num_fun_evals) == int(plain.num_fun_evals)
    with pytest.raises(eqx.EquinoxRuntimeError, match="MAX_STEPS"):
        js.Solver(max_steps=5, throw=True).run(rosenbrock, X0)  # throw=True: still an error


def test_a_budgeted_run_still_raises_on_a_failure(budget):
    with pytest.raises(eqx.EquinoxRuntimeError, match="NONFINITE"):
        budget.run(lambda x: jnp.sum(x) * jnp.nan, X0)
    with pytest.raises(eqx.EquinoxRuntimeError, match="LINESEARCH_FAILED|STALLED"):
        budget.run(nan_away_from, X0, X0)


def test_a_stalled_budgeted_run_raises():
    """A run without progress for `stall_steps` steps ends STALLED: a failure, whatever the
    budget. Fixed steps of 2^-10 on sum |x| from 2^-11 jump between x and -x: f and the
    gradient's norm never fall below their first values."""
    solver = js.Solver(js.Gradient(), js.FixedStep(2.0**-10), stall_steps=3, throw="failures")
    x0 = jnp.full(2, 2.0**-11, jnp.float32)
    plain = js.Solver(js.Gradient(), js.FixedStep(2.0**-10), stall_steps=3)
    assert plain.run(lambda x: jnp.sum(jnp.abs(x)), x0).status == js.Status.STALLED
    with pytest.raises(eqx.EquinoxRuntimeError, match="STALLED"):
        solver.run(lambda x: jnp.sum(jnp.abs(x)), x0)


def test_a_budgeted_step_raises_as_throw_true(budget):
    state = budget.init(X0)
    with pytest.raises(eqx.EquinoxRuntimeError, match="LINESEARCH_FAILED|STALLED"):
        budget.step(nan_away_from, X0, state, X0)
    x, state = budget.step(rosenbrock, X0, state)
    assert state.status == js.Status.RUNNING


def test_budgeted_runs_share_one_compiled_program(compiles):
    """`throw` is static and hashed: a second, equal solver from a new start compiles
    nothing more."""
    js.Solver(max_steps=4, throw="failures").run(rosenbrock, X0)
    x1 = jax.block_until_ready(X0 + 0.5)
    compiles.reset()
    result = js.Solver(max_steps=4, throw="failures").run(rosenbrock, x1)
    assert compiles.count == 0
    assert result.status == js.Status.MAX_STEPS


@pytest.mark.parametrize("throw", ["yes", "Failures", ""])
def test_throw_takes_a_bool_or_failures(throw):
    with pytest.raises(ValueError, match='throw must be True, False or "failures"'):
        js.Solver(throw=throw)
