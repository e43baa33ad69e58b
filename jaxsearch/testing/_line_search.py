"""The conformance kit for a line search: `check_line_search`, `drive` and the kit's lines."""

import dataclasses
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._contract import same_avals, strongly_typed
from .._direction import Gradient
from .._linesearch import AbstractLineSearch
from .._misc import at_least_float32, widest_float
from .._solver import Solver
from ._common import abstract_values, contract, counting_compiles, require, scoped_x64


def _quadratic(t):  # minimum at 2
    return (t - 2) ** 2 - 4, 2 * (t - 2)


def _quartic(t):  # flat minimum at 0.3
    return (t - 0.3) ** 4 - 0.3**4, 4 * (t - 0.3) ** 3


def _falling(t):  # no minimiser
    return math.exp(-t), -math.exp(-t)


def _nan_beyond_one(t):  # a quadratic with its minimum at 3, undefined beyond t = 1
    return _quadratic(t / 1.5) if t <= 1 else (math.nan, math.nan)


def _inf_beyond_half(t):
    return _quadratic(t) if t <= 0.5 else (math.inf, math.inf)


def _nowhere_finite(t):
    return _quadratic(t) if t == 0 else (math.nan, math.nan)


def _linear(t):  # f falls steeply everywhere: any sufficient-decrease test holds
    return -t, -1.0


LINES = (_quadratic, _quartic, _falling, _nan_beyond_one, _inf_beyond_half)


@eqx.filter_jit
def _start(search, state, phi0, dphi0, guess, min_step, max_step):
    return search.start(state, phi0, dphi0, guess, min_step, max_step=max_step)


@eqx.filter_jit
def _update(search, record, t, phi, dphi):
    return search.update(record, t, phi, dphi)


def drive(search: AbstractLineSearch, phi, dtype, guess=1.0, max_step=None, min_step=0.0):
    """One search on the closed-form line `phi` (t -> (phi(t), phi'(t)) in float64), driven as the
    solver does (phi'(t) = NaN where `slope_needed` says so). Returns the trials, their (phi,
    phi') and the final state; checks the avals, the budget and that no trial leaves [min_step,
    cap]."""
    who = f"{type(search).__name__} ({np.dtype(dtype).name})"

    def c(v):
        return jnp.asarray(np.asarray(v, np.float64).astype(dtype))

    phi0, dphi0 = phi(0.0)
    cap_given = None if max_step is None else c(max_step)
    record = _start(search, search.init(dtype), c(phi0), c(dphi0), c(guess), c(min_step), cap_given)
    with contract(np.dtype(dtype).name):
        strongly_typed(search, "start", record, "search state")
    # the cap as the search's dtype holds it: no trial may exceed it by even one ulp
    cap = float(c(min(float(search.max_step_size), math.inf if max_step is None else max_step)))
    caps = f"max_step_size = {float(search.max_step_size)}, max_step = {max_step}, guess {guess}"
    trials: list[float] = []
    values: list[tuple] = []
    value_only_t = math.nan  # the last trial handed without its slope
    while not bool(record.done):
        require(
            len(trials) < search.max_trials,
            who,
            f"trial budget: the search did not end within max_trials = {search.max_trials} "
            f"updates on {phi.__name__.lstrip('_')}",
            "set `done` once `num_trials` reaches `max_trials` (the solver cuts a search off "
            "there with no step)",
        )
        t = record.trial
        tf = float(t)
        require(
            math.isfinite(tf) and tf > 0,
            who,
            f"trial t = {tf} is not positive and finite",
            "propose only trials in (0, cap]; guard interpolated trials",
        )
        require(
            tf <= cap and tf >= min_step * (1 - 1e-6),
            who,
            f"cap rules: trial {len(trials) + 1}, t = {tf}, lies outside [min_step, cap] = "
            f"[{min_step}, {cap}] on {phi.__name__.lstrip('_')} ({caps}; trials before: "
            f"{[float(t) for t in trials][-4:]})",
            "clip every trial to [search.min_step, search.max_step], the trials that extend "
            "the bracket too (`capped_start` gives the first; see `AbstractLineSearch.start`)",
        )
        trials.append(t)
        values.append(phi(tf))
        # As the solver does: phi'(t) = NaN where no slope is needed, unless the search asks again
        # for that trial.
        needed = search.slope_needed(record)
        alone = needed is not None and not bool(needed) and tf != value_only_t
        value_only_t = tf if alone else math.nan
        slope = math.nan if alone else values[-1][1]
        before = record
        record = _update(search, record, t, c(values[-1][0]), c(slope))
        with contract(np.dtype(dtype).name):
            same_avals(search, "update", before, record, "search state")
    require(
        float(record.step) <= cap,
        who,
        f"cap rules: the accepted step {float(record.step)} exceeds the cap {cap} ({caps})",
        "accept only a trial in [search.min_step, search.max_step]",
    )
    return trials, values, record


