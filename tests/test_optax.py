"""`Solver.as_optax()` in optax's documented L-BFGS loop, against `optax.lbfgs()` (issue 6)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxsearch as js

from .problems import rosenbrock

SOLVER = js.Solver(js.LBFGS(), js.Zoom())


def _documented_loop(opt, fn, params, steps, **extra_args):
    """optax's L-BFGS loop, as its docs write it (one jitted step)."""
    value_and_grad = optax.value_and_grad_from_state(fn)

    @jax.jit
    def step(params, state):
        value, grad = value_and_grad(params, state=state, **extra_args)
        updates, state = opt.update(
            grad, state, params, value=value, grad=grad, value_fn=fn, **extra_args
        )
        return optax.apply_updates(params, updates), state

    state = opt.init(params)
    for _ in range(steps):
        params, state = step(params, state)
    return params, state


def test_documented_loop_both_ways():
    """The same loop with optax.lbfgs() and with jaxsearch: both reach the minimiser of
    Rosenbrock in float64, and f in the state is f at the params."""
    with jax.enable_x64(True):
        x0 = jnp.array([-1.2, 1.0])
        ours, state = _documented_loop(SOLVER.as_optax(), rosenbrock, x0, 60)
        with jax.numpy_dtype_promotion("standard"):  # optax.lbfgs mixes int32 and int64
            theirs, _ = _documented_loop(optax.lbfgs(), rosenbrock, x0, 60)
        np.testing.assert_allclose(np.asarray(ours), 1.0, atol=1e-6)
        np.testing.assert_allclose(np.asarray(theirs), 1.0, atol=1e-6)
        assert float(optax.tree.get(state, "value")) == pytest.approx(float(rosenbrock(ours)))


def test_value_and_grad_from_state_reuses_the_cache():
    """After the first update, value_and_grad_from_state takes f and grad from the state:
    f is evaluated only by the solver's line search."""
    calls = []

    def fn(x):
        jax.debug.callback(lambda: calls.append(1))
        return rosenbrock(x)

    opt = SOLVER.as_optax()
    value_and_grad = optax.value_and_grad_from_state(fn)
    params, state = jnp.array([-1.2, 1.0]), opt.init(jnp.array([-1.2, 1.0]))
    for _ in range(5):
        value, grad = value_and_grad(params, state=state)
        jax.effects_barrier()
        before = len(calls)
        updates, state = opt.update(grad, state, params, value=value, grad=grad, value_fn=fn)
        params = optax.apply_updates(params, updates)
        jax.effects_barrier()
        assert float(state.value) == pytest.approx(float(rosenbrock(params)), rel=1e-6)
        assert len(calls) >= before + 1  # the search evaluated fn at least once
        after_update = len(calls)
        cached, _ = value_and_grad(params, state=state)
        jax.effects_barrier()
        assert len(calls) == after_update  # taken from the state, not evaluated
        assert float(cached) == float(state.value)


def test_compiles_once(compiles):
    """A jitted documented step compiles once over many iterations, and eager updates
    compile nothing after the first."""
    x0 = jnp.array([-1.2, 1.0])
    compiles.reset()
    _documented_loop(SOLVER.as_optax(), rosenbrock, x0, 8)
    assert compiles.count == 1
    opt = SOLVER.as_optax()
    params, state = x0, opt.init(x0)
    value, grad = jax.value_and_grad(rosenbrock)(params)
    for i in range(4):
        if i == 1:
            compiles.reset()
        updates, state = opt.update(
            grad,
            state,
            params,
            value=state.value if i else value,
            grad=state.grad if i else grad,
            value_fn=rosenbrock,
        )
        params = optax.apply_updates(params, updates)
    assert compiles.count == 0


def _quadratic(w, data, target):
    return jnp.mean((data @ w - target) ** 2)


def test_extra_args_reach_value_fn():
    rng = np.random.default_rng(0)
    data = jnp.asarray(rng.standard_normal((20, 3)), jnp.float32)
    target = data @ jnp.array([1.0, -2.0, 0.5])
    params, _ = _documented_loop(
        SOLVER.as_optax(), _quadratic, jnp.zeros(3), 20, data=data, target=target
    )
    np.testing.assert_allclose(np.asarray(params), [1.0, -2.0, 0.5], atol=1e-4)


def test_equinox_model():
    """An eqx.nn.MLP as params (it has non-array leaves): updates are None there, and
    eqx.apply_updates applies them."""
    key = jax.random.PRNGKey(0)
    model = eqx.nn.MLP(2, 1, 8, 1, key=key)
    x = jax.random.normal(key, (32, 2))
    y = jnp.sin(x[:, :1])

    def loss(m, x, y):
        return jnp.mean((jax.vmap(m)(x) - y) ** 2)

    opt = SOLVER.as_optax()
    state = opt.init(eqx.filter(model, eqx.is_inexact_array))
    first = float(loss(model, x, y))

    @eqx.filter_jit
    def step(model, state):
        value, grad = eqx.filter_value_and_grad(loss)(model, x, y)
        updates, state = opt.update(
            grad, state, model, value=value, grad=grad, value_fn=loss, x=x, y=y
        )
        return eqx.apply_updates(model, updates), state

    for _ in range(10):
        model, state = step(model, state)
    assert float(loss(model, x, y)) < 0.5 * first


def test_update_needs_params_and_value_fn():
    opt = SOLVER.as_optax()
    state = opt.init(jnp.zeros(2))
    with pytest.raises(ValueError, match="value_fn"):
        opt.update(jnp.zeros(2), state, jnp.zeros(2))
