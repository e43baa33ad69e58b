"""`jax.vmap` over `Solver.run` and `Solver.step` (issue 8): each problem of a batch keeps its
own status, step count and evaluation count, a finished problem stops changing while the others
go on, and the results are those of the one-at-a-time runs.

Tolerances. Counters and statuses must match exactly. Params and values cannot be required to
match bitwise: XLA's CPU backend compiles the batched objective and the batched inner products
into other code than the unbatched ones, so f and its gradient at the same point already differ
in the last bit (Rosenbrock, float64, 64 points: 11 values and 36 gradients differ, by up to
2.5e-16 relative; `jnp.vdot` differs in half of 64 rows) before any solver is involved. A run
carries those differences along its trajectory: on the convex quartic below (float64, L-BFGS,
six batches of 64) final params differ by up to 1.3e-12 relative to max(|x|, 1), f by up to
1.8e-16; the asserts allow 1e-11 and 1e-15. On Rosenbrock the differences grow to 1e-6 and can
move a stopping decision by a step (seen: 71 steps batched, 70 alone), so it is not used here.
The float32 batch (BFGS + Backtracking) differs by one float32 ulp.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jaxsearch as js

CONVERGED = (js.Status.CONVERGED_GTOL, js.Status.CONVERGED_FTOL)


def quartic(x, cond):
    """Convex, minimum 0 at all ones; the quadratic part has condition number `cond`: harder
    (more steps) as `cond` grows, and from starts further away."""
    weights = cond ** jnp.linspace(0, 1, x.shape[0], dtype=x.dtype)
    return jnp.sum(weights * (x - 1) ** 2) + jnp.sum((x - 1) ** 4)


SOLVER = js.Solver()  # L-BFGS + Zoom
BATCH, N = 64, 6


def run_one(x0, cond):
    return SOLVER.run(quartic, x0, cond)


batched_run = jax.jit(jax.vmap(run_one))


def problems(batch, seed):
    """NumPy float64 starts in [-2, 2]^N and condition numbers from 1 to 10^4 (log-spaced)."""
    rng = np.random.default_rng(seed)
    x0s = rng.uniform(-2.0, 2.0, (batch, N))
    conds = np.logspace(0.0, 4.0, batch)
    return x0s, conds


def one_at_a_time(solver, fn, x0s, args):
    """`solver.run` on each row, as NumPy: one compiled program (rows become device arrays by
    `jnp.asarray` of NumPy rows: no program per row, as indexing a device array would compile)."""
    rows = [
        solver.run(fn, jnp.asarray(x0), jnp.asarray(a)) for x0, a in zip(x0s, args, strict=True)
    ]
    return jax.tree.map(lambda *leaves: np.stack([np.asarray(x) for x in leaves]), *rows)


def as_numpy(result):
    return jax.tree.map(np.asarray, result)


def assert_same_runs(batched, alone, *, rtol_params, atol_value):
    """Counters and statuses exact; params and value within the tolerance (module docstring)."""
    np.testing.assert_array_equal(batched.status, alone.status, err_msg="status")
    np.testing.assert_array_equal(batched.num_steps, alone.num_steps, err_msg="num_steps")
    np.testing.assert_array_equal(
        batched.num_fun_evals, alone.num_fun_evals, err_msg="num_fun_evals"
    )
    scale = np.maximum(np.abs(alone.params), 1)
    np.testing.assert_array_less(
        np.abs(batched.params - alone.params) / scale, rtol_params, err_msg="params"
    )
    np.testing.assert_allclose(batched.value, alone.value, rtol=0, atol=atol_value, err_msg="f")


@pytest.fixture(scope="module")
def runs64():
    """The batch of 64 float64 problems: vmapped, and one at a time."""
    x0s, conds = problems(BATCH, seed=0)
    with jax.enable_x64(True):
        batched = as_numpy(batched_run(jnp.asarray(x0s), jnp.asarray(conds)))
        alone = one_at_a_time(SOLVER, quartic, x0s, conds)
    return batched, alone


# ------------------------------------------------------------------------------------- run


def test_vmapped_run_equals_one_at_a_time(runs64):
    batched, alone = runs64
    assert batched.params.dtype == np.float64 and batched.params.shape == (BATCH, N)
    assert_same_runs(batched, alone, rtol_params=1e-11, atol_value=1e-15)
    # The batch is of mixed difficulty: each problem stopped after its own number of steps.
    steps = batched.num_steps
    assert len(np.unique(steps)) >= 20 and steps.max() >= 3 * steps.min(), steps
    assert len(np.unique(batched.num_fun_evals)) >= 20
    # ...and by its own criterion; all converged.
    assert set(batched.status.tolist()) == {int(s) for s in CONVERGED}


def test_vmapped_run_compiles_once_per_batch_shape(compiles):
    """Two different batches of the same shape share one compiled program."""
    with jax.enable_x64(True):
        batches = [jax.tree.map(jnp.asarray, problems(16, seed)) for seed in (1, 2)]
        compiles.reset()
        results = jax.block_until_ready([batched_run(*batch) for batch in batches])
        assert compiles.count == 1
    assert not np.array_equal(results[0].num_steps, results[1].num_steps)


@pytest.mark.parametrize("batched_axis", ["x0", "args"])
def test_vmap_over_x0_or_args_only(batched_axis):
    x0s, conds = problems(16, seed=3)
    with jax.enable_x64(True):
        if batched_axis == "x0":
            cond = conds[8]
            fn = jax.jit(jax.vmap(run_one, in_axes=(0, None)))
            batched = as_numpy(fn(jnp.asarray(x0s), jnp.asarray(cond)))
            alone = one_at_a_time(SOLVER, quartic, x0s, [cond] * len(x0s))
        else:
            x0 = np.array([-1.2, 1.0, -1.2, 1.0, -1.2, 1.0])
            fn = jax.jit(jax.vmap(run_one, in_axes=(None, 0)))
            batched = as_numpy(fn(jnp.asarray(x0), jnp.asarray(conds)))
            alone = one_at_a_time(SOLVER, quartic, [x0] * len(conds), conds)
    assert batched.params.shape == (16, N)
    assert_same_runs(batched, alone, rtol_params=1e-11, atol_value=1e-15)
    assert len(np.unique(batched.num_steps)) >= 4, batched.num_steps


def test_second_pairing_float32():
    """BFGS + Backtracking in float32, a batch of 8 quartics of condition 1 to 100."""
    solver = js.Solver(js.BFGS(), js.Backtracking(), gtol=1e-3)
    rng = np.random.default_rng(4)
    x0s = rng.uniform(-2.0, 2.0, (8, 4)).astype(np.float32)
    conds = np.logspace(0.0, 2.0, 8).astype(np.float32)
    fn = jax.jit(jax.vmap(functools.partial(solver.run, quartic)))
    batched = as_numpy(fn(jnp.asarray(x0s), jnp.asarray(conds)))
    alone = one_at_a_time(solver, quartic, x0s, conds)
    assert batched.params.dtype == np.float32 and batched.value.dtype == np.float32
    # A quartic's minimiser is flat (f' ~ x^3), so the two programs' float32 roundings move
    # params by some ulps of 1: 1e-6 held with jaxlib 0.10.2, 1.2e-6 with 0.10.0 (nox -s oldest).
    assert_same_runs(batched, alone, rtol_params=1e-5, atol_value=1e-8)
    assert len(np.unique(batched.num_steps)) >= 4, batched.num_steps


# ------------------------------------------------------------------------------------ step


STEPS = 40


def step_trajectory(solver, x0s, conds):
    """`STEPS` calls of the vmapped `solver.step` from a vmapped `init`, in one jitted scan:
    params, value, status, num_steps and num_fun_evals after each call, batch axis second."""

    def body(carry, _):
        params, state = jax.vmap(functools.partial(solver.step, quartic))(*carry, conds)
        record = (params, state.value, state.status, state.num_steps, state.num_fun_evals)
        return (params, state), record

    @jax.jit
    def trajectory(x0s):
        states = jax.vmap(solver.init)(x0s)
        return lax.scan(body, (x0s, states), None, length=STEPS)[1]

    return as_numpy(trajectory(x0s))


def assert_finished_problems_freeze(trajectory):
    params, value, status, num_steps, num_fun_evals = trajectory
    finished_at = []
    for i in range(params.shape[1]):
        done = np.flatnonzero(np.isin(status[:, i], [int(s) for s in CONVERGED]))
        if done.size == 0:
            continue
        k = done[0]
        finished_at.append(k)
        for name, leaf in (
            ("params", params),
            ("value", value),
            ("status", status),
            ("num_steps", num_steps),
            ("num_fun_evals", num_fun_evals),
        ):
            # bitwise: the same bytes after every later step
            later = [np.ascontiguousarray(x).tobytes() for x in leaf[k:, i]]
            assert len(set(later)) == 1, (name, i, k)
        # ...while another problem still moves after this one finished.
        if k + 1 < STEPS:
            assert np.any(params[k + 1 :] != params[k:-1]), i
    return finished_at


def test_vmapped_step_freezes_finished_problems():
    """With `ftol=0`, gtol is the only criterion: a problem converged by it takes no more steps
    (its params, value and counters stay bitwise the same) while the others continue."""
    solver = js.Solver(ftol=0.0)
    x0s, conds = problems(16, seed=5)
    with jax.enable_x64(True):
        trajectory = step_trajectory(solver, jnp.asarray(x0s), jnp.asarray(conds))
        finished_at = assert_finished_problems_freeze(trajectory)
        # Problems finish at different steps, and some are still running at the end.
        assert len(set(finished_at)) >= 4, finished_at
        assert len(finished_at) < 16
        params, value, status, num_steps, num_fun_evals = trajectory
        # A few problems against the unbatched step loop: the same counters after every call.
        for i in (int(np.argmin(num_steps[-1])), int(np.argmax(num_steps[-1])), 7):
            x, state = jnp.asarray(x0s[i]), solver.init(jnp.asarray(x0s[i]))
            for k in range(STEPS):
                x, state = solver.step(quartic, x, state, jnp.asarray(conds[i]))
                assert int(state.status) == status[k, i], (i, k)
                assert int(state.num_steps) == num_steps[k, i], (i, k)
                assert int(state.num_fun_evals) == num_fun_evals[k, i], (i, k)
                scale = np.maximum(np.abs(np.asarray(x)), 1)
                assert np.all(np.abs(np.asarray(x) - params[k, i]) / scale < 1e-10), (i, k)


def test_vmapped_step_freezes_problems_converged_by_ftol():
    x0s, conds = problems(16, seed=5)
    with jax.enable_x64(True):
        trajectory = step_trajectory(SOLVER, jnp.asarray(x0s), jnp.asarray(conds))
    status = trajectory[2]
    assert np.any(status == js.Status.CONVERGED_FTOL)
    assert_finished_problems_freeze(trajectory)
