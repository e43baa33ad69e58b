"""What a call sets up on the host before its program runs: the call's box and its one line
search (`line_search`: the bounded one where there are bounds), and the solver state, built
for that search (`init`, `initial_state`, the program of a fresh run's state), resumed, or checked
against the solver and params (`check_state`).
"""

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
from jaxtyping import PyTree

from . import _evaluate
from ._box import Box, check_order
from ._complex import OnRealView, RealView, check_complex, real_params
from ._inputs import (
    check_fits,
    check_is_state,
    check_params,
    floating_dtype,
    misfit,
    partition,
)
from ._linesearch import AbstractLineSearch
from ._misc import (
    at_least_float32,
    leaves,
    scalar,
    tree_zeros_like,
    widest_float,
)
from ._objective import Objective
from ._state import BestPoint, SolverState, fingerprint_dtype
from ._status import SearchEnd, Status

_replace = dataclasses.replace


# ------------------------------------------------------------------ the call's box and search


def make_box(solver, bounds, params) -> Box | None:
    """The `Box` of `bounds` for the floating leaves of params (None: no bounds), after
    checking that the solver's direction can honour them and, when concrete, their order."""
    if bounds is None:
        return None
    if not solver.direction.supports_bounds:
        raise TypeError(
            f"{type(solver.direction).__name__} cannot honour bounds: use js.LBFGS() "
            "(L-BFGS-B; the default direction) or js.Gradient() (projected gradient)."
        )
    diff, _ = partition(params)
    box = Box.from_bounds(bounds, diff)
    check_order(box)
    return box


def line_search(solver, box: Box | None) -> AbstractLineSearch:
    """The one line search of a call: the solver's bounded one where there is a box."""
    return solver.linesearch if box is None else solver.bounded_linesearch


# ------------------------------------------------------------------------------ the state


class Call(NamedTuple):
    """A call of `run` or `init` once `prepare` has checked it: fn, params and args as the
    call's programs take them (complex params as their real view, fn on it), the call's box
    and its one line search, and the `RealView` that turns the result back (None: real)."""

    fn: Callable | None
    params: PyTree
    args: tuple
    box: Box | None
    search: AbstractLineSearch
    view: RealView | None


def prepare(solver, fn, x0, args: tuple, bounds) -> Call:
    """The host side of a call, in one pass down: x0 checked before fn is traced (fn would
    fail first on a Python number, or a list of them), complex params as their real view
    (`_complex`: refused with bounds, or with fn's own gradient), then the box (None: no
    bounds) and the line search for it."""
    check_params(x0)
    view = check_complex(solver, x0, bounds)
    if view is not None:
        fn = None if fn is None else OnRealView(fn, view)
        x0 = real_params(view, x0)
    box = make_box(solver, bounds, x0)
    return Call(fn, x0, args, box, line_search(solver, box), view)


def init(solver, params, value_dtype, fn, args: tuple, bounds) -> SolverState:
    """`Solver.init`: the call prepared (`prepare`), the state built for its line search."""
    call = prepare(solver, fn, params, args, bounds)
    diff = partition(call.params)[0]
    objective = None if call.fn is None else Objective.of(solver, call.fn)
    return initial_state(solver, call.search, call.params, diff, value_dtype, objective, args)


def initial_state(solver, search, params, diff, value_dtype, objective, args: tuple):
    """The state `init` gives for params (with floating leaves `diff`) and `search`, its
    value dtype as `Solver.init` says; the `Objective`, when given (None: no fn), is traced
    for its value and aux."""
    out = None
    if objective is not None:
        out = eqx.filter_eval_shape(lambda p: objective.value_and_aux(p, args), params)
    elif solver.has_aux:
        raise TypeError("Solver(has_aux=True).init needs `fn=` to learn the structure of aux.")
    if value_dtype is None:
        if out is not None:
            value_dtype = out[0].dtype
        else:
            value_dtype = widest_float(*(x.dtype for x in leaves(diff)), jnp.float32)
    value_dtype = jnp.dtype(floating_dtype(value_dtype, "value_dtype"))
    aux_shapes = None
    if solver.has_aux:
        assert out is not None  # has_aux without fn raised above
        # Aux leaves become arrays (a Python number too), zero until fn is evaluated.
        aux_shapes = jtu.tree_map(
            lambda a: jax.ShapeDtypeStruct(
                jnp.shape(a), jax.dtypes.canonicalize_dtype(jnp.result_type(a))
            ),
            out[1],
        )
    return build_state(solver, search, diff, value_dtype, aux_shapes)


