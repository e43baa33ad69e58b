"""Safeguarded one-dimensional interpolation steps used by the Wolfe searches."""

import jax.numpy as jnp
from jaxtyping import Array, Bool, Scalar

from .._misc import Setting


def cubic_minimiser(a, fa, da, b, fb, db) -> Scalar:
    """Minimiser of the cubic matching f and f' at a and b (N&W eq. 3.59); NaN if none.

    With t = a + u (b - a) the cubic is fa + delta u + beta u^2 + gamma u^3, where
    delta = da (b - a), beta = 3 (fb - fa) - (2 da + db) (b - a) and gamma = (da + db) (b - a)
    - 2 (fb - fa); its local minimiser, the root of delta + 2 beta u + 3 gamma u^2 where the
    second derivative is positive, is u = -delta / (beta + r) for beta >= 0 and
    (r - beta) / (3 gamma) otherwise, r = sqrt(beta^2 - 3 gamma delta): the two forms of
    the same root, each taken where it does not cancel. So a minimiser near a (u ~ 1e-30, a
    first trial far beyond the minimiser of a quadratic) comes out to full relative
    precision, where b - (b - a) (...) would keep only an absolute error of eps |b - a|.
    The coefficients are divided by the largest of their magnitudes first, as Moré &
    Thuente's dcstep does, so that beta^2 does not overflow.
    """
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
    """Next trial strictly inside the bracket [lo, hi] (points are (t, phi, dphi) triples).

    The cubic's minimiser if it lies at least `safeguard` times the bracket width from either
    end, else the quadratic's (through phi(lo), phi'(lo), phi(hi)) under the same test. Where
    neither does and `near_end` is True, the cubic's minimiser if it lies strictly inside the
    bracket and at least `resolution` from either end; otherwise bisection. On a quadratic
    phi the cubic is phi, so its minimiser is exact wherever it lies; the quadratic, which
    ignores phi'(hi), is not trusted near an end (where f grows faster than a quadratic it
    puts its minimiser next to lo). Non-finite data at `hi` (a failed trial) falls through
    to bisection. `cubic`: the cubic's minimiser when the caller has it (else computed here).
    """
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
    """Next trial beyond `current` while bracketing (the slope there is still negative).

    The cubic minimiser through `prev` and `current`, kept in [t + 1.1 w, t + 4 w] with
    w = t - t_prev (the extrapolation bounds of Moré & Thuente, 1994), and capped at
    `max_step_size` (the search's cap); without a usable minimiser, t + 4 w. `cubic`: that
    minimiser when the caller has it (else computed here).
    """
    (a, fa, da), (b, fb, db) = prev, current
    width = b - a
    low, high = b + 1.1 * width, b + 4 * width
    if cubic is None:
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
