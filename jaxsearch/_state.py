"""The solver's state: every leaf's dtype is fixed at `init`, so a jitted step never retraces."""

import equinox as eqx
from jaxtyping import Array, Bool, Int, PyTree, Scalar


class SolverState(eqx.Module):
    """State between steps. `value`, `grad` and `aux` are f, its gradient and fn's aux at the
    params that the last step returned (valid once `has_eval` is True). `value` has the value
    dtype; the other scalars have the scalar dtype, at least float32."""

    value: Scalar
    grad: PyTree
    aux: PyTree
    has_eval: Bool[Array, ""]
    direction: PyTree
    linesearch: PyTree
    prev_decrease: Scalar  # f_{k-1} - f_k of the last step, for the next guess; NaN at first
    step_size: (
        Scalar  # the last step's accepted step size along its direction; 0 if it did not move
    )
    num_steps: Int[Array, ""]
    num_fun_evals: Int[Array, ""]
    status: Int[Array, ""]  # a Status code describing the last step
