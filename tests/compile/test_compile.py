"""Compile-once tests: the central promise of jaxsearch (DESIGN.md, "The state is the contract").

For cells that cover every pair of direction, line search and params dtype setting
(`covering_cells`), one test checks in sequence:

1. a user `eqx.filter_jit` train step calling `solver.step` five times compiles exactly once
   (compiled with the lean XLA options that `step` itself uses on a CPU: `USER_JIT`);
2. the state after `init` and after five steps has the same tree structure, shapes, dtypes and
   weak types, and no leaf is weakly typed;
3. `solver.step` called eagerly five times compiles once (it is `eqx.filter_jit`-ed itself);
4. a `Solver` built anew with equal settings reuses the compiled `step` and train step.

`solver.run` (compiles once for new x0 and args values; reused by an equal solver) is tested in
`test_compile_run.py`, so that pytest-xdist can run the two halves in parallel.

Compiles are counted only around the calls under test: every input array and state is made
before `compiles.reset()`, because eager array operations compile small programs too. The
objectives are module level, in tests/compile_kit.py (with the dtype settings and solvers both
halves share): their identity is part of every compile key, so no other test can have compiled
these programs already in the same worker process (each test here compiles programs of its
own: solver settings, objective and dtypes differ).
"""

import itertools

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

from ..compile_kit import (
    SETTINGS,
    USER_JIT,
    Setting,
    block,
    leaf_dtypes,
    make_solver,
    rosenbrock_f64,
    shifted_rosenbrock,
    steps_in_user_jit,
    weak_leaves,
)
from ..helpers import DIRECTIONS, SEARCHES

NUM_STEPS = 5


# --------------------------------------------------------------------------- objectives


def rosenbrock_sanity(x, shift):
    """Used by the counter's sanity test only, so that no other test shares its programs."""
    return shifted_rosenbrock(x, shift)


# ------------------------------------------------------------------------------ helpers


def signature(tree) -> dict:
    """(shape, dtype, weak_type) per leaf, keyed by the leaf's path: with the tree structure,
    what a jit cache keys on. A dict, so that a failing comparison names the leaf."""
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return {
        jax.tree_util.keystr(path): (x.shape, jnp.dtype(x.dtype).name, jax.typeof(x).weak_type)
        for path, x in flat
    }


@eqx.filter_jit(**USER_JIT)
def train_step(solver, params, state, data):
    """The user's jitted training step. `solver` has no array leaves: it is static, hashed."""
    return solver.step(shifted_rosenbrock, params, state, data)


@eqx.filter_jit(**USER_JIT)
def train_step_f64(solver, params, state):
    return solver.step(rosenbrock_f64, params, state)


# -------------------------------------------------------------------------------- tests


def covering_cells() -> list[tuple[str, str, Setting]]:
    """(direction, search, setting) cells that cover every pair of the three: every direction
    with every line search of the registry (tests/helpers.py; FixedStep with every direction
    too, not `pairs()`) once, in the setting (i + j) mod 5 for the i-th direction and the j-th
    search. A direction meets every setting among its seven searches, a search every setting
    among its thirteen directions (`test_cells_cover_every_pair`). A recompile comes from one
    part's state changing its avals, and the state of each part is checked in every setting;
    the whole product (455 cells) adds no pair not seen here."""
    return [
        (direction, search, SETTINGS[(i + j) % len(SETTINGS)])
        for i, direction in enumerate(DIRECTIONS)
        for j, search in enumerate(SEARCHES)
    ]


def test_cells_cover_every_pair():
    cells = [(d, s, setting.name) for d, s, setting in covering_cells()]
    names = [setting.name for setting in SETTINGS]
    for first, second, every in [
        (0, 1, itertools.product(DIRECTIONS, SEARCHES)),
        (0, 2, itertools.product(DIRECTIONS, names)),
        (1, 2, itertools.product(SEARCHES, names)),
    ]:
        assert {(cell[first], cell[second]) for cell in cells} == set(every)
    assert len(cells) == len(DIRECTIONS) * len(SEARCHES)  # each pair of the registry once


