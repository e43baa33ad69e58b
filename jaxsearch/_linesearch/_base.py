"""What a line search must provide to the solver."""

import abc
from typing import Any, ClassVar

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Bool, Int, PyTree, Scalar

from .._misc import Setting


class Point(eqx.Module):
    """A trial of a search: step t, value phi(t) and slope phi'(t)."""

    t: Scalar
    phi: Scalar
    dphi: Scalar

    def triple(self):
        return self.t, self.phi, self.dphi


class AbstractSearchState(eqx.Module):
    """The state of one search, from `AbstractLineSearch.start` until `done`.

    The solver evaluates phi(t) = f(x + t d) and phi'(t) = <grad f(x + t d), d> at `trial`
    and hands both back to `AbstractLineSearch.update` until `done`. When a search ends with
    `step > 0`, the last evaluated trial was at `step` (so the solver keeps that point's value
    and gradient); `step == 0` means no step is taken.

    `min_step` is the resolution of the line: below it no parameter changes (x + t d rounds to
    x), so a search never proposes a trial below it and gives up instead.

    `max_step` is the search's cap on trials, min(`max_step_size`, the `max_step` passed to
    `AbstractLineSearch.start`): no trial exceeds it.
    """

    trial: Scalar  # next step size to evaluate
    done: Bool[Array, ""]
    step: Scalar  # accepted step size, 0 if none
    success: Bool[Array, ""]  # True when the search's own conditions hold at `step`
    num_trials: Int[Array, ""]
    min_step: Scalar
    max_step: Scalar  # no trial exceeds this: min(max_step_size, the dynamic cap)


def fresh_search(trial: Scalar, min_step: Scalar, max_step: Scalar | None = None) -> dict:
    """The `AbstractSearchState` fields of a search that has evaluated nothing yet; `max_step` is
    its effective cap (see `effective_cap`; None: +inf)."""
    false = jnp.array(False)
    dtype = min_step.dtype
    cap = jnp.full((), jnp.inf, dtype) if max_step is None else jnp.asarray(max_step)
    return dict(
        trial=trial.astype(dtype),
        done=false,
        step=jnp.zeros((), dtype),
        success=false,
        num_trials=jnp.zeros((), jnp.int32),
        min_step=min_step,
        max_step=cap.astype(dtype),
    )


def effective_cap(max_step_size: Setting, max_step: Scalar | None, dtype) -> Scalar:
    """min(`max_step_size`, `max_step`) as a strongly typed 0-d array of `dtype` (a NaN
    `max_step` gives NaN); `max_step_size` alone for None."""
    static = jnp.asarray(max_step_size).astype(dtype)
    if max_step is None:
        return static
    return jnp.minimum(static, jnp.asarray(max_step).astype(dtype))


def capped_search(guess: Scalar, min_step: Scalar, cap: Scalar) -> dict:
    """`fresh_search` under a dynamic cap: first trial max(min(guess, cap), min_step). A cap
    below the line's resolution `min_step` (no step up to it changes a parameter), not
    positive, or NaN ends the search at once with no step and `trial` = cap."""
    dtype = min_step.dtype
    give_up = ~((cap >= min_step) & (cap > 0))
    trial = jnp.maximum(jnp.minimum(guess.astype(dtype), cap), min_step)
    fields = fresh_search(jnp.where(give_up, cap, trial), min_step, cap)
    fields["done"] = give_up
    return fields


def at_capped_edge(search: AbstractSearchState, max_step_size: Setting, t: Scalar) -> Array:
    """Is `t` at a dynamic cap that binds (`search.max_step < max_step_size`)?"""
    return (search.max_step < max_step_size) & (t >= search.max_step)


