"""Compile once per dtype setting on the accelerator (DESIGN.md's central promise): `run` with
new values of the same shapes and dtypes compiles nothing, `step` inside the user's
`eqx.filter_jit` training step compiles once over several steps, and `as_optax()` in an optax
update loop under `jax.jit` compiles once. Counted with tests/conftest.py's `compiles`
(XLA backend compiles, `jax.monitoring`); the first call of each must count at least one, so
that a counter which sees nothing on this backend fails instead of passing.

The dtype settings are tests/compile_kit.py's, float64 left out on a TPU (it has none). The
objective is this module's own: its identity is part of every compile key, so no other test
can have compiled these programs in the same process."""

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

from ..compile_kit import (
    SETTINGS,
    USER_JIT,
    block,
    make_solver,
    shifted_rosenbrock,
    steps_in_user_jit,
    weak_leaves,
)
from ..problems import avals

pytestmark = pytest.mark.accelerator

NUM_STEPS = 5
TIER_SETTINGS = [s for s in SETTINGS if not (s.x64 and jax.default_backend() == "tpu")]
IDS = [s.name for s in TIER_SETTINGS]


def objective(params, shift):
    """compile_kit's shifted Rosenbrock under a name of this module's."""
    return shifted_rosenbrock(params, shift)


@eqx.filter_jit(**USER_JIT)
def train_step(solver, params, state, data):
    """The user's jitted training step (the solver has no array leaves: static, hashed).
    `USER_JIT`: the lean XLA options on a CPU, XLA's defaults elsewhere."""
    return solver.step(objective, params, state, data)


@pytest.mark.parametrize("setting", TIER_SETTINGS, ids=IDS)
def test_run_compiles_once(setting, compiles):
    with jax.enable_x64(setting.x64):
        solver = make_solver("LBFGS", "Zoom")
        x0s = [setting.params(seed) for seed in (30, 31, 32)]
        data = [setting.data(seed) for seed in (30, 31, 32)]
        counts = []
        for x0, shift in zip(x0s, data, strict=True):
            compiles.reset()
            result = block(solver.run(objective, x0, shift, value_dtype=setting.value_dtype))
            counts.append(compiles.count)
        assert counts[0] >= 1 and counts[1:] == [0, 0], counts
        assert jax.tree.map(lambda x: x.dtype, result.params) == jax.tree.map(
            lambda x: x.dtype, x0s[0]
        )
        assert result.value.dtype == setting.expected_value_dtype()


@pytest.mark.parametrize("setting", TIER_SETTINGS, ids=IDS)
def test_step_in_user_jit_compiles_once(setting, compiles):
    with jax.enable_x64(setting.x64):
        solver = make_solver("LBFGS", "Zoom")
        seeds = range(40, 40 + NUM_STEPS)
        params, state, state0 = steps_in_user_jit(train_step, solver, setting, seeds, compiles)
        assert compiles.count == 1
        assert avals(state) == avals(state0)  # structure, shapes, dtypes, weak types
        assert weak_leaves(state) == []
        assert avals(params) == avals(setting.params(40))


@pytest.mark.parametrize("setting", TIER_SETTINGS, ids=IDS)
def test_as_optax_loop_compiles_once(setting, compiles):
    optax = pytest.importorskip("optax")
    with jax.enable_x64(setting.x64):
        shift = setting.data(50)
        opt = make_solver("LBFGS", "Zoom").as_optax()

        def loss(params):
            return objective(params, shift)

        value_and_grad = optax.value_and_grad_from_state(loss)

        @jax.jit(**USER_JIT)
        def update(params, state):
            value, grad = value_and_grad(params, state=state)
            updates, state = opt.update(grad, state, params, value=value, grad=grad, value_fn=loss)
            return optax.apply_updates(params, updates), state

        params = setting.params(50)
        state = block(opt.init(params))
        compiles.reset()
        for _ in range(NUM_STEPS):
            params, state = update(params, state)
        block((params, state))
        assert compiles.count == 1
        assert avals(params) == avals(setting.params(50))
        first = float(loss(setting.params(50)).astype(jnp.float32))
        assert float(jnp.asarray(state.value, jnp.float32)) < first  # it went downhill