@pytest.mark.parametrize(
    "direction,search,setting",
    covering_cells(),
    ids=lambda cell: cell.name if isinstance(cell, Setting) else cell,
)
def test_step_compiles_once(direction, search, setting, compiles):
    with jax.enable_x64(setting.x64):
        solver = make_solver(direction, search)
        counts = {}

        # 1. User train step, five calls with a new data array each (like mini-batches).
        seeds = range(NUM_STEPS)
        params, state, state0 = steps_in_user_jit(train_step, solver, setting, seeds, compiles)
        counts["train_step"] = compiles.count
        batches = [setting.data(seed) for seed in seeds]
        jit_params, jit_state = params, state

        # 3. Eager steps: `Solver.step` is filter_jit-ed, so eager calls hit its cache.
        params = setting.params(1)
        state = block(solver.init(params, value_dtype=setting.value_dtype))
        compiles.reset()
        for batch in batches:
            params, state = solver.step(shifted_rosenbrock, params, state, batch)
        block((params, state))
        counts["eager_step"] = compiles.count
        eager_state = state

        # 4. An equal solver, built anew, shares both compiled programs.
        rebuilt = make_solver(direction, search)
        params = setting.params(2)
        rebuilt_state = block(rebuilt.init(params, value_dtype=setting.value_dtype))
        compiles.reset()
        block(rebuilt.step(shifted_rosenbrock, params, rebuilt_state, batches[0]))
        block(train_step(rebuilt, params, rebuilt_state, batches[1]))
        counts["rebuilt"] = compiles.count

        assert counts == {"train_step": 1, "eager_step": 1, "rebuilt": 0}

        # 2. The state keeps its structure, shapes, dtypes and weak types; no leaf is weak.
        assert weak_leaves(state0) == []
        for other in (jit_state, eager_state, rebuilt_state):
            assert jax.tree.structure(other) == jax.tree.structure(state0)
            assert signature(other) == signature(state0)
        assert weak_leaves(jit_params) == []
        assert jit_state.value.dtype == setting.expected_value_dtype()
        assert leaf_dtypes(jit_params) == list(map(jnp.dtype, setting.dtypes))
        assert leaf_dtypes(jit_state.grad) == list(map(jnp.dtype, setting.dtypes))
        assert int(jit_state.num_steps) >= 1  # the steps ran (a search was made at least once)
        assert rebuilt == solver and hash(rebuilt) == hash(solver)


def test_value_dtype_none_matches_float32_for_low_precision():
    """value_dtype=None on bfloat16/float16 params infers float32: the same state as asking."""
    solver = make_solver("LBFGS", "Zoom")
    for dtypes in [(jnp.bfloat16,), (jnp.float16,), (jnp.bfloat16, jnp.float32)]:
        params = Setting("", dtypes, None, jnp.float32).params(0)
        inferred = solver.init(params)
        asked = solver.init(params, value_dtype=jnp.float32)
        assert jax.tree.structure(inferred) == jax.tree.structure(asked)
        assert signature(inferred) == signature(asked)
        assert inferred.value.dtype == jnp.float32
        assert weak_leaves(inferred) == []