def _with_static_cap(search: AbstractLineSearch, cap: float) -> AbstractLineSearch | None:
    """`search` with the static cap `max_step_size` = `cap`, where it is a field holding a
    Python number (None otherwise: a property, or an array)."""
    fields = {field.name for field in dataclasses.fields(search)}
    value = getattr(search, "max_step_size", None)
    if (
        "max_step_size" not in fields
        or isinstance(value, bool)
        or not isinstance(value, int | float)
    ):
        return None
    return eqx.tree_at(lambda s: s.max_step_size, search, cap)


def _check_ending(search, trials, values, record, phi, who):
    step = float(record.step)
    require(step >= 0, who, f"step = {step} is negative", "return step >= 0 (0: no step)")
    require(
        not bool(record.success) or step > 0,
        who,
        "success is True with no step",
        "set success only with step > 0",
    )
    if step > 0:
        require(
            bool(trials[-1] == record.step),
            who,
            f"last trial: the search returned step {step} but its last trial was "
            f"{float(trials[-1])}",
            "end on the trial just evaluated (the solver keeps that point), or evaluate the "
            "step once more (`end_on_best`)",
        )
        value, slope = values[-1]
        require(
            math.isfinite(value) and math.isfinite(slope),
            who,
            f"a non-finite trial was accepted (phi = {value}, phi' = {slope} at t = {step})",
            "never accept a trial whose value or slope is not finite",
        )
        if search.monotone:
            require(
                value <= phi(0.0)[0],
                who,
                f"monotone is True but the accepted step raised f ({value} > {phi(0.0)[0]})",
                "return monotone False for a search that may accept a rise",
            )


def _check_driven(search: AbstractLineSearch, dtype) -> None:
    who = f"{type(search).__name__} ({np.dtype(dtype).name})"
    static_cap = float(search.max_step_size)
    cap = static_cap / 2 if math.isfinite(static_cap) else 0.5
    with counting_compiles() as compiles:
        for phi in (*LINES, _nowhere_finite):
            for options in (
                {},
                {"guess": 5.0, "max_step": cap},
                {"guess": 0.3 * cap, "max_step": cap},  # the search grows its trials to the cap
                {"guess": 5.0, "min_step": 1e-2},
            ):
                trials, values, record = drive(search, phi, dtype, **options)
                _check_ending(search, trials, values, record, phi, who)
                between = search.init(dtype)
                with contract(np.dtype(dtype).name):
                    same_avals(search, "finish", between, search.finish(between, record), "state")
                if phi is _nowhere_finite:
                    require(
                        float(record.step) == 0,
                        who,
                        "a search on a line with no finite trial took a step",
                        "take no step when every trial is non-finite",
                    )
        first = len(compiles)
        for phi in LINES:
            drive(search, phi, dtype)
        require(
            len(compiles) == first,
            who,
            f"one compile: driving the search again compiled {len(compiles) - first} more programs",
            "keep the state's avals fixed (see the structure check) and settings hashable",
        )
    # A static cap, below the first guess and above it: no trial beyond it.
    capped = _with_static_cap(search, cap)
    if capped is not None:
        for phi in LINES:
            for guess in (5.0, 0.3 * cap):
                trials, values, record = drive(capped, phi, dtype, guess=guess)
                _check_ending(capped, trials, values, record, phi, who)
    # A cap below the resolution, not positive or NaN: no trial, no step.
    for bad in (cap / 10, 0.0, math.nan):
        trials, _, record = drive(search, _quadratic, dtype, max_step=bad, min_step=cap / 5)
        require(
            trials == [] and float(record.step) == 0,
            who,
            f"cap rules: a cap {bad} below the resolution {cap / 5} (or <= 0, NaN) must end the "
            "search at `start`, with no trial and no step",
            "build the start with `capped_start`, which sets `done` there",
        )
    # A binding dynamic cap where f falls steeply: the trial at the cap ends the search.
    trials, _, record = drive(search, _linear, dtype, guess=5.0, max_step=cap)
    require(
        float(record.step) == float(jnp.asarray(cap, dtype)) and bool(record.success),
        who,
        f"cap rules: on phi(t) = -t with a binding cap {cap}, the trial at the cap passes "
        f"sufficient decrease and must end the search with step = cap and success (got step "
        f"{float(record.step)}, trials {[float(t) for t in trials]})",
        "accept a trial at a binding cap (`at_binding_cap`) that passes your decrease test",
    )
    # Trials judged on f alone: from a first trial far beyond the minimiser, a sufficient decrease
    # is found.
    trials, values, record = drive(search, _quadratic, dtype, guess=10.0)
    if search.slope_needed(record) is not None:
        require(
            float(record.step) > 0 and values[-1][0] < 0,
            who,
            "slope_needed: on phi(t) = (t - 2)^2 - 4 from a first trial of 10, the trials after "
            "the first were handed phi'(t) = NaN and the search found no step with decrease "
            f"(trials {[float(t) for t in trials][:6]}, step {float(record.step)})",
            "judge a trial without its slope on phi(t) alone, or say it needs the slope",
        )
    # A dynamic cap at or above max_step_size changes nothing.
    for phi in LINES:
        plain = drive(search, phi, dtype)[0]
        above = drive(search, phi, dtype, max_step=static_cap * 2 if cap != 0.5 else math.inf)[0]
        require(
            [float(t) for t in plain] == [float(t) for t in above],
            who,
            "cap rules: a dynamic cap at or above max_step_size changed the trials",
            "take the cap as min(max_step_size, max_step) (`search_cap`)",
        )


