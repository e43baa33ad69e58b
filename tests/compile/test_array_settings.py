"""Numeric settings given as arrays are dynamic leaves: a schedule or a sweep reuses one
compiled program. Integer settings, which fix loop bounds and shapes, refuse arrays."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js


def bowl(x):
    return jnp.sum((x - jnp.arange(3.0)) ** 2)


X0 = jnp.zeros(3)


def test_fixed_step_with_an_array_learning_rate_in_run(compiles):
    rates = [0.1, 0.2, 0.05]
    expected = [js.Solver(js.Gradient(), js.FixedStep(r), max_steps=5).run(bowl, X0) for r in rates]
    solver = js.Solver(js.Gradient(), js.FixedStep(jnp.asarray(rates[0])), max_steps=5)
    solver.run(bowl, X0)
    compiles.reset()
    for rate, reference in zip(rates, expected, strict=True):
        solver = js.Solver(js.Gradient(), js.FixedStep(jnp.asarray(rate)), max_steps=5)
        result = solver.run(bowl, X0)
        np.testing.assert_allclose(result.params, reference.params, rtol=1e-6)
        assert int(result.num_fun_evals) == int(reference.num_fun_evals)
    jax.block_until_ready(result)
    assert compiles.count == 0  # a new learning rate, the same compiled program


def test_learning_rate_schedule_inside_a_jitted_step(compiles):
    """The solver is built inside the user's jitted step from a traced learning rate."""

    @eqx.filter_jit
    def train_step(params, state, rate):
        solver = js.Solver(js.Gradient(), js.FixedStep(rate))
        return solver.step(bowl, params, state)

    params = X0
    state = js.Solver(js.Gradient(), js.FixedStep(0.1)).init(params)
    rates = [jnp.asarray(0.3 * 0.5**k, jnp.float32) for k in range(6)]
    params, state = train_step(params, state, rates[0])
    compiles.reset()
    for rate in rates[1:]:
        params, state = train_step(params, state, rate)
    jax.block_until_ready(params)
    assert compiles.count == 0
    # gradient descent with these rates, by hand
    x = np.zeros(3)
    for rate in np.asarray(rates):
        x = x - rate * 2 * (x - np.arange(3.0))
    np.testing.assert_allclose(params, x, rtol=1e-5)


def test_sweep_over_c1_under_vmap():
    c1s = jnp.array([1e-4, 0.1, 0.45])

    def evaluations(c1):
        solver = js.Solver(js.Gradient(), js.Backtracking(c1=c1), max_steps=50)
        return solver.run(bowl, X0).num_fun_evals

    swept = jax.vmap(evaluations)(c1s)
    one_by_one = []
    for c1 in c1s.tolist():
        solver = js.Solver(js.Gradient(), js.Backtracking(c1=c1), max_steps=50)
        one_by_one.append(int(solver.run(bowl, X0).num_fun_evals))
    assert swept.tolist() == one_by_one


@pytest.mark.parametrize(
    "make",
    [
        lambda v: js.Zoom(c1=v, c2=jnp.asarray(0.9)),
        lambda v: js.MoreThuente(ftol=v),
        lambda v: js.HagerZhang(delta=v),
        lambda v: js.Backtracking(c1=v, shrink=jnp.asarray(0.3)),
    ],
    ids=["zoom", "more-thuente", "hager-zhang", "backtracking"],
)
def test_array_settings_of_every_search(make):
    """Settings given as 0-d arrays give the run of the same Python numbers, in float64."""
    with jax.enable_x64(True):
        x0 = jnp.array([-1.2, 1.0])

        def rosenbrock(x):
            return 100 * (x[1] - x[0] ** 2) ** 2 + (1 - x[0]) ** 2

        as_array = js.Solver(js.LBFGS(), make(jnp.asarray(1e-3))).run(rosenbrock, x0)
        as_number = js.Solver(js.LBFGS(), make(1e-3)).run(rosenbrock, x0)
        np.testing.assert_allclose(as_array.params, as_number.params, rtol=1e-12)
        assert int(as_array.num_fun_evals) == int(as_number.num_fun_evals)


def rosenbrock(x):
    return 100 * (x[1] - x[0] ** 2) ** 2 + (1 - x[0]) ** 2


def test_solver_tolerances_as_arrays(compiles):
    x0 = jnp.array([-1.2, 1.0])
    loose = js.Solver(gtol=jnp.asarray(1.0), ftol=jnp.asarray(0.0)).run(rosenbrock, x0)
    tight = js.Solver(gtol=jnp.asarray(1e-4), ftol=jnp.asarray(0.0))
    compiles.reset()
    result = tight.run(rosenbrock, x0)
    jax.block_until_ready(result)
    assert compiles.count == 0  # new tolerances, the same compiled program
    assert bool(result.success) and bool(loose.success)
    assert np.max(np.abs(np.asarray(result.grad))) <= 1e-4
    assert int(loose.num_steps) < int(result.num_steps)


def test_array_settings_are_checked_when_built():
    with pytest.raises(ValueError, match=r"Zoom: c1 must lie in \(0, 1\)"):
        js.Zoom(c1=jnp.asarray(2.0))
    with pytest.raises(ValueError, match=r"FixedStep: learning_rate must be positive"):
        js.FixedStep(jnp.asarray(-0.1))
    with pytest.raises(TypeError, match=r"learning_rate"):  # (or the annotation's check)
        js.FixedStep(jnp.ones(2))
    with pytest.raises(ValueError, match=r"gtol must be non-negative"):
        js.Solver(gtol=jnp.asarray(-1.0))


@pytest.mark.parametrize(
    "make",
    [
        lambda: js.Zoom(max_trials=jnp.asarray(5)),
        lambda: js.LBFGS(memory_size=jnp.asarray(5)),
        lambda: js.Solver(max_steps=jnp.asarray(5)),
    ],
    ids=["zoom-max_trials", "lbfgs-memory_size", "solver-max_steps"],
)
def test_integer_settings_refuse_arrays(make):
    with pytest.raises(TypeError, match=r"(?i)int"):
        make()
