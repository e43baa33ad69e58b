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
    """The state of one search, from `AbstractLineSearch.start` until `done`: the fields the
    solver reads. A search that keeps nothing else returns a `SearchState`; one that keeps
    more (brackets, phi(0), ...) returns a subclass that only adds fields (data, no methods).

    The solver evaluates phi(t) = f(x + t d) and phi'(t) = <grad f(x + t d), d> at `trial`
    and hands both back to `AbstractLineSearch.update` until `done`. When a search ends with
    `step > 0`, the last evaluated trial was at `step` (so the solver keeps that point's value
    and gradient); `step == 0` means no step is taken.

    `min_step` is the resolution of the line: below it no parameter changes (x + t d rounds to
    x), so a search never proposes a trial below it and gives up instead.

    `max_step` is the search's cap on trials, min(`max_step_size`, the `max_step` passed to
    `AbstractLineSearch.start`) (see `search_cap`): no trial exceeds it.

    Build the fields of a new search with `capped_start`, and those after a judged trial
    with `after_trial`. This class was called `AbstractSearchState` (a deprecated alias).
    """

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
    """The `SearchState` fields of a search that has evaluated nothing yet, under the cap
    rules of `AbstractLineSearch.start`: first trial max(min(`first`, cap), min_step); a cap
    below the line's resolution `min_step` (no step up to it changes a parameter), not
    positive, or NaN ends the search at once with no step and `trial` = cap. `cap` is
    `search_cap`'s; scalars are in `min_step`'s dtype. Pass the dict to your state's
    constructor with your own fields: `MyState(**capped_start(...), phi0=phi0)`."""
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
    """`search` once a trial was judged: the next `trial`, whether the search is `done`, the
    `step` taken (0: none; when positive, the trial just judged) and `success`; one more
    trial counted; `fields` replace the subclass's own fields of those names, every other
    field (the cap, the resolution, ...) is kept. Step sizes are cast to the search's dtype."""
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
    """Is `t` at a dynamic cap that binds (`search.max_step < max_step_size`)? There the
    rules of `AbstractLineSearch.start` let a trial with sufficient decrease end the search
    with step = cap, whatever the slope."""
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
    """The best-point fallback of a search whose trial t was judged: it `accept`ed, it
    `fail`ed, or neither (the search goes on at `next_trial`).

    A failed search ends on its `best` trial (0: none, no step). When that trial is t the
    search takes it now; otherwise the trial is evaluated once more (`refining` on the next
    update: the search must remember that it re-evaluates), and the search then takes it where
    its value and slope are `finite`, else no step (a non-finite value is never taken). The
    re-evaluation is a trial of its own: judge at most `trials_before_fallback(max_trials)`
    trials before it. Returns (done, taken: the step is t, refine: the next trial re-evaluates
    `best`, the next trial)."""
    has_best = best > 0
    is_current = best == t
    refine = fail & has_best & ~is_current
    done = refining | accept | (fail & ~refine)
    taken = jnp.where(refining, finite, accept | (fail & has_best & is_current))
    trial = jnp.where(refining, t, jnp.where(refine, best, next_trial))
    return done, taken, refine, trial


def trials_before_fallback(max_trials: int) -> int:
    """The trials a search that ends on its best trial (`end_on_best`) may judge within the
    budget `max_trials`: one fewer, for the re-evaluation of the best trial, but at least one
    (after a single trial the best is that one, or none: no re-evaluation)."""
    return max(max_trials - 1, 1)


