"""Acceptance tests shared by the line searches."""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Bool, Scalar

from .._misc import Setting, scalar


def no_allowance(epsilon) -> bool:
    """Whether `epsilon` is the Python number 0 (Armijo's test alone): the search is then
    `monotone`."""
    return isinstance(epsilon, int | float) and epsilon == 0


def armijo(phi0: Scalar, dphi0: Scalar, t: Scalar, phi: Scalar, c1: Setting) -> Bool[Array, ""]:
    """Sufficient decrease phi(t) <= phi(0) + c1 t phi'(0), False when phi(t) is not finite."""
    return jnp.isfinite(phi) & (phi <= phi0 + c1 * t * dphi0)


def value_tolerance(epsilon: Setting | None, dtype) -> Setting:
    """`epsilon`, or for None max(1e-6, sqrt(eps of dtype)): Hager & Zhang's 1e-6 in float64, 3.5e-4
    in float32, where a long sum's rounding lies far above 1e-6 relative to f."""
    if epsilon is not None:
        return epsilon
    return max(1e-6, float(jnp.finfo(dtype).eps) ** 0.5)


class ValueScale(eqx.Module):
    """Hager & Zhang's (2005, section 4) running average of |f| over the iterates, C_k:

        Q_0 = 1, C_0 = |f_0|,   Q_k = 1 + Delta Q_{k-1},   C_k = C_{k-1} + (|f_k| - C_{k-1}) / Q_k.

    Rounding is judged relative to C_k, not |f_k|: as f falls towards 0 the terms it sums, and
    their rounding, stay large.
    """

    C: Scalar
    Q: Scalar  # 0 before the first iterate

    @classmethod
    def empty(cls, dtype) -> "ValueScale":
        return cls(C=scalar(0, dtype), Q=scalar(0, dtype))

    def add(self, f: Scalar, Delta: Setting = 0.7) -> "ValueScale":
        """C_k, Q_k once f_k = `f` is added."""
        first = self.Q <= 0
        Q = jnp.where(first, 1, 1 + Delta * self.Q).astype(self.Q.dtype)
        C = jnp.where(first, jnp.abs(f), self.C + (jnp.abs(f) - self.C) / Q).astype(self.C.dtype)
        return ValueScale(C=C, Q=Q)

    def allowance(self, epsilon: Setting | None) -> Scalar:
        """epsilon C_k: how far above phi(0) a step `lost_in_rounding` may be accepted."""
        return value_tolerance(epsilon, self.C.dtype) * self.C

    def kept_if(self, keep: Bool[Array, ""], other: "ValueScale") -> "ValueScale":
        """This scale where `keep`, else `other` (a search that took no step adds no iterate)."""
        return ValueScale(C=jnp.where(keep, self.C, other.C), Q=jnp.where(keep, self.Q, other.Q))


def lost_in_rounding(
    phi0: Scalar,
    dphi0: Scalar,
    t: Scalar,
    phi: Scalar,
    dphi: Scalar,
    epsilon: Setting | None,
    scale: Scalar | None = None,
) -> Bool[Array, ""]:
    """Is phi(t) - phi(0) lost in f's rounding? Near a minimiser value comparisons are coin tosses,
    so the slopes decide (Hager & Zhang 2005, section 4). True where t |phi'(0)| <= epsilon C and
    |phi(t) - phi(0)| <= epsilon C with phi(t), phi'(t) finite; C is `scale` (C_k) or, for None,
    |phi(0)|. A step accepted there by `slope_armijo` raises f by at most epsilon C. `epsilon =
    0` never reports a loss; None: `value_tolerance`."""
    scale = jnp.abs(phi0) if scale is None else scale
    tolerance = value_tolerance(epsilon, phi0.dtype) * scale
    return (
        jnp.isfinite(phi)
        & jnp.isfinite(dphi)
        & (t * jnp.abs(dphi0) <= tolerance)
        & (jnp.abs(phi - phi0) <= tolerance)
    )


def slope_armijo(dphi0: Scalar, dphi: Scalar, c1: Setting) -> Bool[Array, ""]:
    """phi'(t) <= (2 c1 - 1) phi'(0): for a quadratic phi, the Armijo condition with constant
    c1 (Hager & Zhang 2005, the approximate Wolfe conditions)."""
    return dphi <= (2 * c1 - 1) * dphi0


def sufficient_decrease(
    phi0: Scalar,
    dphi0: Scalar,
    t: Scalar,
    phi: Scalar,
    dphi: Scalar,
    c1: Setting,
    epsilon,
    scale: Scalar | None = None,
) -> tuple[Bool[Array, ""], Bool[Array, ""]]:
    """(Armijo's test, or `slope_armijo` where the change is `lost_in_rounding`; the loss). A step
    accepted on its slope may raise f by up to epsilon C, so such a search is not `monotone`."""
    lost = lost_in_rounding(phi0, dphi0, t, phi, dphi, epsilon, scale)
    decrease = jnp.where(lost, slope_armijo(dphi0, dphi, c1), armijo(phi0, dphi0, t, phi, c1))
    return decrease & jnp.isfinite(dphi), lost


def wolfe_curvature(dphi0: Scalar, dphi: Scalar, c2: Setting) -> Bool[Array, ""]:
    """phi'(t) >= c2 phi'(0): Wolfe's curvature condition (Nocedal & Wright, 2nd ed., eq.
    3.6b), False where phi'(t) is NaN."""
    return dphi >= c2 * dphi0


def strong_wolfe_curvature(dphi0: Scalar, dphi: Scalar, c2: Setting) -> Bool[Array, ""]:
    """|phi'(t)| <= c2 |phi'(0)|: the strong Wolfe curvature condition (Nocedal & Wright,
    2nd ed., eq. 3.7b), False where phi'(t) is not finite."""
    return jnp.abs(dphi) <= c2 * jnp.abs(dphi0)


def goldstein_lower(
    phi0: Scalar, dphi0: Scalar, t: Scalar, phi: Scalar, dphi: Scalar, c: Setting, lost
) -> Bool[Array, ""]:
    """The lower Goldstein bound phi(t) >= phi(0) + (1 - c) t phi'(0) (Nocedal & Wright, 2nd ed.,
    eq. 3.11, left); where the change is `lost` in rounding, its quadratic form phi'(t) >= (1 - 2
    c) phi'(0)."""
    on_values = phi >= phi0 + (1 - c) * t * dphi0
    return jnp.where(lost, dphi >= (1 - 2 * c) * dphi0, on_values)
