"""What a line search must provide to the solver, and the public toolkit for writing one."""

import abc
import dataclasses
from typing import Any, TypeVar

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Bool, Int, PyTree, Scalar

from .._misc import Setting
from ._standalone import LineSearchResult, run_alone


class Point(eqx.Module):
    """A trial of a search: step t, value phi(t) and slope phi'(t)."""

    t: Scalar
    phi: Scalar
    dphi: Scalar

    def triple(self):
        return self.t, self.phi, self.dphi


class SearchState(eqx.Module):
    """The state of one search, from `AbstractLineSearch.start` until `done`: the fields the solver
    reads; a search keeping more subclasses it, adding fields only. The solver evaluates phi(t) =
    f(x + t d) and phi'(t) at `trial` for `update` until `done`; a search ending with `step > 0`
    last evaluated `step`, `step == 0` is no step. `min_step`: the line's resolution (below it x
    + t d rounds to x), `max_step`: `search_cap`'s cap; no trial lies outside. Build the fields
    with `capped_start`, then `after_trial`. Formerly `AbstractSearchState` (a deprecated alias)."""

    trial: Scalar  # next step size to evaluate
    done: Bool[Array, ""]
    step: Scalar  # accepted step size, 0 if none
    success: Bool[Array, ""]  # True when the search's own conditions hold at `step`
    num_trials: Int[Array, ""]
    min_step: Scalar
    max_step: Scalar  # no trial exceeds this: min(max_step_size, the dynamic cap)


def search_cap(max_step_size: Setting, max_step: Scalar | None, dtype) -> Scalar:
    """A search's cap: min(`max_step_size`, `max_step`) as a strongly typed 0-d array of
    `dtype` (a NaN `max_step` gives NaN); `max_step_size` alone for `max_step` None."""
    static = jnp.asarray(max_step_size).astype(dtype)
    if max_step is None:
        return static
    return jnp.minimum(static, jnp.asarray(max_step).astype(dtype))


def capped_start(first: Scalar, min_step: Scalar, cap: Scalar) -> dict:
    """The `SearchState` fields of a search before its first trial, under the cap rules of
    `AbstractLineSearch.start`: trial max(min(`first`, cap), min_step); a cap below `min_step`,
    not positive or NaN ends the search at once with no step and `trial` = cap. Scalars are in
    `min_step`'s dtype. Use as `MyState(**capped_start(...), phi0=phi0)`."""
    dtype = min_step.dtype
    give_up = ~((cap >= min_step) & (cap > 0))
    trial = jnp.maximum(jnp.minimum(first.astype(dtype), cap), min_step)
    return dict(
        trial=jnp.where(give_up, cap, trial).astype(dtype),
        done=give_up,
        step=jnp.zeros((), dtype),
        success=jnp.array(False),
        num_trials=jnp.zeros((), jnp.int32),
        min_step=min_step,
        max_step=jnp.asarray(cap).astype(dtype),
    )


_Search = TypeVar("_Search", bound=SearchState)


def after_trial(
    search: _Search,
    *,
    trial: Scalar,
    done: Bool[Array, ""],
    step: Scalar,
    success: Bool[Array, ""],
    **fields: Any,
) -> _Search:
    """`search` after a judged trial: the next `trial`, `done`, the `step` (0: none, else the
    trial just judged), `success`, one more trial counted, and the subclass's `fields`
    replaced; other fields kept. Step sizes are cast to the search's dtype."""
    dtype = search.trial.dtype
    return dataclasses.replace(
        search,
        trial=jnp.asarray(trial).astype(dtype),
        done=jnp.asarray(done),
        step=jnp.asarray(step).astype(dtype),
        success=jnp.asarray(success),
        num_trials=search.num_trials + 1,
        **fields,
    )


def at_binding_cap(search: SearchState, max_step_size: Setting, t: Scalar) -> Array:
    """Is `t` at a binding dynamic cap (`search.max_step < max_step_size`)? There sufficient
    decrease alone ends the search with step = cap (`AbstractLineSearch.start`)."""
    return (search.max_step < max_step_size) & (t >= search.max_step)


def end_on_best(
    accept: Bool[Array, ""],
    fail: Bool[Array, ""],
    refining: Bool[Array, ""],
    best: Scalar,
    t: Scalar,
    finite: Bool[Array, ""],
    next_trial: Scalar,
) -> tuple[Bool[Array, ""], Bool[Array, ""], Bool[Array, ""], Scalar]:
    """The best-point fallback after judging trial t: it `accept`ed, `fail`ed, or neither (go
    on at `next_trial`). A failed search ends on its `best` trial (0: no step): taken now if
    it is t, else evaluated once more (`refining` on the next update) and taken where `finite`.
    That re-evaluation is a trial: judge at most `trials_before_fallback(max_trials)` before
    it. Returns (done, taken: the step is t, refine: the next trial re-evaluates `best`, the
    next trial)."""
    has_best = best > 0
    is_current = best == t
    refine = fail & has_best & ~is_current
    done = refining | accept | (fail & ~refine)
    taken = jnp.where(refining, finite, accept | (fail & has_best & is_current))
    trial = jnp.where(refining, t, jnp.where(refine, best, next_trial))
    return done, taken, refine, trial


