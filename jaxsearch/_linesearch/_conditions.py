"""Acceptance tests shared by the line searches."""

import jax.numpy as jnp
from jaxtyping import Array, Bool, Scalar


def armijo(phi0: Scalar, dphi0: Scalar, t: Scalar, phi: Scalar, c1: float) -> Bool[Array, ""]:
    """Sufficient decrease phi(t) <= phi(0) + c1 t phi'(0), False when phi(t) is not finite."""
    return jnp.isfinite(phi) & (phi <= phi0 + c1 * t * dphi0)


def value_tolerance(epsilon: float | None, dtype) -> float:
    """`epsilon`, or for None max(1e-6, sqrt(machine epsilon of dtype)): Hager & Zhang's 1e-6
    in float64, 3.5e-4 in float32, where the rounding error of a sum of many terms lies far
    above 1e-6 relative to f."""
    if epsilon is not None:
        return epsilon
    return max(1e-6, float(jnp.finfo(dtype).eps) ** 0.5)


def lost_in_rounding(
    phi0: Scalar, dphi0: Scalar, t: Scalar, phi: Scalar, dphi: Scalar, epsilon: float | None
) -> Bool[Array, ""]:
    """Is the change phi(t) - phi(0) lost in the rounding error of f?

    Near a minimiser phi(0) - phi(t) falls below the rounding error of f, and tests and
    comparisons of values become coin tosses. Following Hager & Zhang (2005, section 4), the
    searches then let the slopes decide. That is the case here when

        t |phi'(0)| <= epsilon |phi(0)|   and   |phi(t) - phi(0)| <= epsilon |phi(0)|

    (the linear model and the value both change f by less than the tolerance), with phi(t)
    and phi'(t) finite. There sufficient decrease is judged by `slope_armijo`, so a step
    accepted this way raises f by at most epsilon |phi(0)|. `epsilon = 0` never reports a
    loss; for `epsilon = None` see `value_tolerance`.
    """
    tolerance = value_tolerance(epsilon, phi0.dtype) * jnp.abs(phi0)
    return (
        jnp.isfinite(phi)
        & jnp.isfinite(dphi)
        & (t * jnp.abs(dphi0) <= tolerance)
        & (jnp.abs(phi - phi0) <= tolerance)
    )


def slope_armijo(dphi0: Scalar, dphi: Scalar, c1: float) -> Bool[Array, ""]:
    """phi'(t) <= (2 c1 - 1) phi'(0): for a quadratic phi, the Armijo condition with constant
    c1 (Hager & Zhang 2005, the approximate Wolfe conditions)."""
    return dphi <= (2 * c1 - 1) * dphi0


def sufficient_decrease(
    phi0: Scalar, dphi0: Scalar, t: Scalar, phi: Scalar, dphi: Scalar, c1: float, epsilon
) -> tuple[Bool[Array, ""], Bool[Array, ""]]:
    """(Armijo's test, or `slope_armijo` where the change is `lost_in_rounding`; the loss)."""
    lost = lost_in_rounding(phi0, dphi0, t, phi, dphi, epsilon)
    decrease = jnp.where(lost, slope_armijo(dphi0, dphi, c1), armijo(phi0, dphi0, t, phi, c1))
    return decrease & jnp.isfinite(dphi), lost
