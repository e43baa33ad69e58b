"""What the sufficient-decrease searches (`Backtracking`, `Zoom`, `MoreThuente`,
`HagerZhang`) share: their settings' checks, the trial budget, the rounding allowance, the
cap and first-trial rules, acceptance at a binding cap and the best-point fallback."""

import abc

import equinox as eqx
from jaxtyping import Array, Bool, PyTree, Scalar

from .._misc import Setting, as_int, check_count, check_setting, renamed_keyword
from ._base import (
    AbstractLineSearch,
    SearchState,
    at_binding_cap,
    capped_start,
    search_cap,
    trials_before_fallback,
)
from ._conditions import ValueScale, no_allowance, sufficient_decrease


class DecreaseSearchState(SearchState):
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
      one, `trials_before_fallback`), so that the re-evaluation fits the budget; any other
      judges `max_trials`.
    - **Monotone.** With `epsilon = 0` nothing is lost in rounding: no accepted step raises f.
    - **Cap and first trial** (`open`): cap = min(max_step_size, max_step), first trial
      max(min(first, cap), min_step); a cap below `min_step`, <= 0 or NaN ends the search
      at once (`capped_start`).
    - **At a binding cap** (`falls_at_binding_cap`): where the dynamic cap binds, a trial at
      t = cap where f still falls steeply, phi'(t) <= c phi'(0), may end the search with
      step = cap, as dcsrch stops at its stpmax (each search adds its own decrease test).
    - **Best-point fallback** (`end_on_best`).

    A subclass says what it keeps between searches (`init`) and where C_k is in it
    (`value_scale`).
    """

    max_trials: eqx.AbstractVar[int]
    max_step_size: eqx.AbstractVar[Setting]
    epsilon: eqx.AbstractVar[Setting | None]
    # True for a search that ends a failed search on its best trial (`end_on_best`).
    refines_best: eqx.AbstractClassVar[bool]
    evaluates_each_step: eqx.AbstractClassVar[bool]

    def __check_init__(self):
        name = type(self).__name__
        check_count(name, "max_trials", self.max_trials)
        check_setting(name, "max_step_size", self.max_step_size, lambda v: v > 0, "be positive")
        if self.epsilon is not None:
            check_setting(name, "epsilon", self.epsilon, lambda v: v >= 0, "be None or >= 0")

    @abc.abstractmethod
    def value_scale(self, state: PyTree) -> ValueScale:
        """C_k from the state kept between searches."""

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
        return trials_before_fallback(self.max_trials) if self.refines_best else self.max_trials

    def open(self, first: Scalar, phi0, dphi0, min_step, max_step, scale: ValueScale) -> dict:
        """The `DecreaseSearchState` fields of a search from phi(0), phi'(0) whose
        first trial, before the cap rules, is `first`; `scale` is C_k at this point."""
        cap = search_cap(self.max_step_size, max_step, phi0.dtype)
        return dict(**capped_start(first, min_step, cap), phi0=phi0, dphi0=dphi0, scale=scale)

    def decrease(
        self, search: DecreaseSearchState, t, phi, dphi, c: Setting
    ) -> tuple[Bool[Array, ""], Bool[Array, ""]]:
        """(sufficient decrease with constant `c` at this trial, whether its change of f is
        lost in rounding): `sufficient_decrease` against the search's phi(0) and C_k."""
        return sufficient_decrease(
            search.phi0, search.dphi0, t, phi, dphi, c, self.epsilon, search.scale.C
        )

    def falls_at_binding_cap(
        self, search: DecreaseSearchState, t, dphi, c: Setting
    ) -> Bool[Array, ""]:
        """Is t at a dynamic cap that binds (below `max_step_size`) with f still falling
        steeply there, phi'(t) <= c phi'(0)?"""
        edge = at_binding_cap(search, self.max_step_size, t)
        return edge & (dphi <= c * search.dphi0)


class AbstractScaleKeepingSearch(AbstractDecreaseSearch):
    """A sufficient-decrease search that keeps C_k alone between searches (`Zoom`,
    `MoreThuente`): a search that takes no step adds no iterate to it."""

    def init(self, dtype) -> ValueScale:
        return ValueScale.empty(dtype)

    def value_scale(self, state) -> ValueScale:
        return state

    def finish(self, state, search) -> ValueScale:
        return search.scale.kept_if(search.step > 0, state)


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
