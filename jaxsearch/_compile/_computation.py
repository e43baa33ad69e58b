"""Objectives compared by what they compute, so that a new closure over the same computation
reuses the program compiled for an earlier one.

A `run` or `step` at the top level or under an eager `jax.vmap` compiles with fn static, and
jax's compile cache tells functions apart by identity: a library that builds its loss as a new
closure for every fit compiled the solver again every time. `by_computation` gives fn a stand-
in, `Computation`, that is equal to another exactly when both compute the same thing at the
same argument types: the jaxpr of fn's value, gradient and Hessian-vector products (forward
over reverse, with respect to the floating leaves of params, every other array leaf an input;
of a fn not twice differentiable, its value and gradient) is equal equation by equation, with
equal parameters, literals and input and output types, and the arrays fn closes over (the
jaxpr's constants) are equal bit for bit. The derivatives' jaxpr is compared rather than fn's,
as it holds the rules of `jax.custom_jvp` and `jax.custom_vjp` functions (whose own equations
carry a rule traced anew for every closure) worked out into equations.
For a fn that returns its own gradient (`Solver(value_and_grad=True)`), which nothing
differentiates, the jaxpr compared is fn's own.

Where something in the jaxpr cannot be compared by value (a callback, a rule that is still
a Python function), the stand-in is equal only to itself: fn is then compiled as before, once
per object. A stand-in for the same fn object at the same argument types is kept, so that
calling `run` again with it traces nothing.
"""

import contextlib
import struct
import weakref
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.extend
import jax.tree_util as jtu
import numpy as np

from .. import _evaluate
from .._objective import Objective, objective_value
from ._caches import Kept


class _NotComparable(Exception):
    """A part of a jaxpr that has no value to compare."""


class Computation:
    """fn, hashed and compared by what it computes (see the module docstring); calling it
    calls fn."""

    __slots__ = ("fn", "_key", "_constants", "_hash", "__weakref__")

    def __init__(self, fn: Callable, key: tuple, constants: tuple):
        self.fn = fn
        self._key = key
        self._constants = constants  # host copies, compared bit for bit
        self._hash = hash((key, tuple(_constant_hash(c) for c in constants)))

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        if self is other:
            return True
        if not isinstance(other, Computation) or self._hash != other._hash:
            return False
        return self._key == other._key and all(
            a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
            for a, b in zip(self._constants, other._constants, strict=True)
        )

    def __repr__(self) -> str:
        return f"Computation({self.fn!r})"


def _constant_hash(constant: np.ndarray) -> int:
    return hash((constant.dtype.str, constant.shape, constant.tobytes()))


# The functions whose jaxpr had no value to compare (their own stand-ins), while they live.
incomparable: "weakref.WeakSet" = weakref.WeakSet()

# Stand-ins kept by fn and the call's argument types: the last 64.
_kept = Kept(64, "computations")


def forget() -> None:
    """Empty the kept stand-ins (for the test seam)."""
    _kept.clear()


def by_computation(objective: Objective, params, args: tuple):
    """The `Computation` of the objective's fn (an `_objective.Objective`: its aux and its
    kind are part of the key) for a call at params and args, or fn itself where it cannot have
    one (its jaxpr has no value to compare, or tracing it raises: the call itself then
    raises with the solver's message). Only for calls that run eagerly (`_programs.eager`:
    outside any trace but an eager `jax.vmap`'s), on arrays; a fn that closes over a tracer
    is its own stand-in. fn is
    traced once (`_evaluate.TracedOnce`); within `_evaluate.sharing_traces`, the call's
    programs reuse that trace for the stand-in. For residuals the key is the jaxpr of
    f = 0.5 |r|^2; for fn's own gradient, the jaxpr of fn itself (nothing differentiates
    it)."""
    fn, has_aux = objective.fn, objective.has_aux
    residual, own_grad = objective.residual, objective.own_grad
    if isinstance(fn, Computation):
        return fn
    flat, treedef = jtu.tree_flatten((params, args))
    try:
        key = (fn, has_aux, residual, own_grad, treedef, tuple(map(_leaf_type, flat)))
        kept = _kept.get(key)
    except TypeError:  # an unhashable fn or leaf
        return fn
    if kept is not None:
        return kept
    stand_in: Callable
    try:
        traced = _evaluate.TracedOnce(fn, params, *args)
        if own_grad:
            stand_in = Computation(fn, *_own_key(traced, params, args))
        else:
            stand_in = Computation(fn, *_derivatives_key(traced, has_aux, residual, params, args))
    except _NotComparable:
        stand_in = fn
        with contextlib.suppress(TypeError):  # not weakly referable: not remembered
            incomparable.add(fn)
    except Exception:  # noqa: BLE001 - the call raises it, with the solver's message
        return fn
    else:
        _evaluate.share(traced, stand_in, params, args)
    _kept.put(key, stand_in)
    return stand_in


def _leaf_type(leaf):
    return jax.typeof(leaf) if isinstance(leaf, jax.Array) else (type(leaf), leaf)


