"""Hager–Zhang approximate Wolfe line search (Hager & Zhang 2005, 2006; CG_DESCENT)."""

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Bool, Int, Scalar

from .._misc import Setting, as_int, check_setting, scalar, select, setting_value
from ._base import Point, after_trial, at_binding_cap, end_on_best
from ._conditions import ValueScale, armijo, value_tolerance
from ._decrease import AbstractDecreaseSearch, DecreaseSearchState, accepts_max_steps
from ._interpolate import quadratic_minimiser, secant_minimiser

# Phases: what the trial being evaluated is.
_QUAD = 0  # phi(psi1 alpha_{k-1}) for QuadStep (rule I1); never accepted itself
_BRACKET = 1  # c_j of the bracket routine (B1-B3)
_BISECT = 2  # d = (1 - theta) a + theta b of the update's bisection loop (U3a-c)
_SECANT = 3  # c = secant(a, b) of secant^2 (S1)
_SECANT_BAR = 4  # c_bar of secant^2 (S2-S4)
_MIDPOINT = 5  # (a + b) / 2 when the bracket did not shrink enough (L2)
_FALLBACK = 6  # re-evaluation of the best point after a failure
# Where the bisection loop returns to.
_TO_L1, _TO_L2 = 0, 1


class HagerZhangState(eqx.Module):
    """What the search keeps between searches (CG_DESCENT's C_k, Q_k, AWolfe, alpha_{k-1})."""

    scale: ValueScale  # C_k, Q_k up to the last iterate a search moved from
    approx: Bool[Array, ""]  # use the approximate Wolfe conditions
    prev_step: Scalar  # alpha_{k-1}; 0 when no step has been accepted yet


class _HagerZhangSearch(DecreaseSearchState):
    phase: Int[Array, ""]
    after: Int[Array, ""]  # _TO_L1 or _TO_L2: where the bisection loop continues
    bound: Scalar  # phi(0) + epsilon_k
    approx: Bool[Array, ""]
    a: Point  # bracket [a, b]: phi'(a) < 0, phi(a) <= phi(0) + epsilon_k, phi'(b) >= 0 ...
    b: Point  # ... (or b is a point above the bound / non-finite, inside the bisection loop)
    width: Scalar  # b_j - a_j at the start of the current secant^2 iteration
    best: Point  # lowest phi among trials with (approximate) sufficient decrease; t = 0: none
    best_approx: Point  # lowest phi among trials satisfying T2; t = 0: none
    rescued: Bool[Array, ""]  # re-evaluating best_approx after a failed Wolfe (T1) search
    switched: Bool[Array, ""]  # the Wolfe (T1) search failed: approximate Wolfe from now on
    last_phi: Scalar  # phi at the last trial (phi at `step` when step > 0)
    prev_step: Scalar  # alpha_{k-1} (0: none)


def _inside(c, a, b):
    return jnp.isfinite(c) & (c > a) & (c < b)


