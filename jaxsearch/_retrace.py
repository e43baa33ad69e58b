"""Warn when a solver keeps compiling for the same shapes because fn is a new object that
computes something else (`_computation` lets new objects computing the same share one compile)."""

import functools
import warnings
import weakref

import jax
import numpy as np

from ._computation import Computation

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


_seen: dict = {}


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


def note_trace(entry: str, solver, fn, arguments) -> None:
    """Record that `entry` ("run" or "step") of `solver` is being traced for `fn` at
    `arguments`; warn once per key when fn's code has been compiled `_WARN_AT` times for the
    same shapes and dtypes with a different function object each time."""
    if isinstance(fn, Computation):  # the stand-in of fn (`_computation`): fn's identity
        fn = fn.fn
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
        _seen[key] = _Seen(fn)
        return
    if seen.fn() is fn:  # the same object: a retrace for another reason (e.g. a static arg)
        return
    seen.fn, seen.count = _ref(fn), seen.count + 1
    if seen.count >= _WARN_AT and not seen.warned:
        seen.warned = True
        warnings.warn(
            f"jaxsearch: Solver.{entry} compiled {seen.count} times for the same shapes and "
            f"dtypes because `fn` ({code.co_name} in {code.co_filename}:{code.co_firstlineno})"
            " is a new function object on every call that computes something else or closes "
            "over other arrays, typically a closure over new data created inside a loop. New "
            "closures over the same computation and equal arrays share one compile; pass the "
            f"data through fn's arguments instead: solver.{entry}(fn, params, *args).",
            RetraceWarning,
            stacklevel=4,
        )
