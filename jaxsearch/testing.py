"""A conformance kit for your own direction or line search: call `check_line_search(search)`
or `check_direction(direction)` in your test suite. Each checks what the solver relies on and
raises an AssertionError that names the property that failed and how to fix it.

Both run small problems, each compiled once per dtype: float32 and float64 (under
`jax.enable_x64(True)`, scoped) for the scalars a line search sees, and float16, bfloat16,
float32, float64 and a mixed-dtype pytree of params for a direction and for a search inside
`Solver.step`. A least-squares direction (`AbstractLeastSquares`) is checked on residual
problems, with `DirectionInfo(..., residuals=r)` as the solver passes it.
"""

import contextlib
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import PyTree

from ._direction import AbstractDirection, AbstractLeastSquares, DirectionInfo, Gradient
from ._linesearch import AbstractLineSearch
from ._misc import at_least_float32, widest_float
from ._solver import Solver

__all__ = ["check_direction", "check_line_search"]

_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


@contextlib.contextmanager
def _counting_compiles():
    """A list that grows by one at each XLA backend compile inside the block."""
    seen: list[float] = []

    def listen(event: str, duration_secs: float, **kwargs: str | int) -> None:
        if event == _COMPILE_EVENT:
            seen.append(duration_secs)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield seen
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)


def _precision(dtype):
    """x64 on, scoped, for float64; nothing otherwise."""
    if np.dtype(dtype) == np.float64:
        return jax.enable_x64(True)
    return contextlib.nullcontext()


def _aval(x):
    if isinstance(x, jax.Array | np.ndarray | np.generic):
        return (x.shape, x.dtype, getattr(x, "weak_type", False))
    return (type(x).__name__,)  # a Python value: static under jit, its value in the compile key


def _avals(tree: PyTree):
    return jax.tree.structure(tree), [_aval(x) for x in jax.tree.leaves(tree)]


def _require(ok, who: str, what: str, fix: str) -> None:
    if not ok:
        raise AssertionError(f"{who}: {what}. Fix: {fix}")


# ----------------------------------------------------------------------- line searches


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
    """One search on the closed-form line `phi` (t -> (phi(t), phi'(t)) in float64), driven as
    the solver drives it: `start`, then `update` at `trial` until `done`. Returns the trials,
    their (phi, phi') and the final search state; checks the state's avals, the budget, and
    that no trial leaves [min_step, cap]."""
    who = f"{type(search).__name__} ({np.dtype(dtype).name})"

    def c(v):
        return jnp.asarray(np.asarray(v, np.float64).astype(dtype))

    phi0, dphi0 = phi(0.0)
    cap_given = None if max_step is None else c(max_step)
    record = _start(search, search.init(dtype), c(phi0), c(dphi0), c(guess), c(min_step), cap_given)
    started = _avals(record)
    cap = min(float(search.max_step_size), math.inf if max_step is None else max_step)
    trials: list[float] = []
    values: list[tuple] = []
    while not bool(record.done):
        _require(
            len(trials) < search.max_trials,
            who,
            f"trial budget: the search did not end within max_trials = {search.max_trials} "
            f"updates on {phi.__name__.lstrip('_')}",
            "set `done` once `num_trials` reaches `max_trials` (the solver cuts a search off "
            "there with no step)",
        )
        t = record.trial
        tf = float(t)
        _require(
            math.isfinite(tf) and tf > 0,
            who,
            f"trial t = {tf} is not positive and finite",
            "propose only trials in (0, cap]; guard interpolated trials",
        )
        _require(
            tf <= cap * (1 + 1e-6) and tf >= min_step * (1 - 1e-6),
            who,
            f"cap rules: trial t = {tf} lies outside [min_step, cap] = [{min_step}, {cap}]",
            "clip every trial to [search.min_step, search.max_step] (`capped_start` gives the "
            "first; see `AbstractLineSearch.start`)",
        )
        trials.append(t)
        values.append(phi(tf))
        record = _update(search, record, t, c(values[-1][0]), c(values[-1][1]))
        _require(
            _avals(record) == started,
            who,
            "state structure: `update` returned a state whose structure, shapes, dtypes or weak "
            f"types differ from `start`'s ({_avals(record)} != {started})",
            "give every field the dtype `start` gave it (`after_trial` casts step sizes; cast "
            "your own fields with .astype)",
        )
    return trials, values, record


