"""FixedStep: exactly t = learning_rate, one evaluation per step, never a non-finite point."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js

from ..problems import rosenbrock


def test_takes_exactly_the_learning_rate_with_one_evaluation_per_step():
    solver = js.Solver(js.Gradient(), js.FixedStep(1e-3), max_steps=100)
    with jax.enable_x64(True):
        x = jnp.array([-1.2, 1.0])
        state = solver.init(x)
        for k in range(1, 6):
            expected = x - 1e-3 * jax.grad(rosenbrock)(x)
            x, state = solver.step(rosenbrock, x, state)
            np.testing.assert_allclose(x, expected, rtol=1e-14)
            assert int(state.num_fun_evals) == k + 1  # one base evaluation, then one per step
        result = solver.run(rosenbrock, jnp.array([-1.2, 1.0]))
        assert result.status == js.Status.MAX_STEPS
        assert int(result.num_fun_evals) == 101
        assert float(result.value) < float(rosenbrock(jnp.array([-1.2, 1.0])))


def test_divergence_stops_before_a_nonfinite_point():
    """Too large a rate makes f grow (no decrease test) until it overflows; the non-finite
    point is never taken."""
    result = js.Solver(js.Gradient(), js.FixedStep(1.0), max_steps=50).run(
        rosenbrock, jnp.array([-1.2, 1.0])
    )
    assert result.status == js.Status.LINESEARCH_FAILED, result.message
    assert bool(jnp.all(jnp.isfinite(result.params)))
    assert bool(jnp.isfinite(result.value))


def test_rate_below_resolution_is_stalled():
    solver = js.Solver(js.Gradient(), js.FixedStep(1e-8), max_steps=10)
    result = solver.run(rosenbrock, jnp.array([-1.2, 1.0], jnp.bfloat16))
    assert result.status == js.Status.STALLED, result.message
    assert int(result.num_fun_evals) == 1


def test_rejects_bad_rate():
    with pytest.raises(ValueError, match="learning_rate"):
        js.FixedStep(0.0)
