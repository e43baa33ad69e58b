"""How a step ends: its status, from what its search did and where it ended."""

import jax.numpy as jnp
from jaxtyping import Array, Bool, Int, Scalar

from ._misc import Setting
from ._status import FAILED_SEARCH_CAUSES, Cause, SearchEnd, Status

# A least-squares step that changes no parameter ends `CONVERGED_PRECISION` where the unit step
# predicted a decrease of f of at most PRECISION eps |f|: within f's own rounding (a sum of m
# squares rounds by up to m eps |f|; m = 154 on NIST's Bennett5), so no step of the model could show
# in f. Every stall of LevenbergMarquardt on NIST StRD with ftol=0 meets it
# (benchmarks/studies/least_squares_defaults.py); a wrong Jacobian's predicts ~1/eps.
PRECISION = 100.0


def step_status(
    *,
    cut_off: Bool[Array, ""],
    moved: Bool[Array, ""],
    below_resolution: Bool[Array, ""],
    unchanged: Bool[Array, ""],
    grad_norm: Scalar,
    gtol: Setting,
    before: Scalar,
    after: Scalar,
    ftol: Setting,
    out_of_evals: Bool[Array, ""] | None = None,
    change: Scalar | None = None,
    xtol: Setting = 0.0,
    stop: Bool[Array, ""] | None = None,
    model: tuple[Scalar, Bool[Array, ""]] | None = None,
) -> Int[Array, ""]:
    """The status of a step that searched, by the first rule that applies:

    1. cut off at the run's evaluation budget (`out_of_evals`): `MAX_EVALS`; at its trial budget:
    `LINESEARCH_FAILED`; 2. (least squares) no parameter changed where the unit step predicted a
    decrease of at most `PRECISION` eps |f_k| or itself rounds to x (MINPACK's "no further
    improvement in x is possible"), or `ftol` is in (0, `PRECISION` eps) and f changed by at most
    that: `CONVERGED_PRECISION`; 3. no step, giving up below the line's resolution: `STALLED`; no
    step otherwise: `LINESEARCH_FAILED`; 4. a step that changed no parameter: `STALLED`; 5.
    gradient norm at most `gtol`: `CONVERGED_GTOL`; 6. f fell by at most `ftol` max(|f_k|,
    |f_{k+1}|, 1) (scipy's; 0: off), and not by exactly 0 where `ftol` is below f's resolution
    (searches accept steps on slopes where f no longer changes): `CONVERGED_FTOL`; with `model`,
    MINPACK's test: f fell, and the unit step predicted it to fall, by at most `ftol` |f_k|; 7.
    `change` = max_i |x_{k+1,i} - x_{k,i}| at most `xtol` (torch's `tolerance_change`; 0: off):
    `CONVERGED_XTOL`; 8. `stop` (the caller's `stop_when`): `STOPPED`; else `RUNNING`.

    `xtol` and `stop_when` come last, ending only steps that would go on. None for
    `out_of_evals`, `change` or `stop`: no such rule. `model` (least squares only): (-g'd of the
    unit step, whether x + d rounds to x), between the linear model's predicted decrease and
    twice it for Gauss-Newton and Levenberg-Marquardt (as MINPACK's `prered` |r|^2). `before`,
    `after`: f at the step's ends in the value dtype; the decrease is in `grad_norm`'s dtype.
    """
    dtype = grad_norm.dtype
    decrease = before.astype(dtype) - after.astype(dtype)
    eps = float(jnp.finfo(before.dtype).eps)
    if model is None:
        scale = jnp.maximum(jnp.maximum(jnp.abs(before), jnp.abs(after)).astype(dtype), 1)
        modelled = jnp.array(True)
    else:
        scale = jnp.abs(before).astype(dtype)
        modelled = model[0] <= ftol * scale
    ftol_unresolved = ftol < eps
    small_decrease = (
        (ftol > 0)
        & (decrease >= 0)
        & (decrease <= ftol * scale)
        & modelled
        & ~((decrease == 0) & ftol_unresolved)
    )
    rules = [(cut_off, Status.LINESEARCH_FAILED)]
    if model is not None:
        predicted, unit_rounds = model
        precise = (predicted <= PRECISION * eps * jnp.abs(before).astype(dtype)) | unit_rounds
        rounded = (~moved & below_resolution) | (moved & unchanged)
        # MINPACK's "ftol is too small": where ftol is below f's rounding (float32's 1e-10),
        # a step whose actual change of f is within that rounding ends here too.
        floor = PRECISION * eps
        at_rounding = (
            (ftol > 0)
            & (ftol < floor)
            & (jnp.abs(decrease) <= floor * jnp.abs(before).astype(dtype))
        )
        rules.append(((rounded | at_rounding) & precise, Status.CONVERGED_PRECISION))
    rules += [
        (~moved & below_resolution, Status.STALLED),
        (~moved, Status.LINESEARCH_FAILED),
        (unchanged, Status.STALLED),
        (grad_norm <= gtol, Status.CONVERGED_GTOL),
        (small_decrease, Status.CONVERGED_FTOL),
    ]
    if out_of_evals is not None:
        rules.insert(0, (cut_off & out_of_evals, Status.MAX_EVALS))
    if change is not None:
        rules.append(((xtol > 0) & (change <= xtol), Status.CONVERGED_XTOL))
    if stop is not None:
        rules.append((stop, Status.STOPPED))
    conditions, statuses = zip(*rules, strict=True)
    return jnp.select(list(conditions), list(statuses), Status.RUNNING).astype(jnp.int32)


