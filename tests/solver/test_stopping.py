"""The stopping rules as pure functions (`jaxsearch._stopping`): how a step ends, how a run
ends, and which point a run that kept a best point returns."""

import types

import jax
import jax.numpy as jnp
import pytest

import jaxsearch as js
from jaxsearch._stopping import (
    goes_on,
    returned_status,
    returns_last,
    run_status,
    step_status,
)

S = js.Status

# ---------------------------------------------------------------------------- a step

F32 = jnp.float32


def status(**changes):
    """step_status of a step that moved and changed x, with |g| = 1 > gtol and f 10 -> 5."""
    settings = dict(
        cut_off=jnp.array(False),
        moved=jnp.array(True),
        below_resolution=jnp.array(False),
        unchanged=jnp.array(False),
        grad_norm=jnp.array(1.0, F32),
        gtol=1e-5,
        before=jnp.array(10.0, F32),
        after=jnp.array(5.0, F32),
        ftol=1e-9,
    )
    settings.update(changes)
    return js.Status(int(step_status(**settings)))


def test_a_step_that_makes_progress_runs_on():
    assert status() == js.Status.RUNNING


def test_cut_off_search_failed_whatever_else_holds():
    assert status(cut_off=jnp.array(True), grad_norm=jnp.array(0.0, F32)) == (
        js.Status.LINESEARCH_FAILED
    )


def test_no_step_is_stalled_below_the_resolution_and_failed_above():
    no_step = dict(moved=jnp.array(False), after=jnp.array(10.0, F32))
    assert status(**no_step, below_resolution=jnp.array(True)) == js.Status.STALLED
    assert status(**no_step) == js.Status.LINESEARCH_FAILED


def test_a_step_that_changes_nothing_is_stalled_never_converged():
    assert status(unchanged=jnp.array(True), grad_norm=jnp.array(0.0, F32)) == js.Status.STALLED


def test_gtol_comes_before_ftol():
    tiny = dict(after=jnp.array(10.0 - 1e-6, F32), ftol=1e-3)
    assert status(**tiny) == js.Status.CONVERGED_FTOL
    assert status(**tiny, grad_norm=jnp.array(1e-6, F32)) == js.Status.CONVERGED_GTOL


def test_ftol_is_relative_to_at_least_one():
    # f 0.5 -> 0.4: a decrease of 0.1, judged against max(|f|, 1) = 1
    small = dict(before=jnp.array(0.5, F32), after=jnp.array(0.4, F32))
    assert status(**small, ftol=0.2) == js.Status.CONVERGED_FTOL
    assert status(**small, ftol=0.05) == js.Status.RUNNING
    assert status(**small, ftol=0.0) == js.Status.RUNNING  # ftol = 0 switches it off


def test_a_rise_never_passes_ftol():
    assert status(after=jnp.array(10.5, F32), ftol=0.5) == js.Status.RUNNING


def test_zero_decrease_passes_only_a_resolvable_ftol():
    same = dict(after=jnp.array(10.0, F32))
    assert status(**same, ftol=1e-9) == js.Status.RUNNING  # below float32's resolution
    assert status(**same, ftol=1e-3) == js.Status.CONVERGED_FTOL


def test_status_with_array_settings_under_jit():
    """gtol and ftol may be traced (array settings)."""

    @jax.jit
    def decide(gtol, ftol):
        return step_status(
            cut_off=jnp.array(False),
            moved=jnp.array(True),
            below_resolution=jnp.array(False),
            unchanged=jnp.array(False),
            grad_norm=jnp.array(1e-3, F32),
            gtol=gtol,
            before=jnp.array(10.0, F32),
            after=jnp.array(5.0, F32),
            ftol=ftol,
        )

    assert int(decide(jnp.array(1e-2, F32), jnp.array(1e-9, F32))) == js.Status.CONVERGED_GTOL
    assert int(decide(jnp.array(1e-4, F32), jnp.array(1e-9, F32))) == js.Status.RUNNING


# ----------------------------------------------------------------------------- a run


def ended(status, steps_since_best, num_fun_evals=0, num_steps=0):
    """The counts of a state in which a run's engine stopped."""
    return types.SimpleNamespace(
        status=jnp.asarray(status, jnp.int32),
        steps_since_best=jnp.asarray(steps_since_best, jnp.int32),
        num_fun_evals=jnp.asarray(num_fun_evals, jnp.int32),
        num_steps=jnp.asarray(num_steps, jnp.int32),
    )


def test_a_run_stops_at_its_budget_of_evaluations():
    """`goes_on` and `run_status` read one rule: evaluations at the budget's end stop the run
    (`MAX_EVALS`), one short of it do not; without a budget only steps and stalls count."""
    at_end, short = ended(S.RUNNING, 0, num_fun_evals=7), ended(S.RUNNING, 0, num_fun_evals=6)
    assert not bool(goes_on(at_end, 10, 100, jnp.int32(7)))
    assert bool(goes_on(short, 10, 100, jnp.int32(7)))
    assert bool(goes_on(at_end, 10, 100))
    assert not bool(goes_on(ended(S.RUNNING, 100), 10, 100))  # stalled
    assert not bool(goes_on(ended(S.RUNNING, 0, num_steps=10), 10, 100))  # its last step
    assert not bool(goes_on(ended(S.CONVERGED_GTOL, 0), 10, 100))
    assert S(int(run_status(at_end, 100, jnp.int32(7))[0])) == S.MAX_EVALS
    assert S(int(run_status(short, 100, jnp.int32(7))[0])) == S.MAX_STEPS


