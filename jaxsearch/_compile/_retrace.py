"""Warn when a solver keeps compiling for the same shapes because fn is a new object that
computes something else (`_computation` lets new objects computing the same share one compile)."""

import contextlib
import contextvars
import functools
import warnings
import weakref

import jax
import numpy as np

from ._caches import Kept
from ._closure import ClosedOver
from ._computation import Computation, incomparable

# Compiles that repeat for one (entry point, solver, fn's code, argument shapes) before a
# warning: the first may be a second problem on purpose; the third is a pattern.
_WARN_AT = 3


class RetraceWarning(UserWarning):
    """A solver compiled again for the same shapes only because fn was a new object."""


class _Seen:
    def __init__(self, fn):
        self.fn = _ref(fn)
        self.count = 1
        self.warned = False


_seen = Kept(256, "retraces")

# Whether the call being traced compiles its own programs (`_programs.compiled_per_call`):
# inside a caller's `jax.jit`, the caller's compile decides, and nothing here is a retrace.
_watching: contextvars.ContextVar[bool] = contextvars.ContextVar("watching", default=False)


@contextlib.contextmanager
def watching(on: bool):
    """Within this context, `note_trace` counts the traces of a call that compiles its own
    programs (`on`), and ignores those of a call inside a caller's trace."""
    token = _watching.set(on)
    try:
        yield
    finally:
        _watching.reset(token)


def _ref(fn):
    try:
        return weakref.ref(fn)
    except TypeError:
        return lambda: fn


def _code(fn):
    """The code object behind fn (through functools.partial), or None."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    fn = getattr(fn, "__func__", fn)  # a bound method
    return getattr(fn, "__code__", None)


def _avals(tree) -> tuple:
    leaves, treedef = jax.tree.flatten(tree)
    return treedef, tuple(
        (np.shape(x), str(x.dtype)) if hasattr(x, "dtype") else type(x).__name__ for x in leaves
    )


def _incomparable(fn) -> bool:
    try:
        return fn in incomparable
    except TypeError:
        return False


def note_trace(entry: str, solver, fn, arguments) -> None:
    """Record that `entry` ("run" or "step") of `solver` is being traced for `fn` at
    `arguments`; warn once per key when fn's code has been compiled `_WARN_AT` times for the
    same shapes and dtypes with a different function object each time."""
    if not _watching.get():
        return
    while isinstance(fn, Computation | ClosedOver):  # stand-ins: fn's identity behind them
        fn = fn.fn
    comparable = not _incomparable(fn)
    code = _code(fn)
    if code is None:
        return
    try:
        key = (entry, solver, code, _avals(arguments))
        hash(key)
    except TypeError:
        return
    seen = _seen.get(key)
    if seen is None:
        _seen.put(key, _Seen(fn))
        return
    if seen.fn() is fn:  # the same object: a retrace for another reason (e.g. a static arg)
        return
    seen.fn, seen.count = _ref(fn), seen.count + 1
    if seen.count >= _WARN_AT and not seen.warned:
        seen.warned = True
        where = f"`fn` ({code.co_name} in {code.co_filename}:{code.co_firstlineno})"
        if comparable:
            why = (
                "computes something else or closes over other arrays, typically a closure "
                "over new data created inside a loop. New closures over the same computation "
                "and equal arrays share one compile; pass the data through fn's arguments "
                f"instead: solver.{entry}(fn, params, *args)."
            )
        else:
            why = (
                "holds something that cannot be compared by value (a callback, a "
                "jax.debug.print, another side effect), so each new object compiles its own "
                "program. Define fn once, outside the function or loop that calls "
                f"solver.{entry}, and pass what changes through its arguments: "
                f"solver.{entry}(fn, params, *args)."
            )
        warnings.warn(
            f"jaxsearch: Solver.{entry} compiled {seen.count} times for the same shapes and "
            f"dtypes because {where} is a new function object on every call that {why}",
            RetraceWarning,
            stacklevel=4,
        )
