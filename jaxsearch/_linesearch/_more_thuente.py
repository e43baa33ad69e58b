"""Moré–Thuente line search (Moré & Thuente, 1994; MINPACK-2 `dcsrch` and `dcstep`)."""

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Bool, Int, Scalar

from .._misc import Setting, as_int, check_setting, scalar, select, setting_value
from ._base import Point, after_trial, end_on_best
from ._decrease import AbstractScaleKeepingSearch, DecreaseSearchState, accepts_max_steps
from ._interpolate import quadratic_minimiser, scaled_cubic, secant_minimiser

_SEARCH, _FALLBACK = 0, 1
_EXTRAPOLATE_MIN, _EXTRAPOLATE_MAX = 1.1, 4.0  # next step in t + [1.1, 4] (t - t_x)
_SHRINK = 0.66  # the bracket must shrink by this factor every two trials, else bisect


class _MoreThuenteSearch(DecreaseSearchState):
    phase: Int[Array, ""]
    use_phi: Bool[Array, ""]  # second stage: the interval is updated with phi, not psi
    bracketed: Bool[Array, ""]
    x: Point  # endpoint with the least psi (first stage) or phi (second stage): t_x
    y: Point  # other endpoint of the interval of uncertainty: t_y
    lower: Scalar  # the next step is chosen in [lower, upper]: the bracket, or the
    upper: Scalar  # extrapolation range beyond the trial being evaluated
    width: Scalar  # |t_y - t_x| after the last trial ...
    width_before: Scalar  # ... and after the one before it
    best: Point  # lowest phi with sufficient decrease so far (t = 0: none yet)


def _dcstep(x: Point, y: Point, p: Point, bracketed, lower, upper):
    """One safeguarded step of Moré & Thuente (1994), section 4 (MINPACK-2 `dcstep`): `x` is the
    endpoint with the lower value, whose slope points towards the trial `p`, `y` the other; the
    step stays in [lower, upper] while nothing is bracketed. Returns (x, y, bracketed) and the
    next trial (NaN on degenerate data: the caller guards it)."""
    forward = p.t > x.t
    higher = p.phi > x.phi  # case 1: the minimiser is bracketed by x and p
    opposite = jnp.sign(p.dphi) * jnp.sign(x.dphi) < 0  # case 2: slopes change sign
    flatter = jnp.abs(p.dphi) < jnp.abs(x.dphi)  # case 3 (else case 4)

    # Case 1: the cubic minimiser if closer to x than the quadratic's (phi(x), phi'(x), phi(p)),
    # else their mean.
    r, _ = scaled_cubic(x.t, x.phi, x.dphi, p.t, p.phi, p.dphi)
    cubic = x.t + r * (p.t - x.t)
    quadratic = quadratic_minimiser(x.t, x.phi, x.dphi, p.t, p.phi)
    closer = jnp.abs(cubic - x.t) <= jnp.abs(quadratic - x.t)
    step1 = jnp.where(closer, cubic, cubic + (quadratic - cubic) / 2)

    # Case 2: the cubic minimiser if it is farther from p than the secant step, else the secant.
    secant = secant_minimiser(p.t, p.dphi, x.t, x.dphi)
    r, _ = scaled_cubic(p.t, p.phi, p.dphi, x.t, x.phi, x.dphi)
    cubic = p.t + r * (x.t - p.t)
    step2 = jnp.where(jnp.abs(cubic - p.t) > jnp.abs(secant - p.t), cubic, secant)

    # Case 3: the cubic step if the cubic tends to infinity along the step or its minimiser lies
    # beyond p; else the range's end.
    r, gamma = scaled_cubic(p.t, p.phi, p.dphi, x.t, x.phi, x.dphi, clamp=True)
    cubic = jnp.where(
        (r < 0) & (gamma != 0), p.t + r * (x.t - p.t), jnp.where(forward, upper, lower)
    )
    # Bracketed: the step closer to p, at most 0.66 of the way to y.
    nearer = jnp.where(jnp.abs(cubic - p.t) < jnp.abs(secant - p.t), cubic, secant)
    cap = p.t + _SHRINK * (y.t - p.t)
    nearer = jnp.where(forward, jnp.minimum(cap, nearer), jnp.maximum(cap, nearer))
    # Not bracketed: the step farther from p, within [lower, upper].
    farther = jnp.where(jnp.abs(cubic - p.t) > jnp.abs(secant - p.t), cubic, secant)
    farther = jnp.maximum(jnp.minimum(farther, upper), lower)
    step3 = jnp.where(bracketed, nearer, farther)

    # Case 4: the cubic's minimiser through p and y when bracketed, else the range's end.
    r, _ = scaled_cubic(p.t, p.phi, p.dphi, y.t, y.phi, y.dphi)
    step4 = jnp.where(bracketed, p.t + r * (y.t - p.t), jnp.where(forward, upper, lower))

    step = jnp.where(higher, step1, jnp.where(opposite, step2, jnp.where(flatter, step3, step4)))
    new_y = select(higher, p, select(opposite, x, y))
    new_x = select(higher, x, p)
    return new_x, new_y, bracketed | higher | opposite, step