def _check_ending(search, trials, values, record, phi, who):
    step = float(record.step)
    _require(step >= 0, who, f"step = {step} is negative", "return step >= 0 (0: no step)")
    _require(
        not bool(record.success) or step > 0,
        who,
        "success is True with no step",
        "set success only with step > 0",
    )
    if step > 0:
        _require(
            bool(trials[-1] == record.step),
            who,
            f"last trial: the search returned step {step} but its last trial was "
            f"{float(trials[-1])}",
            "end on the trial just evaluated (the solver keeps that point), or evaluate the "
            "step once more (`end_on_best`)",
        )
        value, slope = values[-1]
        _require(
            math.isfinite(value) and math.isfinite(slope),
            who,
            f"a non-finite trial was accepted (phi = {value}, phi' = {slope} at t = {step})",
            "never accept a trial whose value or slope is not finite",
        )
        if search.monotone:
            _require(
                value <= phi(0.0)[0],
                who,
                f"monotone is True but the accepted step raised f ({value} > {phi(0.0)[0]})",
                "return monotone False for a search that may accept a rise",
            )


def _check_driven(search: AbstractLineSearch, dtype) -> None:
    who = f"{type(search).__name__} ({np.dtype(dtype).name})"
    static_cap = float(search.max_step_size)
    cap = static_cap / 2 if math.isfinite(static_cap) else 0.5
    with _counting_compiles() as compiles:
        for phi in (*LINES, _nowhere_finite):
            for options in ({}, {"guess": 5.0, "max_step": cap}, {"guess": 5.0, "min_step": 1e-2}):
                trials, values, record = drive(search, phi, dtype, **options)
                _check_ending(search, trials, values, record, phi, who)
                between = search.init(dtype)
                _require(
                    _avals(search.finish(between, record)) == _avals(between),
                    who,
                    "state structure: `finish` returned a state whose avals differ from `init`'s",
                    "give the state between searches fixed dtypes (no Python floats)",
                )
                if phi is _nowhere_finite:
                    _require(
                        float(record.step) == 0,
                        who,
                        "a search on a line with no finite trial took a step",
                        "take no step when every trial is non-finite",
                    )
        first = len(compiles)
        for phi in LINES:
            drive(search, phi, dtype)
        _require(
            len(compiles) == first,
            who,
            f"one compile: driving the search again compiled {len(compiles) - first} more programs",
            "keep the state's avals fixed (see the structure check) and settings hashable",
        )
    # A cap below the resolution, not positive or NaN: no trial, no step.
    for bad in (cap / 10, 0.0, math.nan):
        trials, _, record = drive(search, _quadratic, dtype, max_step=bad, min_step=cap / 5)
        _require(
            trials == [] and float(record.step) == 0,
            who,
            f"cap rules: a cap {bad} below the resolution {cap / 5} (or <= 0, NaN) must end the "
            "search at `start`, with no trial and no step",
            "build the start with `capped_start`, which sets `done` there",
        )
    # A binding dynamic cap where f falls steeply: the trial at the cap ends the search.
    trials, _, record = drive(search, _linear, dtype, guess=5.0, max_step=cap)
    _require(
        float(record.step) == float(jnp.asarray(cap, dtype)) and bool(record.success),
        who,
        f"cap rules: on phi(t) = -t with a binding cap {cap}, the trial at the cap passes "
        f"sufficient decrease and must end the search with step = cap and success (got step "
        f"{float(record.step)}, trials {[float(t) for t in trials]})",
        "accept a trial at a binding cap (`at_binding_cap`) that passes your decrease test",
    )
    # A dynamic cap at or above max_step_size changes nothing.
    for phi in LINES:
        plain = drive(search, phi, dtype)[0]
        above = drive(search, phi, dtype, max_step=static_cap * 2 if cap != 0.5 else math.inf)[0]
        _require(
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


def _param_cases():
    """(name, dtype to enable x64 for, params) for each params dtype a direction must take."""
    base = np.linspace(-1.0, 1.0, 6)
    return [
        ("float16", None, jnp.asarray(base, jnp.float16)),
        ("bfloat16", None, jnp.asarray(base, jnp.bfloat16)),
        ("float32", None, jnp.asarray(base, jnp.float32)),
        ("float64", np.float64, base),
        ("mixed", None, {"a": jnp.asarray(base[:2], jnp.bfloat16), "b": jnp.asarray(base[2:])}),
    ]


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
    result = solver.run(_fn, params, target)
    _require(
        _avals(result.state) == _avals(solver.init(params, fn=_fn, args=(target,))),
        who,
        "state structure: the state after a run differs from `init`'s in structure, shapes, "
        "dtypes or weak types",
        "keep the avals of what `init` and `finish` return equal (explicit dtypes)",
    )
    finite = all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(result.params))
    _require(finite, who, "non-finite params after a run", "never accept a non-finite trial")
    other = jax.tree.map(lambda x: jnp.asarray(-np.asarray(x, np.float32), x.dtype), params)
    with _counting_compiles() as compiles:
        solver.run(_fn, other, target)
    _require(
        len(compiles) == 0,
        who,
        f"one compile: a second run from other params compiled {len(compiles)} programs",
        "keep the state between searches of fixed avals and the settings hashable",
    )


