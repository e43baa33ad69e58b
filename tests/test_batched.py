"""`js.batched_run` (issue 38): a pool of lanes that run a chunk of steps at a time and take
the next problems as theirs end gives per problem what `jax.jit(jax.vmap(solver.run))` gives,
bit for bit where XLA contracts no multiply-add into an FMA, and compiles nothing per chunk
or per new batch of the same size.

The batches are 2-D Rosenbrock-like problems with a random scale b in [1, 1000] and random
starts, so their step counts vary several-fold; `max_steps` is set below the slowest so that
some problems end at it. 300 problems in a pool of 256 lanes: the lanes take new problems as
theirs end, and the last problems run in a pool of 32.
"""

import os
import pathlib
import platform
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js
from jaxsearch import _batched

SIZE = 300
LANES = 256  # widths 256, then 32
NARROW = 32
MAX_STEPS = 24
CHUNK = 8
ROOT = pathlib.Path(__file__).resolve().parents[1]


def rosenbrock(x, ab):
    """(a - x_1)^2 + b (x_2 - x_1^2)^2, and x_1 as aux."""
    x1, x2 = x["x1"][0], x["x2"][0]
    return (ab[0] - x1) ** 2 + ab[1] * (x2 - x1**2) ** 2, x1


def plain(x, ab):
    return rosenbrock({"x1": x[:1], "x2": x[1:]}, ab)[0]


def problems(seed, dtype, size=SIZE):
    rng = np.random.default_rng(seed)
    x0 = rng.uniform(-2.0, 2.0, (size, 2)).astype(dtype)
    ab = np.stack([rng.uniform(0.5, 1.5, size), 10.0 ** rng.uniform(0.0, 3.0, size)], 1)
    return jnp.asarray(x0), jnp.asarray(ab.astype(dtype))


def as_tree(x0):
    return {"x1": x0[:, :1], "x2": x0[:, 1:]}


def float64_case():
    solver = js.Solver(gtol=1e-8, ftol=0.0, max_steps=MAX_STEPS, has_aux=True)
    return solver, rosenbrock, as_tree, np.float64


def float32_case():
    solver = js.Solver(js.BFGS(), js.Backtracking(), gtol=1e-4, ftol=0.0, max_steps=MAX_STEPS)
    return solver, plain, lambda x0: x0, np.float32


def bits(leaf):
    """The leaf's bytes, per element: equal bits, NaNs and signed zeros included."""
    a = np.asarray(leaf)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind == "f" else a


NAMES = ("params", "value", "grad", "aux", "status", "iterate", "state")


def leaf_pairs(got, want):
    for name in NAMES:
        g, w = jax.tree.leaves(getattr(got, name)), jax.tree.leaves(getattr(want, name))
        assert len(g) == len(w), name
        for a, b in zip(g, w, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape, name
            yield name, a, b


def solve_both(case, seed, lanes=LANES):
    """(batched_run's result, plain vmap's) on the case's batch `seed`."""
    solver, fn, layout, dtype = case
    x0, ab = problems(seed, dtype)
    x0 = layout(x0)
    want = jax.jit(jax.vmap(lambda x, ab: solver.run(fn, x, ab)))(x0, ab)
    got = js.batched_run(solver, fn, x0, ab, chunk_steps=CHUNK, lanes=lanes)
    steps = np.asarray(want.num_steps)
    assert steps.min() < MAX_STEPS // 2 and steps.max() == MAX_STEPS  # varied, some at the end
    return got, want


def check_bit_for_bit():
    """Run in a child process without FMA (see `test_bit_for_bit_without_fma`)."""
    with jax.numpy_dtype_promotion("strict"):
        with jax.enable_x64(True):
            for name, a, b in leaf_pairs(*solve_both(float64_case(), 0)):
                np.testing.assert_array_equal(bits(a), bits(b), err_msg=f"float64 {name}")
        for name, a, b in leaf_pairs(*solve_both(float32_case(), 0, lanes=LANES - 1)):
            np.testing.assert_array_equal(bits(a), bits(b), err_msg=f"float32 {name}")


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="an x86 ISA flag")
def test_bit_for_bit_without_fma():
    """Without FMA (XLA's CPU code limited to AVX), every problem's params, value, grad, aux,
    status, iterate and state equal plain vmap's bit for bit: in float64 with a pytree x0 and
    aux, in a pool of 256 lanes that takes new problems and shrinks to 32, and in float32 in
    255 lanes. (Lean compiles: jaxsearch's own options for small problems, to save time.)"""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    lean = " --xla_cpu_use_fusion_emitters=false --xla_backend_optimization_level=1"
    env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_cpu_max_isa=AVX" + lean
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    script = "from tests.test_batched import check_bit_for_bit; check_bit_for_bit()"
    completed = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]


