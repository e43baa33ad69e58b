"""What the sufficient-decrease searches (`Backtracking`, `Zoom`, `MoreThuente`, `HagerZhang`)
share."""

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
    """A sufficient-decrease search's state: phi(0), phi'(0) and C_k at its start point."""

    phi0: Scalar
    dphi0: Scalar
    scale: ValueScale


class AbstractDecreaseSearch(AbstractLineSearch):
    """A search that accepts a step only with sufficient decrease, phi(t) <= phi(0) + c t phi'(0),
    judged by the slope where values are lost in rounding (within epsilon C_k, Hager & Zhang
    2005, section 4: `sufficient_decrease`); `monotone` with `epsilon = 0`. Its settings are
    checked here: `max_trials` (an int >= 1; at most that many evaluations of phi, a search that
    `refines_best` judging `judged_trials`), `max_step_size` (> 0), `epsilon` (None or >= 0). It
    shares the cap and first-trial rules (`open`, `capped_start`), acceptance at a binding cap
    where phi'(t) <= c phi'(0) (`falls_at_binding_cap`, as dcsrch's stpmax, with each search's
    decrease test) and the best-point fallback (`end_on_best`). A subclass gives `init` and
    `value_scale`."""

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
        """The trials judged before failing: `max_trials`, less the fallback's re-evaluation where
        the search `refines_best` (`trials_before_fallback`)."""
        return trials_before_fallback(self.max_trials) if self.refines_best else self.max_trials

    def open(self, first: Scalar, phi0, dphi0, min_step, max_step, scale: ValueScale) -> dict:
        """The `DecreaseSearchState` fields of a search from phi(0), phi'(0), first trial `first`
        (before the cap rules) and C_k `scale`."""
        cap = search_cap(self.max_step_size, max_step, phi0.dtype)
        return dict(**capped_start(first, min_step, cap), phi0=phi0, dphi0=dphi0, scale=scale)

    def decrease(
        self, search: DecreaseSearchState, t, phi, dphi, c: Setting
    ) -> tuple[Bool[Array, ""], Bool[Array, ""]]:
        """(sufficient decrease with constant `c`, whether the change is lost in rounding):
        `sufficient_decrease` against phi(0) and C_k."""
        return sufficient_decrease(
            search.phi0, search.dphi0, t, phi, dphi, c, self.epsilon, search.scale.C
        )

    def falls_at_binding_cap(
        self, search: DecreaseSearchState, t, dphi, c: Setting
    ) -> Bool[Array, ""]:
        """Is t at a binding dynamic cap with f still falling steeply, phi'(t) <= c phi'(0)?"""
        edge = at_binding_cap(search, self.max_step_size, t)
        return edge & (dphi <= c * search.dphi0)


class AbstractScaleKeepingSearch(AbstractDecreaseSearch):
    """A sufficient-decrease search keeping C_k alone between searches (`Zoom`, `MoreThuente`); a
    search that takes no step adds no iterate."""

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


# `max_steps`, the trial budget's old name, with a DeprecationWarning (a decorator for each concrete
# search: equinox writes `__init__` when the class is created).
accepts_max_steps = renamed_keyword("max_steps", "max_trials", _budget_of_max_steps, _budget_note)
