"""Backtracking line search with the Armijo sufficient-decrease condition."""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Scalar

from .._misc import as_int, check_count, scalar
from ._base import AbstractLineSearch, AbstractSearch, capped_search, effective_cap, fresh_search
from ._conditions import ValueScale, sufficient_decrease


class _BacktrackingState(eqx.Module):
    prev_step: Scalar  # previous accepted step; 0 until one is accepted
    scale: ValueScale  # C_k, the scale of f's rounding error


class _BacktrackingSearch(AbstractSearch):
    phi0: Scalar
    dphi0: Scalar
    scale: ValueScale


class Backtracking(AbstractLineSearch):
    """Backtracking until the Armijo condition phi(t) <= phi(0) + c1 t phi'(0) holds.

    Nocedal & Wright, *Numerical Optimization*, 2nd ed., algorithm 3.1. Each rejected trial
    (including one where f or its slope is not finite) multiplies t by `shrink`. After
    `max_steps` rejected trials, or when the next trial would be below the line's resolution
    `min_step` (it would change no parameter), no step is taken (`step == 0`).

    The first trial is the solver's shared initial guess (1 for quasi-Newton directions); with
    `growth` set it is instead min(growth * previous accepted step, max_step_size) once a step
    has been accepted, as optax's backtracking search does.

    With a dynamic cap `max_step` passed to `start`, cap = min(max_step_size, max_step)
    replaces max_step_size above and the first trial is max(min(that trial, cap), min_step):
    no trial exceeds cap, and a trial at cap is accepted (step = cap, `success` True) exactly
    when it passes the test below, as any trial. A cap below `min_step` (or <= 0, or NaN)
    ends the search at once with no step.

    Where phi(t) - phi(0) and t phi'(0) are within `epsilon C_k` (C_k: Hager & Zhang's
    average of |f| over the iterates, `ValueScale`; `epsilon = None`: 1e-6 in float64,
    3.5e-4 in float32), the change is lost in the rounding error of f and
    the test is on the slope instead, phi'(t) <= (2 c1 - 1) phi'(0) (`lost_in_rounding`,
    Hager & Zhang 2005, section 4). `epsilon = 0` gives the textbook test.
    """

    c1: float = eqx.field(static=True, default=1e-4)
    shrink: float = eqx.field(static=True, default=0.5)
    max_steps: int = eqx.field(static=True, default=30, converter=as_int)
    growth: float | None = eqx.field(static=True, default=None)
    max_step_size: float = eqx.field(static=True, default=1e10)
    epsilon: float | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        if not 0 < self.c1 < 1:
            raise ValueError(f"Backtracking: c1 must lie in (0, 1), got {self.c1}.")
        if not 0 < self.shrink < 1:
            raise ValueError(f"Backtracking: shrink must lie in (0, 1), got {self.shrink}.")
        check_count("Backtracking", "max_steps", self.max_steps)
        if self.growth is not None and not 1 <= self.growth < float("inf"):
            raise ValueError(f"Backtracking: growth must be >= 1 or None, got {self.growth}.")
        if not self.max_step_size > 0:
            raise ValueError("Backtracking: max_step_size must be positive.")
        if self.epsilon is not None and not self.epsilon >= 0:
            raise ValueError(f"Backtracking: epsilon must be None or >= 0, got {self.epsilon}.")

    def init(self, dtype) -> _BacktrackingState:
        return _BacktrackingState(prev_step=scalar(0, dtype), scale=ValueScale.empty(dtype))

    def start(
        self, state, phi0, dphi0, guess, min_step, scaled=None, max_step=None
    ) -> _BacktrackingSearch:
        dtype = phi0.dtype
        cap = effective_cap(self.max_step_size, max_step, dtype)
        t0 = guess
        if self.growth is not None:
            grown = jnp.minimum(state.prev_step * self.growth, cap).astype(dtype)
            t0 = jnp.where(state.prev_step > 0, grown, guess)
        if max_step is None:
            fields = fresh_search(jnp.maximum(t0, min_step), min_step, cap)
        else:
            fields = capped_search(t0, min_step, cap)
        return _BacktrackingSearch(
            **fields,
            phi0=phi0,
            dphi0=dphi0,
            scale=state.scale.add(phi0),
        )

    def update(self, search, t, phi, dphi) -> _BacktrackingSearch:
        accept, _ = sufficient_decrease(
            search.phi0, search.dphi0, t, phi, dphi, self.c1, self.epsilon, search.scale.C
        )
        num_trials = search.num_trials + 1
        shrunk = (t * self.shrink).astype(t.dtype)
        give_up = ~accept & ((num_trials >= self.max_steps) | (shrunk < search.min_step))
        return eqx.tree_at(
            lambda s: (s.trial, s.done, s.step, s.success, s.num_trials),
            search,
            (
                jnp.where(accept, t, shrunk).astype(t.dtype),
                accept | give_up,
                jnp.where(accept, t, 0).astype(t.dtype),
                accept,
                num_trials,
            ),
        )

    def finish(self, state, search) -> _BacktrackingState:
        moved = search.step > 0
        prev_step = jnp.where(moved, search.step, state.prev_step).astype(state.prev_step.dtype)
        return _BacktrackingState(prev_step, search.scale.kept_if(moved, state.scale))