class Pool:
    """Stands in for the pool's compiled chunk: problem p runs `need[p]` chunks; records each
    chunk's width and the problems that start in it."""

    def __init__(self, need):
        self.need, self.done, self.chunks = need, np.zeros_like(need), []

    def __call__(self, settings, carry, pool):
        _, (fresh, owner, live) = settings
        fresh, owner, live = np.asarray(fresh), np.asarray(owner), np.asarray(live)
        self.chunks.append((fresh.size, fresh[fresh >= 0], int(live.sum())))
        np.add.at(self.done, owner[live], 1)
        return carry, pool, jnp.asarray(live & (self.done[owner] < self.need[owner]))


def fake_run(monkeypatch, need, **kwargs):
    pool = Pool(need)
    monkeypatch.setattr(_batched, "_chunk", pool)
    x0, ab = problems(0, np.float32, size=need.size)
    js.batched_run(js.Solver(throw=False), plain, x0, ab, **kwargs)
    return pool


def test_lanes_take_the_next_problems_as_theirs_end(monkeypatch):
    """300 problems of 1 to 12 chunks each in 256 lanes: each problem starts once, in order,
    in a lane that freed up, and runs its chunks; once none waits and at most 32 run, the pool
    is 32 lanes wide."""
    need = np.random.default_rng(0).integers(1, 13, SIZE)
    pool = fake_run(monkeypatch, need, lanes=LANES)
    np.testing.assert_array_equal(pool.done, need)
    started = np.concatenate([fresh for _, fresh, _ in pool.chunks])
    np.testing.assert_array_equal(started, np.arange(SIZE))
    widths = np.array([width for width, _, _ in pool.chunks])
    running = np.array([count for _, _, count in pool.chunks])
    last_start = max(i for i, (_, fresh, _) in enumerate(pool.chunks) if fresh.size)
    assert set(widths[: last_start + 1]) == {LANES}  # full width while problems wait
    np.testing.assert_array_equal(running[:last_start], LANES)  # every lane busy
    narrow = (np.arange(widths.size) > last_start) & (running <= NARROW)
    np.testing.assert_array_equal(widths[narrow], NARROW)
    assert narrow.any() and set(widths) == {LANES, NARROW}


def test_a_batch_narrower_than_lanes_is_one_pool(monkeypatch):
    pool = fake_run(monkeypatch, np.arange(1, 11))
    assert {width for width, _, _ in pool.chunks} == {10}


def test_first_call_compiles_a_few_programs_and_a_new_batch_none(compiles):
    """The start, a gather into the pool, the pool's program at 256 and at 32 lanes, and a
    gather into the narrower pool; a new batch of the same size compiles nothing."""
    solver = js.Solver(js.Gradient(), js.Backtracking(), gtol=0.1, ftol=0.0, max_steps=MAX_STEPS)
    fn, dtype = plain, np.float32
    for seed, most in ((3, 5), (4, 0)):
        x0, ab = problems(seed, dtype)
        compiles.reset()
        result = js.batched_run(solver, fn, x0, ab, chunk_steps=CHUNK, lanes=LANES)
        jax.block_until_ready(result)
        assert compiles.count <= most
        steps = np.asarray(result.num_steps)
        assert steps.min() < MAX_STEPS // 2 and steps.max() == MAX_STEPS, np.bincount(steps)


def test_pool_widths():
    assert _batched._widths(1024) == [1024, 128]
    assert _batched._widths(LANES) == [LANES, NARROW]
    assert _batched._widths(16_384) == [16_384, 2048, 256, 32]
    assert _batched._widths(255) == [255]


@pytest.mark.parametrize("name", ["chunk_steps", "lanes"])
@pytest.mark.parametrize("value", [0, -1, True])
def test_counts_must_be_positive_integers(name, value):
    x0, ab = problems(0, np.float32)
    with pytest.raises(ValueError, match=name):
        js.batched_run(js.Solver(throw=False), plain, x0, ab, **{name: value})


def test_chunk_steps_must_divide_max_steps():
    x0, ab = problems(0, np.float32)
    with pytest.raises(ValueError, match="multiple of chunk_steps"):
        js.batched_run(js.Solver(throw=False, max_steps=20), plain, x0, ab, chunk_steps=8)


def test_batch_axes_must_agree():
    x0, ab = problems(0, np.float32)
    solver = js.Solver(throw=False)
    with pytest.raises(ValueError, match=r"args\[0\] has a batch axis of 4"):
        js.batched_run(solver, plain, x0, ab[:4])
    with pytest.raises(ValueError, match="no batch axis"):
        js.batched_run(solver, plain, x0, jnp.float32(1.0))


@pytest.mark.parametrize(
    "solver, match",
    [(js.Solver(throw=True), "throw=False"), (js.Solver(max_evals=50), "max_evals")],
)
def test_settings_a_chunked_run_cannot_keep(solver, match):
    x0, ab = problems(0, np.float32)
    with pytest.raises(ValueError, match=match):
        js.batched_run(solver, plain, x0, ab)