def check_line_search(search: AbstractLineSearch) -> None:
    """Check `search` against what the solver relies on (see `AbstractLineSearch`); raise an
    AssertionError naming the first property that fails and how to fix it.

    Driven by hand on closed-form lines (quadratic, quartic, exp(-t), lines that turn NaN or
    inf beyond a point, one finite nowhere but at 0), in float32 and float64:

    - the state has the structure, shapes, dtypes and weak types of `start`'s after every
      `update`, and driving it again compiles nothing;
    - it ends within `max_trials` updates; every trial is positive, finite and within
      [min_step, cap];
    - a step > 0 is the last trial, with a finite value and slope (and no rise of f where
      `monotone`); `success` only with a step; no step where nothing is finite;
    - the cap rules of `AbstractLineSearch.start`: a cap below the resolution, <= 0 or NaN
      ends the search at `start`; on phi(t) = -t a binding cap ends it with step = cap; a
      dynamic cap at or above `max_step_size` changes no trial.

    `finish` keeps the avals of `init`'s state. And a `Solver(Gradient(), search).run` on
    mixed float16, bfloat16 and float32 params ends with finite params and a state of
    `init`'s avals, and a second run compiles nothing.
    """
    who = type(search).__name__
    _require(
        isinstance(search, AbstractLineSearch),
        who,
        "not an AbstractLineSearch",
        "subclass jaxsearch.AbstractLineSearch",
    )
    _require(
        isinstance(search.max_trials, int) and search.max_trials >= 1,
        who,
        f"trial budget: max_trials must be a Python int >= 1, got {search.max_trials!r}",
        "make max_trials a static int field or property",
    )
    _require(
        isinstance(search.monotone, bool) and isinstance(search.evaluates_each_step, bool),
        who,
        "monotone and evaluates_each_step must be Python bools",
        "return a bool (decided by static settings)",
    )
    for dtype in (np.float32, np.float64):
        with _precision(dtype):
            _check_driven(search, dtype)
    _check_in_solver(search)


# -------------------------------------------------------------------------- directions


def _quadratic_problem(n: int, seed: int):
    """A random SPD matrix (condition number about 100) and a vector, in float64."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    a = q @ np.diag(np.geomspace(1.0, 100.0, n)) @ q.T
    return a, rng.normal(size=n)


def _flat(tree, dtype):
    return jnp.concatenate([jnp.ravel(x).astype(dtype) for x in jax.tree.leaves(tree)])


def _like(flat, tree):
    out, i = [], 0
    for x in jax.tree.leaves(tree):
        out.append(flat[i : i + x.size].reshape(x.shape).astype(x.dtype))
        i += x.size
    return jax.tree.unflatten(jax.tree.structure(tree), out)


def _gradient(x, a, b, dtype):
    """The gradient A x - b of 0.5 x'Ax - b'x, in each leaf's dtype."""
    return _like(a @ _flat(x, dtype) - b, x)


