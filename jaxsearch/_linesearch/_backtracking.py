"""Backtracking line searches: Armijo's test against a reference value, phi(0) or Zhang &
Hager's C_k."""

import abc
from math import inf
from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Bool, Scalar

from .._misc import Setting, as_int, check_setting, scalar, setting_value
from ._base import AbstractLineSearch, after_trial, at_binding_cap
from ._conditions import (
    ValueScale,
    armijo,
    goldstein_lower,
    lost_in_rounding,
    slope_armijo,
    strong_wolfe_curvature,
    wolfe_curvature,
)
from ._decrease import AbstractDecreaseSearch, DecreaseSearchState, accepts_max_steps


class AbstractBacktracking(AbstractLineSearch):
    """Backtracking on Armijo's test against a reference value R, phi(t) <= R + c1 t phi'(0): R =
    phi(0) for Armijo's test (Nocedal & Wright, 2nd ed., algorithm 3.1: `Backtracking`,
    `StochasticArmijo`), R = C_k, Zhang & Hager's weighted average of the iterates' values (SIAM
    J. Optim. 14(4), 2004: `NonmonotoneArmijo`). Where `lost_in_rounding`, phi'(t) <= (2 c1 - 1)
    phi'(0) instead; a non-finite trial fails. `update` is the shared loop: a passing trial is
    the step, a failing one is multiplied by `shrink`; after `max_trials`, or below `min_step`,
    no step. A subclass writes `init`, `start`, `finish`, `reference`, `lost_in_rounding` and
    `recorded`; its search state has `dphi0`."""

    c1: eqx.AbstractVar[Setting]
    shrink: eqx.AbstractVar[Setting]

    @abc.abstractmethod
    def reference(self, search) -> Scalar:
        """R, the value Armijo's test compares phi(t) against."""

    @abc.abstractmethod
    def lost_in_rounding(self, search, t, phi, dphi) -> Bool[Array, ""]:
        """Whether the change of f at this trial is lost in rounding, so the test is on the slope
        (False for a search on values alone)."""

    @abc.abstractmethod
    def long_enough(self, search, t, phi, dphi, lost) -> Bool[Array, ""] | None:
        """The test beside sufficient decrease against too short a step (Wolfe's curvature,
        Goldstein's lower bound), given whether the change is `lost`; None for Armijo's alone."""

    @abc.abstractmethod
    def recorded(self, search, accept: Bool[Array, ""], phi: Scalar) -> dict:
        """The search's own fields a judged trial sets (for `after_trial`); {} for none."""

    def passes(self, search, t, phi, dphi) -> Bool[Array, ""]:
        """Armijo's test against `reference` (the slope test where `lost_in_rounding`), and
        `long_enough` where there is one; False where phi(t) or phi'(t) is not finite. A
        `value_only_trial` is judged on values alone."""
        lost = self.lost_in_rounding(search, t, phi, dphi)
        test = armijo(self.reference(search), search.dphi0, t, phi, self.c1)
        decrease = jnp.where(lost, slope_armijo(search.dphi0, dphi, self.c1), test)
        accept = decrease & jnp.isfinite(dphi)
        other = self.long_enough(search, t, phi, dphi, lost)
        if other is not None:
            accept = accept & other
        if self.slope_needed(search) is None:
            return accept
        alone = test if other is None else test & other
        return jnp.where(self.value_only_trial(search, dphi), alone, accept)

    def value_only_trial(self, search, dphi) -> Bool[Array, ""]:
        """Whether the trial came without its slope (phi'(t) = NaN, see `slope_needed`)."""
        needed = self.slope_needed(search)
        if needed is None:
            return jnp.array(False)
        return ~needed & jnp.isnan(dphi)

    def slope_wanted(self, search, t, phi, dphi) -> Bool[Array, ""]:
        """Whether a trial judged on f alone needs its slope after all (its change is
        `lost_in_rounding`): the search then asks for the same t again."""
        lost = self.lost_in_rounding(search, t, phi, jnp.zeros_like(dphi))
        return self.value_only_trial(search, dphi) & lost

    def update(self, search, t, phi, dphi):
        again = self.slope_wanted(search, t, phi, dphi)
        accept = self.passes(search, t, phi, dphi) & ~again
        num_trials = search.num_trials + 1
        shrunk = (t * self.shrink).astype(t.dtype)
        give_up = ~accept & ~again & ((num_trials >= self.max_trials) | (shrunk < search.min_step))
        return after_trial(
            search,
            trial=jnp.where(accept | again, t, shrunk),
            done=accept | give_up,
            step=jnp.where(accept, t, 0),
            success=accept,
            **self.recorded(search, accept, phi),
        )


