"""The finer stopping rules of `Solver`: `xtol` (the change of params in a step), `max_evals` (a
budget of evaluations of fn) and `stop_when` (the caller's rule on the step's record), each
with its own status and message, in `run`, `step` and under `jax.vmap`."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js
from jaxsearch import _history


def halving(params):
    """0.5 |x|^2, summed over leaves in float32: steepest descent with a fixed step of 0.5
    halves every coordinate, so from x0 = 1 the k-th step changes x by exactly 2^-k, in every
    dtype."""
    return 0.5 * sum(jnp.sum(leaf.astype(jnp.float32) ** 2) for leaf in jax.tree.leaves(params))


def halving_solver(xtol):
    return js.Solver(js.Gradient(), js.FixedStep(0.5), gtol=1e-12, ftol=0.0, xtol=xtol)


def first_halving_step(xtol: float) -> int:
    """The first k with 2^-k <= xtol: the step at which xtol ends the halving run."""
    k = 1
    while 2.0**-k > xtol:
        k += 1
    return k


def rosenbrock(x):
    return jnp.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


X0 = (-1.2, 1.0)

# ----------------------------------------------------------------------------------- xtol


@pytest.mark.parametrize("dtype", ["float16", "mixed"])
def test_xtol_ends_the_first_step_that_moves_x_by_at_most_xtol(dtype):
    """In float16, and in a pytree mixing float16, bfloat16, float32 and float64, the halving
    run ends CONVERGED_XTOL (a success) at step 10, the first whose change 2^-10 <= 1e-3, far
    before gtol (1e-12) would hold; params are 2^-10 exactly."""
    with jax.enable_x64(True):
        if dtype == "mixed":
            x0 = {
                "a": jnp.ones(2, jnp.float16),
                "b": jnp.ones((), jnp.bfloat16),
                "c": jnp.ones(3, jnp.float32),
                "d": jnp.ones(1, jnp.float64),
            }
        else:
            x0 = jnp.ones(3, dtype)
        result = halving_solver(1e-3).run(halving, x0)
        assert js.Status(result.status) is js.Status.CONVERGED_XTOL, result.message
        assert bool(result.success)
        assert int(result.num_steps) == first_halving_step(1e-3) == 10
        for leaf, start in zip(jax.tree.leaves(result.params), jax.tree.leaves(x0), strict=True):
            assert leaf.dtype == start.dtype
            np.testing.assert_array_equal(np.asarray(leaf, np.float64), 2.0**-10)
        assert result.message == (
            "Converged: the last step changed no parameter by more than xtol."
        )


def test_xtol_as_an_array_compiles_once(compiles):
    """xtol given as 0-d arrays is a dynamic leaf: two values, one compiled program; each run
    ends at its closed-form step (float64)."""
    with jax.enable_x64(True):
        x0 = jnp.ones(2)
        loose = halving_solver(jnp.asarray(1e-3)).run(halving, x0)
        compiles.reset()
        tight = halving_solver(jnp.asarray(1e-6)).run(halving, x0)
        jax.block_until_ready(tight)
        assert compiles.count == 0
        assert [int(loose.num_steps), int(tight.num_steps)] == [10, first_halving_step(1e-6)]
        assert (
            list(js.Status(jnp.stack([loose.status, tight.status])))
            == [js.Status.CONVERGED_XTOL] * 2
        )
        # xtol = 0 (an array) is off: the run goes on to gtol
        off = halving_solver(jnp.asarray(0.0)).run(halving, x0)
        assert js.Status(off.status) is js.Status.CONVERGED_GTOL


def test_settings_are_checked():
    with pytest.raises(ValueError, match=r"xtol must be non-negative"):
        js.Solver(xtol=-1.0)
    with pytest.raises(ValueError, match=r"max_evals must be an integer >= 1"):
        js.Solver(max_evals=0)
    with pytest.raises(TypeError, match=r"max_evals"):
        js.Solver(max_evals=jnp.asarray(3))
    with pytest.raises(TypeError, match=r"stop_when"):
        js.Solver(stop_when=1.0)
    assert js.Solver(max_evals=np.int64(5)).max_evals == 5


def test_new_statuses_keep_the_old_codes():
    assert [int(s) for s in js.Status][:7] == list(range(7))
    assert int(js.Status.CONVERGED_XTOL) == 7
    assert int(js.Status.MAX_EVALS) == 8
    assert int(js.Status.STOPPED) == 9
    assert js.Status.CONVERGED_XTOL.converged
    assert not js.Status.MAX_EVALS.converged and not js.Status.STOPPED.converged


# ------------------------------------------------------------------------------ max_evals

BUDGET = 7
PAIRS = [(d, s) for d in ("LBFGS", "BFGS", "NonlinearCG") for s in ("Zoom", "Backtracking")]


@pytest.mark.parametrize(("direction", "search"), PAIRS)
def test_max_evals_is_never_exceeded(direction, search):
    """With a budget of 7 evaluations (Rosenbrock needs dozens), every pair stops with
    exactly 7 (float32), MAX_EVALS, not a success; no step recorded past the budget."""
    solver = js.Solver(getattr(js, direction)(), getattr(js, search)(), max_evals=BUDGET)
    result = solver.run(rosenbrock, jnp.array(X0), history=True)
    assert js.Status(result.status) is js.Status.MAX_EVALS, result.message
    assert not bool(result.success)
    assert int(result.num_fun_evals) == BUDGET
    history = result.history.to_numpy()
    assert history["num_fun_evals"].max() <= BUDGET
    assert len(history["step"]) == int(result.num_steps) + 1  # x0 and each step
    assert result.message == "Stopped: max_evals evaluations of f reached before convergence."


@pytest.fixture(scope="module")
def reference():
    """The default solver's float64 Rosenbrock run without a budget, with its history."""
    with jax.enable_x64(True):
        result = js.Solver().run(rosenbrock, jnp.array(X0), history=True)
        assert js.Status(result.status) is js.Status.CONVERGED_GTOL
        return result.history.to_numpy()