@pytest.mark.parametrize(
    "status, steps_since_best, expected, no_progress",
    [
        (S.RUNNING, 3, S.MAX_STEPS, False),  # the step budget ran out
        (S.RUNNING, 100, S.STALLED, True),  # stall_steps without progress
        (S.RUNNING, 250, S.STALLED, True),
        (S.CONVERGED_GTOL, 100, S.CONVERGED_GTOL, False),  # a status of its own stays
        (S.CONVERGED_FTOL, 0, S.CONVERGED_FTOL, False),
        (S.LINESEARCH_FAILED, 100, S.LINESEARCH_FAILED, False),
        (S.NONFINITE, 0, S.NONFINITE, False),
        (S.STALLED, 0, S.STALLED, False),
    ],
)
def test_run_status(status, steps_since_best, expected, no_progress):
    code, stopped = run_status(ended(status, steps_since_best), 100)
    assert code.dtype == jnp.int32
    assert S(int(code)) == expected
    assert bool(stopped) == no_progress


def last_or_best(**changes) -> bool:
    """`returns_last` of a last iterate 1e-6 above the best (an allowance of 1e-5), below
    f(x0) = 10 and flatter than the best, in a run that made progress."""
    settings = dict(
        last=jnp.array(1.000001, F32),
        best=jnp.array(1.0, F32),
        allowance=jnp.array(1e-5, F32),
        start=jnp.array(10.0, F32),
        last_grad_norm=jnp.array(1e-7, F32),
        best_grad_norm=jnp.array(1e-3, F32),
        no_progress=jnp.array(False),
    )
    settings.update(changes)
    return bool(returns_last(**settings))


def test_the_flatter_last_iterate_within_the_allowance_is_returned():
    assert last_or_best()
    assert last_or_best(last=jnp.array(1.0, F32), last_grad_norm=jnp.array(1e-3, F32))  # ties


def test_the_best_point_is_returned_otherwise():
    assert not last_or_best(last=jnp.array(1.0001, F32))  # beyond the allowance
    assert not last_or_best(allowance=0.0)  # a search without one
    assert not last_or_best(last_grad_norm=jnp.array(1e-2, F32))  # steeper than the best
    assert not last_or_best(start=jnp.array(1.0, F32))  # above f(x0)
    assert not last_or_best(no_progress=jnp.array(True))  # a stalled run: its lowest point


def test_last_and_best_compare_in_the_scalar_dtype():
    """A bfloat16 value dtype, the last iterate one bfloat16 ulp above the best: an allowance
    of 0.99 ulp does not reach it in float32 (in bfloat16, best + allowance would round up
    to it), one of an ulp does."""
    bf16 = jnp.bfloat16
    ulp = float(jnp.finfo(bf16).eps)
    values = dict(last=jnp.array(1 + ulp, bf16), best=jnp.array(1.0, bf16))
    values["start"] = jnp.array(10.0, bf16)
    assert not last_or_best(**values, allowance=jnp.array(0.99 * ulp, F32))
    assert last_or_best(**values, allowance=jnp.array(ulp, F32))


@pytest.mark.parametrize(
    "status, grad_norm, expected",
    [
        (S.CONVERGED_GTOL, 1e-6, S.CONVERGED_GTOL),
        (S.CONVERGED_GTOL, 1e-5, S.CONVERGED_GTOL),  # at gtol
        (S.CONVERGED_GTOL, 2e-5, S.STALLED),  # met at a point the run does not return
        (S.CONVERGED_GTOL, float("nan"), S.STALLED),
        (S.CONVERGED_FTOL, 1.0, S.CONVERGED_FTOL),  # other statuses are not judged by gtol
        (S.MAX_STEPS, 1.0, S.MAX_STEPS),
    ],
)
def test_returned_status(status, grad_norm, expected):
    code = returned_status(jnp.int32(status), jnp.array(grad_norm, F32), 1e-5)
    assert S(int(code)) == expected


def test_run_rules_under_jit_with_array_settings():
    @jax.jit
    def decide(status, steps, gtol):
        status, _ = run_status(ended(status, steps), 5)
        return returned_status(status, jnp.array(1e-3, F32), gtol)

    assert S(int(decide(jnp.int32(S.CONVERGED_GTOL), 0, jnp.array(1e-2, F32)))) == (
        S.CONVERGED_GTOL
    )
    assert S(int(decide(jnp.int32(S.CONVERGED_GTOL), 0, jnp.array(1e-4, F32)))) == S.STALLED
    assert S(int(decide(jnp.int32(S.RUNNING), 5, jnp.array(1e-4, F32)))) == S.STALLED
