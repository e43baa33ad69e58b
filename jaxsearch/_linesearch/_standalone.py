"""A line search by itself (`AbstractLineSearch.run`), as jaxopt's `ls.run` and scipy's
`line_search`."""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Bool, Int, PyTree, Scalar

from .._evaluate import TracedOnce, check_value
from .._misc import (
    at_least_float32,
    select,
    tree_add_scaled,
    tree_dot,
    tree_min_step,
    weak_settings,
)


class LineSearchResult(eqx.Module):
    """What `search.run(fn, params, direction, ...)` returns (`AbstractLineSearch.run`).

    - `step`: the accepted step size (0: none), in the search's dtype (fn's, at least float32).
    - `params`: x + step d where a step was taken, else x.
    - `value`, `grad`: fn and its gradient at `params`, from the last evaluation.
    - `success`: a boolean array, True where the search's conditions hold at `step`; False, with
      no step, for a non-descent direction or a failed search.
    - `num_fun_evals`: evaluations of fn with its gradient this call made.
    - `state`: the search's state, for the next call's `state=`.
    """

    step: Scalar
    params: PyTree
    value: Scalar
    grad: PyTree
    success: Bool[Array, ""]
    num_fun_evals: Int[Array, ""]
    state: PyTree


class _Loop(eqx.Module):
    """The loop's carry: the search, whether it has started (phi(0) known), whether d
    descends, fn and its gradient at x (`origin_*`) and at the last evaluation (`last_*`)."""

    search: Any
    started: Bool[Array, ""]
    descent: Bool[Array, ""]
    origin_value: Scalar
    origin_grad: PyTree
    last_params: PyTree
    last_value: Scalar
    last_grad: PyTree
    evals: Int[Array, ""]


def _start(search, state, phi0, dphi0, guess, min_step, max_step):
    """(the search, whether d descends). Where not (phi'(0) >= 0 or not finite) the cap is NaN, so
    `start` ends the search with no step."""
    dtype = min_step.dtype
    descent = jnp.isfinite(phi0) & jnp.isfinite(dphi0) & (dphi0 < 0)
    cap = jnp.where(descent, jnp.inf if max_step is None else max_step, jnp.nan).astype(dtype)
    phi0, dphi0 = lax.stop_gradient((phi0, dphi0))
    return search.start(state, phi0, dphi0, guess, min_step, None, max_step=cap), descent


@eqx.filter_jit
def run_alone(search, fn, params, direction, args, value, grad, guess, max_step, state):
    """`AbstractLineSearch.run`: a `lax.while_loop`, one evaluation of fn and its gradient per
    iteration (at x first where `value` is not given, then at each trial)."""
    if (value is None) != (grad is None):
        raise ValueError("run: give both value and grad at params, or neither.")
    traced = TracedOnce(fn, params, *args)  # fn traced once, evaluated in the loop
    out = traced.jaxpr.out_avals
    if len(out) != 1:
        raise TypeError("run: fn must return a scalar (no aux).")
    check_value(out[0])
    value_dtype = out[0].dtype
    dtype = at_least_float32(value_dtype)
    search = weak_settings(search)
    state = search.init(dtype) if state is None else state
    guess = lax.stop_gradient(jnp.asarray(guess).astype(dtype))
    min_step = tree_min_step(params, direction, dtype)
    if max_step is not None:
        max_step = lax.stop_gradient(jnp.asarray(max_step).astype(dtype))

    def opened(phi0, dphi0):
        return _start(search, state, phi0, dphi0, guess, min_step, max_step)

    given = value is not None
    if given:
        value = jnp.asarray(value).astype(value_dtype)
        grad = jax.tree.map(lambda g, x: jnp.asarray(g).astype(x.dtype), grad, params)
        first, descent = opened(value.astype(dtype), tree_dot(grad, direction, dtype))
    else:  # a placeholder of the search's structure, replaced at the first evaluation
        value = jnp.zeros((), value_dtype)
        grad = jax.tree.map(jnp.zeros_like, params)
        first, descent = opened(jnp.zeros((), dtype), jnp.zeros((), dtype))
    budget = search.max_trials + (0 if given else 1)

    def cond(c: _Loop):
        return (~c.started | ~c.search.done) & (c.evals < budget)

    def body(c: _Loop):
        t = jnp.where(c.started, c.search.trial, 0).astype(dtype)
        x = select(c.started, tree_add_scaled(params, t, direction), params)
        f, g = jax.value_and_grad(traced)(x, *args)
        phi, dphi = f.astype(dtype), tree_dot(g, direction, dtype)
        begun, descends = opened(phi, dphi)
        judged = search.update(c.search, t, lax.stop_gradient(phi), lax.stop_gradient(dphi))
        return _Loop(
            search=select(c.started, judged, begun),
            started=jnp.array(True),
            descent=jnp.where(c.started, c.descent, descends),
            origin_value=jnp.where(c.started, c.origin_value, f),
            origin_grad=select(c.started, c.origin_grad, g),
            last_params=x,
            last_value=f,
            last_grad=g,
            evals=c.evals + 1,
        )

    start = _Loop(
        search=first,
        started=jnp.array(given),
        descent=descent,
        origin_value=value,
        origin_grad=grad,
        last_params=params,
        last_value=value,
        last_grad=grad,
        evals=jnp.zeros((), jnp.int32),
    )
    c = lax.while_loop(cond, body, start)
    ended = c.search
    # A search cut off at its budget takes no step; when one ends with a step, its last trial
    # (the last evaluation) was at that step.
    moved = ended.done & (ended.step > 0) & c.descent
    final = eqx.tree_at(lambda s: s.step, ended, jnp.where(ended.done, ended.step, 0))
    return LineSearchResult(
        step=jnp.where(moved, ended.step, 0).astype(dtype),
        params=select(moved, c.last_params, params),
        value=jnp.where(moved, c.last_value, c.origin_value),
        grad=select(moved, c.last_grad, c.origin_grad),
        success=moved & ended.success,
        num_fun_evals=c.evals,
        state=select(c.descent, search.finish(state, final), state),
    )