def _fn(params, target):
    """sum((x - target)^2 (1 + i)) over the leaves, in float32 or wider."""
    total = jnp.zeros((), jnp.float32)
    for i, x in enumerate(jax.tree.leaves(params)):
        wide = at_least_float32(x.dtype)
        diff = x.astype(wide) - jnp.asarray(target, wide)
        total = total.astype(widest_float(total.dtype, wide)) + (1 + i) * jnp.sum(diff**2)
    return total


def _check_in_solver(search: AbstractLineSearch) -> None:
    """`Solver(Gradient(), search).run` on mixed float16, bfloat16 and float32 params: finite
    params, a state of `init`'s avals, and a second run from other params compiles nothing."""
    who = f"{type(search).__name__} in Solver.run (mixed float16, bfloat16, float32 params)"
    solver = Solver(Gradient(), search, max_steps=8)
    base = np.linspace(-1.0, 1.0, 6)
    params = {
        "half": jnp.asarray(base[:2], jnp.float16),
        "brain": jnp.asarray(base[2:4], jnp.bfloat16),
        "single": jnp.asarray(base[4:], jnp.float32),
    }
    target = jnp.asarray(0.25, jnp.float32)
    with contract("in Solver.run, mixed float16, bfloat16 and float32 params"):
        result = solver.run(_fn, params, target)
    require(
        abstract_values(result.state)
        == abstract_values(solver.init(params, fn=_fn, args=(target,))),
        who,
        "state structure: the state after a run differs from `init`'s in structure, shapes, "
        "dtypes or weak types",
        "keep the avals of what `init` and `finish` return equal (explicit dtypes)",
    )
    finite = all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(result.params))
    require(finite, who, "non-finite params after a run", "never accept a non-finite trial")
    other = jax.tree.map(lambda x: jnp.asarray(-np.asarray(x, np.float32), x.dtype), params)
    with counting_compiles() as compiles:
        solver.run(_fn, other, target)
    require(
        len(compiles) == 0,
        who,
        f"one compile: a second run from other params compiled {len(compiles)} programs",
        "keep the state between searches of fixed avals and the settings hashable",
    )


def check_line_search(search: AbstractLineSearch) -> None:
    """Check `search` against what the solver relies on (`AbstractLineSearch`); raise an
    AssertionError naming the first property that fails and how to fix it. Driven on closed-form
    lines (quadratic, quartic, exp(-t), lines turning NaN or inf, one finite only at 0), in
    float32 and float64:

    - `start`'s state has no weakly typed field, every `update` keeps the state's structure,
      shapes, dtypes and weak types, `finish` keeps `init`'s, and driving again compiles nothing;
    - it ends within `max_trials` updates; every trial and step is positive, finite and within
      [min_step, cap] (cap in the search's dtype), starting above and below the cap, under a
      dynamic cap and, where `max_step_size` is a Python-number field, a static one;
    - a step > 0 is the last trial, with finite value and slope (no rise where `monotone`);
      `success` only with a step; no step where nothing is finite;
    - `AbstractLineSearch.start`'s cap rules: a cap below the resolution, <= 0 or NaN ends it at
      `start`; on phi(t) = -t a binding cap gives step = cap; a dynamic cap at or above
      `max_step_size` changes nothing;
    - `Solver(Gradient(), search).run` on mixed float16, bfloat16 and float32 params gives finite
      params and `init`'s avals, and a second run compiles nothing.
    """
    who = type(search).__name__
    require(
        isinstance(search, AbstractLineSearch),
        who,
        "not an AbstractLineSearch",
        "subclass jaxsearch.AbstractLineSearch",
    )
    require(
        isinstance(search.max_trials, int) and search.max_trials >= 1,
        who,
        f"trial budget: max_trials must be a Python int >= 1, got {search.max_trials!r}",
        "make max_trials a static int field or property",
    )
    require(
        isinstance(search.monotone, bool) and isinstance(search.evaluates_each_step, bool),
        who,
        "monotone and evaluates_each_step must be Python bools",
        "return a bool (decided by static settings)",
    )
    for dtype in (np.float32, np.float64):
        with scoped_x64(dtype):
            _check_driven(search, dtype)
    _check_in_solver(search)
