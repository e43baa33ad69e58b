"""The first trial step of a search, shared by the line searches."""

import jax.numpy as jnp
from jaxtyping import Array, Bool, Scalar

from .._misc import Setting


def initial_step(
    scaled: Bool[Array, ""],
    dphi0: Scalar,
    d_norm: Scalar,
    prev_decrease: Scalar,
    max_step_size: Setting,
) -> Scalar:
    """Initial trial step for a search along d.

    - A well-scaled direction (quasi-Newton with curvature information): t = 1
      (Nocedal & Wright, *Numerical Optimization*, 2nd ed., section 3.5).
    - Otherwise, after a previous step: t = 2 (f_{k-1} - f_k) / -phi'(0), N&W eq. (3.60),
      which assumes the first-order change of f equals that of the previous step. The solver
      passes min(f_{k-1} - f_k, -t_{k-1} phi_{k-1}'(0)) as the decrease, or half the latter
      where f did not decrease (rounding noise), which turns the guess into N&W eq. (3.59).
    - Otherwise (first step, or an unusable previous decrease): t = 1 / |d|_2, a unit-length
      first step, as L-BFGS-B does.

    The result is finite and lies in (0, max_step_size].
    """
    dtype = dphi0.dtype
    unit_length = 1 / d_norm
    from_decrease = 2 * prev_decrease / -dphi0
    usable = jnp.isfinite(from_decrease) & (from_decrease > 0)
    guess = jnp.where(scaled, jnp.ones((), dtype), jnp.where(usable, from_decrease, unit_length))
    guess = jnp.where(jnp.isfinite(guess) & (guess > 0), guess, jnp.ones((), dtype))
    return jnp.minimum(guess, max_step_size).astype(dtype)
