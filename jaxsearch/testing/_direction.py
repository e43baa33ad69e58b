"""The conformance kit for a direction, least-squares directions included: `check_direction`."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import PyTree

from .._contract import same_avals
from .._direction import AbstractDirection, AbstractLeastSquares, DirectionInfo
from .._misc import at_least_float32, widest_float
from ._common import abstract_values, contract, counting_compiles, param_cases, require, scoped_x64


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
    s, y = _pair(x_new, x, grad_new, grad)
    return x_new, direction.update(state, s, y, dtype, accept=accept)


def _pair(x_new, x, grad_new, grad):
    """(s, y) = (x_new - x, grad_new - grad), each leaf in at least float32."""

    def sub(u, v):
        wide = at_least_float32(widest_float(u.dtype, v.dtype))
        return u.astype(wide) - v.astype(wide)

    return jax.tree.map(sub, x_new, x), jax.tree.map(sub, grad_new, grad)


def _require_kept(who: str, kept, state) -> None:
    require(
        _same(kept, state),
        who,
        "update(accept=False) changed the state",
        "select the old state where accept is False (e.g. jnp.where(accept, new, old) on every "
        "leaf)",
    )


def _require_no_compile(who: str, more: int, what: str) -> None:
    require(
        more == 0,
        who,
        f"one compile: {what} compiled {more} more programs (the state holds Python numbers, "
        "or changed avals)",
        "make every leaf of the state a JAX array of fixed dtype (no Python numbers)",
    )


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
    with scoped_x64(x64 or np.float32):
        x = jax.tree.map(jnp.asarray, params)
        dtype = np.dtype(np.float64 if x64 else np.float32)
        n = sum(leaf.size for leaf in jax.tree.leaves(x))
        a64, b64 = _quadratic_problem(n, seed)
        a, b = jnp.asarray(a64, dtype), jnp.asarray(b64, dtype)
        state = initial = direction.init(x, dtype)
        with counting_compiles() as compiles:
            for k in range(4):
                grad, d, scaled, new_state, limit = _compute(direction, state, x, a, b, dtype)
                _check_outputs(who, grad, d, scaled, limit)
                cos = _cosine(grad, d)
                require(
                    cos < 0,
                    who,
                    f"descent: d is not a descent direction at step {k} on a random SPD "
                    f"quadratic (cos(g, d) = {cos:.3g})",
                    "return d with <g, d> < 0 (keep the curvature pairs you use with s'y > 0)",
                )
                with contract(name + " params"):
                    same_avals(direction, "compute", initial, new_state, "state")
                kept = _advance(direction, new_state, x, grad, d, a, b, dtype, jnp.array(False))[1]
                _require_kept(who, kept, new_state)
                computed_at = (x, new_state)  # the engine resets the state `compute` returned
                x, state = _advance(direction, new_state, x, grad, d, a, b, dtype, jnp.array(True))
                with contract(name + " params"):
                    same_avals(direction, "update", initial, state, "state")
                if k == 0:
                    first = len(compiles)
            _require_no_compile(who, len(compiles) - first, "later steps")
        # `reset` forgets: compute at g from the reset state is compute from `init`'s.
        x, computed = computed_at
        reset, replaced = _reset_and_replaced(direction, computed)
        with contract(name + " params"):
            same_avals(direction, "reset", initial, reset, "state")
            same_avals(direction, "gradient_replaced", initial, replaced, "state")
        grad, fresh, *_ = _compute(direction, direction.init(x, dtype), x, a, b, dtype)
        d = _compute(direction, reset, x, a, b, dtype)[1]
        _check_reset(who, grad, fresh, d)


def _multiple(grad: PyTree, d: PyTree) -> tuple[bool, float]:
    """Whether d = -c g for one c > 0, each element within two roundings of its leaf's dtype and the
    most precise leaf's (where c is read off); and the largest relative difference from -c g (inf
    where d is 0 or not finite off g's zeros)."""
    leaves = [
        (np.asarray(g, np.float64).ravel(), np.asarray(p, np.float64).ravel(), _eps(g))
        for g, p in zip(jax.tree.leaves(grad), jax.tree.leaves(d), strict=True)
    ]
    if any(np.any(p[g == 0] != 0) or not np.all(np.isfinite(p)) for g, p, _ in leaves):
        return False, math.inf
    g, p, eps_ref = min(leaves, key=lambda leaf: leaf[2])
    ratios = -p[g != 0] / g[g != 0]
    c = float(np.median(ratios)) if ratios.size else 1.0
    if c <= 0:
        return False, math.inf
    gaps = [(np.abs(-p[g != 0] / g[g != 0] - c) / c, eps) for g, p, eps in leaves]
    ok = all(np.all(gap <= 2 * (eps + eps_ref)) for gap, eps in gaps)
    return ok, max((float(np.max(gap, initial=0.0)) for gap, _ in gaps), default=0.0)


