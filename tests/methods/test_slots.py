"""L-BFGS's slot reads and writes (`_direction/_slots.py`, issue 48 item 1).

On a TPU, small buffers are read and written by selects, since a vmapped gather or scatter
is slow there and a vmapped `mode="drop"` scatter in a while loop wrote wrong rows. The CPU
suite cannot run a TPU, so the `selected` fixture makes this backend take the TPU's path, and
the tests check it against NumPy and against the sliced path: the same values exactly, the
same derivatives, and no gather or scatter left in a vmapped L-BFGS run.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js
from jaxsearch._direction import _slots

from ..problems import rosenbrock_f32
from ..program_inspection import all_eqns

MODES = ("sliced", "selected")
CONVERGED = {int(js.Status.CONVERGED_GTOL), int(js.Status.CONVERGED_FTOL)}
DTYPES = (jnp.float16, jnp.bfloat16, jnp.float32, jnp.complex64)


def _take_path(monkeypatch, tpu: bool):
    """This backend takes the TPU's path (`tpu`) or the sliced one; programs traced under
    the other must not be reused."""
    monkeypatch.setattr(_slots, "_writes_selected", lambda: tpu)
    jax.clear_caches()


@pytest.fixture(params=MODES)
def mode(request, monkeypatch):
    _take_path(monkeypatch, request.param == "selected")
    yield request.param
    jax.clear_caches()


@pytest.fixture
def selected(monkeypatch):
    _take_path(monkeypatch, True)
    yield
    jax.clear_caches()


def _buffers(batch, m, n, dtype, seed=0):
    rng = np.random.default_rng(seed)
    values = rng.standard_normal((batch, m, n)).astype(np.float32)
    return np.array(jnp.asarray(values, dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(64, 7, 3), (3, 7, 3000)], ids=["small", "large"])
def test_slot_reads_and_writes_match_numpy_under_vmap(mode, dtype, shape):
    """Reads, writes and reorders of one slot per problem, vmapped, are NumPy's exactly; a
    large buffer (over `SELECT_LIMIT` elements) is read by a gather on the TPU's path too.
    Writes also where the problems share the slot, and unbatched."""
    batch, m, n = shape
    buffers = _buffers(batch, m, n, dtype)
    buffers[:, 2] = np.inf  # a slot that is never read must not leak into a read
    rng = np.random.default_rng(1)
    index = rng.choice([0, 1, 3, 4, 5, 6], batch).astype(np.int32)
    keep = rng.random(batch) < 0.5
    new = np.array(jnp.asarray(rng.standard_normal((batch, n)).astype(np.float32), dtype))

    read = jax.jit(jax.vmap(_slots.slot))(buffers, index)
    np.testing.assert_array_equal(np.asarray(read), buffers[np.arange(batch), index])

    written = np.asarray(jax.jit(jax.vmap(_slots.with_slot))(buffers, index, new, keep))
    expected = buffers.copy()
    expected[np.arange(batch)[keep], index[keep]] = new[keep]
    np.testing.assert_array_equal(written, expected)

    always = np.asarray(
        jax.jit(jax.vmap(lambda b, i, v: _slots.with_slot(b, i, v)))(buffers, index, new)
    )
    expected = buffers.copy()
    expected[np.arange(batch), index] = new
    np.testing.assert_array_equal(always, expected)

    shared = jax.jit(jax.vmap(_slots.with_slot, in_axes=(0, None, 0, 0)))
    expected = buffers.copy()
    expected[np.arange(batch)[keep], index[0]] = new[keep]
    np.testing.assert_array_equal(np.asarray(shared(buffers, index[0], new, keep)), expected)

    one = jax.jit(_slots.with_slot)(buffers[0], index[0], new[0], keep[0])
    expected = buffers[0].copy()
    expected[index[0]] = new[0] if keep[0] else expected[index[0]]
    np.testing.assert_array_equal(np.asarray(one), expected)

    order = np.stack([rng.permutation(m) for _ in range(batch)]).astype(np.int32)
    reordered = np.asarray(jax.jit(jax.vmap(_slots.in_order))(buffers, order))
    np.testing.assert_array_equal(reordered, np.take_along_axis(buffers, order[:, :, None], 1))


def test_slot_derivatives(mode):
    """The read's and the write's derivatives are those of indexing: one-hot cotangents."""
    m, n = 5, 4
    buffer = jnp.asarray(_buffers(1, m, n, jnp.float32)[0])
    weights = jnp.arange(1.0, n + 1.0)
    index = jnp.int32(3)

    grad = jax.grad(lambda b: jnp.sum(weights * _slots.slot(b, index)))(buffer)
    expected = np.zeros((m, n), np.float32)
    expected[3] = np.asarray(weights)
    np.testing.assert_array_equal(np.asarray(grad), expected)

    def written(b, v, keep):
        return jnp.sum(
            jnp.arange(1.0, m * n + 1.0).reshape(m, n) * _slots.with_slot(b, index, v, keep)
        )

    for keep in (True, False):
        db, dv = jax.grad(written, argnums=(0, 1))(buffer, weights, jnp.asarray(keep))
        coefficients = np.arange(1.0, m * n + 1.0).reshape(m, n)
        expected_db = coefficients.copy()
        if keep:
            expected_db[3] = 0
        np.testing.assert_array_equal(np.asarray(db), expected_db)
        np.testing.assert_array_equal(np.asarray(dv), coefficients[3] if keep else np.zeros(n))

    # Under vmap, each problem its own slot (the TPU path's select) and a shared one (its
    # slice): the same one-hot cotangents per problem.
    indices, keeps = jnp.array([3, 1, 3]), jnp.array([True, True, False])
    buffers, values = jnp.stack([buffer] * 3), jnp.stack([weights] * 3)

    def per_problem(b, v, i, keep):
        coefficients = jnp.arange(1.0, m * n + 1.0).reshape(m, n)
        return jnp.sum(coefficients * _slots.with_slot(b, i, v, keep))

    for in_axes, slots in (((0, 0, 0, 0), indices), ((0, 0, None, 0), jnp.int32(3))):
        grad = jax.jit(jax.vmap(jax.grad(per_problem, argnums=(0, 1)), in_axes=in_axes))
        db, dv = grad(buffers, values, slots, keeps)
        for k in range(3):
            i, keep = int(jnp.broadcast_to(slots, (3,))[k]), bool(keeps[k])
            coefficients = np.arange(1.0, m * n + 1.0).reshape(m, n)
            expected_db = coefficients.copy()
            if keep:
                expected_db[i] = 0
            np.testing.assert_array_equal(np.asarray(db[k]), expected_db)
            np.testing.assert_array_equal(
                np.asarray(dv[k]), coefficients[i] if keep else np.zeros(n)
            )


def _vmapped_run(form, memory_size=10, bounds=None):
    solver = js.Solver(js.LBFGS(memory_size=memory_size, form=form), gtol=1e-4, max_steps=300)
    options = {} if bounds is None else {"bounds": bounds}
    return jax.jit(jax.vmap(lambda x: solver.run(rosenbrock_f32, x, **options)))


def _starts(batch):
    noise = jax.random.normal(jax.random.key(3), (batch, 2), jnp.float32)
    return jnp.array([-1.2, 1.0], jnp.float32) + 0.5 * noise


@pytest.fixture(scope="module")
def sliced_results():
    """The vmapped runs on this backend's own (sliced) path, once per module."""
    x0s = _starts(48)
    return {
        (form, bounded): _vmapped_run(form, bounds=(-2.0, 0.9) if bounded else None)(x0s)
        for form in ("two_loop", "compact")
        for bounded in (False, True)
        if not (bounded and form == "compact")
    }


