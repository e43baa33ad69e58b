"""Checks of what a user hands the solver: params, fn, dtypes, `throw`, and a state's fit."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np

from ._misc import leaves


def check_no_numbers(params) -> None:
    """Raise for a Python number among params' leaves outside Equinox modules: it is not an
    array, so it would be held fixed, silently. An Equinox module's non-array fields are its
    static configuration and stay so. (A NumPy scalar is an array, and is optimised.)"""
    found = jtu.tree_flatten_with_path(params, is_leaf=lambda x: isinstance(x, eqx.Module))[0]
    for path, leaf in found:
        if isinstance(leaf, int | float | complex) and not isinstance(leaf, bool):
            where = f"params{jtu.keystr(path)}"
            raise TypeError(
                f"{where} is a Python {type(leaf).__name__} ({leaf!r}), which jaxsearch cannot "
                f"optimise: only array leaves change. Pass jnp.asarray({leaf!r}) to optimise "
                "it, or pass it through `args` to hold it fixed."
            )


def partition(params):
    """(the floating array leaves of params, the rest), after checking that there is something
    to optimise and nothing that would be held fixed silently."""
    check_no_numbers(params)
    diff, static = eqx.partition(params, eqx.is_inexact_array)
    for leaf in leaves(static):
        if isinstance(leaf, jax.Array | np.ndarray) and not jnp.issubdtype(leaf.dtype, jnp.inexact):
            raise TypeError(
                f"params has a leaf of dtype {leaf.dtype}; only floating arrays can be optimised. "
                "Pass integer or boolean data through `args` instead."
            )
    if not leaves(diff):
        raise TypeError("params has no floating array leaves: there is nothing to optimise.")
    for leaf in leaves(diff):
        if jnp.issubdtype(leaf.dtype, jnp.complexfloating):
            raise TypeError("params has a complex leaf; jaxsearch optimises real floating arrays.")
    return diff, static


def check_fn(fn) -> None:
    if not callable(fn):
        raise TypeError(
            "fn must be callable, a function fn(params, *args) returning a scalar; "
            f"got {type(fn).__name__}."
        )


def floating_dtype(dtype, what: str):
    """`dtype` canonicalised, after checking that it is a real floating dtype."""
    dtype = jax.dtypes.canonicalize_dtype(dtype)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(f"{what} must be a real floating dtype, got {dtype}.")
    return dtype


def throw_setting(throw) -> bool | str:
    """`throw` as stored: a bool, or "failures" (raise on failures, not on `MAX_STEPS`)."""
    if isinstance(throw, bool):
        return throw
    if isinstance(throw, str) and throw == "failures":
        return throw
    raise ValueError(f'Solver: throw must be True, False or "failures", got {throw!r}.')


def check_fits(given, expected, what: str) -> None:
    """Raise a TypeError naming the first leaf of `given` whose shape or dtype differs from
    `expected` (a pytree of `jax.ShapeDtypeStruct`), or where their structures differ."""
    given_leaves, given_tree = jtu.tree_flatten_with_path(given)
    expected_leaves, expected_tree = jtu.tree_flatten_with_path(expected)
    if str(given_tree) != str(expected_tree):
        given_paths = {jtu.keystr(path) for path, _ in given_leaves}
        expected_paths = {jtu.keystr(path) for path, _ in expected_leaves}
        missing = sorted(expected_paths - given_paths)
        extra = sorted(given_paths - expected_paths)
        raise TypeError(
            f"{what} does not fit this solver and params: its structure differs from the "
            f"state `init` gives (missing {missing[:3]}, unexpected {extra[:3]}). A state "
            "belongs to one solver's settings (direction, memory size, line search, "
            "return_best, bounds or not) and to params of one structure."
        )
    for (path, leaf), (_, want) in zip(given_leaves, expected_leaves, strict=True):
        shape, dtype = jnp.shape(leaf), jnp.result_type(leaf)
        if shape != want.shape or dtype != want.dtype:
            raise TypeError(
                f"{what}{jtu.keystr(path)} is {dtype}{list(shape)} where this solver and "
                f"params give {want.dtype}{list(want.shape)}: the state belongs to another "
                "solver or problem (memory size, params' shapes or dtypes, value dtype)."
            )