def search_end(search, above_cap, budget, spent, finite) -> Int[Array, ""]:
    """How a step's `search` ended (a `SearchEnd` code), by the first rule that applies: a step with
    (`success`) or without its conditions; a trial beyond the cap refused (`above_cap`); cut off
    by the run's evaluations `spent` before its trial `budget`; a non-`finite` trial; its trial
    budget used; below the line's resolution; else its own reason."""
    took = search.done & (search.step > 0)
    out_of_evals = jnp.array(False) if spent is None else spent & ~search.done & ~budget
    rules = [
        (took & search.success, SearchEnd.SUCCESS),
        (took, SearchEnd.FALLBACK),
        (above_cap, SearchEnd.ABOVE_CAP),
        (out_of_evals, SearchEnd.OUT_OF_EVALS),
        (~finite, SearchEnd.NONFINITE),
        (budget | ~search.done, SearchEnd.TRIAL_BUDGET),
        (search.trial < search.min_step, SearchEnd.BELOW_RESOLUTION),
    ]
    conditions, codes = zip(*rules, strict=True)
    return jnp.select(list(conditions), list(codes), SearchEnd.GAVE_UP).astype(jnp.int32)


def stalled(steps_since_best: Int[Array, ""], stall_steps: int) -> Bool[Array, ""]:
    """Whether a run has gone `stall_steps` steps without progress (`steps_since_best`)."""
    return steps_since_best >= stall_steps


def evals_spent(num_fun_evals: Int[Array, ""], last_eval) -> Bool[Array, ""] | None:
    """Whether a budget of evaluations that ends at the count `last_eval` is spent (None
    without a budget)."""
    return None if last_eval is None else num_fun_evals >= last_eval


def goes_on(state, last_step, stall_steps: int, last_eval=None) -> Bool[Array, ""]:
    """The stop condition of a run (the engine's loop, the step record, `run_status`): it goes on
    after `state`'s step while the status is `RUNNING`, the step count is below `last_step`, it
    has not `stalled` and the evaluations are below `last_eval` (where budgeted)."""
    running = state.status == Status.RUNNING
    go = running & (state.num_steps < last_step) & ~stalled(state.steps_since_best, stall_steps)
    spent = evals_spent(state.num_fun_evals, last_eval)
    return go if spent is None else go & ~spent


