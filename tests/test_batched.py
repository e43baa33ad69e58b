"""`js.batched_run` (issue 38): a batch solved `chunk_steps` at a time, the live problems
resumed in buckets, gives per problem what `jax.jit(jax.vmap(solver.run))` gives, bit for bit,
and compiles nothing per chunk or per new batch of the same size.

The batches are 2-D Rosenbrock-like problems with a random scale b in [1, 1000] and random
starts, so their step counts vary several-fold; `max_steps` is set below the slowest so that
some problems end at it, after a last chunk shorter than `chunk_steps`. 2 * 64 + 5 problems:
the buckets hold 5 (the batch's size modulo `LANES`) plus a multiple of 64.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js
from jaxsearch._batched import LANES, _placement

SIZE = 2 * LANES + 5
BUCKETS = (LANES + 5,)
MAX_STEPS = 20  # not a multiple of CHUNK: the last chunk runs 4 steps
CHUNK = 8


def rosenbrock(x, ab):
    """(a - x_1)^2 + b (x_2 - x_1^2)^2, and x_1 as aux."""
    x1, x2 = x["x1"][0], x["x2"][0]
    return (ab[0] - x1) ** 2 + ab[1] * (x2 - x1**2) ** 2, x1


def plain(x, ab):
    return rosenbrock({"x1": x[:1], "x2": x[1:]}, ab)[0]


def problems(seed, dtype):
    rng = np.random.default_rng(seed)
    x0 = rng.uniform(-2.0, 2.0, (SIZE, 2)).astype(dtype)
    ab = np.stack([rng.uniform(0.5, 1.5, SIZE), 10.0 ** rng.uniform(0.0, 3.0, SIZE)], 1)
    return jnp.asarray(x0), jnp.asarray(ab.astype(dtype))


def bits(leaf):
    """The leaf's bytes, per element: equal bits, NaNs and signed zeros included."""
    a = np.asarray(leaf)
    return (
        a.view(f"u{a.dtype.itemsize}") if a.dtype.kind == "f" or a.dtype.name == "bfloat16" else a
    )


def assert_bit_for_bit(got, want):
    names = ("params", "value", "grad", "aux", "status", "iterate", "state")
    for name in names:
        g, w = jax.tree.leaves(getattr(got, name)), jax.tree.leaves(getattr(want, name))
        assert len(g) == len(w), name
        for a, b in zip(g, w, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape, name
            np.testing.assert_array_equal(bits(a), bits(b), err_msg=name)


class Case:
    """A solver, fn and x0 layout, with its reference (`jit(vmap(run))`) compiled once."""

    def __init__(self, solver, fn, layout, dtype):
        self.solver, self.fn, self.layout, self.dtype = solver, fn, layout, dtype
        self.reference = jax.jit(jax.vmap(lambda x, ab: solver.run(fn, x, ab)))

    def batch(self, seed):
        x0, ab = problems(seed, self.dtype)
        return self.layout(x0), ab


def as_tree(x0):
    return {"x1": x0[:, :1], "x2": x0[:, 1:]}


@pytest.fixture(scope="module")
def float64_case():
    with jax.enable_x64(True):
        solver = js.Solver(gtol=1e-8, ftol=0.0, max_steps=MAX_STEPS, has_aux=True)
        yield Case(solver, rosenbrock, as_tree, np.float64)


@pytest.fixture(scope="module")
def float32_case():
    solver = js.Solver(js.BFGS(), js.Backtracking(), gtol=1e-4, ftol=0.0, max_steps=MAX_STEPS)
    return Case(solver, plain, lambda x0: x0, np.float32)


def check(case, seed, compiles=None):
    x0, ab = case.batch(seed)
    want = case.reference(x0, ab)
    if compiles is not None:
        compiles.reset()
    got = js.batched_run(case.solver, case.fn, x0, ab, chunk_steps=CHUNK, buckets=BUCKETS)
    steps = np.asarray(want.num_steps)
    assert steps.min() < MAX_STEPS // 2 and steps.max() == MAX_STEPS  # varied, some at the end
    assert_bit_for_bit(got, want)
    return got


def test_float64_pytree_aux_bit_for_bit_and_compiles_once(float64_case, compiles):
    with jax.enable_x64(True):
        check(float64_case, 0, compiles)
        # the first chunk, the later chunks of 8 steps and the last of 4 in at most 2 buckets
        assert 2 <= compiles.count <= 5
        check(float64_case, 1, compiles)  # a new batch of the same size
        assert compiles.count == 0


def test_float32_bit_for_bit_and_compiles_once(float32_case, compiles):
    check(float32_case, 0, compiles)
    assert compiles.count <= 5
    check(float32_case, 2, compiles)
    assert compiles.count == 0


def test_only_live_problems_resume_in_the_smallest_bucket():
    size, tail = SIZE, SIZE % LANES
    sizes = [SIZE, LANES + tail]
    live = np.array([3, 70, SIZE - 4, SIZE - 1])  # two in the body, two of the last five
    index, keep = _placement(live, size, sizes)
    assert index.shape == (LANES + tail,)
    np.testing.assert_array_equal(np.sort(index[keep]), live)  # each live problem kept once
    assert set(index[~keep]) <= set(live)  # spare places hold copies of live problems
    # the batch's last problems keep their distance from the bucket's end
    assert index[-4] == SIZE - 4 and index[-1] == SIZE - 1 and keep[-4] and keep[-1]
    many = np.arange(LANES + 1)  # more than the small bucket's body: the whole batch's
    index, keep = _placement(many, size, sizes)
    assert index.shape == (SIZE,)
    np.testing.assert_array_equal(np.sort(index[keep]), many)


def test_default_buckets_keep_the_residue():
    from jaxsearch._batched import _buckets

    for size in (10_000, 500, SIZE, 40):
        sizes = _buckets(None, size)
        assert sizes[0] == size and sizes == sorted(sizes, reverse=True)
        assert all((s - size % LANES) % LANES == 0 for s in sizes)
    assert _buckets(None, 10_000) == [10_000, 5008, 2512, 1296, 656, 336, 208, 144]


@pytest.mark.parametrize("chunk_steps", [0, -1, True])
def test_chunk_steps_must_be_a_positive_integer(chunk_steps):
    x0, ab = problems(0, np.float32)
    with pytest.raises(ValueError, match="chunk_steps"):
        js.batched_run(js.Solver(), plain, x0, ab, chunk_steps=chunk_steps)


def test_batch_axes_must_agree():
    x0, ab = problems(0, np.float32)
    with pytest.raises(ValueError, match=r"args\[0\] has a batch axis of 4"):
        js.batched_run(js.Solver(), plain, x0, ab[:4])
    with pytest.raises(ValueError, match="no batch axis"):
        js.batched_run(js.Solver(), plain, x0, jnp.float32(1.0))


@pytest.mark.parametrize("buckets", [(10,), (SIZE + LANES,), (0,)])
def test_buckets_must_keep_the_residue(buckets):
    x0, ab = problems(0, np.float32)
    with pytest.raises(ValueError, match="bucket"):
        js.batched_run(js.Solver(), plain, x0, ab, buckets=buckets)


@pytest.mark.parametrize(
    "solver, match",
    [(js.Solver(throw=True), "throw=False"), (js.Solver(max_evals=50), "max_evals")],
)
def test_settings_a_chunked_run_cannot_keep(solver, match):
    x0, ab = problems(0, np.float32)
    with pytest.raises(ValueError, match=match):
        js.batched_run(solver, plain, x0, ab)
