"""No search: a fixed step size."""

import jax.numpy as jnp

from .._misc import Setting, check_setting
from ._base import AbstractLineSearch, AbstractSearchState, capped_search, effective_cap


class _FixedSearch(AbstractSearchState):
    pass


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

    def init(self, dtype) -> None:
        return None

    def start(
        self, state, phi0, dphi0, guess, min_step, scaled=None, max_step=None
    ) -> _FixedSearch:
        cap = effective_cap(self.learning_rate, max_step, phi0.dtype)
        return _FixedSearch(**capped_search(cap, min_step, cap))

    def update(self, search, t, phi, dphi) -> _FixedSearch:
        finite = jnp.isfinite(phi) & jnp.isfinite(dphi)
        return _FixedSearch(
            trial=search.trial,
            done=jnp.array(True),
            step=jnp.where(finite, t, 0).astype(t.dtype),
            success=finite,
            num_trials=search.num_trials + 1,
            min_step=search.min_step,
            max_step=search.max_step,
        )

    def finish(self, state, search) -> None:
        return None