def test_max_evals_cuts_a_search_off(reference):
    """A budget that runs out inside step k's search (float64): the search is cut off, the
    step takes none and ends MAX_EVALS, and the run returns the iterate of step k - 1, as the
    unbudgeted run had it."""
    multi = np.flatnonzero(reference["step_evals"] >= 2)  # row k is step k (row 0: x0)
    k = int(reference["step"][multi[multi > 1][0]])  # a step after the first with >= 2 trials
    budget = int(reference["num_fun_evals"][k - 1]) + 1
    with jax.enable_x64(True):
        result = js.Solver(max_evals=budget).run(rosenbrock, jnp.array(X0))
    assert js.Status(result.status) is js.Status.MAX_EVALS
    assert int(result.num_fun_evals) == budget
    assert int(result.num_steps) == k
    assert js.Status(result.state.status) is js.Status.MAX_EVALS  # the step's own
    assert float(result.state.step_size) == 0.0
    np.testing.assert_allclose(float(result.value), reference["value"][k - 1], rtol=1e-12)


def test_progress_bar_closes_at_the_budget(reference, capsys):
    """A run whose last step ends RUNNING exactly at max_evals closes its progress bar: that
    step's record is its last (`final`)."""
    pytest.importorskip("tqdm")
    budget = int(reference["num_fun_evals"][4])  # step 4 ends on it
    with jax.enable_x64(True):
        result = js.Solver(max_evals=budget).run(rosenbrock, jnp.array(X0), progress=True)
        jax.effects_barrier()
    assert js.Status(result.status) is js.Status.MAX_EVALS
    assert js.Status(result.state.status) is js.Status.RUNNING
    assert int(result.num_steps) == 4
    assert _history._bar is None  # closed


def test_max_evals_in_step(reference):
    """`step` caps the state's count: a loop of steps with a budget that a step's search ends
    on exactly (float64) goes as the unbudgeted run, the step after it changes nothing and
    ends MAX_EVALS, without an evaluation; the count never passes the budget."""
    k = 5
    budget = int(reference["num_fun_evals"][k])
    with jax.enable_x64(True):
        solver = js.Solver(max_evals=budget)
        params = jnp.array(X0)
        state = solver.init(params)
        for _ in range(k):
            params, state = solver.step(rosenbrock, params, state)
            assert js.Status(state.status) is js.Status.RUNNING
            assert int(state.num_fun_evals) <= budget
        assert int(state.num_fun_evals) == budget
        np.testing.assert_allclose(float(state.value), reference["value"][k], rtol=1e-12)
        after, state = solver.step(rosenbrock, params, state)
        assert js.Status(state.status) is js.Status.MAX_EVALS
        assert int(state.num_fun_evals) == budget
        np.testing.assert_array_equal(after, params)


