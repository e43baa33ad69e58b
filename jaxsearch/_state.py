"""The solver's state: every leaf's dtype is fixed at `init`, so a jitted step never retraces."""

import equinox as eqx
from jaxtyping import Array, Bool, Int, PyTree, Scalar


class BestPoint(eqx.Module):
    """The point with the lowest f accepted since fn was last evaluated at the start of a step
    (the first step, or the one after `reevaluate`), the newer of equal ones, with its
    gradient and aux; `start_value` is f at that start (f(x0) in a run). Kept for line
    searches that may accept a rise of f (`AbstractLineSearch.monotone` False), so that a run
    returns the best point it found. `params` holds the floating leaves only."""

    value: Scalar
    params: PyTree
    grad: PyTree
    aux: PyTree
    start_value: Scalar


class SolverState(eqx.Module):
    """State between steps. `value`, `grad` and `aux` are f, its gradient and fn's aux at the
    params that the last step returned (valid once `has_eval` is True). `value` has the value
    dtype; the other scalars have the scalar dtype, at least float32.

    `best` is the best point seen (`BestPoint`), or None where the line search never lets f
    rise (then the params `step` returned are the best point). `steps_since_best` counts the
    steps since the last progress: f below its best value, or the gradient's norm below its
    least (`lowest_grad_norm`); `Solver(stall_steps=...)` ends a run that makes no progress
    for that many steps as `STALLED`."""

    value: Scalar
    grad: PyTree
    aux: PyTree
    has_eval: Bool[Array, ""]
    direction: PyTree
    linesearch: PyTree
    prev_decrease: Scalar  # f_{k-1} - f_k of the last step, for the next guess; NaN at first
    initial_step: PyTree  # the state of the solver's initial-step rule (`AbstractInitialStep`)
    step_size: (
        Scalar  # the last step's accepted step size along its direction; 0 if it did not move
    )
    num_steps: Int[Array, ""]
    num_fun_evals: Int[Array, ""]
    status: Int[Array, ""]  # a Status code describing the last step
    best: BestPoint | None
    steps_since_best: Int[Array, ""]  # steps since the last progress (see `Solver`)
    lowest_grad_norm: Scalar  # the least gradient norm accepted since fn was last evaluated

    @property
    def scalar_dtype(self):
        """The dtype of the line search's scalars (step sizes, slopes, norms): the value
        dtype widened to at least float32."""
        return self.prev_decrease.dtype
