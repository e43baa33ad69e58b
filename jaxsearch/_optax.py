"""A solver as an optax gradient transformation that honours optax's line-search contract."""

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jaxtyping import PyTree, Scalar

from ._misc import tree_cast_like
from ._state import SolverState


class OptaxState(NamedTuple):
    """`value` and `grad` are f and its gradient at the params that the last update led to
    (inf and zeros before the first), where `optax.value_and_grad_from_state` looks for them;
    `solver` is the rest of the solver's state (its `grad` is kept only here, once)."""

    value: Scalar
    grad: PyTree
    solver: SolverState


class _WithKeywords(eqx.Module):
    """fn(params, **kwargs) called as fn(params, kwargs): optax passes data as keywords."""

    fn: Callable = eqx.field(static=True)

    def __call__(self, params, kwargs):
        return self.fn(params, **kwargs)


def _split(state: SolverState) -> OptaxState:
    return OptaxState(state.value, state.grad, dataclasses.replace(state, grad=None))


def as_optax(solver) -> optax.GradientTransformationExtraArgs:
    """See `Solver.as_optax`."""

    def init(params) -> OptaxState:
        return _split(solver.init(params))

    def update(
        updates,
        state: OptaxState,
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
        st = dataclasses.replace(state.solver, grad=state.grad)
        if (value is None) != (grad is None):
            raise ValueError("Pass both `value` and `grad` at params, or neither.")
        if value is not None:  # f and its gradient at params, e.g. from value_and_grad_from_state
            st = dataclasses.replace(
                st,
                value=jnp.asarray(value).astype(st.value.dtype),
                grad=tree_cast_like(eqx.filter(grad, eqx.is_inexact_array), st.grad),
                has_eval=jnp.array(True),
            )
        new_params, st = solver.step(_WithKeywords(value_fn), params, st, extra_args)
        updates = jax.tree.map(
            lambda new, old: new - old if eqx.is_inexact_array(old) else None,
            new_params,
            params,
        )
        return updates, _split(st)

    return optax.GradientTransformationExtraArgs(init, update)
