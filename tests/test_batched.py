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
LANES = 256  # widths 256, then 32
NARROW = 32
MAX_STEPS = 24
FEW = 40  # lanes: each lane solves several problems in turn
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


def check_bit_for_bit():
    """Run in a child process without FMA (see `test_bit_for_bit_without_fma`)."""
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
    aux, in a pool of 256 lanes that takes new problems and shrinks to 32 and in a pool of
    40 lanes that takes about 7 problems per lane; in float32 in 255 lanes, and with a
    budget of evaluations in 40. (Lean compiles: jaxsearch's own options for small problems,
    to save time.)"""
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


def first_free(need, width: int) -> int:
    """The iterations a pool of `width` lanes runs for problems of `need` iterations each,
    where each lane takes the next problem (the lowest lane first) at the iteration its own
    ends: the last iteration at which a lane is busy."""
    free = np.zeros(width, int)  # the iteration after which each lane is free
    for n in need:
        free[np.argmin(free)] += n
    return int(free.max())


def test_lanes_take_the_next_problem_at_the_iteration_theirs_ends():
    """60 problems in 8 lanes (one width): fn, which notes each evaluation on the host, is
    evaluated on every lane once per iteration of the pool (no evaluation of its own per
    problem, no chunks), and the pool runs for as many iterations as lanes that each take the
    next problem at the iteration theirs ends: a problem's iterations are its evaluations.
    A budget of evaluations (`max_evals`) ends some problems."""
    calls = []

    def noted(x, ab):
        jax.debug.callback(lambda x: calls.append(np.shape(x)), x)
        return plain(x, ab)

    budget = 30
    solver = js.Solver(
        js.BFGS(), js.Backtracking(), gtol=1e-4, ftol=0.0, max_steps=MAX_STEPS, max_evals=budget
    )
    x0, ab = problems(0, np.float32, size=60)
    result = jax.block_until_ready(js.batched_run(solver, noted, x0, ab, lanes=8))
    need, status = np.asarray(result.num_fun_evals), np.asarray(result.status)
    assert need.min() * 2 < need.max()
    assert len(calls) == 8 * first_free(need, 8)
    # the budget of evaluations holds per problem, each started as a fresh run starts it
    assert need.max() == budget and (status == js.Status.MAX_EVALS).any()
    assert (need[status == js.Status.MAX_EVALS] == budget).all()


def test_first_call_compiles_one_program_and_a_new_batch_none(compiles):
    """One program for the whole batch (the starts, the pool at 256 and at 32 lanes, the
    results); a new batch of the same size compiles nothing."""
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


def test_pool_widths():
    assert _batched._widths(1024) == [1024, 128]
    assert _batched._widths(LANES) == [LANES, NARROW]
    assert _batched._widths(16_384) == [16_384, 2048, 256, 32]
    assert _batched._widths(255) == [255]


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
