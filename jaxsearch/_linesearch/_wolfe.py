"""What the Wolfe searches (`Zoom`, `MoreThuente`) share: a trial budget, and the rounding
allowance epsilon C_k of their sufficient-decrease test."""

import equinox as eqx

from .._misc import Setting
from ._base import AbstractLineSearch
from ._conditions import ValueScale, no_allowance


class AbstractWolfeSearch(AbstractLineSearch):
    """A search for a step that meets the Wolfe conditions within `max_steps` trials, whose
    sufficient-decrease test allows f to exceed phi(0) by epsilon C_k (Hager & Zhang 2005, as
    `ValueScale` keeps it between searches) where values are lost in rounding. With
    `epsilon = 0` the test is Armijo's alone, so f never rises (`monotone`). A search that
    ends without meeting its conditions falls back to its best trial, evaluated once more:
    its trial budget is `max_steps + 1`."""

    max_steps: eqx.AbstractVar[int]
    epsilon: eqx.AbstractVar[Setting | None]

    @property
    def monotone(self) -> bool:
        return no_allowance(self.epsilon)

    def allowance(self, state: ValueScale):
        return state.allowance(self.epsilon)

    @property
    def max_trials(self) -> int:
        return self.max_steps + 1

    def init(self, dtype) -> ValueScale:
        return ValueScale.empty(dtype)