@pytest.mark.parametrize(
    ("form", "bounded"), [("two_loop", False), ("compact", False), ("two_loop", True)]
)
def test_selected_runs_match_sliced_runs(selected, sliced_results, form, bounded):
    """A vmapped L-BFGS run (both forms, and L-BFGS-B) on the TPU's select path converges
    where the sliced path does, to the same params. Two programs compiled apart round apart
    (tests/scale/test_vmap.py): near the end one may stop by ftol where the other stops by gtol, so
    statuses are compared as converged and params to the stopping tolerance's accuracy."""
    expected = sliced_results[(form, bounded)]
    got = _vmapped_run(form, bounds=(-2.0, 0.9) if bounded else None)(_starts(48))
    for result in (got, expected):
        assert set(np.asarray(result.status).tolist()) <= CONVERGED
    np.testing.assert_allclose(np.asarray(got.params), np.asarray(expected.params), atol=2e-3)


@pytest.mark.program_shape
@pytest.mark.parametrize("form", ["two_loop", "compact"])
def test_selected_vmapped_run_has_no_gather_or_scatter(selected, form):
    """Under vmap on the select path, no gather and no scatter is left in the L-BFGS run: the
    operations that were slow on a TPU and, as a dropped scatter, wrong there."""
    solver = js.Solver(js.LBFGS(form=form), gtol=1e-4, max_steps=300)
    jaxpr = jax.make_jaxpr(jax.vmap(lambda x: solver.run(rosenbrock_f32, x).params))(_starts(8))
    names = [eqn.primitive.name for eqn in all_eqns(jaxpr.jaxpr)]
    assert not [name for name in names if "gather" in name or "scatter" in name]


@pytest.mark.program_shape
@pytest.mark.parametrize("n", [3, 3000], ids=["small", "large"])
def test_tpu_path_writes_without_scatter(selected, n):
    """On the TPU's path a vmapped write is no scatter at any size: a vmapped scatter in a
    while loop wrote wrong rows there, in bounds too (benchmarks/studies/tpu_vmap_failures.py)."""
    buffers = jnp.zeros((4, 7, n), jnp.float32)
    write = jax.vmap(_slots.with_slot)
    jaxpr = jax.make_jaxpr(write)(buffers, jnp.arange(4), jnp.ones((4, n)), jnp.ones(4, bool))
    assert not [e for e in all_eqns(jaxpr.jaxpr) if "scatter" in e.primitive.name]


@pytest.mark.program_shape
@pytest.mark.parametrize("batched", ["one problem", "shared slot"])
def test_tpu_path_writes_by_select_even_where_the_slot_is_shared(selected, batched):
    """On the TPU's path a write is a select over the whole buffer even where the slot index
    is not batched: a slice written in place there made the MLP run of
    benchmarks/suite/networks.py 58% slower on a TPU v5e (0.106 to 0.168 s; `_slots`' docstring)."""
    m, n = 7, 3000
    write = _slots.with_slot
    arguments = (jnp.zeros((m, n)), jnp.int32(2), jnp.ones(n), jnp.bool_(True))
    if batched == "shared slot":
        write = jax.vmap(write, in_axes=(0, None, 0, 0))
        arguments = (jnp.zeros((4, m, n)), jnp.int32(2), jnp.ones((4, n)), jnp.ones(4, bool))
    eqns = list(all_eqns(jax.make_jaxpr(write)(*arguments).jaxpr))
    shape = arguments[0].shape
    assert not [e for e in eqns if e.primitive.name == "dynamic_update_slice"]
    assert [e for e in eqns if e.primitive.name == "select_n" and e.outvars[0].aval.shape == shape]
    assert not [e for e in eqns if "scatter" in e.primitive.name]
