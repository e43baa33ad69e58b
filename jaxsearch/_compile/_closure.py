"""Values that fn closes over, made arguments of the run (closure conversion).

A compiled run holds fn static: what fn closes over is part of the program, a constant. A
value of an enclosing transformation that fn closes over (`lam` in `jax.grad(lambda lam:
solver.run(lambda w: f(w, lam), w0).params)`) is a tracer, not a constant: held in the
program it would lose its derivative (the adjoint differentiates the run's arguments) or be
refused by the compiler. So at the door of `run`, `step` and `batched_run`, fn is traced
once, and the tracers among the constants of its jaxpr become one more argument of the call:
`fn(params, *args)` becomes `ClosedOver(...)(params, *args, captured)`. The run then treats
them as it treats `args` in every respect: the adjoints differentiate them, `jax.vmap`
batches them, a caller's `jax.jit` passes them in. Concrete values fn closes over stay
constants of the program, as before.
"""

from collections.abc import Callable

import equinox as eqx
import jax
import jax.extend
import jax.tree_util as jtu

from .. import _evaluate
from . import _programs


class ClosedOver:
    """fn with the tracers it closed over taken out: called with them as its last
    argument, it evaluates fn's jaxpr (traced at the call's params and args) on them and on
    the array leaves of params and args; every other leaf is fixed at its traced value.
    Compared by identity (a new one per call: a run inside a trace is traced once, by its
    caller); `fn` is the user's function, for messages."""

    __slots__ = ("fn", "_jaxpr", "_consts", "_captured_at", "_out_tree", "__weakref__")

    def __init__(self, fn: Callable, traced: "_evaluate.TracedOnce", captured_at: tuple):
        self.fn = fn
        self._jaxpr = traced.jaxpr.jaxpr
        # The concrete constants; None where a tracer was, filled in at each call.
        consts = traced.jaxpr.consts
        self._consts = tuple(None if i in captured_at else c for i, c in enumerate(consts))
        self._captured_at = captured_at
        self._out_tree = traced.out_tree

    def __call__(self, params, *args_and_captured):
        *args, captured = args_and_captured
        consts = list(self._consts)
        for i, value in zip(self._captured_at, captured, strict=True):
            consts[i] = value
        dynamic, _ = eqx.partition((params, tuple(args)), eqx.is_array)
        closed = jax.extend.core.ClosedJaxpr(self._jaxpr, consts)
        out = jax.extend.core.jaxpr_as_fun(closed)(*jtu.tree_leaves(dynamic))
        return jtu.tree_unflatten(self._out_tree, out)

    def __repr__(self) -> str:
        return f"ClosedOver({self.fn!r})"


def converted(fn, params, args: tuple) -> tuple[Callable, tuple]:
    """(fn, args) of a call of fn at params and args, where fn closes over no tracer; else
    (`ClosedOver(fn)`, (*args, captured)), `captured` the tuple of those tracers. At the top
    level (no transformation under way) fn cannot close over a live tracer: nothing is
    traced. Elsewhere fn is traced once (`_evaluate.TracedOnce`, shared within
    `_evaluate.sharing_traces` with the call's later traces of fn)."""
    if fn is None or isinstance(fn, ClosedOver) or _programs.top_level():
        return fn, args
    try:
        traced = _evaluate.TracedOnce(fn, params, *args)
    except Exception:  # noqa: BLE001 - the call itself raises it, with the solver's message
        return fn, args
    consts = traced.jaxpr.consts
    captured_at = tuple(i for i, c in enumerate(consts) if isinstance(c, jax.core.Tracer))
    if not captured_at:
        return fn, args
    captured = tuple(consts[i] for i in captured_at)
    return ClosedOver(fn, traced, captured_at), (*args, captured)