def run_status(state, stall_steps: int, last_eval=None) -> tuple[Int[Array, ""], Bool[Array, ""]]:
    """(The status of a run stopped in `state`, whether it `stalled`). A last step still `RUNNING`
    gives `STALLED` where it stalled, `MAX_EVALS` where the evaluations (up to `last_eval`; None:
    no budget) are spent, else `MAX_STEPS`; any other status of the last step is the run's."""
    status = state.status
    running = status == Status.RUNNING
    no_progress = running & stalled(state.steps_since_best, stall_steps)
    spent = evals_spent(state.num_fun_evals, last_eval)
    spent = jnp.array(False) if spent is None else spent
    budget = jnp.where(spent, Status.MAX_EVALS, Status.MAX_STEPS)
    ended = jnp.where(no_progress, Status.STALLED, budget)
    return jnp.where(running, ended, status).astype(jnp.int32), no_progress


def returns_last(
    *,
    last: Scalar,
    best: Scalar,
    allowance: Scalar | float,
    start: Scalar,
    last_grad_norm: Scalar,
    best_grad_norm: Scalar,
    no_progress: Bool[Array, ""],
) -> Bool[Array, ""]:
    """Whether a run keeping a best point returns the last iterate (f = `last`) rather than the
    lowest (`best`): where the last is within the search's rounding `allowance` of the best, not
    above f(x0) (`start`), no steeper, and the run did not stop for want of progress. Values that
    close are rounding noise, and near a minimiser the last iterate is the flatter one. `last`
    and `best` compare in `last_grad_norm`'s dtype, `last` and `start` in theirs."""
    dtype = last_grad_norm.dtype
    within = last.astype(dtype) <= best.astype(dtype) + allowance
    flatter = last_grad_norm <= best_grad_norm
    return within & flatter & (last <= start) & ~no_progress


def returned_status(status: Int[Array, ""], grad_norm: Scalar, gtol: Setting) -> Int[Array, ""]:
    """A run's status once its returned point is chosen: `CONVERGED_GTOL` becomes `STALLED`
    where that point's gradient norm exceeds `gtol` (the precision of f is exhausted: scipy's
    "precision loss")."""
    stalled = (status == Status.CONVERGED_GTOL) & ~(grad_norm <= gtol)
    return jnp.where(stalled, Status.STALLED, status).astype(jnp.int32)


def stop_cause(xp, status, last_status, step_size, x_finite, value_finite, search_end):
    """Which cause ended a run or step with `status` (a `Cause`; `NONE` unless `STALLED`,
    `NONFINITE` or `LINESEARCH_FAILED`), from the state's `last_status`, `step_size` (0: none),
    `search_end` (a `SearchEnd`), and whether the start point (`x_finite`) and f there
    (`value_finite`) are finite; `xp` is `numpy` (`Result.message`) or `jax.numpy` (`throw`).
    `STALLED`: the last step moved yet changed no parameter, or gave up below the resolution; or
    the run stopped for want of progress; or `CONVERGED_GTOL` held only above the lowest f
    (`returned_status`). `NONFINITE` is decided at the start point only: the point, else f, else
    its gradient. `LINESEARCH_FAILED` names how the last search ended (`FAILED_SEARCH_CAUSES`)."""
    stalled = status == Status.STALLED
    nonfinite = status == Status.NONFINITE
    failed = status == Status.LINESEARCH_FAILED
    searches = list(FAILED_SEARCH_CAUSES.items())
    return xp.select(
        [
            stalled & (last_status == Status.CONVERGED_GTOL),
            stalled & (last_status == Status.RUNNING),
            stalled & (step_size > 0),
            stalled,
            nonfinite & ~x_finite,
            nonfinite & ~value_finite,
            nonfinite,
            *(failed & (search_end == end) for end, _ in searches),
            failed,
        ],
        [
            Cause.GTOL_ABOVE_BEST,
            Cause.NO_PROGRESS,
            Cause.ROUNDED_AWAY,
            Cause.BELOW_RESOLUTION,
            Cause.X_NOT_FINITE,
            Cause.VALUE_NOT_FINITE,
            Cause.GRAD_NOT_FINITE,
            *(cause for _, cause in searches),
            Cause.SEARCH_GAVE_UP,
        ],
        Cause.NONE,
    ).astype(xp.int32)