def _eps(x) -> float:
    return float(jnp.finfo(x.dtype).eps)


def _diagonal(grad: PyTree, d: PyTree) -> bool:
    """Whether d = -P g for a positive diagonal P: each element of d of the sign of -g, and 0
    where g is 0."""
    return all(
        np.array_equal(np.sign(np.asarray(p, np.float64)), -np.sign(np.asarray(g, np.float64)))
        for g, p in zip(jax.tree.leaves(grad), jax.tree.leaves(d), strict=True)
    )


def _check_reset(who: str, grad: PyTree, fresh: PyTree, d: PyTree) -> None:
    """d, from `reset`'s state at g, is `fresh`, from `init`'s, up to what a reset may keep."""
    if _same(fresh, d):
        return
    fix = (
        "forget in `reset` every pair, momentum or memory of earlier steps (a scale such as "
        "L-BFGS's gamma, or a diagonal preconditioner, may be kept)"
    )
    if _multiple(grad, fresh)[0]:
        ok, gap = _multiple(grad, d)
        require(
            ok,
            who,
            "reset: from `init`'s state `compute` gives steepest descent, a positive multiple "
            "of -g; from the state after `reset` at the same point it must too, to the rounding "
            f"of each element, but an element of d is {gap:.2g} (relative) off -c g",
            fix,
        )
    else:
        require(
            _diagonal(grad, d),
            who,
            "reset: after `reset`, `compute` gives neither the d it gives from `init`'s state "
            "at the same point nor a positive diagonal scaling of -g (a kept preconditioner): "
            f"cos(g, d) = {_cosine(grad, d):.7f}",
            fix,
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
    s, y = _pair(x_new, x, grad_new, grad)
    return x_new, direction.update(state, s, y, dtype, accept=accept)


def _host(x) -> np.ndarray:
    return np.asarray(x, np.float64)


def _check_least_squares_at(direction: AbstractDirection, name, x64, params, seed) -> None:
    who = f"{type(direction).__name__} ({name} params)"
    narrowest = max(float(jnp.finfo(leaf.dtype).eps) for leaf in jax.tree.leaves(params))
    with scoped_x64(x64 or np.float32):
        dtype = np.dtype(np.float64 if x64 else np.float32)
        x0 = jax.tree.map(jnp.asarray, params)
        n = sum(leaf.size for leaf in jax.tree.leaves(x0))
        initial = direction.init(x0, dtype)
        first: int | None = None
        allowed = 0
        with counting_compiles() as compiles:
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
                        require(
                            cos < 0,
                            who_here,
                            f"descent: d is not a descent direction of 0.5 |r|^2 at step {k} "
                            f"(cos(J'r, d) = {cos:.3g})",
                            "return d with <J'r, d> < 0 (e.g. a solution of a damped or "
                            "least-squares system J d = -r)",
                        )
                    with contract(f"{name} params, {problem}"):
                        same_avals(direction, "compute", initial, new_state, "state")
                    kept = _advance_residuals(
                        direction, new_state, x, grad, d, a, b, c, dtype, jnp.array(False)
                    )[1]
                    _require_kept(who_here, kept, new_state)
                    computed_at = (x, new_state, d)
                    x, state = _advance_residuals(
                        direction, new_state, x, grad, d, a, b, c, dtype, jnp.array(True)
                    )
                    with contract(f"{name} params, {problem}"):
                        same_avals(direction, "update", initial, state, "state")
                    if first is None:  # every later step, on every problem, reuses its programs
                        first = len(compiles)
                # `reset` forgets: at the last point, compute from the reset state gives compute
                # from `init`'s (its programs, new, are not counted against the steps).
                before = len(compiles)
                at, computed, _ = computed_at
                reset, replaced = _reset_and_replaced(direction, computed)
                with contract(f"{name} params, {problem}"):
                    same_avals(direction, "reset", initial, reset, "state")
                    same_avals(direction, "gradient_replaced", initial, replaced, "state")
                fresh = _compute_residuals(direction, direction.init(x0, dtype), at, a, b, c, dtype)
                again = _compute_residuals(direction, reset, at, a, b, c, dtype)
                gap = max(
                    float(np.max(np.abs(_host(u) - _host(v))) / (np.max(np.abs(_host(u))) + 1e-30))
                    for u, v in zip(
                        jax.tree.leaves(fresh[2]), jax.tree.leaves(again[2]), strict=True
                    )
                )
                require(
                    _same(fresh[2], again[2]),
                    who_here,
                    "reset: after `reset`, compute must give the d that compute gives from "
                    f"`init`'s state at the same point, bit for bit (relative difference "
                    f"{gap:.3g})",
                    "forget every accumulated quantity (damping, radius, memory) in `reset`",
                )
                allowed += len(compiles) - before
            more = len(compiles) - allowed - (first or 0)
            _require_no_compile(who, more, "later steps and problems")


def _check_outputs(who: str, grad, d, scaled, limit) -> None:
    """What `compute` returns without bounds: d shaped as the gradient, a 0-d boolean
    `scaled`, and an infinite limit."""
    require(
        abstract_values(d) == abstract_values(grad),
        who,
        "direction structure: d must have the structure, shapes and dtypes of "
        f"info.grad ({abstract_values(d)} != {abstract_values(grad)})",
        "cast each leaf of d to its gradient leaf's dtype",
    )
    require(
        jnp.asarray(scaled).dtype == jnp.bool_ and jnp.asarray(scaled).shape == (),
        who,
        "`scaled` must be a 0-d boolean array",
        "return jnp.array(True) or jnp.array(False) (or a traced bool)",
    )
    require(
        float(limit) == math.inf,
        who,
        f"limit: without bounds the limit must be +inf, got {float(limit)}",
        "return `no_limit(info.dtype)`-like +inf without `info.box`",
    )


def check_direction(direction: AbstractDirection) -> None:
    """Check `direction` against what the solver relies on (`AbstractDirection`); raise an
    AssertionError naming the first property that fails and how to fix it. On random SPD
    quadratics of 6 unknowns (condition number 100), with float16, bfloat16, float32, float64 and
    mixed params, four exact steps along d:

    - d is shaped as the gradient, `scaled` a 0-d bool, the limit +inf without bounds; <g, d> < 0
      at every step;
    - the state keeps `init`'s structure, shapes, dtypes and weak types through `compute`,
      `update`, `reset` and `gradient_replaced` (a failure names the member and field), later
      steps compile nothing, and `update(..., accept=False)` changes nothing;
    - `compute` after `reset` gives `init`'s d, up to what `AbstractDirection.reset` lets a reset
      keep: a positive multiple of -g (each element within two roundings) where `init`'s d is
      one, else a positive diagonal scaling of -g.

    An `AbstractLeastSquares` is checked on r(x) = A x - b + c (A x)^2 / 2 (A of n + 4 rows,
    condition number about 30) instead: consistent and inconsistent linear and nonlinear (c =
    1/2), three steps each with `DirectionInfo(x, J'r, dtype, hvp, residuals=r)` and the first of
    t = 1, 1/2, ... lowering f; descent is asked only where |J'r| is above 50 eps of its first
    value, and d after `reset` must be `init`'s bit for bit.
    """
    who = type(direction).__name__
    require(
        isinstance(direction, AbstractDirection),
        who,
        "not an AbstractDirection",
        "subclass jaxsearch.AbstractDirection",
    )
    require(
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
    for seed, (name, x64, params) in enumerate(param_cases()):
        check(direction, name, x64, params, seed)