class _BacktrackingState(eqx.Module):
    prev_step: Scalar  # previous accepted step; 0 until one is accepted
    scale: ValueScale  # C_k, the scale of f's rounding error


class AbstractDecreaseBacktracking(AbstractBacktracking, AbstractDecreaseSearch):
    """Backtracking on Armijo's test against phi(0) within `AbstractDecreaseSearch`'s rounding
    allowance: `Backtracking`, `StochasticArmijo`. It keeps the previous accepted step (0: none)
    and C_k; a subclass gives `first_trial` and `carried_after_failure`."""

    refines_best: ClassVar[bool] = False  # the last trial is the only one with sufficient decrease

    @abc.abstractmethod
    def first_trial(self, prev_step: Scalar, guess: Scalar) -> Scalar:
        """The first trial before the cap rules, from the previous accepted step (0: none) and the
        solver's guess."""

    @abc.abstractmethod
    def carried_after_failure(self, prev_step: Scalar, search: DecreaseSearchState) -> Scalar:
        """The `prev_step` a search that took no step leaves for the next `first_trial`."""

    def value_scale(self, state) -> ValueScale:
        return state.scale

    def reference(self, search) -> Scalar:
        return search.phi0

    def lost_in_rounding(self, search, t, phi, dphi) -> Bool[Array, ""]:
        return lost_in_rounding(
            search.phi0, search.dphi0, t, phi, dphi, self.epsilon, search.scale.C
        )

    def recorded(self, search, accept, phi) -> dict:
        return {}

    def init(self, dtype) -> _BacktrackingState:
        return _BacktrackingState(prev_step=scalar(0, dtype), scale=ValueScale.empty(dtype))

    def start(
        self, state, phi0, dphi0, guess, min_step, scaled=None, max_step=None
    ) -> DecreaseSearchState:
        t0 = self.first_trial(state.prev_step, guess.astype(phi0.dtype)).astype(phi0.dtype)
        fields = self.open(t0, phi0, dphi0, min_step, max_step, state.scale.add(phi0))
        return DecreaseSearchState(**fields)

    def finish(self, state, search) -> _BacktrackingState:
        moved = search.step > 0
        failed = self.carried_after_failure(state.prev_step, search)
        prev_step = jnp.where(moved, search.step, failed).astype(state.prev_step.dtype)
        return _BacktrackingState(prev_step, search.scale.kept_if(moved, state.scale))