@pytest.mark.parametrize("search", list(SEARCHES))
def test_state_dtype_contract(search):
    """value in value_dtype, grad leaves in the params' dtypes, scalars at least float32."""
    solver = make_solver("LBFGS", search)
    params = {"w": jnp.ones((3,), jnp.bfloat16), "b": jnp.ones((2,), jnp.float16)}
    state = solver.init(params, value_dtype=jnp.float32)
    assert state.value.dtype == jnp.float32
    assert jax.tree.map(lambda g: g.dtype, state.grad) == {"w": jnp.bfloat16, "b": jnp.float16}
    assert jax.tree.map(lambda g: g.shape, state.grad) == {"w": (3,), "b": (2,)}
    assert state.prev_decrease.dtype == jnp.float32
    assert state.direction.rho.dtype == jnp.float32
    assert state.direction.gamma.dtype == jnp.float32
    for leaf in jax.tree.leaves(state.linesearch):  # e.g. Backtracking's last step size
        if jnp.issubdtype(leaf.dtype, jnp.floating):  # (HagerZhang also keeps a bool flag)
            assert leaf.dtype == jnp.float32
    # L-BFGS memory: a leading (memory_size,) axis, the param leaf's dtype by default.
    m = solver.direction.memory_size
    assert state.direction.s["w"].shape == (m, 3) and state.direction.s["w"].dtype == jnp.bfloat16
    assert state.direction.y["b"].shape == (m, 2) and state.direction.y["b"].dtype == jnp.float16
    assert state.num_steps.dtype == jnp.int32 and state.status.dtype == jnp.int32
    assert weak_leaves(state) == []

    # float16 values still get float32 scalars.
    state = solver.init(jnp.ones((2,), jnp.float16), value_dtype=jnp.float16)
    assert state.value.dtype == jnp.float16
    assert state.prev_decrease.dtype == jnp.float32
    assert weak_leaves(state) == []

    with jax.enable_x64(True):
        state = solver.init(jnp.ones((2,), jnp.float64))
        assert state.value.dtype == jnp.float64
        assert state.prev_decrease.dtype == jnp.float64
        assert state.direction.rho.dtype == jnp.float64
        assert state.grad.dtype == jnp.float64
        assert weak_leaves(state) == []
        # Inferred from fn when fn is given: rosenbrock_f64 returns float64 on float32 params.
        state = solver.init(jnp.ones((2,), jnp.float32), fn=rosenbrock_f64)
        assert state.value.dtype == jnp.float64
        assert state.grad.dtype == jnp.float32


@pytest.mark.parametrize("search", list(SEARCHES))
def test_float64_value_is_cast_to_value_dtype(search, compiles):
    """fn returns float64 on float32 params (x64 on); a float32 state casts it, never widens."""
    with jax.enable_x64(True):
        solver = make_solver("LBFGS", search)
        params = jnp.asarray([-1.2, 1.0], jnp.float32)
        state0 = block(solver.init(params, value_dtype=jnp.float32))
        state = state0
        compiles.reset()
        for _ in range(NUM_STEPS):
            params, state = train_step_f64(solver, params, state)
        block((params, state))
        assert compiles.count == 1
        assert jax.tree.structure(state) == jax.tree.structure(state0)
        assert signature(state) == signature(state0)
        assert state.value.dtype == jnp.float32
        assert params.dtype == jnp.float32 and state.grad.dtype == jnp.float32
        assert weak_leaves(state) == []
        assert float(state.value) < float(rosenbrock_f64(jnp.asarray([-1.2, 1.0], jnp.float32)))


def test_counter_sees_a_recompile_for_a_weakly_typed_state_leaf(compiles):
    """The counter counts genuine recompiles: a state whose `prev_decrease` is weakly typed
    (what `jnp.asarray(nan)` would give) is a new jit signature, so it costs a compile. This is
    why `init` must make every leaf strongly typed, and why the tests above can fail."""
    solver = make_solver("Gradient", "Backtracking")
    params = jnp.asarray([-1.2, 1.0], jnp.float32)
    state = solver.init(params)
    weak = eqx.tree_at(lambda s: s.prev_decrease, state, jnp.asarray(float("nan")))
    assert weak_leaves(weak) == [".prev_decrease"]
    assert signature(weak) != signature(state)
    data = jnp.zeros((2,), jnp.float32)
    block(solver.step(rosenbrock_sanity, params, state, data))  # compile for the strong state
    compiles.reset()
    block(solver.step(rosenbrock_sanity, params, state, data))
    assert compiles.count == 0
    block(solver.step(rosenbrock_sanity, params, weak, data))
    assert compiles.count == 1


@pytest.mark.parametrize("direction", list(DIRECTIONS))
def test_init_compiles_one_program(direction, compiles):
    """`init` builds the whole state in one compiled program (built eagerly, every new shape of
    a leaf compiled a program of its own: ten for a first L-BFGS `init`), and reuses it."""
    solver = make_solver(direction, "Zoom")
    params = {"a": jnp.ones(13, jnp.float32), "b": jnp.ones((5, 3), jnp.bfloat16)}
    compiles.reset()
    state = block(solver.init(params))
    assert compiles.count == 1
    other = block(jax.tree.map(lambda x: x + 1, params))
    compiles.reset()
    again = block(solver.init(other))
    assert compiles.count == 0
    assert signature(again) == signature(state) and weak_leaves(state) == []
