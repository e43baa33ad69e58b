"""Directions: L-BFGS's two-loop recursion against the explicit inverse-Hessian recursion,
its circular buffer, curvature guard and memory dtypes; steepest descent."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js

from ..helpers import DIRECTIONS, compute, explicit_lbfgs_direction, random_pair
from ..program_inspection import all_eqns


@pytest.mark.parametrize("num_pairs", [1, 3, 5, 8])
def test_two_loop_matches_explicit_recursion(num_pairs):
    """With more pairs than memory_size, only the newest memory_size are used, in order."""
    rng = np.random.default_rng(num_pairs)
    n, m = 6, 5
    direction = js.LBFGS(memory_size=m)
    with jax.enable_x64(True):
        state = direction.init(jnp.zeros(n), jnp.float64)
        pairs = []
        for _ in range(num_pairs):
            s, y = random_pair(rng, n)
            assert s @ y > 0
            pairs.append((s, y))
            state = direction.update(state, jnp.asarray(s), jnp.asarray(y), jnp.float64)
        assert int(state.count) == min(num_pairs, m)
        g = rng.standard_normal(n)
        d, scaled, _ = compute(direction, state, jnp.asarray(g), jnp.float64)
        assert bool(scaled)
        np.testing.assert_allclose(d, explicit_lbfgs_direction(pairs[-m:], g), rtol=1e-10)


@pytest.mark.parametrize("after_reset", [0, 2, 4])
def test_stale_slots_after_reset_are_ignored(after_reset):
    """After `reset` the buffers still hold the old pairs; the direction uses only the pairs
    stored since, as the explicit recursion over those does (-gamma g with none)."""
    rng = np.random.default_rng(after_reset)
    n, m = 5, 4
    direction = js.LBFGS(memory_size=m)
    with jax.enable_x64(True):
        state = direction.init(jnp.zeros(n), jnp.float64)
        for _ in range(m + 2):
            s, y = random_pair(rng, n)
            state = direction.update(state, jnp.asarray(s), jnp.asarray(y), jnp.float64)
        gamma = float(state.gamma)
        state = direction.reset(state)
        pairs = [random_pair(rng, n) for _ in range(after_reset)]
        for s, y in pairs:
            state = direction.update(state, jnp.asarray(s), jnp.asarray(y), jnp.float64)
        g = rng.standard_normal(n)
        d, scaled, _ = compute(direction, state, jnp.asarray(g), jnp.float64)
        assert bool(scaled) == (after_reset > 0)
        expected = explicit_lbfgs_direction(pairs, g) if pairs else -gamma * g
        np.testing.assert_allclose(d, expected, rtol=1e-10)


def test_pytree_memory_matches_flat_memory():
    """Leaves of several shapes give the direction of the same pairs flattened into one vector;
    a skipped pair (negative curvature) between them changes nothing."""
    rng = np.random.default_rng(7)
    shapes = {"a": (2, 3), "b": (4,), "c": ()}

    def unflatten(v):
        out, i = {}, 0
        for key, shape in shapes.items():
            size = int(np.prod(shape))
            out[key] = jnp.asarray(v[i : i + size].reshape(shape))
            i += size
        return out

    n = 11
    direction = js.LBFGS(memory_size=3)
    with jax.enable_x64(True):
        tree_state = direction.init(unflatten(np.zeros(n)), jnp.float64)
        flat_state = direction.init(jnp.zeros(n), jnp.float64)
        pairs = [random_pair(rng, n) for _ in range(4)]
        pairs.insert(2, (np.ones(n), -np.ones(n)))
        for s, y in pairs:
            tree_state = direction.update(tree_state, unflatten(s), unflatten(y), jnp.float64)
            flat_state = direction.update(flat_state, jnp.asarray(s), jnp.asarray(y), jnp.float64)
        assert int(tree_state.count) == 3
        g = rng.standard_normal(n)
        d_tree, _, _ = compute(direction, tree_state, unflatten(g), jnp.float64)
        d_flat, _, _ = compute(direction, flat_state, jnp.asarray(g), jnp.float64)
        kept = [pair for pair in pairs if pair[0] @ pair[1] > 0][-3:]
        np.testing.assert_allclose(d_flat, explicit_lbfgs_direction(kept, g), rtol=1e-10)
        flattened = np.concatenate([np.ravel(d_tree[key]) for key in shapes])
        np.testing.assert_allclose(flattened, d_flat, rtol=1e-10)


def test_without_pairs_direction_is_steepest_and_unscaled():
    direction = js.LBFGS()
    state = direction.init(jnp.zeros(3), jnp.float32)
    g = jnp.array([1.0, -2.0, 3.0])
    d, scaled, _ = compute(direction, state, g, jnp.float32)
    np.testing.assert_array_equal(d, -g)
    assert not bool(scaled)
    d, scaled, _ = compute(js.Gradient(), None, g, jnp.float32)
    np.testing.assert_array_equal(d, -g)
    assert not bool(scaled)


@pytest.mark.parametrize(
    "s,y",
    [
        ([1.0, 0.0], [-1.0, 0.0]),  # negative curvature
        ([1.0, 0.0], [0.0, 1.0]),  # zero curvature
        ([1.0, 0.0], [1e-9, 1.0]),  # s'y = 1e-9 < eps |s| |y| in float32
        ([1.0, 0.0], [np.nan, 1.0]),  # non-finite
        ([0.0, 0.0], [0.0, 0.0]),  # nothing at all
    ],
)
def test_curvature_guard_skips_bad_pairs(s, y):
    direction = js.LBFGS(memory_size=3)
    state = direction.init(jnp.zeros(2), jnp.float32)
    new = direction.update(state, jnp.array(s), jnp.array(y), jnp.float32)
    assert int(new.count) == 0 and int(new.head) == 0
    for a, b in zip(jax.tree.leaves(new), jax.tree.leaves(state), strict=True):
        np.testing.assert_array_equal(a, b)


def test_float16_pair_that_overflows_is_skipped():
    """s'y of two float16 vectors overflows float16 (max 65504); the product is accumulated in
    float32 and 1 / s'y is kept in float32, so a good pair is kept and a pair whose entries
    overflow float16 on storage is skipped."""
    direction = js.LBFGS(memory_size=2)
    params = jnp.zeros(4, jnp.float16)
    state = direction.init(params, jnp.float32)
    big = jnp.full(4, 200.0, jnp.float32)  # s'y = 4 * 200 * 200 = 160000 > 65504
    kept = direction.update(state, big, big, jnp.float32)
    assert int(kept.count) == 1
    assert kept.rho.dtype == jnp.float32
    np.testing.assert_allclose(float(kept.rho[0]), 1 / 160000.0, rtol=1e-3)
    huge = jnp.full(4, 1e5, jnp.float32)  # beyond float16's range once stored
    skipped = direction.update(state, huge, huge, jnp.float32)
    assert int(skipped.count) == 0


@pytest.mark.parametrize("memory_dtype", [None, jnp.float32])
def test_memory_dtype_per_leaf(memory_dtype):
    params = {"half": jnp.zeros(3, jnp.bfloat16), "single": jnp.zeros(2, jnp.float32)}
    state = js.LBFGS(memory_size=4, memory_dtype=memory_dtype).init(params, jnp.float32)
    expected_half = jnp.bfloat16 if memory_dtype is None else jnp.float32
    assert state.s["half"].shape == (4, 3) and state.s["half"].dtype == expected_half
    assert state.y["single"].shape == (4, 2) and state.y["single"].dtype == jnp.float32
    assert state.rho.dtype == jnp.float32


def test_direction_keeps_leaf_dtypes():
    params = {"half": jnp.ones(3, jnp.bfloat16), "single": jnp.ones(2, jnp.float32)}
    direction = js.LBFGS(memory_dtype=jnp.float32)
    state = direction.init(params, jnp.float32)
    s = {"half": jnp.full(3, 0.1, jnp.float32), "single": jnp.full(2, 0.1, jnp.float32)}
    y = {"half": jnp.full(3, 0.2, jnp.float32), "single": jnp.full(2, 0.3, jnp.float32)}
    state = direction.update(state, s, y, jnp.float32)
    d, _, _ = compute(direction, state, params, jnp.float32)
    assert d["half"].dtype == jnp.bfloat16 and d["single"].dtype == jnp.float32


def test_lbfgs_rejects_bad_settings():
    with pytest.raises(ValueError, match="memory_size"):
        js.LBFGS(memory_size=0)
    with pytest.raises(ValueError, match="memory_dtype"):
        js.LBFGS(memory_dtype=jnp.int32)


def f32(v):
    return jnp.asarray(v, jnp.float32)


def test_backtracking_growth_starts_from_previous_step():
    search = js.Backtracking(growth=2.0, max_step_size=3.0)
    zero, guess, min_step = f32(0.0), f32(0.7), f32(0.0)
    state = search.init(jnp.float32)
    first = search.start(state, zero, f32(-1.0), guess, min_step)
    assert float(first.trial) == pytest.approx(0.7)  # no previous step yet: the shared guess
    after = lambda step: eqx.tree_at(lambda s: s.prev_step, state, f32(step))
    grown = search.start(after(0.5), zero, f32(-1.0), guess, min_step)
    assert float(grown.trial) == pytest.approx(1.0)
    capped = search.start(after(2.5), zero, f32(-1.0), guess, min_step)
    assert float(capped.trial) == pytest.approx(3.0)
    # finish() records the accepted step for the next search.
    accepted = search.update(grown, grown.trial, f32(-0.5), f32(0.0))
    assert float(search.finish(after(0.5), accepted).prev_step) == pytest.approx(1.0)


@pytest.mark.parametrize("dtype,memory_dtype", [(jnp.float32, None), (jnp.bfloat16, jnp.float32)])
def test_solver_stores_the_step_and_gradient_change(dtype, memory_dtype):
    """After the first step from init (whose base evaluation happens inside the step), the
    memory holds s = x1 - x0 and y = g1 - g0, computed from the actual params and gradients
    (in float32 for float32 memory, not rounded to the params' dtype first)."""

    def fn(x):
        x = x.astype(jnp.float32)
        return jnp.sum(jnp.array([1.0, 10.0, 100.0]) * x**2) + jnp.sum(x)

    solver = js.Solver(js.LBFGS(memory_size=3, memory_dtype=memory_dtype), js.Zoom())
    x0 = jnp.array([1.0, -0.7, 0.3], dtype)
    state = solver.init(x0)
    x1, state = solver.step(fn, x0, state)
    assert int(state.direction.count) == 1
    g0, g1 = jax.grad(fn)(x0), jax.grad(fn)(x1)
    as32 = lambda v: np.asarray(v, np.float32)  # noqa: E731
    np.testing.assert_array_equal(as32(state.direction.s[0]), as32(x1) - as32(x0))
    np.testing.assert_array_equal(as32(state.direction.y[0]), as32(g1) - as32(g0))


@pytest.mark.parametrize("name", list(DIRECTIONS))
def test_gradient_replaced_changes_how_not_what(name):
    """Every direction, told that the gradient was replaced when it was not: the same state
    structure and dtypes (a jitted step does not retrace), and the same direction to rounding
    (L-BFGS's compact form then multiplies its memory by y instead of taking differences)."""
    direction = DIRECTIONS[name]()
    a = np.diag(np.linspace(1.0, 8.0, 6))
    rng = np.random.default_rng(11)
    with jax.enable_x64(True):
        hvp = lambda v: jnp.asarray(a) @ v  # noqa: E731
        x = jnp.asarray(rng.standard_normal(6))
        state = direction.init(x, jnp.float64)
        d, _, state = compute(direction, state, hvp(x), jnp.float64, hvp, x)
        for _ in range(3):
            x_new = x + 0.5 * d
            s, y = x_new - x, hvp(x_new) - hvp(x)
            state = direction.update(state, s, y, jnp.float64)
            x = x_new
            told = direction.gradient_replaced(state)
            assert jax.tree.structure(told) == jax.tree.structure(state)
            assert [v.dtype for v in jax.tree.leaves(told)] == [
                v.dtype for v in jax.tree.leaves(state)
            ]
            d_told, _, _ = compute(direction, told, hvp(x), jnp.float64, hvp, x)
            d, _, state = compute(direction, state, hvp(x), jnp.float64, hvp, x)
            np.testing.assert_allclose(d_told, d, rtol=1e-12, atol=1e-14)


@pytest.mark.program_shape
@pytest.mark.parametrize("form", ["two_loop", "compact"])
def test_lbfgs_update_reads_no_row_of_its_memory(form):
    """The update writes a pair into its slot without reading the slot's old row: a pair it
    does not keep goes to slot m, which does not exist, and is dropped. Masking the write with
    the old row read that row at every iteration of the solver's loop (at n = 1e6, 0.73 ms
    against 0.45 ms per buffer for a kept pair; benchmarks/HISTORY.md, round 10)."""
    direction = js.LBFGS(memory_size=4, form=form)
    x = jnp.arange(16, dtype=jnp.float32)
    state = direction.init(x, jnp.float32)

    def update(st, s, y, accept):
        return direction.update(st, s, y, jnp.float32, accept=accept)

    closed = jax.make_jaxpr(update)(state, x, x, True)
    leaves = jax.tree.leaves(state)
    buffers = {
        var
        for var, leaf in zip(closed.jaxpr.invars, leaves, strict=False)
        if leaf is state.s or leaf is state.y
    }
    assert len(buffers) == 2
    reads = [
        eqn.primitive.name
        for eqn in all_eqns(closed.jaxpr)
        if eqn.primitive.name in ("dynamic_slice", "gather", "slice") and eqn.invars[0] in buffers
    ]
    assert reads == []
    # A kept pair lands in slot `head`; one not kept leaves every slot as it was.
    kept = update(state, x, x + 1, True)
    np.testing.assert_array_equal(kept.s[0], x)
    np.testing.assert_array_equal(kept.y[0], x + 1)
    assert int(kept.head) == 1
    dropped = update(kept, 2 * x, -x, False)
    np.testing.assert_array_equal(dropped.s, kept.s)
    np.testing.assert_array_equal(dropped.y, kept.y)
    assert int(dropped.head) == 1