class AbstractLineSearch(eqx.Module):
    """A line search over phi(t) = f(x + t d) that sees value *and* slope at every trial.

    Subclasses are immutable configuration. Integer and other structural settings are static
    fields; numeric settings may be Python numbers (hashed: equal searches share compiled
    programs) or 0-d arrays (dynamic leaves: a schedule or a sweep reuses one compiled
    program; the solver hands them to the search weakly typed). All scalars are in `dtype`,
    at least float32.

    `max_step_size` caps every trial. The built-in searches default it to +inf (no cap):
    their first trial is the solver's scale-free guess, so multiplying f by a constant
    changes no iterate. A `max_step_size` below the line's resolution `min_step` ends a
    search at once with no step, as a dynamic cap does (see `start`).
    """

    max_step_size: eqx.AbstractVar[Any]  # no trial step exceeds this (+inf: no static cap)

    # True for a search on an objective that changes from step to step (a mini-batch in
    # args): `Solver.step` then evaluates f and its gradient at its params on its own args
    # before every search, as after `Solver.reevaluate`, rather than starting from those
    # the state caches (on the previous step's args). `run`, whose args do not change, and
    # the optax transformation given f and its gradient at params, do not evaluate again.
    evaluates_each_step: ClassVar[bool] = False

    @property
    @abc.abstractmethod
    def max_trials(self) -> int:
        """The trial budget: a search ends within this many evaluations of phi. The solver
        stops a search that has not ended by then, with no step (`LINESEARCH_FAILED`)."""

    def allowance(self, state: PyTree) -> Scalar | float:
        """How far above phi(0) this search may accept a step for rounding's sake (epsilon
        C_k for the searches that judge steps by slopes where values are lost in rounding),
        from its `state` between searches; 0 for one that never does. The solver returns a
        run's last iterate while its f lies within this of the lowest value seen (values
        closer than that are rounding noise), else the point with that lowest value."""
        return 0.0

    @property
    def monotone(self) -> bool:
        """True when every step this search accepts has phi(step) <= phi(0): f never rises
        from one iterate to the next, so the iterate is the best point seen and the solver
        keeps no separate record of it. False (the safe default) for a search that may accept
        a rise: a step judged on its slope within a rounding allowance, or a fixed step."""
        return False

    @abc.abstractmethod
    def init(self, dtype) -> PyTree:
        """State kept between searches (e.g. the previous step size)."""

    @abc.abstractmethod
    def start(
        self,
        state: PyTree,
        phi0: Scalar,
        dphi0: Scalar,
        guess: Scalar,
        min_step: Scalar,
        scaled: Bool[Array, ""] | None = None,
        max_step: Scalar | None = None,
    ) -> AbstractSearchState:
        """Begin a search from phi(0), phi'(0) < 0, the shared initial-step `guess` and the
        line's resolution `min_step` (0 when every step counts). `scaled` tells whether the
        direction carries curvature information (the unit step is natural); None: unknown.

        `max_step` is a dynamic cap on this search's steps (e.g. where the direction leaves a
        feasible box; may be traced, +inf allowed); None: none. The search's cap is then
        cap = min(`max_step_size`, `max_step`), stored as `AbstractSearchState.max_step`, and:

        - no trial exceeds cap; the first is max(min(guess, cap), min_step);
        - if cap < min_step, cap <= 0 or cap is NaN, the search ends at once with no step;
        - where cap < `max_step_size` (the dynamic cap binds), a finite trial at t = cap that
          satisfies the search's sufficient-decrease test ends the search with step = cap
          and `success` True, whatever the slope there (as L-BFGS-B accepts `stpmax`);
          a trial at cap that fails it leaves the search inside [0, cap].

        The static cap `max_step_size` is honoured in the same way: with `max_step` None the
        cap is `max_step_size`, so no trial exceeds it (a `guess` above it is clipped) and a
        `max_step_size` below `min_step` ends the search at once with no step. With any
        `max_step` >= `max_step_size` the search is exactly as with `max_step` None."""

    @abc.abstractmethod
    def update(
        self, search: AbstractSearchState, t: Scalar, phi: Scalar, dphi: Scalar
    ) -> AbstractSearchState:
        """Take phi(t), phi'(t) at t = search.trial; non-finite values must never be accepted."""

    @abc.abstractmethod
    def finish(self, state: PyTree, search: AbstractSearchState) -> PyTree:
        """State for the next search, once this one is done."""
