"""Why a step or a run stopped."""

import enum


class Status(enum.IntEnum):
    """Outcome of a step or a run, stored as an int32 in the state and the result.

    Compare with the members directly (`result.status == js.Status.CONVERGED_GTOL`), or read
    `result.message`. Only `CONVERGED_GTOL` and `CONVERGED_FTOL` count as success: a step that
    rounded away to nothing is `STALLED`, never converged.
    """

    RUNNING = 0
    CONVERGED_GTOL = 1
    CONVERGED_FTOL = 2
    MAX_STEPS = 3
    LINESEARCH_FAILED = 4
    NONFINITE = 5
    STALLED = 6

    @property
    def message(self) -> str:
        return _MESSAGES[self]

    @property
    def converged(self) -> bool:
        return self in (Status.CONVERGED_GTOL, Status.CONVERGED_FTOL)


_MESSAGES = {
    Status.RUNNING: "No stopping criterion met yet.",
    Status.CONVERGED_GTOL: "Converged: the infinity norm of the gradient is at most gtol.",
    Status.CONVERGED_FTOL: "Converged: the relative decrease of f is at most ftol.",
    Status.MAX_STEPS: "Stopped: max_steps reached before convergence.",
    Status.LINESEARCH_FAILED: (
        "Stopped: the line search found no acceptable point (sufficient decrease; for "
        "FixedStep, a finite value); params are the last accepted point."
    ),
    Status.NONFINITE: "Stopped: f or its gradient is not finite at the current point.",
    Status.STALLED: (
        "Stopped: no progress at this precision (the step rounded away, every step left to try "
        "would, f did not decrease while ftol is below the value dtype's resolution, no new "
        "lowest f nor least gradient norm for stall_steps steps, or gtol was met only at a "
        "point above the best value seen); not converged."
    ),
}