@accepts_max_steps
class Backtracking(AbstractDecreaseBacktracking):
    """Backtracking until `condition` holds, with `c1` = 1e-4 and `c2` = 0.9 by default (Nocedal &
    Wright, 2nd ed., algorithm 3.1):

    - `"armijo"` (the default): phi(t) <= phi(0) + c1 t phi'(0) (N&W eq. 3.4);
    - `"goldstein"`: phi(0) + (1 - c1) t phi'(0) <= phi(t) <= phi(0) + c1 t phi'(0), `c1` < 1/2
      (N&W eq. 3.11);
    - `"wolfe"`: Armijo's and phi'(t) >= c2 phi'(0) (N&W eq. 3.6);
    - `"strong-wolfe"`: Armijo's and |phi'(t)| <= c2 |phi'(0)| (N&W eq. 3.7);

    `c2` in (c1, 1), for the Wolfe conditions only. Each rejected trial (non-finite too) is
    multiplied by `shrink`; after `max_trials` rejections, or below `min_step`, no step. A step
    rejected as too short is shrunk too (as jaxopt's `BacktrackingLineSearch`): for the Wolfe
    conditions a bracketing search (`js.Zoom`, `js.MoreThuente`) finds more steps. The first
    trial is the solver's guess; with `growth`, min(growth * previous accepted step,
    max_step_size) once one was accepted, as optax's. At a binding dynamic cap
    (`AbstractLineSearch.start`) Armijo's test alone accepts the cap: no longer step may be
    tried.

    Where the change of f is within `epsilon C_k` (`AbstractDecreaseSearch`; `epsilon = None`:
    1e-6 in float64, 3.5e-4 in float32) it is lost in rounding (Hager & Zhang 2005, section 4)
    and value tests are made on slopes, as for a quadratic phi: Armijo's becomes phi'(t) <= (2 c1
    - 1) phi'(0), Goldstein's lower bound phi'(t) >= (1 - 2 c1) phi'(0). `epsilon = 0` gives the
    textbook tests (only then is it `monotone`).

    `slopes="first"` evaluates f alone at trials after the first (as jaxopt's): k backtracks cost
    k evaluations of f alone and two with the gradient, against k + 1 with `"every"` (the
    default); worth it where the gradient costs more than f and steps backtrack often.
    `max_step_size` (default +inf) and array settings: see `AbstractLineSearch`.
    """

    c1: Setting = 1e-4
    shrink: Setting = 0.5
    max_trials: int = eqx.field(static=True, default=30, converter=as_int)
    growth: Setting | None = None
    max_step_size: Setting = float("inf")
    epsilon: Setting | None = None
    condition: str = eqx.field(static=True, default="armijo")
    c2: Setting = 0.9
    slopes: str = eqx.field(static=True, default="every")

    evaluates_each_step: ClassVar[bool] = False

    def slope_needed(self, search) -> Bool[Array, ""] | None:
        if self.slopes == "every":
            return None
        return search.num_trials == 0

    def __check_init__(self):
        name = "Backtracking"
        if self.slopes not in ("every", "first"):
            raise ValueError(
                f"{name}: slopes must be 'every' (every trial evaluates f and its gradient) or "
                f"'first' (trials after the first evaluate f alone), got {self.slopes!r}."
            )
        if self.slopes == "first" and self.condition in ("wolfe", "strong-wolfe"):
            raise ValueError(
                f"{name}: slopes='first' judges trials on f alone, which the curvature test of "
                f"condition={self.condition!r} cannot do: use slopes='every' with it."
            )
        if not (isinstance(self.condition, str) and self.condition in CONDITIONS):
            raise ValueError(
                f"{name}: condition must be one of {', '.join(map(repr, CONDITIONS))}, "
                f"got {self.condition!r}."
            )
        check_setting(name, "c1", self.c1, lambda v: 0 < v < 1, "lie in (0, 1)")
        if self.condition == "goldstein":
            check_setting(
                name, "c1", self.c1, lambda v: v < 0.5, 'lie in (0, 1/2) for condition="goldstein"'
            )
        if self.condition in ("wolfe", "strong-wolfe"):
            c1, c2 = setting_value(name, "c1", self.c1), setting_value(name, "c2", self.c2)
            if c1 is not None and c2 is not None and not c1 < c2 < 1:
                raise ValueError(f"{name}: c2 must lie in (c1, 1) = ({c1}, 1), got {c2}.")
        check_setting(name, "shrink", self.shrink, lambda v: 0 < v < 1, "lie in (0, 1)")
        if self.growth is not None:
            check_setting(name, "growth", self.growth, lambda v: 1 <= v < inf, "be >= 1 or None")

    def first_trial(self, prev_step, guess):
        if self.growth is None:
            return guess
        grown = (prev_step * self.growth).astype(guess.dtype)
        return jnp.where(prev_step > 0, grown, guess)

    def carried_after_failure(self, prev_step, search):
        return prev_step

    def long_enough(self, search, t, phi, dphi, lost) -> Bool[Array, ""] | None:
        if self.condition == "armijo":
            return None
        if self.condition == "goldstein":
            test = goldstein_lower(search.phi0, search.dphi0, t, phi, dphi, self.c1, lost)
        elif self.condition == "wolfe":
            test = wolfe_curvature(search.dphi0, dphi, self.c2)
        else:
            test = strong_wolfe_curvature(search.dphi0, dphi, self.c2)
        return test | at_binding_cap(search, self.max_step_size, t)


# The conditions `Backtracking` tests, by name (jaxopt's `BacktrackingLineSearch` names).
CONDITIONS = ("armijo", "goldstein", "wolfe", "strong-wolfe")
