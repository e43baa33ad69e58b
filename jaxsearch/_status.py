"""Why a step or a run stopped."""

import enum

import jax
import numpy as np


class _StatusType(enum.EnumMeta):
    """`Status(code)` as for any enum, and `Status(codes)` for an array of codes (a batch's
    `result.status`): a `StatusArray` of members of the same shape."""

    def __call__(cls, value, *args, **kwargs):
        if args or kwargs:  # the functional API of enums
            return super().__call__(value, *args, **kwargs)
        if isinstance(value, jax.core.Tracer):
            raise TypeError(
                "Status(...) reads a concrete status on the host; inside jax.jit (or vmap) "
                "compare the status with the members (status == js.Status.CONVERGED_GTOL), "
                "or use result.success."
            )
        if isinstance(value, jax.Array | np.ndarray | np.generic | list | tuple):
            codes = np.asarray(value)
            if codes.ndim > 0:
                members = np.frompyfunc(lambda code: super(_StatusType, cls).__call__(code), 1, 1)
                return members(codes.astype(int)).view(StatusArray)
            if np.issubdtype(codes.dtype, np.integer):
                value = int(codes)
        return super().__call__(value)


class Status(enum.IntEnum, metaclass=_StatusType):
    """Outcome of a step or a run, an int32 in the state and the result: compare with the members
    (`result.status == js.Status.CONVERGED_GTOL`) or read `result.message`.
    `js.Status(result.status)` is the member, printing as its name (for a batch, a
    `StatusArray`). Only `CONVERGED_GTOL` and `CONVERGED_FTOL` count as success: a step that
    rounded away is `STALLED`."""

    RUNNING = 0
    CONVERGED_GTOL = 1
    CONVERGED_FTOL = 2
    MAX_STEPS = 3
    LINESEARCH_FAILED = 4
    NONFINITE = 5
    STALLED = 6
    CONVERGED_XTOL = 7
    MAX_EVALS = 8
    STOPPED = 9
    CONVERGED_PRECISION = 10

    def __str__(self) -> str:
        return self.name

    def __format__(self, spec: str) -> str:
        """The name, formatted as a string (`f"{status:>16}"`); a numeric format (`:d`) formats the
        code."""
        try:
            return format(self.name, spec)
        except ValueError:
            return format(int(self), spec)

    @property
    def message(self) -> str:
        """What the status means, in general; `result.message` says what ended a run."""
        return _MESSAGES[self]

    @property
    def converged(self) -> bool:
        return self in CONVERGED


CONVERGED = (
    Status.CONVERGED_GTOL,
    Status.CONVERGED_FTOL,
    Status.CONVERGED_XTOL,
    Status.CONVERGED_PRECISION,
)

# Statuses a step reaches by what it did, not where it ended (not checkable again at its point): a
# `step` from one changes nothing until `reevaluate`, and a resumed run stops at once.
KEPT = (Status.CONVERGED_FTOL, Status.CONVERGED_XTOL, Status.STOPPED, Status.CONVERGED_PRECISION)


class StatusArray(np.ndarray):
    """The statuses of a batch of runs, `js.Status(result.status)` under `jax.vmap`: a NumPy
    array of `Status` members (compare it with a member, elementwise) that prints their
    names, `[CONVERGED_GTOL STALLED]`."""

    def __str__(self) -> str:
        return np.array2string(np.asarray(self), formatter={"all": str})

    def __repr__(self) -> str:
        names = np.array2string(np.asarray(self), separator=", ", formatter={"all": str})
        return f"StatusArray({names})"


class SearchEnd(enum.IntEnum):
    """How a step's line search ended (`state.search_end`, the history's `search_end`): a step with
    its conditions met (`SUCCESS`), one without (`FALLBACK`, e.g. Zoom's best point), or none,
    and why. The solver reads it from the search's `SearchState`."""

    SUCCESS = 0  # a step taken, the search's conditions met
    FALLBACK = 1  # a step taken without the search's conditions (its best trial)
    TRIAL_BUDGET = 2  # no step: its max_trials trials found no acceptable point
    BELOW_RESOLUTION = 3  # no step: every step left to try rounds to x
    NONFINITE = 4  # no step: it ended on a trial whose f or slope was not finite
    ABOVE_CAP = 5  # no step: it proposed a trial beyond its cap, which the solver refused
    GAVE_UP = 6  # no step, for a reason of the search's own
    OUT_OF_EVALS = 7  # no step: cut off where the run's max_evals was spent
    NOT_SEARCHED = 8  # no search yet (the state of `init`)