def trials_before_fallback(max_trials: int) -> int:
    """Trials an `end_on_best` search may judge within `max_trials`: one fewer, for the
    re-evaluation, but at least one (after one trial there is nothing to re-evaluate)."""
    return max(max_trials - 1, 1)


class AbstractLineSearch(eqx.Module):
    """A line search over phi(t) = f(x + t d) that sees value *and* slope at every trial (or the
    value alone where `slope_needed` says so).

    Subclasses are immutable configuration: structural settings static, numeric ones Python
    numbers (hashed: equal searches share programs) or 0-d arrays (dynamic: a sweep reuses one
    program), scalars in `dtype`, at least float32. A subclass implements `max_step_size`,
    `evaluates_each_step` (a class attribute), `max_trials`, `monotone`, `allowance`, `init`,
    `start`, `update`, `finish`, optionally `slope_needed` (Equinox's abstract/final rule); check
    it with `jaxsearch.testing.check_line_search`. `max_step_size` caps every trial; the
    built-ins default it to +inf, so scaling f changes no iterate.
    """

    max_step_size: eqx.AbstractVar[Any]  # no trial step exceeds this (+inf: no static cap)

    # True for an objective that changes each step (a mini-batch in args): `Solver.step` then
    # evaluates f and its gradient on its own args before each search, not the cached ones.
    # Its failures are part of the method, so `run` goes on after a step that took no step.
    evaluates_each_step: eqx.AbstractClassVar[bool]

    @property
    @abc.abstractmethod
    def max_trials(self) -> int:
        """The trial budget (a Python int); past it the solver ends the search with no step
        (`LINESEARCH_FAILED`)."""

    @abc.abstractmethod
    def allowance(self, state: PyTree) -> Scalar | float:
        """How far above phi(0) this search may accept a step for rounding's sake (epsilon
        C_k, see `ValueScale`), from its `state`; 0 for one that never does. The solver returns
        the last iterate while its f is within this of the lowest seen, else the lowest."""

    @property
    @abc.abstractmethod
    def monotone(self) -> bool:
        """True when every accepted step has phi(step) <= phi(0), so the solver keeps no
        separate best point. False (the safe answer) where a rise may be accepted."""

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
    ) -> SearchState:
        """Begin a search from phi(0), phi'(0) < 0, the initial-step `guess` and the line's
        resolution `min_step` (0: every step counts); `scaled`: whether d carries curvature
        (None: unknown); `max_step`: a dynamic cap (e.g. a box's edge; traced, +inf allowed;
        None: none, as is any `max_step` >= `max_step_size`). With cap = min(`max_step_size`,
        `max_step`), stored as `SearchState.max_step`:

        - no trial exceeds cap; the first is max(min(guess, cap), min_step);
        - if cap < min_step, cap <= 0 or cap is NaN, the search ends at once with no step;
        - where cap < `max_step_size` (the dynamic cap binds), a finite trial at cap with
          sufficient decrease ends the search with step = cap and `success`, whatever the slope
          (as L-BFGS-B accepts `stpmax`); one without stays inside [0, cap].

        `capped_start(first, min_step, search_cap(self.max_step_size, max_step, phi0.dtype))`
        follows the first two rules; `at_binding_cap` tells where the third applies.
        """

    @abc.abstractmethod
    def update(self, search: SearchState, t: Scalar, phi: Scalar, dphi: Scalar) -> SearchState:
        """Take phi(t), phi'(t) at t = search.trial (`after_trial` builds the result). Never
        accept a non-finite value; end within `max_trials` calls; a `step > 0` is the last
        call's t; keep the structure, shapes and dtypes of `search`."""

    def slope_needed(self, search: SearchState) -> Bool[Array, ""] | None:
        """Whether `search.trial` needs its slope phi'(t); None (the default): every trial does.
        Where False the solver evaluates f alone and hands `update` phi'(t) = NaN; asking for the
        same t again gets its slope; a step ending on such a trial is re-evaluated with its
        gradient (no step where that slope is not finite). Under `jax.vmap`, a dense
        least-squares direction or fn's own gradient, every trial has its slope."""
        return None

    @abc.abstractmethod
    def finish(self, state: PyTree, search: SearchState) -> PyTree:
        """State for the next search, once this one is done."""

    def run(
        self,
        fn,
        params: PyTree,
        direction: PyTree,
        *args: Any,
        value: Scalar | None = None,
        grad: PyTree | None = None,
        guess: Scalar | float = 1.0,
        max_step: Scalar | float | None = None,
        state: PyTree | None = None,
    ) -> LineSearchResult:
        """This search alone along `direction` from `params`, as jaxopt's `ls.run` or scipy's
        `line_search`: phi(t) = fn(params + t direction, *args), a scalar, slopes by
        `jax.value_and_grad`. `params`, `direction`: pytrees of floating arrays of one structure;
        `value` and `grad` (both or neither): fn and its gradient at `params`; `guess`: the first
        trial (before `start`'s cap rules); `max_step`: a cap (None: none); `state`: the previous
        result's (None: `init`'s); `min_step` is `tree_min_step`'s. One `lax.while_loop` of at
        most `max_trials` trials, compiled once per shapes and dtypes (`eqx.filter_jit`), under
        `jax.jit` and `jax.vmap` too. A non-descent `direction` gets `success` False and no step
        (it may be traced, so no raise). Returns a `LineSearchResult`."""
        return run_alone(self, fn, params, direction, args, value, grad, guess, max_step, state)
