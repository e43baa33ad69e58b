"""Safeguarded one-dimensional interpolation steps used by the Wolfe searches."""

import jax.numpy as jnp
from jaxtyping import Scalar

from .._misc import Setting


def cubic_minimiser(a, fa, da, b, fb, db) -> Scalar:
    """Minimiser of the cubic matching f and f' at a and b (N&W eq. 3.59); NaN if none."""
    d1 = da + db - 3 * (fa - fb) / (a - b)
    radicand = d1 * d1 - da * db
    d2 = jnp.sign(b - a) * jnp.sqrt(jnp.where(radicand >= 0, radicand, jnp.nan))
    return b - (b - a) * (db + d2 - d1) / (db - da + 2 * d2)


def quadratic_minimiser(a, fa, da, b, fb) -> Scalar:
    """Minimiser of the quadratic matching f(a), f'(a) and f(b); NaN if it has no minimum."""
    curvature = fb - fa - da * (b - a)
    return jnp.where(curvature > 0, a - da * (b - a) ** 2 / (2 * curvature), jnp.nan)


def zoom_trial(lo, hi, safeguard: Setting) -> Scalar:
    """Next trial strictly inside the bracket [lo, hi] (points are (t, phi, dphi) triples).

    Cubic interpolation if its minimiser lies at least `safeguard` times the bracket width from
    either end, else the quadratic through phi(lo), phi'(lo), phi(hi) under the same test,
    else bisection. Non-finite data at `hi` (a failed trial) falls through to bisection.
    """
    (a, fa, da), (b, fb, db) = lo, hi
    low, high = jnp.minimum(a, b), jnp.maximum(a, b)
    margin = safeguard * (high - low)

    def inside(t):
        return jnp.isfinite(t) & (t >= low + margin) & (t <= high - margin)

    cubic = cubic_minimiser(a, fa, da, b, fb, db)
    quadratic = quadratic_minimiser(a, fa, da, b, fb)
    middle = (a + b) / 2
    return jnp.where(inside(cubic), cubic, jnp.where(inside(quadratic), quadratic, middle))


def expansion_trial(prev, current, max_step_size: Setting | Scalar) -> Scalar:
    """Next trial beyond `current` while bracketing (the slope there is still negative).

    The cubic minimiser through `prev` and `current`, kept in [t + 1.1 w, t + 4 w] with
    w = t - t_prev (the extrapolation bounds of Moré & Thuente, 1994), and capped at
    `max_step_size` (the search's cap); without a usable minimiser, t + 4 w.
    """
    (a, fa, da), (b, fb, db) = prev, current
    width = b - a
    low, high = b + 1.1 * width, b + 4 * width
    cubic = cubic_minimiser(a, fa, da, b, fb, db)
    t = jnp.where(jnp.isfinite(cubic) & (cubic > b), jnp.clip(cubic, low, high), high)
    return jnp.minimum(t, max_step_size)


def scaled_cubic(a, fa, da, b, fb, db, clamp: bool = False) -> tuple[Scalar, Scalar]:
    """The cubic matching f and f' at a and b, in the overflow-safe form of Moré & Thuente
    (1994), section 4 (MINPACK-2 `dcstep`). Returns (r, gamma): the cubic's minimiser lies at
    a + r (b - a), with

        theta = 3 (fa - fb) / (b - a) + da + db,
        gamma = sign(b - a) sqrt(theta^2 - da db),
        r = (gamma - da + theta) / (2 gamma - da + db),

    where the square root is taken with s = max(|theta|, |da|, |db|) factored out, so large
    slopes do not overflow. A negative radicand (the cubic has no local minimiser) gives a NaN
    gamma, or gamma = 0 with `clamp=True`.
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
