"""A `step` given params other than those its state belongs to (issue 47): the state's
fingerprint of its point tells them apart, and the step evaluates fn at the params it was
given first, as after `reevaluate`, and counts it in `state.num_foreign_params`; the params a
step returned, fed back eagerly, under `jax.jit` or through optax's loop, never count."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxsearch as js
from jaxsearch._state import fingerprint, same_point


def rosenbrock(params):
    """The extended Rosenbrock function of a pytree's leaves, computed in at least float32."""
    wide = [leaf.astype(jnp.float64 if leaf.dtype == jnp.float64 else jnp.float32) for leaf in
            jax.tree.leaves(params)]  # fmt: skip
    x = jnp.concatenate([jnp.ravel(leaf) for leaf in wide])
    return jnp.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


SOLVER = js.Solver(js.LBFGS(memory_size=5))


def starts(dtype):
    """The usual start, and another point."""
    if dtype == "mixed":
        return (
            {"w": jnp.array([-1.2, 1.0, -1.2], jnp.bfloat16), "b": jnp.array([1.0, 0.5])},
            {"w": jnp.array([1.5, 1.0, 0.5], jnp.bfloat16), "b": jnp.array([1.0, 1.5])},
        )
    a = jnp.asarray([-1.2, 1.0, -1.2, 1.0, -1.2], dtype)
    return a, jnp.asarray([1.5, 1.0, 0.5, 1.0, 1.5], dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64", "mixed"])
def test_foreign_params_are_evaluated(dtype):
    """A state stepped once at a, then given b: the step starts with f and its gradient at b,
    as from `reevaluate(state)` (the reference: that step, in the same compiled program),
    and goes downhill from f(b), rather than searching from f at a's step and returning b
    unmoved as STALLED."""
    with jax.enable_x64(dtype == "float64"):
        a, b = starts(dtype)
        state = SOLVER.init(a, fn=rosenbrock)
        _, state = SOLVER.step(rosenbrock, a, state)
        params, after = SOLVER.step(rosenbrock, b, state)
        expected, reference = SOLVER.step(rosenbrock, b, SOLVER.reevaluate(state))
        assert int(after.num_foreign_params) == 1
        assert int(reference.num_foreign_params) == 0
        assert js.Status(after.status) == js.Status.RUNNING
        assert jax.tree.all(jax.tree.map(np.array_equal, params, expected))
        assert int(after.num_fun_evals) == int(reference.num_fun_evals)
        # The state's f and gradient are those at the params returned, below f(b).
        value = rosenbrock(params)
        np.testing.assert_allclose(after.value, value, rtol=4 * jnp.finfo(value.dtype).eps)
        assert float(after.value) < float(rosenbrock(b))
        for got, want in zip(
            jax.tree.leaves(after.grad), jax.tree.leaves(jax.grad(rosenbrock)(params)), strict=True
        ):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def _step(params, state):
    return SOLVER.step(rosenbrock, params, state)


def test_own_params_never_count_in_a_loop(compiles):
    """Fifty steps in one `lax.fori_loop` under `jax.jit`, and fifty calls of a jitted step:
    no step counts, and a foreign step compiles nothing new."""
    a, b = starts("float32")

    @jax.jit
    def loop(params, state):
        return jax.lax.fori_loop(0, 50, lambda _, c: _step(*c), (params, state))

    params, state = loop(a, SOLVER.init(a))
    assert int(state.num_foreign_params) == 0 and int(state.num_steps) == 50
    step = jax.jit(_step)
    params, state = a, SOLVER.init(a)
    compiles.reset()
    for _ in range(50):
        params, state = step(params, state)
    assert compiles.count == 1
    assert int(state.num_foreign_params) == 0
    _, state = step(b, state)
    assert compiles.count == 1
    assert int(state.num_foreign_params) == 1


def test_own_params_never_count():
    """Fifty steps of L-BFGS on Rosenbrock in float32, eager and under `jax.jit` in turn: each
    program's fingerprint of the params it returned matches the other's of the same params,
    so no step counts."""
    a, _ = starts("float32")
    jitted = jax.jit(_step)
    params, state = a, SOLVER.init(a)
    for k in range(50):
        params, state = (jitted if k % 2 else _step)(params, state)
    assert int(state.num_foreign_params) == 0
    assert int(state.num_steps) == 50


def test_run_then_step():
    """`step` from a run's state: at `result.iterate` (its point) it goes on; at
    `result.params`, an earlier point where the run returned its best, it evaluates there
    first and counts it; from `state_at_params` there, nothing counts."""
    climb = js.Solver(js.Gradient(), js.FixedStep(1.5), max_steps=3, gtol=0.0)

    def square(x):
        return jnp.sum(x**2)

    done = climb.run(square, jnp.array([1.0, -2.0]))
    assert not np.array_equal(done.params, done.iterate)
    _, state = climb.step(square, done.iterate, done.state)
    assert int(state.num_foreign_params) == 0
    _, state = climb.step(square, done.params, done.state)
    assert int(state.num_foreign_params) == 1
    _, state = climb.step(square, done.params, done.state_at_params)
    assert int(state.num_foreign_params) == 0


def test_vmap_counts_each_problem():
    """Under `jax.vmap`, each problem compares its own params with its own state."""
    a, b = starts("float32")
    state = jax.vmap(SOLVER.init)(jnp.stack([a, a]))
    params, state = jax.vmap(_step)(jnp.stack([a, a]), state)
    _, state = jax.vmap(_step)(jnp.stack([params[0], b]), state)
    np.testing.assert_array_equal(state.num_foreign_params, [0, 1])


def test_optax_loop():
    """optax's L-BFGS loop (`value_and_grad_from_state`, `apply_updates`): its params are the
    last update's new params rounded anew (old + (new - old)), within the fingerprint's
    tolerance, so 30 updates in bfloat16 and float32 count none; params from elsewhere with
    the cached value count, and the update starts from f at them."""
    opt = js.Solver(js.LBFGS(memory_size=5)).as_optax()
    value_and_grad = optax.value_and_grad_from_state(rosenbrock)

    @jax.jit
    def update(params, state):
        value, grad = value_and_grad(params, state=state)
        updates, state = opt.update(
            grad, state, params, value=value, grad=grad, value_fn=rosenbrock
        )
        return optax.apply_updates(params, updates), state

    for dtype in (jnp.bfloat16, jnp.float32):
        a = jnp.asarray(np.tile([-1.2, 1.0], 20), dtype)
        params, state = a, opt.init(a)
        for _ in range(30):
            params, state = update(params, state)
        assert int(state.solver.num_foreign_params) == 0
    b = jnp.asarray(np.tile([1.5, 0.5], 20), jnp.float32)
    params, state = update(b, state)
    assert int(state.solver.num_foreign_params) == 1
    assert float(state.value) < float(rosenbrock(b))
    np.testing.assert_allclose(state.value, rosenbrock(params), rtol=1e-6)


def test_fingerprint():
    """The fingerprint tells apart permuted elements and swapped leaves, and gives -0 and +0
    the same point; a bfloat16 leaf rounded anew by an ulp stays the same point."""
    x = jnp.asarray(np.random.default_rng(0).normal(size=(3, 4)), jnp.float32)
    y = jnp.asarray(np.random.default_rng(1).normal(size=(3, 4)), jnp.float32)

    def same(p, q):
        return bool(same_point(fingerprint(p), fingerprint(q)))

    assert same({"x": x, "y": y}, {"x": x, "y": y})
    assert not same({"x": x, "y": y}, {"x": y, "y": x})
    assert not same(x, x[::-1])
    assert not same(x, x.T.reshape(3, 4))
    assert same(jnp.array([0.0, 1.0]), jnp.array([-0.0, 1.0]))
    h = jnp.asarray(np.random.default_rng(2).normal(size=100), jnp.bfloat16)
    assert same(h, h.at[7].set(jnp.nextafter(h[7], jnp.asarray(10, jnp.bfloat16))))
    assert not same(h, h.at[7].set(h[7] + 1))
