"""How a step ends: its status, from what its search did and where it ended."""

import jax.numpy as jnp
from jaxtyping import Array, Bool, Int, Scalar

from ._misc import Setting
from ._status import Status


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
) -> Int[Array, ""]:
    """The status of a step that searched, by the first rule that applies:

    1. the search was cut off at its trial budget: `LINESEARCH_FAILED`;
    2. it took no step and gave up below the line's resolution (every step left to try
       rounds to x): `STALLED`; took no step otherwise: `LINESEARCH_FAILED`;
    3. it took a step that changed no parameter: `STALLED`;
    4. the gradient's norm at the new point is at most `gtol`: `CONVERGED_GTOL`;
    5. f fell by at most `ftol` max(|f_k|, |f_{k+1}|, 1) (scipy's relative decrease; `ftol=0`
       switches it off), and not by exactly 0 when `ftol` is below the resolution of f's
       dtype (near a minimiser the searches accept steps on slopes where f no longer
       changes): `CONVERGED_FTOL`;
    6. else `RUNNING`.

    `before` and `after` are f at the step's start and end, in the value dtype; the decrease
    is computed in the dtype of `grad_norm` (the scalar dtype, at least float32)."""
    dtype = grad_norm.dtype
    decrease = before.astype(dtype) - after.astype(dtype)
    scale = jnp.maximum(jnp.maximum(jnp.abs(before), jnp.abs(after)).astype(dtype), 1)
    ftol_unresolved = ftol < float(jnp.finfo(before.dtype).eps)
    small_decrease = (
        (ftol > 0)
        & (decrease >= 0)
        & (decrease <= ftol * scale)
        & ~((decrease == 0) & ftol_unresolved)
    )
    return jnp.select(
        [
            cut_off,
            ~moved & below_resolution,
            ~moved,
            unchanged,
            grad_norm <= gtol,
            small_decrease,
        ],
        [
            Status.LINESEARCH_FAILED,
            Status.STALLED,
            Status.LINESEARCH_FAILED,
            Status.STALLED,
            Status.CONVERGED_GTOL,
            Status.CONVERGED_FTOL,
        ],
        Status.RUNNING,
    ).astype(jnp.int32)