def _derivatives_key(fn, has_aux: bool, residual: bool, params, args: tuple) -> tuple[tuple, tuple]:
    """The key and constants of the jaxpr of fn's value, gradient and Hessian-vector
    products with respect to the floating leaves of params (of a fn not twice
    differentiable: its value and gradient); with `residual`, of f = 0.5 |r|^2 of fn's
    residuals r."""
    diff, fixed = eqx.partition(params, eqx.is_inexact_array)
    dynamic, static = eqx.partition((fixed, args), eqx.is_array)

    def value_and_grad(diff, dynamic):
        def value(diff):
            fixed, args = eqx.combine(dynamic, static)
            out = fn(eqx.combine(diff, fixed), *args)
            if residual:
                return objective_value(out, has_aux, residual)
            return _evaluate.split_output(out, has_aux)

        return jax.value_and_grad(value, has_aux=True)(diff)

    def second_order(diff, dynamic, tangents):
        return jax.jvp(lambda d: value_and_grad(d, dynamic), (diff,), (tangents,))

    try:  # Newton-CG and the implicit adjoint take Hessian-vector products
        closed, out = jax.make_jaxpr(second_order, return_shape=True)(diff, dynamic, diff)
    except Exception:  # noqa: BLE001 - not twice differentiable: no products to compare
        closed, out = jax.make_jaxpr(value_and_grad, return_shape=True)(diff, dynamic)
    key = (_jaxpr_key(closed.jaxpr), jtu.tree_structure(out))
    return key, tuple(_host(c) for c in closed.consts)


def _own_key(fn, params, args: tuple) -> tuple[tuple, tuple]:
    """The key and constants of the jaxpr of fn itself (a fn that returns its own gradient),
    with the floating leaves of params and every other array leaf as inputs."""
    dynamic, static = eqx.partition((params, args), eqx.is_array)

    def call(dynamic):
        params, args = eqx.combine(dynamic, static)
        return fn(params, *args)

    closed, out = jax.make_jaxpr(call, return_shape=True)(dynamic)
    key = (_jaxpr_key(closed.jaxpr), jtu.tree_structure(out))
    return key, tuple(_host(c) for c in closed.consts)


def _host(constant) -> np.ndarray:
    if isinstance(constant, jax.core.Tracer):
        raise _NotComparable
    return np.asarray(constant)


# ------------------------------------------------------------------ a jaxpr as a value

# Parameters that hold a rule traced anew for every closure, whose equations the jaxpr
# compared already holds: a `custom_jvp` function's rule, worked out to the second order.
_IGNORED = {"custom_jvp_call": ("jvp_jaxpr_fun",)}


def _jaxpr_key(jaxpr) -> tuple:
    """The equations of `jaxpr` as a hashable value: variables numbered in order of
    appearance, each with its type; literals by their bytes; parameters by value."""
    numbers: dict = {}

    def define(var) -> tuple:
        numbers[var] = len(numbers)
        return (numbers[var], _aval_key(var.aval))

    def atom(x) -> Any:
        if isinstance(x, jax.extend.core.Literal):
            return ("literal", _aval_key(x.aval), _bytes_key(x.val))
        if isinstance(x, jax.extend.core.Var) and x in numbers:
            return numbers[x]
        raise _NotComparable  # a dropped variable in an input (never: jaxprs define them)

    head = (
        tuple(define(v) for v in jaxpr.constvars),
        tuple(define(v) for v in jaxpr.invars),
    )
    equations = []
    for eqn in jaxpr.eqns:
        ignored = _IGNORED.get(eqn.primitive.name, ())
        inputs = tuple(atom(x) for x in eqn.invars)
        params = tuple(
            sorted(
                (name, _param_key(value))
                for name, value in eqn.params.items()
                if name not in ignored
            )
        )
        outputs = tuple(
            ("dropped", _aval_key(v.aval)) if isinstance(v, jax.extend.core.DropVar) else define(v)
            for v in eqn.outvars
        )
        equations.append((eqn.primitive, inputs, params, outputs, _effects_key(eqn.effects)))
    return (head, tuple(equations), tuple(atom(x) for x in jaxpr.outvars))


def _aval_key(aval) -> tuple:
    shape, dtype = getattr(aval, "shape", None), getattr(aval, "dtype", None)
    if shape is None or dtype is None:
        raise _NotComparable
    return (type(aval), tuple(shape), str(dtype), bool(getattr(aval, "weak_type", False)))


def _bytes_key(value) -> tuple:
    array = np.asarray(value)
    return (array.dtype.str, array.shape, array.tobytes())


def _effects_key(effects) -> tuple:
    if effects:
        raise _NotComparable  # callbacks, io: each call's own
    return ()


def _param_key(value) -> Any:
    if isinstance(value, jax.extend.core.ClosedJaxpr):
        return (
            "closed",
            _jaxpr_key(value.jaxpr),
            tuple(_bytes_key(_host(c)) for c in value.consts),
        )
    if isinstance(value, jax.extend.core.Jaxpr):
        return ("jaxpr", _jaxpr_key(value))
    if isinstance(value, tuple | list):
        return (type(value), tuple(_param_key(v) for v in value))
    if isinstance(value, np.ndarray | jax.Array):
        return ("array", _bytes_key(value))
    if isinstance(value, float):  # 0.0 == -0.0 and nan != nan: by bits
        return ("float", struct.pack("<d", value))
    try:
        hash(value)
    except TypeError:
        raise _NotComparable from None
    return (type(value), value)