@eqx.filter_jit
def build_state(solver, search, diff, value_dtype, aux_shapes) -> SolverState:
    """Every leaf of a fresh state. One compiled program builds them all: built eagerly, each
    new shape of a leaf would compile a program of its own, about ten for a first `init`."""
    dtype = at_least_float32(value_dtype)
    aux = None
    if aux_shapes is not None:
        aux = jtu.tree_map(lambda a: jnp.zeros(a.shape, a.dtype), aux_shapes)
    best = None
    if solver.return_best and not search.monotone:
        best = BestPoint(
            value=scalar(jnp.inf, value_dtype),
            params=tree_zeros_like(diff),
            grad=tree_zeros_like(diff),
            aux=jtu.tree_map(jnp.zeros_like, aux),
            start_value=scalar(jnp.inf, value_dtype),
        )
    return SolverState(
        value=scalar(jnp.inf, value_dtype),
        grad=tree_zeros_like(diff),
        aux=aux,
        has_eval=jnp.array(False),
        direction=solver.direction.init(diff, dtype),
        linesearch=search.init(dtype),
        prev_decrease=scalar(jnp.nan, dtype),
        prev_value=scalar(jnp.nan, dtype),
        initial_step=solver.initial_step.init(dtype),
        step_size=scalar(0, dtype),
        num_steps=scalar(0, jnp.int32),
        num_fun_evals=scalar(0, jnp.int32),
        num_grad_evals=scalar(0, jnp.int32),
        num_replaced=scalar(0, jnp.int32),
        search_end=scalar(SearchEnd.NOT_SEARCHED, jnp.int32),
        status=scalar(Status.RUNNING, jnp.int32),
        best=best,
        steps_since_best=scalar(0, jnp.int32),
        lowest_grad_norm=scalar(jnp.inf, dtype),
        fingerprint=jnp.zeros(2, fingerprint_dtype(diff)),
        num_foreign_params=scalar(0, jnp.int32),
    )


def check_state(
    solver, search, state, params, diff, objective, args: tuple, *, bounded: bool
) -> None:
    """Raise unless `state` is a `SolverState` with the structure, shapes and dtypes of the
    state `init` gives for params, fn, args and `search` with the state's own value dtype (so
    a value dtype other than params' fits): a TypeError that names the first leaf or node
    that differs, what it is and what the solver and params give; a state made with bounds
    for a call without them (`bounded` False), or the reverse, is said so. `run`, `step` and
    the optax update call it while they are traced: it costs nothing per call."""
    check_is_state(state)
    value_dtype = jnp.result_type(state.value)
    expected = jax.eval_shape(
        lambda: initial_state(solver, search, params, diff, value_dtype, objective, args)
    )
    if solver.linesearch is not solver.bounded_linesearch:
        other = solver.linesearch if bounded else solver.bounded_linesearch
        made_for_other = jax.eval_shape(lambda: other.init(at_least_float32(value_dtype)))
        if (
            misfit(state.linesearch, expected.linesearch, "") is not None
            and misfit(state.linesearch, made_for_other, "") is None
        ):
            given, made = ("with", "without") if bounded else ("without", "with")
            raise TypeError(
                f"step was called {given} bounds on a state that init made {made} them; "
                "with bounds the default line search is another one (L-BFGS-B's): pass "
                "the same bounds to init and step."
            )
    check_fits(state, expected, "state")


def resumed_state(state, value_dtype) -> SolverState:
    """`state`, checked to be a `SolverState` of the value dtype asked for, with its leaves
    as arrays (NumPy leaves, of a checkpoint say, become new device buffers)."""
    check_is_state(state)
    if value_dtype is not None and jnp.dtype(value_dtype) != state.value.dtype:
        raise TypeError(
            f"value_dtype {jnp.dtype(value_dtype)} differs from the state's value dtype "
            f"{state.value.dtype}: a resumed run keeps the state's."
        )
    if all(isinstance(leaf, jax.Array) for leaf in leaves(state)):
        return state
    return jax.tree.map(jnp.asarray, state)


def fresh_state(solver, search, fn, x0, args, value_dtype) -> SolverState:
    """The compiled program of a fresh run's state."""
    objective = Objective.of(solver, _evaluate.TracedOnce(fn, x0, *args))  # the run's trace
    return initial_state(solver, search, x0, partition(x0)[0], value_dtype, objective, args)
