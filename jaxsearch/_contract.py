"""What a method returned against its contract, checked while the solver traces it: a short
`TypeError` naming the class, the member and the field, in place of JAX's error about the
engine's loop. The checks read shapes, dtypes and weak types only, costing nothing at run time;
`jaxsearch.testing` runs them too."""

from typing import Any

import jax
import jax.tree_util as jtu
import numpy as np
from jaxtyping import PyTree


def describe(leaf: Any) -> str:
    """A leaf's abstract value as JAX writes it (`float32[3]`, `~float32[]` weakly typed), or
    the Python type of a leaf JAX does not take as an array."""
    try:
        return str(jax.typeof(leaf))
    except TypeError:
        return type(leaf).__name__


def _fail(method: Any, member: str, what: str, fix: str) -> None:
    raise TypeError(f"{type(method).__name__}.{member}: {what}.\nFix: {fix}")


def _field(path) -> str:
    return jtu.keystr(path) or "(the value itself)"


def same_avals(
    method: Any,
    member: str,
    expected: PyTree,
    got: PyTree,
    what: str,
    weak: bool = True,
    like: str | None = None,
) -> None:
    """`got`, which `method.member` returned as `what` (e.g. "state"), has the pytree
    structure of `expected` and, leaf by leaf, its shape, dtype and (with `weak`) weak type;
    `like` names `expected` in the message (default: the `what` that `got` replaces)."""
    like = f"the {what} it replaces" if like is None else like
    want = dict(jtu.tree_flatten_with_path(expected)[0])
    have = dict(jtu.tree_flatten_with_path(got)[0])
    if str(jtu.tree_structure(expected)) != str(jtu.tree_structure(got)):
        missing = [p for p in want if p not in have]
        extra = [p for p in have if p not in want]
        where = (f"field {_field(missing[0])} is missing" if missing else "fields differ") + (
            f", field {_field(extra[0])} is new" if extra else ""
        )
        _fail(
            method,
            member,
            f"returned a {what} of another pytree structure than {like} ({where})",
            f"return a {what} with the fields, and the pytree classes, that `init` gave it",
        )
    for path, leaf in have.items():
        if _aval(leaf, weak) != _aval(want[path], weak):
            _fail(
                method,
                member,
                f"the {what}'s field {_field(path)} is {describe(leaf)} where {like} has "
                f"{describe(want[path])} (shape, dtype and weak type must stay)",
                "give the field an explicit dtype and keep it (`.astype(dtype)`; "
                "`jnp.asarray(0.0)` of a Python float is weakly typed: `jnp.zeros((), dtype)`)",
            )


def strongly_typed(method: Any, member: str, tree: PyTree, what: str) -> None:
    """No leaf of `tree` (`what`, returned by `method.member`) is weakly typed or a Python
    number: every leaf of a state carried between iterations has a fixed dtype."""
    for path, leaf in jtu.tree_flatten_with_path(tree)[0]:
        aval = _aval(leaf, weak=True)
        if isinstance(leaf, bool | int | float | complex) or (isinstance(aval, tuple) and aval[2]):
            _fail(
                method,
                member,
                f"the {what}'s field {_field(path)} is {describe(leaf)}: weakly typed (a Python "
                "number, or an array made from one), its dtype may change between iterations",
                "build the field with an explicit dtype (`jnp.zeros((), dtype)`, "
                "`jnp.asarray(value, dtype)`, `.astype(dtype)`)",
            )


def scalar_of(method: Any, member: str, value: Any, dtype, what: str) -> None:
    """`value` (`what`, returned by `method.member`) is a 0-d array of `dtype`, or weakly typed
    (a Python number: the solver casts it)."""
    aval = jax.typeof(value)
    if aval.shape != () or not (aval.weak_type or np.dtype(aval.dtype) == np.dtype(dtype)):
        _fail(
            method,
            member,
            f"returned {what} of {describe(value)}, where the contract requires a 0-d array "
            f"of the scalar dtype {np.dtype(dtype).name}",
            "return a scalar: `jnp.asarray(t, info.dtype)` (reduce a vector first)",
        )


def computed(method: Any, state: PyTree, grad: PyTree, out: tuple) -> None:
    """What `compute` returned, `out` = (d, scaled, new state, limit), at a gradient `grad`
    from `state`: d with the structure, shapes and dtypes of the gradient, a 0-d bool
    `scaled`, a state of `state`'s avals (weak types included) and a 0-d `limit`."""
    d, scaled, new_state, limit = out
    same_avals(method, "compute", grad, d, "d", weak=False, like="the gradient")
    flag = jax.typeof(scaled)
    if flag.shape != () or flag.dtype != np.bool_:
        _fail(
            method,
            "compute",
            f"returned `scaled` of {describe(scaled)}, where the contract requires a 0-d bool",
            "return `jnp.asarray(flag)` of a boolean scalar",
        )
    same_avals(method, "compute", state, new_state, "state")
    if jax.typeof(limit).shape != ():
        _fail(method, "compute", f"returned `limit` of {describe(limit)}", "return a 0-d limit")


def search_started(method: Any, before: PyTree, search: PyTree) -> None:
    """What `start` returned: a search state with no weakly typed field, of the avals of the
    search state `before` it (the loop carries one search state from search to search)."""
    strongly_typed(method, "start", search, "search state")
    same_avals(method, "start", before, search, "search state")


def searched(method: Any, before: PyTree, search: PyTree) -> None:
    """What `update` returned from the search state `before`: its avals. A weakly typed field
    of `before`, the loop's carry, can only come from `start` (whose first call the engine
    makes before its loop): it is `start`'s to fix."""
    strongly_typed(method, "start", before, "search state")
    same_avals(method, "update", before, search, "search state")


def remembered(method: Any, before: PyTree, memory: PyTree) -> None:
    """What a direction's `update` returned from `before`, and what `reset` returns from that
    (traced abstractly, `jax.eval_shape`: nothing enters the program): `before`'s avals."""
    same_avals(method, "update", before, memory, "state")
    same_avals(method, "reset", memory, jax.eval_shape(method.reset, memory), "state")


def ended(search: Any, rule: Any, before: Any, after: Any) -> None:
    """The states that the line search's `finish` and the initial-step rule's `update` gave
    the solver's state `after` from `before`'s: the avals of those they replace."""
    same_avals(search, "finish", before.linesearch, after.linesearch, "state")
    same_avals(rule, "update", before.initial_step, after.initial_step, "state")


def _aval(leaf: Any, weak: bool):
    """A leaf's shape, dtype and (with `weak`) weak type; a Python value's type otherwise."""
    try:
        aval = jax.typeof(leaf)
    except TypeError:
        return type(leaf)
    return aval.shape, np.dtype(aval.dtype), weak and aval.weak_type