class Cause(enum.IntEnum):
    """Which cause of a `STALLED`, `NONFINITE` or `LINESEARCH_FAILED` end it was (`NONE` otherwise),
    read by `_stopping.stop_cause`, recorded nowhere."""

    NONE = 0
    ROUNDED_AWAY = 1  # the last step changed no parameter
    BELOW_RESOLUTION = 2  # its search gave up: every step left to try rounds to x
    NO_PROGRESS = 3  # stall_steps steps without a new lowest f nor a new least |g|
    GTOL_ABOVE_BEST = 4  # gtol held only at a point above the lowest f seen
    X_NOT_FINITE = 5  # the start point holds NaN or inf
    VALUE_NOT_FINITE = 6  # f is not finite at the start point
    GRAD_NOT_FINITE = 7  # its gradient is not finite there
    TRIAL_BUDGET = 8  # the search's max_trials trials found no acceptable point
    NONFINITE_TRIAL = 9  # the search ended on a trial where f or its slope is not finite
    ABOVE_CAP = 10  # the search proposed a trial beyond its cap (a broken search)
    SEARCH_GAVE_UP = 11  # the search ended with no step for a reason of its own


_MESSAGES = {
    Status.RUNNING: "No stopping criterion met yet.",
    Status.CONVERGED_GTOL: "Converged: the norm of the gradient (gtol_norm) is at most gtol.",
    Status.CONVERGED_FTOL: "Converged: the relative decrease of f is at most ftol.",
    Status.MAX_STEPS: "Stopped: max_steps reached before convergence.",
    Status.LINESEARCH_FAILED: (
        "Stopped: the line search found no acceptable point (sufficient decrease; for "
        "FixedStep, a finite value); params are the last accepted point."
    ),
    Status.NONFINITE: "Stopped: the start point, f or its gradient there is not finite.",
    Status.STALLED: "Stopped: no progress at this precision; not converged.",
    Status.CONVERGED_XTOL: "Converged: the last step changed no parameter by more than xtol.",
    Status.MAX_EVALS: "Stopped: max_evals evaluations of f reached before convergence.",
    Status.STOPPED: "Stopped: the stop_when rule held after the last step.",
    Status.CONVERGED_PRECISION: (
        "Converged to the precision of f: the last step changed nothing, and the decrease "
        "the least-squares direction predicted for it was below the rounding of f."
    ),
}

# `{x}` is the start point's name: x0 for a run, params for a step.
_CAUSE_MESSAGES = {
    Cause.ROUNDED_AWAY: (
        "Stopped: the last step changed no parameter (x + t d rounded to x at this "
        "precision); not converged."
    ),
    Cause.BELOW_RESOLUTION: (
        "Stopped: the line search gave up below the resolution of x: every step left to "
        "try would change no parameter at this precision; not converged."
    ),
    Cause.NO_PROGRESS: (
        "Stopped: no new lowest f nor least gradient norm for stall_steps steps; not converged."
    ),
    Cause.GTOL_ABOVE_BEST: (
        "Stopped: gtol was met only above the lowest f seen, and the point returned (the "
        "lowest) misses it: the precision of f is exhausted; not converged."
    ),
    Cause.X_NOT_FINITE: "Stopped: {x} is not finite (it holds NaN or inf).",
    Cause.VALUE_NOT_FINITE: "Stopped: f is not finite at {x}.",
    Cause.GRAD_NOT_FINITE: "Stopped: the gradient of f is not finite at {x} (f is).",
    Cause.TRIAL_BUDGET: (
        "Stopped: the line search used its max_trials trials without finding a point with "
        "sufficient decrease; params are the last accepted point."
    ),
    Cause.NONFINITE_TRIAL: (
        "Stopped: the line search ended on a trial where f or its slope is not finite, with "
        "no acceptable point before it; params are the last accepted point."
    ),
    Cause.ABOVE_CAP: (
        "Stopped: the line search proposed a trial step beyond its cap (max_step_size, or "
        "the box's edge), which the solver refused: the search breaks its contract (see "
        "jaxsearch.testing.check_line_search); params are the last accepted point."
    ),
    Cause.SEARCH_GAVE_UP: (
        "Stopped: the line search ended with no step (no point with sufficient decrease; "
        "for FixedStep, no finite value); params are the last accepted point."
    ),
}

# The causes each status may have (the others have none).
CAUSES = {
    Status.STALLED: (
        Cause.ROUNDED_AWAY,
        Cause.BELOW_RESOLUTION,
        Cause.NO_PROGRESS,
        Cause.GTOL_ABOVE_BEST,
    ),
    Status.NONFINITE: (Cause.X_NOT_FINITE, Cause.VALUE_NOT_FINITE, Cause.GRAD_NOT_FINITE),
    Status.LINESEARCH_FAILED: (
        Cause.TRIAL_BUDGET,
        Cause.NONFINITE_TRIAL,
        Cause.ABOVE_CAP,
        Cause.SEARCH_GAVE_UP,
    ),
}

# The cause of a LINESEARCH_FAILED end, from how its last search ended.
FAILED_SEARCH_CAUSES = {
    SearchEnd.TRIAL_BUDGET: Cause.TRIAL_BUDGET,
    SearchEnd.NONFINITE: Cause.NONFINITE_TRIAL,
    SearchEnd.ABOVE_CAP: Cause.ABOVE_CAP,
}


def stop_message(status: int, cause: int, point: str) -> str:
    """Why a run or step stopped with `status` and `cause`, in words; `point` names the
    start point (x0, params)."""
    if cause == Cause.NONE:
        return Status(status).message
    return _CAUSE_MESSAGES[Cause(cause)].format(x=point)
