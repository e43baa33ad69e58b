"""`js.batched_run` (issue 38): a pool of lanes inside one compiled loop, each lane taking the
next problem at the iteration its problem ends, gives per problem what
`jax.jit(jax.vmap(solver.run))` gives, bit for bit where XLA contracts no multiply-add into an
FMA, and compiles one program, nothing for a new batch of the same size.

The batches are 2-D Rosenbrock-like problems with a random scale b in [1, 1000] and random
starts, so their step counts vary several-fold; `max_steps` is set below the slowest so that
some problems end at it. 300 problems in a pool of 256 lanes: the lanes take new problems as
theirs end, and the last problems run in a pool of 32; and in a pool of 40 lanes, each of
which solves about 7 problems in turn.
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
LANES = 256  # widths 256, then 64 where the pool may shrink to 32 lanes (`narrow_pools`)
NARROW = 64
MAX_STEPS = 24
FEW = 40  # lanes: each lane solves several problems in turn
ROOT = pathlib.Path(__file__).resolve().parents[2]


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
    got = js.batched_run(solver, fn, x0, ab, lanes=lanes)
    steps = np.asarray(want.num_steps)
    assert steps.min() < MAX_STEPS // 2 and steps.max() == MAX_STEPS  # varied, some at the end
    return got, want


def float32_budget_case():
    """float32, and a budget of evaluations that ends some problems (`MAX_EVALS`)."""
    solver, fn, layout, dtype = float32_case()
    return (
        js.Solver(
            js.BFGS(), js.Backtracking(), gtol=1e-4, ftol=0.0, max_steps=MAX_STEPS, max_evals=30
        ),
        fn,
        layout,
        dtype,
    )


def narrow_pools():
    """Let the pool shrink below its 256 lanes (to 64 from 256), so that a test-sized batch
    runs a narrower pool too."""
    _batched.NARROWEST = 32


def check_bit_for_bit():
    """Run in a child process without FMA (see `test_bit_for_bit_without_fma`)."""
    narrow_pools()
    with jax.numpy_dtype_promotion("strict"):
        with jax.enable_x64(True):
            for name, a, b in leaf_pairs(*solve_both(float64_case(), 0)):
                np.testing.assert_array_equal(bits(a), bits(b), err_msg=f"float64 {name}")
            for name, a, b in leaf_pairs(*solve_both(float64_case(), 1, lanes=FEW)):
                np.testing.assert_array_equal(bits(a), bits(b), err_msg=f"float64 {name}, {FEW}")
        for name, a, b in leaf_pairs(*solve_both(float32_case(), 0, lanes=LANES - 1)):
            np.testing.assert_array_equal(bits(a), bits(b), err_msg=f"float32 {name}")
        got, want = solve_both(float32_budget_case(), 2, lanes=FEW)
        assert (np.asarray(want.status) == js.Status.MAX_EVALS).any()
        for name, a, b in leaf_pairs(got, want):
            np.testing.assert_array_equal(bits(a), bits(b), err_msg=f"max_evals {name}")


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="an x86 ISA flag")
def test_bit_for_bit_without_fma():
    """Without FMA (XLA's CPU code limited to AVX), every problem's params, value, grad, aux,
    status, iterate and state equal plain vmap's bit for bit: in float64 with a pytree x0 and
    aux, in a pool of 256 lanes that takes new problems and shrinks to 64 and in a pool of
    40 lanes that takes about 7 problems per lane; in float32 in 255 lanes, and with a
    budget of evaluations in 40. (Lean compiles: jaxsearch's own options for small problems,
    to save time.)"""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    lean = " --xla_cpu_use_fusion_emitters=false --xla_backend_optimization_level=1"
    env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_cpu_max_isa=AVX" + lean
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    script = "from tests.scale.test_batched import check_bit_for_bit; check_bit_for_bit()"
    completed = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]


def pool_iterations(need, widths) -> list[int]:
    """The iterations a pool runs at each of its `widths` for problems of `need` iterations
    each: every lane takes the next problem (the lowest lane first) at the iteration its own
    ends, and once none waits the pool goes to the next width where the problems still
    running fit."""
    free = np.zeros(widths[0], int)  # the iteration after which each lane is free
    start = np.zeros(need.size, int)
    for p, n in enumerate(need):
        lane = np.argmin(free)
        start[p], free[lane] = free[lane], free[lane] + n
    end, out, t = start + need, [], 0
    for width in widths[1:] + [0]:
        running = lambda t: np.sum((start <= t) & (end > t))  # noqa: E731
        stop = next(u for u in range(t, end.max() + 1) if u >= start.max() and running(u) <= width)
        out.append(stop - t)
        t = stop
    return out


def test_lanes_take_the_next_problem_at_the_iteration_theirs_ends(monkeypatch):
    """60 problems in 16 lanes, then 4: fn, which notes each evaluation on the host, is
    evaluated on every lane once per iteration of the pool (no evaluation of its own per
    problem, no chunks), and the pool runs for as many iterations as lanes that each take the
    next problem at the iteration theirs ends, and then shrink: a problem's iterations are
    its evaluations. A budget of evaluations (`max_evals`) ends some problems."""
    monkeypatch.setattr(_batched, "NARROWEST", 4)
    calls = []

    def noted(x, ab):
        jax.debug.callback(lambda x: calls.append(np.shape(x)), x)
        return plain(x, ab)

    budget = 30
    solver = js.Solver(
        js.BFGS(), js.Backtracking(), gtol=1e-4, ftol=0.0, max_steps=MAX_STEPS, max_evals=budget
    )
    x0, ab = problems(0, np.float32, size=60)
    result = jax.block_until_ready(js.batched_run(solver, noted, x0, ab, lanes=16))
    need, status = np.asarray(result.num_fun_evals), np.asarray(result.status)
    assert need.min() * 2 < need.max()
    wide, narrow = pool_iterations(need, [16, 4])
    assert narrow > 0 and len(calls) == 16 * wide + 4 * narrow
    # the budget of evaluations holds per problem, each started as a fresh run starts it
    assert need.max() == budget and (status == js.Status.MAX_EVALS).any()
    assert (need[status == js.Status.MAX_EVALS] == budget).all()


def test_first_call_compiles_one_program_and_a_new_batch_none(compiles, monkeypatch):
    """One program for the whole batch (the starts, the pool at 256 lanes and, where it may
    shrink to 32, at 64, the results); a new batch of the same size compiles nothing."""
    monkeypatch.setattr(_batched, "NARROWEST", 32)  # `narrow_pools`
    solver = js.Solver(js.Gradient(), js.Backtracking(), gtol=0.1, ftol=0.0, max_steps=MAX_STEPS)
    fn, dtype = plain, np.float32
    for seed, most in ((3, 1), (4, 0)):
        x0, ab = problems(seed, dtype)
        compiles.reset()
        result = js.batched_run(solver, fn, x0, ab, lanes=LANES)
        jax.block_until_ready(result)
        assert compiles.count == most
        steps = np.asarray(result.num_steps)
        assert steps.min() < MAX_STEPS // 2 and steps.max() == MAX_STEPS, np.bincount(steps)


def test_pool_widths(monkeypatch):
    assert _batched._widths(1024) == [1024, 256]
    assert _batched._widths(LANES) == [LANES]
    assert _batched._widths(16_384) == [16_384, 4096, 1024, 256]
    assert _batched._widths(1023) == [1023]  # 1023 // 4 < 256
    assert _batched._widths(255) == [255]
    monkeypatch.setattr(_batched, "NARROWEST", 32)  # `narrow_pools`
    assert _batched._widths(LANES) == [LANES, NARROW]


@pytest.mark.parametrize("value", [0, -1, True])
def test_lanes_must_be_a_positive_integer(value):
    x0, ab = problems(0, np.float32)
    with pytest.raises(ValueError, match="lanes"):
        js.batched_run(js.Solver(throw=False), plain, x0, ab, lanes=value)


def test_batch_axes_must_agree():
    x0, ab = problems(0, np.float32)
    solver = js.Solver(throw=False)
    with pytest.raises(ValueError, match=r"args\[0\] has a batch axis of 4"):
        js.batched_run(solver, plain, x0, ab[:4])
    with pytest.raises(ValueError, match="no batch axis"):
        js.batched_run(solver, plain, x0, jnp.float32(1.0))


def test_throw_is_refused():
    x0, ab = problems(0, np.float32)
    with pytest.raises(ValueError, match="throw=False"):
        js.batched_run(js.Solver(throw=True), plain, x0, ab)
