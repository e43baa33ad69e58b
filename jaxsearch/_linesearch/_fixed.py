"""No search: a fixed step size."""

from typing import ClassVar

import jax.numpy as jnp

from .._misc import Setting, check_setting
from ._base import AbstractLineSearch, SearchState, after_trial, capped_start, search_cap


class FixedStep(AbstractLineSearch):
    """Take t = `learning_rate` along the direction, without a sufficient-decrease test: one
    evaluation per step, as plain (quasi-)gradient descent in stochastic training.

    The only check is finiteness: a trial whose value or slope is not finite is not taken (no
    step, `success` False), and neither is a learning rate below the line's resolution
    `min_step` (it would change no parameter). Without a decrease test, f may increase from
    one step to the next.

    With a dynamic cap `max_step` passed to `start`, the step is t = min(learning_rate,
    max_step), under the same finiteness check, and nothing is taken when that is below
    `min_step` (or <= 0, or NaN). Still no decrease test, at the cap or elsewhere: the
    search is not `monotone`, and a run keeps its best point.

    `learning_rate` may be a 0-d array: a schedule (a new rate per step, say inside the
    user's jitted step) then reuses one compiled program.
    """

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
