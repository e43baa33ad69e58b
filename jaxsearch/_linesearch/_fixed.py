"""No search: a fixed step size."""

from typing import ClassVar

import jax.numpy as jnp

from .._misc import Setting, check_setting
from ._base import AbstractLineSearch, SearchState, after_trial, capped_start, search_cap


class FixedStep(AbstractLineSearch):
    """Take t = `learning_rate` (or min(learning_rate, the dynamic cap)) without a decrease test:
    one evaluation per step, as plain (quasi-)gradient descent. No step (`success` False) where
    the trial's value or slope is not finite, or t is below `min_step`, <= 0 or NaN. Not
    `monotone`: a run keeps its best point. A 0-d array `learning_rate` lets a schedule reuse one
    compiled program."""

    learning_rate: Setting = 1e-3

    evaluates_each_step: ClassVar[bool] = False

    def __check_init__(self):
        check_setting(
            "FixedStep",
            "learning_rate",
            self.learning_rate,
            lambda v: 0 < v < float("inf"),
            "be positive and finite",
        )

    @property
    def max_trials(self) -> int:
        return 1

    @property  # type: ignore[misc]  # equinox lets a property implement an AbstractVar
    def max_step_size(self) -> Setting:  # type: ignore[override]
        return self.learning_rate

    @property
    def monotone(self) -> bool:
        return False  # no decrease test

    def allowance(self, state) -> float:
        return 0.0

    def init(self, dtype) -> None:
        return None

    def start(self, state, phi0, dphi0, guess, min_step, scaled=None, max_step=None) -> SearchState:
        cap = search_cap(self.learning_rate, max_step, phi0.dtype)
        return SearchState(**capped_start(cap, min_step, cap))

    def update(self, search, t, phi, dphi) -> SearchState:
        finite = jnp.isfinite(phi) & jnp.isfinite(dphi)
        step = jnp.where(finite, t, 0)
        done = jnp.array(True)
        return after_trial(search, trial=search.trial, done=done, step=step, success=finite)

    def finish(self, state, search) -> None:
        return None