@accepts_max_steps
class HagerZhang(AbstractDecreaseSearch):
    """Approximate Wolfe line search of W. W. Hager and H. Zhang, "A new conjugate gradient method
    with guaranteed descent and an efficient line search", *SIAM J. Optim.* 16(1), 170–192
    (2005), and "Algorithm 851: CG_DESCENT", *ACM Trans. Math. Software* 32(1), 113–137 (2006). A
    finite trial t is accepted when it satisfies T1, the (not strong) Wolfe conditions, phi(t) -
    phi(0) <= delta t phi'(0) and phi'(t) >= sigma phi'(0), or (once switched, as CG_DESCENT,
    from the first step with |f_{k+1} - f_k| <= omega C_k on) T2, the approximate Wolfe
    conditions, (2 delta - 1) phi'(0) >= phi'(t) >= sigma phi'(0) and phi(t) <= phi(0) +
    epsilon_k; epsilon_k = epsilon C_k, C_k averaging |f| over the iterates: Q_0 = 1, C_0 =
    |f_0|, Q_{k+1} = 1 + Delta Q_k, C_{k+1} = C_k + (|f_{k+1}| - C_k) / Q_{k+1}.

    Trials follow the 2006 paper: bracketing B1–B3 (c_{j+1} = rho c_j until phi'(c_j) >= 0, or
    phi(c_j) > phi(0) + epsilon_k, which starts U3's bisection, here from c_{j-1}, not 0: every
    earlier c_i is a valid lower end, as B1 assumes), then secant^2 steps (S1–S4, placed by
    U0–U3, U3 bisecting d = (1 - theta) a + theta b), bisecting [a, b] (L2) where a secant^2 step
    shrinks it by less than gamma; secant(a, b) = (a phi'(b) - b phi'(a)) / (phi'(b) - phi'(a)).
    The first trial: the solver's `guess` on the first search (I0 needs x_0) and for a `scaled`
    direction; otherwise QuadStep (I1): phi at psi1 alpha_{k-1} and, if that is <= phi(0) and the
    quadratic through phi(0), phi'(0) and it is strictly convex, its minimiser, else (I2) psi2
    alpha_{k-1}. The QuadStep evaluation is a trial, never accepted itself; if not finite, the
    first trial is theta psi1 alpha_{k-1}. `quad_step=False`: I2 always. A non-finite trial is
    U3's case, the upper end b. Trials lie within [`min_step`, `max_step_size`].

    It fails after `judged_trials` (`max_trials` - 1; default 51) trials, when expansion reaches
    `max_step_size`, when the next trial would not lie strictly inside the bracket, or when the
    bracket or the next trial is below `min_step`. Where a T1 search fails, CG_DESCENT switches
    to T2 for good and searches again; here the switch holds from the next search, and the trials
    seen are checked for T2 (the lowest is the step, with `success`). Otherwise the step is the
    lowest trial with sufficient decrease (approximate mode: phi(t) <= phi(0) + epsilon_k) and a
    finite slope, re-evaluated if not the last, `success` False; or no step.

    Defaults are the 2006 paper's (section 4): `delta` = 0.1, `sigma` = 0.9, `epsilon` = 1e-6,
    `theta` = 0.5, `gamma` = 0.66, `omega` = 1e-3, `Delta` = 0.7, `psi1` = 0.1, `psi2` = 2, `rho`
    = 5; `epsilon = None` (the default): 1e-6 in float64, 3.5e-4 in float32, whose rounding 1e-6
    would not cover (`value_tolerance`). Requires 0 < delta < 0.5, delta <= sigma < 1, epsilon >=
    0, 0 < theta < 1, 0 < gamma < 1, omega >= 0, 0 <= Delta <= 1, 0 < psi1 < 1, psi2 > 0, rho >
    1, max_trials >= 1. A dynamic cap (`AbstractLineSearch.start`) replaces `max_step_size`
    above; where it binds, a QuadStep trial clipped to it is B1's c_0, and a finite trial at the
    cap ends the search with `success` when phi'(cap) <= delta phi'(0) (as dcsrch's stpmax) and
    it passes T1's first half (approximate mode: T2's); failing that, it is U3's case unless
    phi'(cap) >= 0. Approximate Wolfe accepts a rise up to epsilon_k: `monotone` only with
    `epsilon = 0`. `max_step_size` (default +inf) and array settings: see `AbstractLineSearch`.
    """

    delta: Setting = 0.1
    sigma: Setting = 0.9
    epsilon: Setting | None = None
    theta: Setting = 0.5
    gamma: Setting = 0.66
    omega: Setting = 1e-3
    Delta: Setting = 0.7
    psi1: Setting = 0.1
    psi2: Setting = 2.0
    rho: Setting = 5.0
    quad_step: bool = eqx.field(static=True, default=True)
    max_trials: int = eqx.field(static=True, default=51, converter=as_int)
    max_step_size: Setting = float("inf")

    refines_best: ClassVar[bool] = True
    evaluates_each_step: ClassVar[bool] = False

    def __check_init__(self):
        name = "HagerZhang"
        check_setting(name, "delta", self.delta, lambda v: 0 < v < 0.5, "lie in (0, 0.5)")
        delta = setting_value(name, "delta", self.delta)
        sigma = setting_value(name, "sigma", self.sigma)
        if delta is not None and sigma is not None and not delta <= sigma < 1:
            raise ValueError(f"{name}: sigma must lie in [delta, 1) = [{delta}, 1), got {sigma}.")
        check_setting(name, "theta", self.theta, lambda v: 0 < v < 1, "lie in (0, 1)")
        check_setting(name, "gamma", self.gamma, lambda v: 0 < v < 1, "lie in (0, 1)")
        check_setting(name, "omega", self.omega, lambda v: v >= 0, "be non-negative")
        check_setting(name, "Delta", self.Delta, lambda v: 0 <= v <= 1, "lie in [0, 1]")
        check_setting(name, "psi1", self.psi1, lambda v: 0 < v < 1, "lie in (0, 1)")
        check_setting(name, "psi2", self.psi2, lambda v: v > 0, "be positive")
        check_setting(name, "rho", self.rho, lambda v: v > 1, "be > 1")

    def value_scale(self, state) -> ValueScale:
        return state.scale

    def init(self, dtype) -> HagerZhangState:
        zero = scalar(0, dtype)
        return HagerZhangState(
            scale=ValueScale.empty(dtype), approx=jnp.array(False), prev_step=zero
        )

    def start(
        self, state, phi0, dphi0, guess, min_step, scaled=None, max_step=None
    ) -> _HagerZhangSearch:
        dtype = phi0.dtype
        scale = state.scale.add(phi0, self.Delta)
        has_prev = state.prev_step > 0
        scaled = jnp.array(False) if scaled is None else scaled
        use_guess = scaled | ~has_prev
        if self.quad_step:
            other = jnp.maximum(self.psi1 * state.prev_step, min_step)
            phase = jnp.where(use_guess, _BRACKET, _QUAD)
        else:
            other = self.psi2 * state.prev_step
            phase = jnp.full((), _BRACKET)
        t0 = jnp.where(use_guess, guess, other)
        fields = self.open(t0, phi0, dphi0, min_step, max_step, scale)
        cap = fields["max_step"]
        # A QuadStep trial at a binding cap is B1's c_0 instead: it may end the search.
        edge = (fields["trial"] >= cap) & (cap < self.max_step_size)
        phase = jnp.where(edge, _BRACKET, phase)
        origin = Point(scalar(0, dtype), phi0, dphi0)
        return _HagerZhangSearch(
            **fields,
            phase=phase.astype(jnp.int32),
            after=scalar(_TO_L1, jnp.int32),
            bound=(phi0 + value_tolerance(self.epsilon, dtype) * scale.C).astype(dtype),
            approx=state.approx,
            a=origin,
            b=origin,
            width=scalar(0, dtype),
            best=origin,
            best_approx=origin,
            rescued=jnp.array(False),
            switched=jnp.array(False),
            last_phi=phi0,
            prev_step=state.prev_step,
        )

    def update(self, search, t, phi, dphi) -> _HagerZhangSearch:
        s = search
        dtype = t.dtype
        current = Point(t, phi, dphi)
        finite = jnp.isfinite(phi) & jnp.isfinite(dphi)
        phase = s.phase
        in_quad, in_fallback = phase == _QUAD, phase == _FALLBACK

        # Acceptance: T1 (original Wolfe) or, in approximate mode, T2 (approximate Wolfe).
        decrease = armijo(s.phi0, s.dphi0, t, phi, self.delta)
        curvature = dphi >= self.sigma * s.dphi0
        original = decrease & curvature
        approximate = (phi <= s.bound) & ((2 * self.delta - 1) * s.dphi0 >= dphi) & curvature
        accept = finite & (original | (s.approx & approximate)) & ~in_quad & ~in_fallback
        # At a binding dynamic cap, sufficient decrease alone suffices; without it, no lower end.
        edge = at_binding_cap(s, self.max_step_size, t)
        approx_decrease = (phi <= s.bound) & ((2 * self.delta - 1) * s.dphi0 >= dphi)
        edge_ok = self.falls_at_binding_cap(s, t, dphi, self.delta) & finite & ~in_fallback
        edge_ok = edge_ok & (decrease | (s.approx & approx_decrease))
        accept = accept | edge_ok

        # U1 / B1: a new upper end; U2: a new lower end; U3 / B2: above phi(0) + epsilon_k with
        # negative slope, or not finite.
        up = finite & (dphi >= 0)
        low = finite & (dphi < 0) & (phi <= s.bound) & ~(edge & ~edge_ok)
        high = ~up & ~low
        a = select(low & ~in_quad, current, s.a)
        b = select(~low & ~in_quad, current, s.b)

        # Rule I1/I2 after the QuadStep evaluation.
        quad = quadratic_minimiser(scalar(0, dtype), s.phi0, s.dphi0, t, phi)
        use_quad = finite & (phi <= s.phi0) & jnp.isfinite(quad) & (quad > 0)
        from_quad = jnp.where(use_quad, quad, self.psi2 * s.prev_step)
        from_quad = jnp.where(jnp.isfinite(phi), from_quad, self.theta * t)
        from_quad = jnp.maximum(jnp.minimum(from_quad, s.max_step), s.min_step)

        # Next step of the line search, by phase.
        in_bracket = phase == _BRACKET
        expand = in_bracket & low
        bisect = ~in_quad & (high | ((phase == _BISECT) & low))
        second = (phase == _SECANT) & ~high
        c_bar = jnp.where(
            up,
            secant_minimiser(s.b.t, s.b.dphi, t, dphi),
            secant_minimiser(s.a.t, s.a.dphi, t, dphi),
        )
        second = second & _inside(c_bar, a.t, b.t)
        after = jnp.where(
            phase == _BISECT,
            s.after,
            jnp.where((phase == _SECANT) | (phase == _SECANT_BAR), _TO_L2, _TO_L1),
        )
        # Otherwise: to L1 (a new secant^2 step) or L2 (bisect if it shrank too little).
        to_l2 = after == _TO_L2
        width = b.t - a.t
        shrank = width <= self.gamma * s.width
        to_secant = ~to_l2 | shrank
        secant = secant_minimiser(a.t, a.dphi, b.t, b.dphi)
        secant_ok = _inside(secant, a.t, b.t)
        middle = a.t + (b.t - a.t) / 2
        d = (1 - self.theta) * a.t + self.theta * b.t
        grown = jnp.minimum(self.rho * t, s.max_step)

        use_secant = to_secant & secant_ok
        next_trial = jnp.select(
            [in_quad, expand, bisect, second, use_secant],
            [from_quad, grown, d, c_bar, secant],
            middle,
        ).astype(dtype)
        next_phase = jnp.select(
            [in_quad, expand, bisect, second, use_secant],
            [_BRACKET, _BRACKET, _BISECT, _SECANT_BAR, _SECANT],
            _MIDPOINT,
        ).astype(jnp.int32)
        # b_j - a_j: set at the start of each secant^2 step (L1).
        new_width = jnp.where(
            ~in_quad & ~expand & ~bisect & ~second & to_secant, width, s.width
        ).astype(dtype)

        num_trials = s.num_trials + 1
        bracketed = ~in_quad & ~expand
        below = next_trial < s.min_step
        collapsed = bracketed & (~_inside(next_trial, a.t, b.t) | (width < s.min_step))
        exhausted = (
            (num_trials >= self.judged_trials) | (expand & (t >= s.max_step)) | collapsed | below
        )
        fail = ~accept & ~in_fallback & exhausted
        at_max = expand & (t >= s.max_step)

        # Fallback: the lowest trial with (approximate) sufficient decrease and a finite slope.
        acceptable = jnp.where(s.approx, phi <= s.bound, decrease)
        candidate = finite & (t > 0) & acceptable & ~in_fallback
        better = candidate & ((s.best.t == 0) | (phi < s.best.phi))
        best = select(better, current, s.best)
        # CG_DESCENT reruns a failed T1 search with T2; here the trials seen are checked for T2.
        better = finite & (t > 0) & approximate & ~in_fallback
        better = better & ((s.best_approx.t == 0) | (phi < s.best_approx.phi))
        best_approx = select(better, current, s.best_approx)
        switched = s.switched | (fail & ~s.approx & ~at_max)
        rescue = fail & ~s.approx & ~at_max & (best_approx.t > 0)
        best = select(rescue, best_approx, best)
        done, taken, refine, trial = end_on_best(
            accept, fail, in_fallback, best.t, t, finite, next_trial
        )
        success = jnp.where(in_fallback, s.rescued & finite, accept | (rescue & (best.t == t)))
        return after_trial(
            s,
            trial=trial,
            done=done,
            step=jnp.where(taken, t, 0),
            success=success,
            phase=jnp.where(in_fallback | refine, _FALLBACK, next_phase).astype(jnp.int32),
            after=after.astype(jnp.int32),
            a=a,
            b=b,
            width=new_width,
            best=best,
            best_approx=best_approx,
            rescued=jnp.where(in_fallback, s.rescued, rescue),
            switched=switched,
            last_phi=phi,
        )

    def finish(self, state, search) -> HagerZhangState:
        s = search
        dtype = state.prev_step.dtype
        moved = s.step > 0
        switch = jnp.abs(s.last_phi - s.phi0) <= self.omega * s.scale.C
        return HagerZhangState(
            scale=s.scale.kept_if(moved, state.scale),
            approx=state.approx | s.switched | (moved & switch),
            prev_step=jnp.where(moved, s.step, state.prev_step).astype(dtype),
        )
