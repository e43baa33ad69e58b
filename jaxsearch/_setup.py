"""What a call sets up on the host before its program runs: the call checked and prepared
(`prepare`), with its box and its one line search (`line_search`: the bounded one where
there are bounds), and `init`'s state for that search. The state's lifecycle (fresh,
resumed, checked) is `_state`'s.
"""

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

from jaxtyping import PyTree

from ._box import Box, check_order
from ._complex import OnRealView, RealView, check_complex, real_params
from ._inputs import (
    check_params,
    partition,
)
from ._linesearch import AbstractLineSearch
from ._objective import Objective
from ._state import SolverState, initial_state

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
