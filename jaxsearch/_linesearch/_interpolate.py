"""Safeguarded one-dimensional interpolation steps used by the Wolfe searches."""

import jax.numpy as jnp
from jaxtyping import Array, Bool, Scalar

from .._misc import Setting


def cubic_minimiser(a, fa, da, b, fb, db) -> Scalar:
    """Minimiser of the cubic matching f and f' at a and b (N&W eq. 3.59); NaN if none. With t = a +
    u (b - a) it is fa + delta u + beta u^2 + gamma u^3 (delta = da (b - a), beta = 3 (fb - fa) -
    (2 da + db) (b - a), gamma = (da + db) (b - a) - 2 (fb - fa)), minimised at u = -delta /
    (beta + r) for beta >= 0, else (r - beta) / (3 gamma), r = sqrt(beta^2 - 3 gamma delta): each
    form where it does not cancel, so a minimiser near a keeps full relative precision.
    Coefficients are divided by their largest magnitude first (as dcstep) against overflow."""
    width, change = b - a, fb - fa
    delta = da * width
    beta = 3 * change - (2 * da + db) * width
    gamma = (da + db) * width - 2 * change
    scale = jnp.maximum(jnp.maximum(jnp.abs(delta), jnp.abs(beta)), jnp.abs(gamma))
    delta, beta, gamma = delta / scale, beta / scale, gamma / scale
    radicand = beta * beta - 3 * gamma * delta
    r = jnp.sqrt(jnp.where(radicand >= 0, radicand, jnp.nan))
    u = jnp.where(beta >= 0, -delta / (beta + r), (r - beta) / (3 * gamma))
    return jnp.where(jnp.isfinite(u), a + u * width, jnp.nan)


def quadratic_minimiser(a, fa, da, b, fb) -> Scalar:
    """Minimiser of the quadratic matching f(a), f'(a) and f(b); NaN if it has no minimum."""
    curvature = fb - fa - da * (b - a)
    return jnp.where(curvature > 0, a - da * (b - a) ** 2 / (2 * curvature), jnp.nan)


def zoom_trial(
    lo, hi, safeguard: Setting, near_end: Bool[Array, ""], resolution: Scalar, cubic=None
) -> Scalar:
    """Next trial strictly inside the bracket [lo, hi] ((t, phi, dphi) triples): the cubic's
    minimiser if at least `safeguard` times the width from either end, else the quadratic's
    (phi(lo), phi'(lo), phi(hi)) under the same test; else, with `near_end`, the cubic's if
    strictly inside and at least `resolution` from either end; else bisection. The cubic is exact
    on a quadratic phi wherever its minimiser lies; the quadratic ignores phi'(hi), so it is not
    trusted near an end. Non-finite data at `hi` gives bisection. `cubic`: the cubic's minimiser
    if the caller has it."""
    (a, fa, da), (b, fb, db) = lo, hi
    low, high = jnp.minimum(a, b), jnp.maximum(a, b)
    margin = safeguard * (high - low)

    def inside(t):
        return jnp.isfinite(t) & (t >= low + margin) & (t <= high - margin)

    def apart(t):  # strictly inside, and at least `resolution` from either end
        gap = jnp.minimum(t - low, high - t)
        return near_end & jnp.isfinite(t) & (gap > 0) & (gap >= resolution)

    if cubic is None:
        cubic = cubic_minimiser(a, fa, da, b, fb, db)
    quadratic = quadratic_minimiser(a, fa, da, b, fb)
    middle = (a + b) / 2
    near = jnp.where(apart(cubic), cubic, middle)
    return jnp.where(inside(cubic), cubic, jnp.where(inside(quadratic), quadratic, near))


def expansion_trial(prev, current, max_step_size: Setting | Scalar, cubic=None) -> Scalar:
    """Next trial beyond `current` while bracketing: the cubic minimiser through `prev` and
    `current` kept in [t + 1.1 w, t + 4 w], w = t - t_prev (Moré & Thuente 1994), capped at
    `max_step_size`; else t + 4 w. `cubic`: that minimiser if the caller has it."""
    (a, fa, da), (b, fb, db) = prev, current
    width = b - a
    low, high = b + 1.1 * width, b + 4 * width
    if cubic is None:
        cubic = cubic_minimiser(a, fa, da, b, fb, db)
    t = jnp.where(jnp.isfinite(cubic) & (cubic > b), jnp.clip(cubic, low, high), high)
    return jnp.minimum(t, max_step_size)


def scaled_cubic(a, fa, da, b, fb, db, clamp: bool = False) -> tuple[Scalar, Scalar]:
    """The cubic matching f and f' at a and b in Moré & Thuente's (1994, section 4, `dcstep`)
    overflow-safe form; returns (r, gamma), the minimiser at a + r (b - a):

        theta = 3 (fa - fb) / (b - a) + da + db,
        gamma = sign(b - a) sqrt(theta^2 - da db),
        r = (gamma - da + theta) / (2 gamma - da + db),

    the root taken with s = max(|theta|, |da|, |db|) factored out; no local minimiser gives a NaN
    gamma, or 0 with `clamp=True`.
    """
    theta = 3 * (fa - fb) / (b - a) + da + db
    s = jnp.maximum(jnp.maximum(jnp.abs(theta), jnp.abs(da)), jnp.abs(db))
    radicand = (theta / s) ** 2 - (da / s) * (db / s)
    if clamp:
        radicand = jnp.maximum(radicand, 0)
    gamma = s * jnp.sqrt(jnp.where(radicand >= 0, radicand, jnp.nan))
    gamma = jnp.where(b < a, -gamma, gamma)
    r = ((gamma - da) + theta) / (((gamma - da) + gamma) + db)
    return r, gamma


def secant_minimiser(a, da, b, db) -> Scalar:
    """Zero of the line through (a, f'(a)) and (b, f'(b)): the secant step on the slope."""
    return a + (da / (da - db)) * (b - a)
