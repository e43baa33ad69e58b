"""Strong Wolfe line search: bracketing, then zoom (Nocedal & Wright, algorithms 3.5 and 3.6)."""

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Int, Scalar

from .._misc import Setting, as_int, check_setting, scalar, select, setting_value
from ._base import Point, after_trial, end_on_best
from ._decrease import AbstractScaleKeepingSearch, DecreaseSearchState, accepts_max_steps
from ._interpolate import cubic_minimiser, expansion_trial, zoom_trial

_BRACKET, _ZOOM, _FALLBACK = 0, 1, 2
# An interpolated trial near an end is taken only while the bracket shrinks to this fraction of its
# width every two trials (Moré & Thuente's bisection rule, dcsrch's p66; Hager & Zhang's gamma).
_SHRINK = 0.66


class _ZoomSearch(DecreaseSearchState):
    phase: Int[Array, ""]
    prev: Point  # previous trial while bracketing
    lo: Point  # lowest value with sufficient decrease so far (N&W's alpha_lo)
    hi: Point
    width: Scalar  # |hi - lo| after the last trial (+inf while bracketing) ...
    width_before: Scalar  # ... and after the one before it


@accepts_max_steps
class Zoom(AbstractScaleKeepingSearch):
    """Line search for the strong Wolfe conditions

        phi(t) <= phi(0) + c1 t phi'(0)   and   |phi'(t)| <= c2 |phi'(0)|,

    with `c1` = 1e-4 and `c2` = 0.9 by default, by Nocedal & Wright, *Numerical Optimization*,
    2nd ed., algorithms 3.5 (bracketing, by safeguarded cubic extrapolation) and 3.6 (zoom). A
    zoom trial is the cubic's minimiser through the bracket's ends, else the quadratic's through
    phi(lo), phi'(lo), phi(hi), where it lies at least `safeguard` times the width from either
    end; nearer an end (at least `min_step` inside), the cubic's while the bracket shrinks below
    0.66 of its width two trials before (Moré & Thuente 1994); else bisection. A non-finite
    trial fails sufficient decrease, so the search backs off from it.

    It fails after `judged_trials` trials (phi is evaluated at most `max_trials`, 26, times),
    when the bracket is below `xtol` relative to its position or below `min_step` (or the next
    trial would be), or when expansion reaches `max_step_size`, returning the lowest trial with
    sufficient decrease (re-evaluated if not the last) or no step, `success` False. Rounding
    (`epsilon`, as `Backtracking`): a change lost in rounding is judged by phi'(t) <= (2 c1 - 1)
    phi'(0), its value compared with no other; `monotone` only with `epsilon = 0`. At a binding
    dynamic cap (`AbstractLineSearch.start`), a trial at the cap with sufficient decrease and
    phi'(cap) <= c1 phi'(0) ends the search with `success`, as dcsrch stops at stpmax.
    `max_step_size` (default +inf) and array settings: see `AbstractLineSearch`.
    """

    c1: Setting = 1e-4
    c2: Setting = 0.9
    max_trials: int = eqx.field(static=True, default=26, converter=as_int)
    safeguard: Setting = 0.1
    xtol: Setting = 1e-7
    max_step_size: Setting = float("inf")
    epsilon: Setting | None = None

    refines_best: ClassVar[bool] = True
    evaluates_each_step: ClassVar[bool] = False

    def __check_init__(self):
        check_setting("Zoom", "c1", self.c1, lambda v: 0 < v < 1, "lie in (0, 1)")
        c1, c2 = setting_value("Zoom", "c1", self.c1), setting_value("Zoom", "c2", self.c2)
        if c1 is not None and c2 is not None and not c1 < c2 < 1:
            raise ValueError(f"Zoom: c2 must lie in (c1, 1) = ({c1}, 1), got {c2}.")
        check_setting("Zoom", "safeguard", self.safeguard, lambda v: 0 < v < 0.5, "lie in (0, 0.5)")
        check_setting("Zoom", "xtol", self.xtol, lambda v: v >= 0, "be non-negative")

    def start(self, state, phi0, dphi0, guess, min_step, scaled=None, max_step=None) -> _ZoomSearch:
        origin = Point(scalar(0, phi0.dtype), phi0, dphi0)
        return _ZoomSearch(
            **self.open(guess, phi0, dphi0, min_step, max_step, state.add(phi0)),
            phase=scalar(_BRACKET, jnp.int32),
            prev=origin,
            lo=origin,
            hi=origin,
            width=scalar(jnp.inf, phi0.dtype),
            width_before=scalar(jnp.inf, phi0.dtype),
        )

    def update(self, search, t, phi, dphi) -> _ZoomSearch:
        dtype = t.dtype
        current = Point(t, phi, dphi)
        decrease, lost = self.decrease(search, t, phi, dphi, self.c1)
        curvature = jnp.abs(dphi) <= -self.c2 * search.dphi0
        bracketing = search.phase == _BRACKET
        first = search.num_trials == 0

        # Algorithm 3.5 (bracketing) and 3.6 (zoom): is `current` the new upper end?
        # A value lost in rounding is not compared with others: the slopes steer.
        higher = jnp.where(bracketing, ~first & (phi >= search.prev.phi), phi >= search.lo.phi)
        above = ~decrease | (~lost & higher)
        # At a binding dynamic cap, sufficient decrease suffices while phi'(t) <= c1 phi'(0), as
        # dcsrch stops at stpmax.
        at_edge = self.falls_at_binding_cap(search, t, dphi, self.c1) & decrease
        accept = (~above & curvature) | at_edge
        # Otherwise `current` has sufficient decrease and the wrong slope.
        rising = ~above & ~accept & (dphi >= 0)  # bracketing: minimum lies behind us
        flip = ~above & ~accept & (dphi * (search.hi.t - search.lo.t) >= 0)  # zoom: hi <- lo
        expand = bracketing & ~above & ~accept & ~rising

        lo_if_bracket = select(above, search.prev, current)
        hi_if_bracket = select(above, current, search.prev)
        lo_if_zoom = select(above, search.lo, current)
        hi_if_zoom = select(above, current, select(flip, search.lo, search.hi))
        lo = select(bracketing, lo_if_bracket, lo_if_zoom)
        hi = select(bracketing, hi_if_bracket, hi_if_zoom)

        width = jnp.abs(hi.t - lo.t)
        zoom_width = jnp.where(expand, jnp.inf, width).astype(dtype)
        near_end = zoom_width < _SHRINK * search.width_before
        # One cubic, through the points of the rule that applies (each scalar op is a CPU kernel of
        # its own: computing both and selecting doubles them).
        first_end, second_end = select(expand, (search.prev, current), (lo, hi))
        cubic = cubic_minimiser(*first_end.triple(), *second_end.triple())
        next_trial = jnp.where(
            expand,
            expansion_trial(search.prev.triple(), current.triple(), search.max_step, cubic),
            zoom_trial(lo.triple(), hi.triple(), self.safeguard, near_end, search.min_step, cubic),
        ).astype(dtype)
        num_trials = search.num_trials + 1
        exhausted = (
            (num_trials >= self.judged_trials)
            | (expand & (t >= search.max_step))
            | (~expand & (width <= self.xtol * jnp.maximum(lo.t, hi.t)))
            | (~expand & ((width < search.min_step) | (next_trial < search.min_step)))
        )
        fail = ~accept & exhausted
        # Best point with sufficient decrease: `current` while expanding, else alpha_lo.
        in_fallback = search.phase == _FALLBACK  # re-evaluation of the best point: take it
        done, taken, refine, trial = end_on_best(
            accept,
            fail,
            in_fallback,
            jnp.where(expand, t, lo.t),
            t,
            jnp.isfinite(phi) & jnp.isfinite(dphi),
            next_trial,
        )
        phase = jnp.where(refine, _FALLBACK, jnp.where(expand, _BRACKET, _ZOOM)).astype(jnp.int32)
        return after_trial(
            search,
            trial=trial,
            done=done,
            step=jnp.where(taken, t, 0),
            success=accept & ~in_fallback,
            phase=jnp.where(in_fallback, search.phase, phase),
            prev=current,
            lo=lo,
            hi=hi,
            width=zoom_width,
            width_before=search.width,
        )
