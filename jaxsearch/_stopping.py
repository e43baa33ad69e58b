"""How a step ends: its status, from what its search did and where it ended."""

import jax.numpy as jnp
from jaxtyping import Array, Bool, Int, Scalar

from ._misc import Setting
from ._status import FAILED_SEARCH_CAUSES, Cause, SearchEnd, Status

# A least-squares step that changes no parameter ends `CONVERGED_PRECISION` where the unit step
# predicted a decrease of f of at most PRECISION eps |f|: within the rounding of f itself (a sum
# of m squares rounds by up to m eps |f|; m = 154 on NIST's Bennett5), so that no step of the
# model could show in f. Where such a step is refused (or rounds to x), the rounding is why.
# Every stall of LevenbergMarquardt on NIST StRD's 16 runs with ftol=0 meets it
# (benchmarks/studies/least_squares_defaults.py); a wrong Jacobian's stall predicts ~1/eps.
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

    1. the search was cut off: at the run's budget of evaluations (`out_of_evals`, before
       its own trial budget was spent): `MAX_EVALS`; else at its trial budget:
       `LINESEARCH_FAILED`;
    2. (least squares only) it changed no parameter (rule 3's or 4's case) where the unit
       step along the direction predicted a decrease of f of at most `PRECISION` eps |f_k|
       (eps of f's dtype), or itself rounds to x (x + d = x: the model's own step is below
       the resolution of x, MINPACK's "no further improvement in x is possible"): the
       precision of f is reached, `CONVERGED_PRECISION`; also where `ftol` is below
       `PRECISION` eps but above 0 (float32 with the default 1e-10) and f changed by at
       most that much;
    3. it took no step and gave up below the line's resolution (every step left to try
       rounds to x): `STALLED`; took no step otherwise: `LINESEARCH_FAILED`;
    4. it took a step that changed no parameter: `STALLED`;
    5. the gradient's norm at the new point is at most `gtol`: `CONVERGED_GTOL`;
    6. f fell by at most `ftol` max(|f_k|, |f_{k+1}|, 1) (scipy's relative decrease; `ftol=0`
       switches it off), and not by exactly 0 when `ftol` is below the resolution of f's
       dtype (near a minimiser the searches accept steps on slopes where f no longer
       changes): `CONVERGED_FTOL`. For least squares (`model` given) the test is
       MINPACK's instead: f fell by at most `ftol` |f_k| and the unit step along the
       direction (MINPACK's trial step) predicted a decrease of at most `ftol` |f_k| too
       (relative to f alone: f = 0.5 |r|^2 has no natural unit of 1);
    7. no parameter changed by more than `xtol`, `change` = max_i |x_{k+1,i} - x_{k,i}|
       (torch's `tolerance_change` on params; `xtol=0` switches it off): `CONVERGED_XTOL`;
    8. the caller's `stop_when` rule held on the step's record (`stop`): `STOPPED`;
    9. else `RUNNING`.

    Rules 7 and 8 come last, so a setting of `xtol` or `stop_when` only ends steps that
    would otherwise go on (with ftol before xtol: both say the step made little progress).
    `None` for `out_of_evals`, `change` or `stop`: no such rule in this program.
    `model`, for a least-squares direction only (else None): (the first-order decrease
    -phi'(0) = -g'd of the unit step along the direction d, whether x + d rounds to x). For
    Gauss-Newton and Levenberg-Marquardt, -g'd = d'(J'J + lambda D) d lies between the
    decrease L(0) - L(d) their linear model of r predicts for the unit step and twice it
    (MINPACK's `prered` times |r|^2 lies in the same range).

    `before` and `after` are f at the step's start and end, in the value dtype; the decrease
    is computed in the dtype of `grad_norm` (the scalar dtype, at least float32)."""
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
    """How a step's `search` ended (a `SearchEnd` code), by the first rule that applies: a
    step taken with the search's conditions met (`success`) or without them; a trial beyond
    the cap refused (`above_cap`); cut off where the run's evaluations were `spent` before
    its trial `budget`; ended on a trial whose value or slope was not `finite`; its trial
    budget used; gave up below the line's resolution; else for a reason of its own."""
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
    """The stop condition of a run, read by the engine's loop, the step record and the run's
    status (`run_status`): a run goes on after a step that ended in `state` while the step's
    status is `RUNNING`, its step count is below `last_step`, it has not `stalled`, and
    (where it has a budget of evaluations) its count of evaluations is below `last_eval`."""
    running = state.status == Status.RUNNING
    go = running & (state.num_steps < last_step) & ~stalled(state.steps_since_best, stall_steps)
    spent = evals_spent(state.num_fun_evals, last_eval)
    return go if spent is None else go & ~spent


def run_status(state, stall_steps: int, last_eval=None) -> tuple[Int[Array, ""], Bool[Array, ""]]:
    """(The status of a run whose engine stopped (`goes_on` turned False) in `state`, whether
    it `stalled`). A run stops with its last step `RUNNING` only at its step budget, at its
    budget of evaluations (ending at the count `last_eval`; None: it has none) or once it
    `stalled`: `STALLED` for the last, else `MAX_EVALS` where the evaluations are spent,
    else `MAX_STEPS`. Any other status of the last step is the run's."""
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
    """Whether a run that kept a best point apart from its iterate returns the last iterate
    (f = `last`) rather than the point of lowest f (`best`): when the last is within the
    search's rounding `allowance` of the best, not above f(x0) (`start`), and flatter (a
    gradient norm no larger), and the run did not stop for want of progress. Values that
    close are rounding noise, and near a minimiser the last iterate is the flatter one:
    CUTEst runs that meet gtol end there with |g| 10 to 3700 times smaller than at their
    lowest value, equal to 12 digits. `last` and `best` are compared in the dtype of
    `last_grad_norm` (the scalar dtype), `last` and `start` in theirs (the value dtype)."""
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
    `NONFINITE` or `LINESEARCH_FAILED`), read from what the state holds: `last_status`,
    `step_size` and `search_end` are the state's (its last step's status, step size, 0
    where it took none, and how its search ended, a `SearchEnd`), `x_finite` and
    `value_finite` tell whether the start point and f there are finite. `xp` is `numpy` (on
    the host, `Result.message`) or `jax.numpy` (in the compiled run, for `throw`).

    A run ends `STALLED` when its last step did (the step moved, `step_size > 0`, yet changed
    no parameter; or its search gave up below the line's resolution, no step), when it
    stopped `RUNNING` for want of progress (`run_status`), or when `CONVERGED_GTOL` held
    only above the lowest f (`returned_status`). `NONFINITE` is decided at the start point
    only (no search accepts a non-finite trial): the point, else f, else its gradient.
    `LINESEARCH_FAILED` names how the last search ended (`FAILED_SEARCH_CAUSES`)."""
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