@eqx.filter_jit
def _compute(direction, state, x, a, b, dtype):
    grad = _gradient(x, a, b, dtype)
    info = DirectionInfo(x, grad, dtype, lambda v: _like(a @ _flat(v, dtype), v))
    d, scaled, state, limit = direction.compute(state, info)
    return grad, d, scaled, state, limit


@eqx.filter_jit
def _advance(direction, state, x, grad, d, a, b, dtype, accept):
    """The exact step along d on the quadratic, then `update` with its (s, y)."""
    g, p = _flat(grad, dtype), _flat(d, dtype)
    t = -(g @ p) / (p @ (a @ p))
    x_new = _like(_flat(x, dtype) + t * p, x)
    grad_new = _gradient(x_new, a, b, dtype)

    def sub(u, v):
        wide = at_least_float32(widest_float(u.dtype, v.dtype))
        return u.astype(wide) - v.astype(wide)

    s, y = jax.tree.map(sub, x_new, x), jax.tree.map(sub, grad_new, grad)
    return x_new, direction.update(state, s, y, dtype, accept=accept)


def _cosine(grad, d) -> float:
    g = np.concatenate([np.ravel(np.asarray(x, np.float64)) for x in jax.tree.leaves(grad)])
    p = np.concatenate([np.ravel(np.asarray(x, np.float64)) for x in jax.tree.leaves(d)])
    return float(g @ p / (np.linalg.norm(g) * np.linalg.norm(p) + 1e-300))


