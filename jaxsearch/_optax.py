"""A solver as an optax gradient transformation that honours optax's line-search contract."""

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Int, PyTree, Scalar

from . import _traced
from ._compile import dispatch, plan
from ._inputs import partition
from ._misc import select, tree_cast_like, tree_equal, tree_inf_norm, tree_norm
from ._state import BestPoint, SolverState, check_state, fingerprint


class OptaxState(NamedTuple):
    """The state of `Solver.as_optax()`, laid out for optax's lookups by name: `value`, `grad`, f
    and its gradient at the params the last update led to (inf and zeros before the first), which
    `optax.value_and_grad_from_state` returns instead of evaluating (`value` is inf after every
    update of a search that `evaluates_each_step`: they are on the last batch); `solver`, the
    rest of the solver's state (its `grad` None, kept once above); `count`, updates made (int32,
    saturating), as optax's states count them, also those that took no step (`solver.num_steps`
    counts the steps that searched). `optax.tree.get` matches keys only among NamedTuple fields
    and dict keys and raises on two; `solver`'s parts are Equinox modules (L-BFGS has a `count`),
    so the three are found once, here, unless params hold such a key (as in `optax.lbfgs()`'s
    state)."""

    value: Scalar
    grad: PyTree
    solver: SolverState
    # The name optax's states and loops use; as a field it hides the method tuple.count.
    count: Int[Array, ""]  # type: ignore[assignment]


class _WithKeywords(eqx.Module):
    """fn(params, **kwargs) called as fn(params, kwargs): optax passes data as keywords."""

    fn: Callable = eqx.field(static=True)

    def __call__(self, params, kwargs):
        return self.fn(params, **kwargs)


def _split(state: SolverState, count: Int[Array, ""], fresh: bool = False) -> OptaxState:
    """The optax state of `state`; `fresh`: its value is not the next update's (a search evaluating
    each step on its batch), so `value` is inf and `optax.value_and_grad_from_state` evaluates
    anew."""
    value = jnp.full_like(state.value, jnp.inf) if fresh else state.value
    return OptaxState(value, state.grad, dataclasses.replace(state, grad=None), count)


@jax.jit
def _increment(count: Int[Array, ""]) -> Int[Array, ""]:
    """count + 1, saturating at the int32 maximum (one compiled program for eager updates)."""
    return jnp.where(count < np.iinfo(np.int32).max, count + 1, count)


def _restart_best(state: SolverState, x: PyTree, value, grad, norm: str) -> SolverState:
    """`state` with its record of progress (best point, least gradient norm, steps without progress)
    restarted at (x, value, grad) where `value` is not the cached one: the objective changed, as
    after `Solver.reevaluate`. `norm`: `gtol_norm`."""
    fresh = value != state.value
    best = state.best
    if best is not None:
        x = tree_cast_like(x, best.params)
        best = select(fresh, BestPoint(value, x, grad, best.aux, value), best)
    since = jnp.where(fresh, 0, state.steps_since_best).astype(state.steps_since_best.dtype)
    measure = tree_inf_norm if norm == "inf" else tree_norm
    lowest = jnp.where(fresh, measure(grad, state.lowest_grad_norm.dtype), state.lowest_grad_norm)
    return dataclasses.replace(state, best=best, steps_since_best=since, lowest_grad_norm=lowest)


def _update(solver, fn: _WithKeywords, params, state: OptaxState, value, grad, extra_args):
    """`update` once its arguments are checked: one `step`, after `value` and `grad` (when given)
    replace the cached ones."""
    st = dataclasses.replace(state.solver, grad=state.grad)
    search = solver.linesearch  # the transformation takes no bounds
    check_state(solver, search, st, params, partition(params)[0], None, (), bounded=False)
    if value is not None:  # f and its gradient at params, e.g. from value_and_grad_from_state
        value = jnp.asarray(value).astype(st.value.dtype)
        grad = tree_cast_like(eqx.filter(grad, eqx.is_inexact_array), st.grad)
        # A value other than the cached one: the objective changed (a new batch), so the best
        # point's record starts again.
        inexact = eqx.filter(params, eqx.is_inexact_array)
        st = _restart_best(st, inexact, value, grad, solver.gtol_norm)
        kept = (value == st.value) & tree_equal(grad, st.grad)
        replaced = solver.direction.gradient_replaced(st.direction)
        direction = select(kept, st.direction, replaced)
        # New ones are at params; the cached ones (`value_and_grad_from_state`) belong to
        # the state's own point, which the step checks params against.
        point = select(kept, st.fingerprint, fingerprint(partition(params)[0]))
        st = dataclasses.replace(
            st,
            value=value,
            grad=grad,
            has_eval=jnp.array(True),
            direction=direction,
            fingerprint=point,
        )
    # Given f and its gradient (on this update's data), a search that evaluates each step uses them.
    new_params, st = _traced.take_step(
        solver, search, fn, params, (extra_args,), None, st, value is not None
    )
    updates = jax.tree.map(
        lambda new, old: new - old if eqx.is_inexact_array(old) else None,
        new_params,
        params,
    )
    fresh = search.evaluates_each_step
    return updates, _split(st, _increment(state.count), fresh)


def as_optax(solver) -> optax.GradientTransformationExtraArgs:
    """See `Solver.as_optax`."""
    if solver.value_and_grad:
        raise TypeError(
            "as_optax() needs a Solver with value_and_grad=False: optax's line-search "
            "contract passes `value_fn`, which returns f alone, and the transformation "
            "differentiates it at the line search's trial points. For an objective that "
            "returns its own gradient, use solver.run or solver.step."
        )

    def init(params) -> OptaxState:
        partition(params)  # refuses complex leaves, which `solver.init` would take
        # From NumPy, strongly typed int32, with nothing to compile when called eagerly.
        return _split(solver.init(params), jnp.asarray(np.zeros((), np.int32)))

    def update(
        updates,
        state,  # an OptaxState: checked below, with a message that names the mistake
        params=None,
        *,
        value=None,
        grad=None,
        value_fn: Callable[..., Any] | None = None,
        **extra_args,
    ):
        del updates  # the step comes from the solver's own direction, from `grad`
        if params is None or value_fn is None:
            raise ValueError(
                "jaxsearch's optax transformation needs `params` and `value_fn`: call "
                "update(grad, state, params, value=value, grad=grad, value_fn=fn)."
            )
        if (value is None) != (grad is None):
            raise ValueError("Pass both `value` and `grad` at params, or neither.")
        if not isinstance(state, OptaxState):
            raise TypeError(
                "state must be the state of this transformation (its `init`'s, or the one "
                f"`update` returned), got {type(state).__name__}."
            )
        # One compiled program (eager updates too): the state is checked while it is traced.
        fn = _WithKeywords(value_fn)
        arguments = (solver, fn, params, state, value, grad, extra_args)
        chosen = plan("update", solver, fn, params, (extra_args,)).options
        return dispatch(_update, arguments, plain=False, static=(), donate=False, options=chosen)

    return optax.GradientTransformationExtraArgs(init, update)
