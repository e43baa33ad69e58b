"""Box math on arrays of one floating dtype (results in `x`'s): projection, the projected gradient's
norm, the longest feasible step. `lower`, `upper` may hold -inf, +inf, lower <= upper. Used leaf
by leaf by `_box.Box`, on one flat vector by L-BFGS-B."""

import jax.numpy as jnp
from jaxtyping import Array, Float

__all__ = ["project", "projected_gradient_inf_norm", "max_feasible_step"]


def project(
    x: Float[Array, "*shape"], lower: Float[Array, "*shape"], upper: Float[Array, "*shape"]
) -> Float[Array, "*shape"]:
    """P(x) = min(max(x, lower), upper), the nearest point of the box (Byrd, Lu, Nocedal & Zhu 1995,
    §2)."""
    return jnp.minimum(jnp.maximum(x, lower), upper)


def projected_gradient_inf_norm(
    x: Float[Array, "*shape"],
    g: Float[Array, "*shape"],
    lower: Float[Array, "*shape"],
    upper: Float[Array, "*shape"],
) -> Float[Array, ""]:
    """max_i |P(x - g)_i - x_i|, scipy L-BFGS-B's `pgtol` measure: for a feasible x, 0 exactly where
    x_i is at a bound with g_i pointing out (or g_i = 0). 0 for n = 0."""
    step = project(x - g, lower, upper) - x
    return jnp.max(jnp.abs(step), initial=0).astype(x.dtype)


def max_feasible_step(
    x: Float[Array, "*shape"],
    d: Float[Array, "*shape"],
    lower: Float[Array, "*shape"],
    upper: Float[Array, "*shape"],
) -> Float[Array, ""]:
    """The largest t >= 0 with lower <= x + t d <= upper: min over i of (upper_i - x_i) / d_i for
    d_i > 0, (lower_i - x_i) / d_i for d_i < 0; +inf where no bound limits it, 0 where a
    component at its bound moves out (clipped at 0 for an infeasible x)."""
    room = jnp.where(d > 0, upper - x, lower - x)
    moving = d != 0
    ratio = jnp.where(moving, room / jnp.where(moving, d, 1), jnp.inf)
    return jnp.maximum(jnp.min(ratio, initial=jnp.inf), 0).astype(x.dtype)