def _same(a: PyTree, b: PyTree) -> bool:
    return all(
        np.array_equal(np.asarray(u), np.asarray(v), equal_nan=True)
        for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


def _check_direction_at(direction: AbstractDirection, name, x64, params, seed) -> None:
    who = f"{type(direction).__name__} ({name} params)"
    with _precision(x64 or np.float32):
        x = jax.tree.map(jnp.asarray, params)
        dtype = np.dtype(np.float64 if x64 else np.float32)
        n = sum(leaf.size for leaf in jax.tree.leaves(x))
        a64, b64 = _quadratic_problem(n, seed)
        a, b = jnp.asarray(a64, dtype), jnp.asarray(b64, dtype)
        state = direction.init(x, dtype)
        started = _avals(state)
        with _counting_compiles() as compiles:
            for k in range(4):
                grad, d, scaled, new_state, limit = _compute(direction, state, x, a, b, dtype)
                _check_outputs(who, grad, d, scaled, limit)
                cos = _cosine(grad, d)
                _require(
                    cos < 0,
                    who,
                    f"descent: d is not a descent direction at step {k} on a random SPD "
                    f"quadratic (cos(g, d) = {cos:.3g})",
                    "return d with <g, d> < 0 (keep the curvature pairs you use with s'y > 0)",
                )
                for state_after in (new_state,):
                    _require(
                        _avals(state_after) == started,
                        who,
                        "state structure: `compute` changed the state's structure, shapes, "
                        "dtypes or weak types",
                        "give every leaf of `init`'s state an explicit dtype and keep it",
                    )
                kept = _advance(direction, new_state, x, grad, d, a, b, dtype, jnp.array(False))[1]
                _require(
                    _same(kept, new_state),
                    who,
                    "update(accept=False) changed the state",
                    "select the old state where accept is False (e.g. jnp.where(accept, new, "
                    "old) on every leaf)",
                )
                computed_at = (x, new_state)  # the engine resets the state `compute` returned
                x, state = _advance(direction, new_state, x, grad, d, a, b, dtype, jnp.array(True))
                _require(
                    _avals(state) == started,
                    who,
                    "state structure: `update` changed the state's structure, shapes, dtypes or "
                    f"weak types ({_avals(state)} != {started})",
                    "cast every updated leaf to the dtype `init` gave it",
                )
                if k == 0:
                    first = len(compiles)
            _require(
                len(compiles) == first,
                who,
                f"one compile: later steps compiled {len(compiles) - first} more programs "
                "(the state holds Python numbers, or changed avals)",
                "make every leaf of the state a JAX array of fixed dtype (no Python numbers)",
            )
        # `reset` restarts: where a fresh state gives steepest descent at g, so does the state
        # `compute` returned at g once reset (as the engine resets it when d is no descent).
        x, computed = computed_at
        reset, replaced = _reset_and_replaced(direction, computed)
        grad, d, *_ = _compute(direction, direction.init(x, dtype), x, a, b, dtype)
        if _cosine(grad, d) < -1 + 1e-3:
            grad, d, *_ = _compute(direction, reset, x, a, b, dtype)
            cos = _cosine(grad, d)
            _require(
                cos < -1 + 1e-3,
                who,
                "reset: after `reset`, compute must give steepest descent (a positive multiple "
                f"of -g) as it does from `init` at the same point; cos(g, d) = {cos:.6f}",
                "forget every accumulated curvature pair or memory in `reset`",
            )
        _require(
            _avals(reset) == started and _avals(replaced) == started,
            who,
            "state structure: `reset` or `gradient_replaced` changed the state's avals",
            "return a state of the same structure and dtypes",
        )


@eqx.filter_jit
def _reset_and_replaced(direction, state):
    return direction.reset(state), direction.gradient_replaced(state)


# ------------------------------------------------------------ least-squares directions


def _residual_problems(n: int, seed: int):
    """(name, A, b, curvature) in float64: r(x) = A x - b + curvature * (A x)^2 / 2 with A of
    n + 4 rows (condition number about 30); b = A x* for the consistent linear problem."""
    rng = np.random.default_rng(seed)
    m = n + 4
    u, _ = np.linalg.qr(rng.normal(size=(m, n)))
    v, _ = np.linalg.qr(rng.normal(size=(n, n)))
    a = u @ np.diag(np.geomspace(1.0, 1 / 30, n)) @ v.T
    return [
        ("consistent linear", a, a @ rng.normal(size=n), 0.0),
        ("inconsistent linear", a, rng.normal(size=m), 0.0),
        ("nonlinear", a, rng.normal(size=m), 0.5),
    ]


def _residuals(x, a, b, curvature, dtype):
    """r(x) in `dtype` (see `_residual_problems`)."""
    ax = a @ _flat(x, dtype)
    return ax - b + curvature * ax * ax / 2


def _objective(x, a, b, curvature, dtype):
    r = _residuals(x, a, b, curvature, dtype)
    return jnp.dot(r, r) / 2


@eqx.filter_jit
def _compute_residuals(direction, state, x, a, b, curvature, dtype):
    gradient = jax.grad(_objective)
    grad = gradient(x, a, b, curvature, dtype)  # J'r, in each leaf's dtype

    def hvp(v):  # of f = 0.5 |r|^2, forward over reverse, as the solver's
        return jax.jvp(lambda p: gradient(p, a, b, curvature, dtype), (x,), (v,))[1]

    def residuals(p):
        return _residuals(p, a, b, curvature, dtype)

    info = DirectionInfo(x, grad, dtype, hvp, residuals=residuals)
    d, scaled, state, limit = direction.compute(state, info)
    return _objective(x, a, b, curvature, dtype), grad, d, scaled, state, limit


@eqx.filter_jit
def _advance_residuals(direction, state, x, grad, d, a, b, curvature, dtype, accept):
    """The first of t = 1, 1/2, ..., 2^-30 that lowers f along d (else t = 0), then `update`
    with that step's (s, y)."""
    f0 = _objective(x, a, b, curvature, dtype)

    def moved(t):
        def shift(u, p):
            wide = at_least_float32(widest_float(u.dtype, t.dtype))
            return (u.astype(wide) + t.astype(wide) * p.astype(wide)).astype(u.dtype)

        return jax.tree.map(shift, x, d)

    def higher(t):
        return (t > 0) & ~(_objective(moved(t), a, b, curvature, dtype) < f0)

    t = jax.lax.while_loop(higher, lambda t: jnp.where(t > 2.0**-30, t / 2, 0), jnp.ones((), dtype))
    x_new = moved(t)
    grad_new = jax.grad(_objective)(x_new, a, b, curvature, dtype)

    def sub(u, v):
        wide = at_least_float32(widest_float(u.dtype, v.dtype))
        return u.astype(wide) - v.astype(wide)

    s, y = jax.tree.map(sub, x_new, x), jax.tree.map(sub, grad_new, grad)
    return x_new, direction.update(state, s, y, dtype, accept=accept)


def _host(x) -> np.ndarray:
    return np.asarray(x, np.float64)


def _check_least_squares_at(direction: AbstractDirection, name, x64, params, seed) -> None:
    who = f"{type(direction).__name__} ({name} params)"
    narrowest = max(float(jnp.finfo(leaf.dtype).eps) for leaf in jax.tree.leaves(params))
    with _precision(x64 or np.float32):
        dtype = np.dtype(np.float64 if x64 else np.float32)
        x0 = jax.tree.map(jnp.asarray, params)
        n = sum(leaf.size for leaf in jax.tree.leaves(x0))
        started = _avals(direction.init(x0, dtype))
        first: int | None = None
        allowed = 0
        with _counting_compiles() as compiles:
            for problem, a64, b64, curvature in _residual_problems(n, seed):
                who_here = f"{who} on a {problem} residual problem"
                a, b = jnp.asarray(a64, dtype), jnp.asarray(b64, dtype)
                c = jnp.asarray(curvature, dtype)
                x, state = x0, direction.init(x0, dtype)
                first_grad = None
                for k in range(3):
                    _, grad, d, scaled, new_state, limit = _compute_residuals(
                        direction, state, x, a, b, c, dtype
                    )
                    _check_outputs(who_here, grad, d, scaled, limit)
                    size = max(float(np.max(np.abs(_host(g)))) for g in jax.tree.leaves(grad))
                    first_grad = size if first_grad is None else first_grad
                    if size > 50 * narrowest * first_grad:  # not lost in the params' rounding
                        cos = _cosine(grad, d)
                        _require(
                            cos < 0,
                            who_here,
                            f"descent: d is not a descent direction of 0.5 |r|^2 at step {k} "
                            f"(cos(J'r, d) = {cos:.3g})",
                            "return d with <J'r, d> < 0 (e.g. a solution of a damped or "
                            "least-squares system J d = -r)",
                        )
                    _require(
                        _avals(new_state) == started,
                        who_here,
                        "state structure: `compute` changed the state's structure, shapes, "
                        "dtypes or weak types",
                        "give every leaf of `init`'s state an explicit dtype and keep it",
                    )
                    kept = _advance_residuals(
                        direction, new_state, x, grad, d, a, b, c, dtype, jnp.array(False)
                    )[1]
                    _require(
                        _same(kept, new_state),
                        who_here,
                        "update(accept=False) changed the state",
                        "select the old state where accept is False (e.g. jnp.where(accept, "
                        "new, old) on every leaf)",
                    )
                    computed_at = (x, new_state, d)
                    x, state = _advance_residuals(
                        direction, new_state, x, grad, d, a, b, c, dtype, jnp.array(True)
                    )
                    _require(
                        _avals(state) == started,
                        who_here,
                        "state structure: `update` changed the state's structure, shapes, "
                        f"dtypes or weak types ({_avals(state)} != {started})",
                        "cast every updated leaf to the dtype `init` gave it",
                    )
                    if first is None:  # every later step, on every problem, reuses its programs
                        first = len(compiles)
                # `reset` forgets: at the last point, compute from the reset state gives the d
                # that compute from `init`'s state gives there. (Its programs, new on the
                # first problem, are not counted against the steps.)
                before = len(compiles)
                at, computed, _ = computed_at
                reset, replaced = _reset_and_replaced(direction, computed)
                _require(
                    _avals(reset) == started and _avals(replaced) == started,
                    who_here,
                    "state structure: `reset` or `gradient_replaced` changed the state's avals",
                    "return a state of the same structure and dtypes",
                )
                fresh = _compute_residuals(direction, direction.init(x0, dtype), at, a, b, c, dtype)
                again = _compute_residuals(direction, reset, at, a, b, c, dtype)
                gap = max(
                    float(np.max(np.abs(_host(u) - _host(v))) / (np.max(np.abs(_host(u))) + 1e-30))
                    for u, v in zip(
                        jax.tree.leaves(fresh[2]), jax.tree.leaves(again[2]), strict=True
                    )
                )
                _require(
                    gap <= 1e-3,
                    who_here,
                    "reset: after `reset`, compute must give the d that compute gives from "
                    f"`init`'s state at the same point (relative difference {gap:.3g})",
                    "forget every accumulated quantity (damping, radius, memory) in `reset`",
                )
                allowed += len(compiles) - before
            more = len(compiles) - allowed - (first or 0)
            _require(
                more == 0,
                who,
                f"one compile: later steps and problems compiled {more} more "
                "programs (the state holds Python numbers, or changed avals)",
                "make every leaf of the state a JAX array of fixed dtype (no Python numbers)",
            )


def _check_outputs(who: str, grad, d, scaled, limit) -> None:
    """What `compute` returns without bounds: d shaped as the gradient, a 0-d boolean
    `scaled`, and an infinite limit."""
    _require(
        _avals(d) == _avals(grad),
        who,
        "direction structure: d must have the structure, shapes and dtypes of "
        f"info.grad ({_avals(d)} != {_avals(grad)})",
        "cast each leaf of d to its gradient leaf's dtype",
    )
    _require(
        jnp.asarray(scaled).dtype == jnp.bool_ and jnp.asarray(scaled).shape == (),
        who,
        "`scaled` must be a 0-d boolean array",
        "return jnp.array(True) or jnp.array(False) (or a traced bool)",
    )
    _require(
        float(limit) == math.inf,
        who,
        f"limit: without bounds the limit must be +inf, got {float(limit)}",
        "return `no_limit(info.dtype)`-like +inf without `info.box`",
    )


def check_direction(direction: AbstractDirection) -> None:
    """Check `direction` against what the solver relies on (see `AbstractDirection`); raise
    an AssertionError naming the first property that fails and how to fix it.

    On random SPD quadratics of 6 unknowns (condition number 100) with float16, bfloat16,
    float32, float64 and mixed (bfloat16 and float32) params, four steps each with the exact
    step along d:

    - d has the structure, shapes and dtypes of the gradient; `scaled` is a 0-d bool; the
      limit is +inf without bounds;
    - d is a descent direction, <g, d> < 0, at every step;
    - the state keeps the structure, shapes, dtypes and weak types of `init`'s through
      `compute`, `update`, `reset` and `gradient_replaced`, and later steps compile nothing;
    - `update(..., accept=False)` returns the state unchanged;
    - where `compute` from `init`'s state gives steepest descent at g, so does `compute` at g
      from `reset` of the state `compute` returned there (the engine resets that state when
      d is not a descent direction, and steps along -g).

    A least-squares direction (an `AbstractLeastSquares`) is checked instead on residual
    problems r(x) = A x - b + c (A x)^2 / 2 (A of n + 4 rows, condition number about 30): a
    consistent linear one (b = A x*, c = 0), an inconsistent linear one and a nonlinear one
    (c = 1/2), three steps each, with `DirectionInfo(x, J'r, dtype, hvp, residuals=r)` as the
    solver passes it and the first of t = 1, 1/2, 1/4, ... that lowers f = 0.5 |r|^2, in the
    same five params dtypes. The same properties hold, but for two: descent <J'r, d> < 0 is
    asked only where |J'r| is above 50 times the params' machine epsilon relative to its
    first value (below, d is lost in their rounding); and after `reset` at a point, `compute`
    must give the d (within 1e-3, relative) that it gives there from `init`'s state.
    """
    who = type(direction).__name__
    _require(
        isinstance(direction, AbstractDirection),
        who,
        "not an AbstractDirection",
        "subclass jaxsearch.AbstractDirection",
    )
    _require(
        isinstance(direction.supports_bounds, bool),
        who,
        "supports_bounds must be a Python bool",
        "declare `supports_bounds: ClassVar[bool] = False` (or True)",
    )
    check = (
        _check_least_squares_at
        if isinstance(direction, AbstractLeastSquares)
        else _check_direction_at
    )
    for seed, (name, x64, params) in enumerate(_param_cases()):
        check(direction, name, x64, params, seed)