def test_throw_raises_on_max_evals_not_on_stopped():
    """throw=True raises on MAX_EVALS as on MAX_STEPS, and not on STOPPED (a caller's rule
    is not a failure): one compiled run, two starts."""
    solver = js.Solver(max_evals=6, stop_when=lambda record: record["value"] < 1e-3, throw=True)
    with pytest.raises(eqx.EquinoxRuntimeError, match=r"MAX_EVALS. Stopped: max_evals"):
        solver.run(rosenbrock, jnp.array(X0))
    near = solver.run(rosenbrock, jnp.array([0.99, 0.98]))
    assert js.Status(near.status) is js.Status.STOPPED, near.message


# ------------------------------------------------------------------------------ stop_when


def below(record):
    return record["value"] < 1e-3


def test_stop_when_stops_at_the_first_step_it_holds(reference, compiles):
    """`record["value"] < 1e-3` ends the run STOPPED (not a success) at the first step of the
    unbudgeted run whose value is below 1e-3, with that run's history up to there; a second
    solver with the same function reuses the compiled program."""
    first = int(np.flatnonzero(reference["value"] < 1e-3)[0])
    with jax.enable_x64(True):
        result = js.Solver(stop_when=below).run(rosenbrock, jnp.array(X0), history=True)
        assert js.Status(result.status) is js.Status.STOPPED
        assert not bool(result.success)
        assert result.message == "Stopped: the stop_when rule held after the last step."
        history = result.history.to_numpy()
        assert int(result.num_steps) == first  # row k is step k
        np.testing.assert_array_equal(
            history["num_fun_evals"], reference["num_fun_evals"][: first + 1]
        )
        np.testing.assert_allclose(history["value"], reference["value"][: first + 1], rtol=1e-12)
        compiles.reset()
        again = js.Solver(stop_when=below).run(rosenbrock, jnp.array(X0), history=True)
        jax.block_until_ready(again)
        assert compiles.count == 0


def test_stop_when_under_vmap_stops_each_problem_on_its_own(reference):
    """Under vmap, each problem stops at its own first step with f < 1e-2 or at step 4,
    whichever comes first: from (-1.2, 1), whose first 4 steps stay above 1e-2 (the
    reference run), at step 4; from (0.99, 0.98), where f(x0) ~ 1e-4, at step 1; the batch
    goes on past a finished problem."""
    assert (reference["value"][1:5] > 1e-2).all()

    def rule(record):
        return (record["step"] >= 4) | (record["value"] < 1e-2)

    x0 = jnp.array([X0, [0.99, 0.98]])
    batch = jax.vmap(js.Solver(stop_when=rule).run, in_axes=(None, 0))(rosenbrock, x0)
    assert list(js.Status(batch.status)) == [js.Status.STOPPED] * 2
    assert [int(n) for n in batch.num_steps] == [4, 1]
    assert float(batch.value[1]) < 1e-2 <= float(batch.value[0])


def test_stop_when_in_step_is_kept():
    """In `step`, a step on which the rule holds ends STOPPED; the next step from that state
    changes nothing (as from a converged one) until `reevaluate`."""
    solver = js.Solver(stop_when=lambda record: record["step"] >= 2)
    params = jnp.array(X0)
    state = solver.init(params)
    params, state = solver.step(rosenbrock, params, state)
    assert js.Status(state.status) is js.Status.RUNNING
    params, state = solver.step(rosenbrock, params, state)
    assert js.Status(state.status) is js.Status.STOPPED
    again, kept = solver.step(rosenbrock, params, state)
    np.testing.assert_array_equal(again, params)
    assert js.Status(kept.status) is js.Status.STOPPED
    assert int(kept.num_fun_evals) == int(state.num_fun_evals)


def test_stop_when_must_return_a_boolean_scalar():
    solver = js.Solver(stop_when=lambda record: record["value"])
    with pytest.raises(TypeError, match=r"stop_when must return a boolean scalar"):
        solver.run(rosenbrock, jnp.array(X0))