def _shift(point: Point, slope) -> Point:
    """phi -> phi - slope t (phi -> psi for slope = ftol phi'(0)); its inverse with -slope."""
    return Point(point.t, point.phi - point.t * slope, point.dphi - slope)


@accepts_max_steps
class MoreThuente(AbstractScaleKeepingSearch):
    """Line search for the strong Wolfe conditions

        phi(t) <= phi(0) + ftol t phi'(0)   and   |phi'(t)| <= gtol |phi'(0)|,

    by J. J. Moré and D. J. Thuente, "Line search algorithms with guaranteed sufficient
    decrease", *ACM Trans. Math. Software* 20(3), 286–307 (1994), as MINPACK-2's `dcsrch` and
    `dcstep` (inside L-BFGS-B and scipy's `line_search_wolfe1`). Defaults are L-BFGS-B's: `ftol`
    = 1e-3, `gtol` = 0.9, `xtol` = 0.1 and 20 trials, `max_trials = 21` counting the
    re-evaluation of a failed search's best trial. Requires 0 < ftol <= gtol < 1 (then a step
    exists wherever phi is bounded below), `xtol >= 0`, `max_trials >= 1`.

    The interval [t_x, t_y] (either order) extrapolates while nothing is bracketed: the next
    trial lies in t + [1.1, 4] (t - t_x). The first stage works on psi(t) = phi(t) - phi(0) -
    ftol t phi'(0) where a trial lowered phi without sufficient decrease; the second, on phi,
    starts at the first trial with psi(t) <= 0 and phi'(t) >= 0 (`dcsrch`'s test; the paper's
    phi'(t) > 0 differs only where both conditions hold). Trials come from `dcstep`'s four cases;
    once bracketed, a trial bisects where the interval did not shrink by 0.66 over two trials. A
    non-finite trial becomes the far end and the next bisects [t_x, t]; a non-finite interpolated
    step is replaced by bisection or the far end of the extrapolation range. No trial exceeds
    `max_step_size` or lies below `min_step`.

    As `dcsrch` warns, it fails when a trial at `max_step_size` has sufficient decrease and
    phi'(t) <= ftol phi'(0); when a trial at `min_step` lacks sufficient decrease or has phi'(t)
    >= ftol phi'(0); when the next trial would not lie strictly inside the bracket; when the
    bracket is at most `xtol` times its upper end wide, or below `min_step`; when the next trial
    is below `min_step`; or after `judged_trials` (`max_trials` - 1) trials. It then returns the
    lowest trial with sufficient decrease (re-evaluated if not the last), or no step; `success`
    False.

    An addition to `dcsrch`: where the change of f is within `epsilon C_k`
    (`AbstractDecreaseSearch`; `epsilon = None`: 1e-6 in float64, 3.5e-4 in float32) it is lost
    in rounding (Hager & Zhang 2005, section 4): sufficient decrease is tested as phi'(t) <= (2
    ftol - 1) phi'(0), the value replaced by phi(0) + t (phi'(0) + phi'(t)) / 2. `epsilon = 0`
    gives `dcsrch` (only then is it `monotone`). A dynamic cap (`AbstractLineSearch.start`;
    L-BFGS-B's `stpmax`) replaces `max_step_size` above; where it binds, a trial at the cap with
    sufficient decrease and phi'(cap) <= ftol phi'(0) ends the search with `success`, as L-BFGS-B
    accepts `dcsrch`'s warning. `max_step_size` (default +inf) and array settings: see
    `AbstractLineSearch`.
    """

    ftol: Setting = 1e-3
    gtol: Setting = 0.9
    xtol: Setting = 0.1
    max_trials: int = eqx.field(static=True, default=21, converter=as_int)
    max_step_size: Setting = float("inf")
    epsilon: Setting | None = None

    refines_best: ClassVar[bool] = True
    evaluates_each_step: ClassVar[bool] = False

    def __check_init__(self):
        name = "MoreThuente"
        check_setting(name, "ftol", self.ftol, lambda v: 0 < v < 1, "lie in (0, 1)")
        ftol, gtol = setting_value(name, "ftol", self.ftol), setting_value(name, "gtol", self.gtol)
        if ftol is not None and gtol is not None and not ftol <= gtol < 1:
            raise ValueError(f"{name}: gtol must lie in [ftol, 1) = [{ftol}, 1), got {gtol}.")
        check_setting(name, "xtol", self.xtol, lambda v: v >= 0, "be non-negative")

    def start(
        self, state, phi0, dphi0, guess, min_step, scaled=None, max_step=None
    ) -> _MoreThuenteSearch:
        dtype = phi0.dtype
        fields = self.open(guess, phi0, dphi0, min_step, max_step, state.add(phi0))
        t0, cap = fields["trial"], fields["max_step"]
        origin = Point(scalar(0, dtype), phi0, dphi0)
        width = (cap - min_step).astype(dtype)
        false = jnp.array(False)
        return _MoreThuenteSearch(
            **fields,
            phase=scalar(_SEARCH, jnp.int32),
            use_phi=false,
            bracketed=false,
            x=origin,
            y=origin,
            lower=scalar(0, dtype),
            upper=(t0 + _EXTRAPOLATE_MAX * t0).astype(dtype),
            width=width,
            width_before=(width / 0.5).astype(dtype),
            best=origin,
        )

    def update(self, search, t, phi, dphi) -> _MoreThuenteSearch:
        dtype = t.dtype
        s = search
        finite = jnp.isfinite(phi) & jnp.isfinite(dphi)
        slope_test = self.ftol * s.dphi0  # psi'(t) = phi'(t) - slope_test
        decrease, lost = self.decrease(s, t, phi, dphi, self.ftol)
        # A value lost in rounding is replaced by the one the slopes give (exact for a
        # quadratic), so that dcstep's interpolation agrees with them.
        phi = jnp.where(lost, s.phi0 + t * (s.dphi0 + dphi) / 2, phi).astype(dtype)
        current = Point(t, phi, dphi)
        converged = decrease & (jnp.abs(dphi) <= self.gtol * -s.dphi0)
        # At a binding dynamic cap (L-BFGS-B's stpmax), dcsrch's test: sufficient decrease
        # and f still falling steeply, phi'(t) <= ftol phi'(0).
        at_edge = self.falls_at_binding_cap(s, t, dphi, self.ftol) & decrease
        converged = converged | at_edge
        use_phi = s.use_phi | (decrease & (dphi >= 0))

        # The interval update and next step: dcstep on psi in the first stage after a trial that
        # lowered phi without sufficient decrease, else on phi.
        on_psi = ~use_phi & finite & (phi <= s.x.phi) & ~decrease
        shift = jnp.where(on_psi, slope_test, 0).astype(dtype)
        x, y, bracketed, step = _dcstep(
            _shift(s.x, shift),
            _shift(s.y, shift),
            _shift(current, shift),
            s.bracketed,
            s.lower,
            s.upper,
        )
        x, y = _shift(x, -shift), _shift(y, -shift)
        # A non-finite trial bounds the bracket and is bisected away from.
        x = select(finite, x, s.x)
        y = select(finite, y, current)
        bracketed = bracketed | ~finite
        middle = x.t + 0.5 * (y.t - x.t)
        step = jnp.where(finite, step, middle)

        # Bisect when the bracket did not shrink enough over two trials.
        width = jnp.abs(y.t - x.t)
        step = jnp.where(bracketed & (width >= _SHRINK * s.width_before), middle, step)
        step = jnp.where(jnp.isfinite(step), step, jnp.where(bracketed, middle, s.upper))
        width_before = jnp.where(bracketed, s.width, s.width_before)
        width = jnp.where(bracketed, width, s.width)
        lower = jnp.where(bracketed, jnp.minimum(x.t, y.t), step + _EXTRAPOLATE_MIN * (step - x.t))
        upper = jnp.where(bracketed, jnp.maximum(x.t, y.t), step + _EXTRAPOLATE_MAX * (step - x.t))
        below = step < s.min_step
        next_trial = jnp.minimum(jnp.maximum(step, s.min_step), s.max_step)

        num_trials = s.num_trials + 1
        stuck = bracketed & (
            (next_trial <= lower)
            | (next_trial >= upper)
            | (upper - lower <= self.xtol * upper)
            | (upper - lower < s.min_step)
        )
        at_max = (t >= s.max_step) & decrease & (dphi <= slope_test)
        at_min = (t <= s.min_step) & (~decrease | (dphi >= slope_test))
        fail = ~converged & (at_max | at_min | stuck | below | (num_trials >= self.judged_trials))

        best = select(decrease & (phi < s.best.phi), current, s.best)
        in_fallback = s.phase == _FALLBACK  # re-evaluation of the best point: take it
        done, step_taken, refine, trial = end_on_best(
            converged, fail, in_fallback, best.t, t, finite, jnp.where(below, step, next_trial)
        )
        phase = jnp.where(in_fallback | refine, _FALLBACK, _SEARCH)
        return after_trial(
            s,
            trial=trial,
            done=done,
            step=jnp.where(step_taken, t, 0),
            success=converged & ~in_fallback,
            phase=phase.astype(jnp.int32),
            use_phi=use_phi,
            bracketed=bracketed,
            x=x,
            y=y,
            lower=lower.astype(dtype),
            upper=upper.astype(dtype),
            width=width.astype(dtype),
            width_before=width_before.astype(dtype),
            best=best,
        )
