"""Box math on arrays of one floating dtype (every result has the dtype of `x`): the
projection onto a box, the projected gradient's norm and the longest feasible step. `lower`
and `upper` may hold -inf and +inf (no bound), with lower <= upper. `_box.Box` applies them
leaf by leaf; L-BFGS-B (`_direction/_lbfgs_bounded.py`) on one flat vector."""

import jax.numpy as jnp
from jaxtyping import Array, Float

__all__ = ["project", "projected_gradient_inf_norm", "max_feasible_step"]


def project(
    x: Float[Array, "*shape"], lower: Float[Array, "*shape"], upper: Float[Array, "*shape"]
) -> Float[Array, "*shape"]:
    """P(x): the nearest point of the box [lower, upper] to x, componentwise
    min(max(x_i, lower_i), upper_i) (P(x, l, u) of Byrd, Lu, Nocedal & Zhu 1995,
    §2)."""
    return jnp.minimum(jnp.maximum(x, lower), upper)


def projected_gradient_inf_norm(
    x: Float[Array, "*shape"],
    g: Float[Array, "*shape"],
    lower: Float[Array, "*shape"],
    upper: Float[Array, "*shape"],
) -> Float[Array, ""]:
    """max_i |P(x - g)_i - x_i|: the infinity norm of the projected gradient, the measure
    scipy's L-BFGS-B compares with `pgtol` (`gtol` in `minimize`) to stop.

    For a feasible x, component i is -g_i where x_i can move against the gradient freely,
    and is cut to the distance to the bound it moves towards otherwise: it is 0 exactly where
    x_i is at a bound and g_i points out of the box (or g_i = 0). 0 for n = 0.
    """
    step = project(x - g, lower, upper) - x
    return jnp.max(jnp.abs(step), initial=0).astype(x.dtype)


def max_feasible_step(
    x: Float[Array, "*shape"],
    d: Float[Array, "*shape"],
    lower: Float[Array, "*shape"],
    upper: Float[Array, "*shape"],
) -> Float[Array, ""]:
    """The largest t >= 0 with lower <= x + t d <= upper: the minimum over i of
    (upper_i - x_i) / d_i where d_i > 0 and (lower_i - x_i) / d_i where d_i < 0.

    +inf where no bound limits the step (d = 0, or every bound d points to is infinite);
    0 where a component at its bound moves out. Clipped below at 0 for an infeasible x.
    """
    room = jnp.where(d > 0, upper - x, lower - x)
    moving = d != 0
    ratio = jnp.where(moving, room / jnp.where(moving, d, 1), jnp.inf)
    return jnp.maximum(jnp.min(ratio, initial=jnp.inf), 0).astype(x.dtype)
