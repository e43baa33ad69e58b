"""`step` (and `as_optax().update`'s updates) return every params leaf with the aval it was
given, weak type included, so a jitted loop that feeds them back compiles once."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax._src.lax import lax as lax_internal

import jaxsearch as js

from ..problems import avals


def shifted(p):
    return sum(
        (jnp.sum((x.astype(jnp.float32) - 1.5) ** 2) for x in jax.tree.leaves(p)),
        jnp.zeros((), jnp.float32),
    )


def weak(x):
    """x as a weakly typed array of its dtype (JAX makes these from Python scalars)."""
    return lax_internal._convert_element_type(x, np.dtype(x.dtype), weak_type=True)


# (dtype, weak): every dtype, weakly and strongly typed. float32 weak params are what
# `jnp.full(n, 0.0)` gives; float64 ones what it gives under x64.
CASES = [(d, w) for d in ("bfloat16", "float16", "float32", "float64") for w in (True, False)]


def params_for(dtype: str, weakly: bool):
    x = jnp.zeros(3, dtype)
    tree = {"a": x, "b": (x[:2] + jnp.asarray(0.5, dtype),)}
    return jax.tree.map(weak, tree) if weakly else tree


SOLVER = js.Solver()


def jitted_step(p, s):
    return SOLVER.step(shifted, p, s)


IDS = [f"{d}-{'weak' if w else 'strong'}" for d, w in CASES]


@pytest.mark.parametrize("dtype,weakly", CASES, ids=IDS)
def test_jitted_step_loop_compiles_once(dtype, weakly, compiles):
    with jax.enable_x64(dtype == "float64"):
        params = params_for(dtype, weakly)
        given = avals(params)
        assert all(w == weakly for _, _, w in given[1])
        state = SOLVER.init(params)
        step = jax.jit(jitted_step)
        compiles.reset()
        for _ in range(4):
            params, state = step(params, state)
            assert avals(params) == given
        jax.block_until_ready(params)
        assert compiles.count == 1
        assert int(state.num_steps) >= 1


def test_weak_float32_from_the_issue(compiles):
    """`jnp.full((3,), 0.0)` is weakly typed; three jitted steps compile once."""
    p = jnp.full((3,), 0.0)
    assert p.weak_type
    s = SOLVER.init(p)
    step = jax.jit(jitted_step)
    compiles.reset()
    for _ in range(3):
        p, s = step(p, s)
    jax.block_until_ready(p)
    assert compiles.count == 1
    assert p.weak_type


def test_run_returns_the_avals_of_x0():
    x0 = jnp.full((3,), 0.0)
    assert SOLVER.run(shifted, x0).params.weak_type
    assert not SOLVER.run(shifted, jnp.zeros(3)).params.weak_type


@pytest.mark.parametrize("weakly", [True, False])
def test_optax_updates_keep_the_avals_of_params(weakly, compiles):
    params = params_for("float32", weakly)
    opt = SOLVER.as_optax()
    state = opt.init(params)

    @jax.jit
    def update(params, state):
        value, grad = optax.value_and_grad_from_state(shifted)(params, state=state)
        updates, state = opt.update(grad, state, params, value=value, grad=grad, value_fn=shifted)
        return updates, optax.apply_updates(params, updates), state

    given = avals(params)
    compiles.reset()
    for _ in range(3):
        updates, new_params, state = update(params, state)
        assert avals(updates) == given
        # optax.apply_updates itself casts to strong types; feed back what it returns, as a
        # user's loop does, and it compiles once for the strong avals too.
        params = jax.tree.map(weak, new_params) if weakly else new_params
    jax.block_until_ready(params)
    assert compiles.count == 1
