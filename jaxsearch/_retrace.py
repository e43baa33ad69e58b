"""Warn when a solver keeps compiling for the same shapes because fn is a new object."""

import functools
import warnings
import weakref

import jax
import numpy as np

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
            " is a new function object on every call, typically a lambda or closure created "
            "inside a loop. The function's identity is part of the compile key. Define fn "
            f"once and pass data through its arguments: solver.{entry}(fn, params, *args).",
            RetraceWarning,
            stacklevel=4,
        )