class AbstractLineSearch(eqx.Module):
    """A line search over phi(t) = f(x + t d) that sees value *and* slope at every trial (or
    the value alone at the trials it says need no slope, `slope_needed`).

    Subclasses are immutable configuration. Integer and other structural settings are static
    fields; numeric settings may be Python numbers (hashed: equal searches share compiled
    programs) or 0-d arrays (dynamic leaves: a schedule or a sweep reuses one compiled
    program; the solver hands them to the search weakly typed). All scalars are in `dtype`,
    at least float32.

    A subclass implements the abstract members below and nothing else (Equinox's
    abstract/final rule): `max_step_size` (a field or property), `evaluates_each_step` (a
    class attribute), `max_trials`, `monotone`, `allowance`, `init`, `start`, `update`,
    `finish`; and where it judges some trials on f alone, the one optional member,
    `slope_needed` (by default every trial needs its slope). Check it with
    `jaxsearch.testing.check_line_search`.

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
    # Such a search's failure is part of its method (it carries what it learnt to the next
    # search): `run` then goes on after a step that took no step, as a loop of `step`s does.
    evaluates_each_step: eqx.AbstractClassVar[bool]

    @property
    @abc.abstractmethod
    def max_trials(self) -> int:
        """The trial budget (a Python int): a search ends within this many evaluations of
        phi. The solver stops a search that has not ended by then, with no step
        (`LINESEARCH_FAILED`)."""

    @abc.abstractmethod
    def allowance(self, state: PyTree) -> Scalar | float:
        """How far above phi(0) this search may accept a step for rounding's sake (epsilon
        C_k for the searches that judge steps by slopes where values are lost in rounding,
        see `ValueScale`), from its `state` between searches; 0 for one that never does. The
        solver returns a run's last iterate while its f lies within this of the lowest value
        seen (values closer than that are rounding noise), else the point with that lowest
        value."""

    @property
    @abc.abstractmethod
    def monotone(self) -> bool:
        """True when every step this search accepts has phi(step) <= phi(0): f never rises
        from one iterate to the next, so the iterate is the best point seen and the solver
        keeps no separate record of it. False (the safe answer) for a search that may accept
        a rise: a step judged on its slope within a rounding allowance, a nonmonotone search,
        or a fixed step."""

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
        """Begin a search from phi(0), phi'(0) < 0, the shared initial-step `guess` and the
        line's resolution `min_step` (0 when every step counts). `scaled` tells whether the
        direction carries curvature information (the unit step is natural); None: unknown.

        `max_step` is a dynamic cap on this search's steps (e.g. where the direction leaves a
        feasible box; may be traced, +inf allowed); None: none. The search's cap is then
        cap = min(`max_step_size`, `max_step`), stored as `SearchState.max_step`, and:

        - no trial exceeds cap; the first is max(min(guess, cap), min_step);
        - if cap < min_step, cap <= 0 or cap is NaN, the search ends at once with no step;
        - where cap < `max_step_size` (the dynamic cap binds), a finite trial at t = cap that
          satisfies the search's sufficient-decrease test ends the search with step = cap
          and `success` True, whatever the slope there (as L-BFGS-B accepts `stpmax`);
          a trial at cap that fails it leaves the search inside [0, cap].

        The static cap `max_step_size` is honoured in the same way: with `max_step` None the
        cap is `max_step_size`, so no trial exceeds it (a `guess` above it is clipped) and a
        `max_step_size` below `min_step` ends the search at once with no step. With any
        `max_step` >= `max_step_size` the search is exactly as with `max_step` None.

        `capped_start(first, min_step, search_cap(self.max_step_size, max_step, phi0.dtype))`
        gives the `SearchState` fields of a search that follows the first two rules; the
        third is the search's own, with `at_binding_cap` to tell where it applies."""

    @abc.abstractmethod
    def update(self, search: SearchState, t: Scalar, phi: Scalar, dphi: Scalar) -> SearchState:
        """Take phi(t), phi'(t) at t = search.trial (`after_trial` builds the result).

        Non-finite values must never be accepted; a search ends within `max_trials` calls;
        when it ends with `step > 0`, `step` is the t of the last call; the result has the
        structure, shapes and dtypes of `search` (the solver runs this in a loop)."""

    def slope_needed(self, search: SearchState) -> Bool[Array, ""] | None:
        """Whether the next trial, `search.trial`, needs its slope phi'(t). An optional
        member: the default, None, says every trial does.

        A search that returns a boolean array lets the solver evaluate f alone (one forward
        pass of fn, no gradient) where it is False, and hand `update` phi'(t) = NaN there.
        Where `update` then asks for the same trial again, the solver evaluates it with its
        slope (so a search that finds it needs the slope after all, e.g. where the change of f
        is lost in rounding, asks for t once more); where such a trial ends the search with
        `step` = t, the solver evaluates f and its gradient there before the step ends, and
        takes no step where that slope is not finite. Both evaluations count in
        `num_fun_evals`, and those with a gradient in `num_grad_evals`. Under `jax.vmap`, and
        with a dense least-squares direction or fn's own gradient, every trial has its
        slope."""
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
        """This search by itself along `direction` from `params`, as jaxopt's `ls.run` and
        scipy's `scipy.optimize.line_search` (inside an optimiser of your own): phi(t) =
        fn(params + t direction, *args), a scalar, with phi'(t) from `jax.value_and_grad`.

        `params` and `direction` are pytrees of floating arrays of one structure. `value` and
        `grad` (both or neither) are fn and its gradient at `params`, which saves an
        evaluation; `guess` is the first trial (before the cap rules of `start`); `max_step`
        a cap on the steps (None: none); `state` the search's state between searches, from
        the previous call's result (None: `init`'s). The line's resolution `min_step` is the
        solver's (`tree_min_step`: below it x + t d rounds to x).

        Every evaluation of fn is at one site of one `lax.while_loop`, within `max_trials`
        trials (and the evaluation at `params` where `value` is not given); compiled with
        `eqx.filter_jit`, so repeated calls with arrays of the same shapes and dtypes (and the
        same fn) compile once, and it runs under `jax.jit` and `jax.vmap`. A `direction` that
        does not descend (phi'(0) >= 0 or not finite) gets `success` False and no step (it
        does not raise: it may be traced). Returns a `LineSearchResult`."""
        return run_alone(self, fn, params, direction, args, value, grad, guess, max_step, state)
