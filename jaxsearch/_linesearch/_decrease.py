"""What the sufficient-decrease searches (`Backtracking`, `Zoom`, `MoreThuente`,
`HagerZhang`) share: their settings' checks, the trial budget, the rounding allowance, the
cap and first-trial rules, acceptance at a binding cap and the best-point fallback."""

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Bool, PyTree, Scalar

from .._misc import Setting, as_int, check_count, check_setting, renamed_keyword
from ._base import (
    AbstractLineSearch,
    AbstractSearchState,
    at_capped_edge,
    capped_search,
    effective_cap,
)
from ._conditions import ValueScale, no_allowance, sufficient_decrease


class AbstractDecreaseSearchState(AbstractSearchState):
    """A sufficient-decrease search's state: phi(0), phi'(0) and the scale C_k of f's
    rounding error at the search's start point."""

    phi0: Scalar
    dphi0: Scalar
    scale: ValueScale


class AbstractDecreaseSearch(AbstractLineSearch):
    """A search that accepts a step only with sufficient decrease, phi(t) <= phi(0) +
    c t phi'(0), where values lost in rounding (within epsilon C_k, Hager & Zhang 2005,
    section 4) are judged by the slope instead (`sufficient_decrease`).

    - **Settings.** `max_trials` (an int >= 1) bounds the trials, `max_step_size` (> 0)
      caps them, `epsilon` (None or >= 0) sets the rounding allowance; all three are
      checked here.
    - **Budget.** A search evaluates phi at most `max_trials` times. A search with
      `refines_best` ends a failed search on its best trial, evaluated once more when it was
      not the last: it judges at most `judged_trials` = `max_trials - 1` trials (at least
      one), so that the re-evaluation fits the budget; any other judges `max_trials`.
    - **Monotone.** With `epsilon = 0` nothing is lost in rounding: no accepted step raises f.
    - **Cap and first trial** (`open`): cap = min(max_step_size, max_step), first trial
      max(min(first, cap), min_step); a cap below `min_step`, <= 0 or NaN ends the search
      at once (`capped_search`).
    - **At a binding cap** (`falls_at_binding_cap`): where the dynamic cap binds, a trial at
      t = cap where f still falls steeply, phi'(t) <= c phi'(0), may end the search with
      step = cap, as dcsrch stops at its stpmax (each search adds its own decrease test).
    - **Best-point fallback** (`settle`).
    """

    max_trials: eqx.AbstractVar[int]
    max_step_size: eqx.AbstractVar[Setting]
    epsilon: eqx.AbstractVar[Setting | None]
    refines_best: ClassVar[bool] = True

    def __check_init__(self):
        name = type(self).__name__
        check_count(name, "max_trials", self.max_trials)
        check_setting(name, "max_step_size", self.max_step_size, lambda v: v > 0, "be positive")
        if self.epsilon is not None:
            check_setting(name, "epsilon", self.epsilon, lambda v: v >= 0, "be None or >= 0")

    def init(self, dtype) -> PyTree:
        """By default a search keeps C_k alone between searches."""
        return ValueScale.empty(dtype)

    def value_scale(self, state) -> ValueScale:
        """C_k from the state kept between searches (the state itself by default)."""
        return state

    @property
    def monotone(self) -> bool:
        return no_allowance(self.epsilon)

    def allowance(self, state):
        return self.value_scale(state).allowance(self.epsilon)

    @property
    def judged_trials(self) -> int:
        """The trials a search judges before it fails: `max_trials`, less the re-evaluation
        of the best trial for a search that `refines_best` (none is needed after a first
        trial: the best trial is then that one, or none)."""
        return max(self.max_trials - int(self.refines_best), 1)

    def open(self, first: Scalar, phi0, dphi0, min_step, max_step, scale: ValueScale) -> dict:
        """The `AbstractDecreaseSearchState` fields of a search from phi(0), phi'(0) whose
        first trial, before the cap rules, is `first`; `scale` is C_k at this point."""
        cap = effective_cap(self.max_step_size, max_step, phi0.dtype)
        return dict(**capped_search(first, min_step, cap), phi0=phi0, dphi0=dphi0, scale=scale)

    def decrease(
        self, search: AbstractDecreaseSearchState, t, phi, dphi, c: Setting
    ) -> tuple[Bool[Array, ""], Bool[Array, ""]]:
        """(sufficient decrease with constant `c` at this trial, whether its change of f is
        lost in rounding): `sufficient_decrease` against the search's phi(0) and C_k."""
        return sufficient_decrease(
            search.phi0, search.dphi0, t, phi, dphi, c, self.epsilon, search.scale.C
        )

    def falls_at_binding_cap(
        self, search: AbstractDecreaseSearchState, t, dphi, c: Setting
    ) -> Bool[Array, ""]:
        """Is t at a dynamic cap that binds (below `max_step_size`) with f still falling
        steeply there, phi'(t) <= c phi'(0)?"""
        edge = at_capped_edge(search, self.max_step_size, t)
        return edge & (dphi <= c * search.dphi0)


def settle(
    accept: Bool[Array, ""],
    fail: Bool[Array, ""],
    refining: Bool[Array, ""],
    best: Scalar,
    t: Scalar,
    finite: Bool[Array, ""],
    next_trial: Scalar,
) -> tuple[Bool[Array, ""], Bool[Array, ""], Bool[Array, ""], Scalar]:
    """The best-point fallback of a search whose trial t was judged: it `accept`ed, it
    `fail`ed, or neither (the search goes on at `next_trial`).

    A failed search ends on its `best` trial (0: none, no step). When that trial is t the
    search takes it now; otherwise the trial is evaluated once more (`refining` on the next
    update), and the search then takes it where its value and slope are `finite`, else no
    step (a non-finite value is never taken). Returns (done, taken: the step is t,
    refine: the next trial re-evaluates `best`, the next trial)."""
    has_best = best > 0
    is_current = best == t
    refine = fail & has_best & ~is_current
    done = refining | accept | (fail & ~refine)
    taken = jnp.where(refining, finite, accept | (fail & has_best & is_current))
    trial = jnp.where(refining, t, jnp.where(refine, best, next_trial))
    return done, taken, refine, trial


def _budget_of_max_steps(cls: type[AbstractDecreaseSearch], steps) -> int:
    """The `max_trials` of the deprecated `max_steps` (the trials judged): the same budget."""
    steps = as_int(steps)
    check_count(cls.__name__, "max_steps", steps)
    return steps + int(cls.refines_best)


def _budget_note(cls: type[AbstractDecreaseSearch]) -> str:
    if cls.refines_best:
        return (
            " max_trials counts the evaluations of f a search may use, the re-evaluation of a "
            "failed search's best trial included; max_steps counted the trials before it."
        )
    return " max_trials counts the evaluations of f a search may use."


# `max_steps`, the trial budget's old name, with a DeprecationWarning (a decorator for each
# concrete search: equinox writes a class's `__init__` when it is created).
accepts_max_steps = renamed_keyword("max_steps", "max_trials", _budget_of_max_steps, _budget_note)
