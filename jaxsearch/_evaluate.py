"""fn traced once per call (`TracedOnce`, shared within `sharing_traces`) and what it returns
checked: its output split into value and aux, its value, its residuals, the gradient it
returns itself. `_objective.Objective` makes every evaluation from these."""

import contextlib
import contextvars

import equinox as eqx
import jax
import jax.extend
import jax.numpy as jnp
import jax.tree_util as jtu
from jaxtyping import PyTree

# The traces of the call in progress (see `sharing_traces`), or None outside one.
_shared: contextvars.ContextVar[dict | None] = contextvars.ContextVar("traces", default=None)


@contextlib.contextmanager
def sharing_traces():
    """Within this context `TracedOnce` traces each fn once per arguments' avals (and non-array
    leaves) across the programs one call compiles (`run`'s fresh state and loop). The traces live
    as long as the context: their constants may be the caller's tracers."""
    token = _shared.set({})
    try:
        yield
    finally:
        _shared.reset(token)


def _share_key(fn, params, args: tuple):
    """The key under which `sharing_traces` keeps fn's trace at params and args (raises
    TypeError where fn or a non-array leaf is unhashable)."""
    dynamic, static = eqx.partition((params, args), eqx.is_array)
    # by type too: 2 == 2.0 == True, but each traces to another program
    fixed_leaves = tuple((type(leaf), leaf) for leaf in jtu.tree_leaves(static))
    fixed = (jtu.tree_structure(static), fixed_leaves)
    key = (fn, jtu.tree_structure(dynamic), fixed, tuple(map(jax.typeof, jtu.tree_leaves(dynamic))))
    hash(key)
    return key


def share(traced: "TracedOnce", fn, params, args: tuple) -> None:
    """Within `sharing_traces`, let `TracedOnce(fn, params, *args)` reuse `traced` (a trace
    of another function that computes what fn does)."""
    shared = _shared.get()
    if shared is not None:
        shared[_share_key(fn, params, args)] = (traced.jaxpr, traced.out_tree)


class TracedOnce(eqx.Module):
    """`fn(params, *args)` traced to a jaxpr once, at the example arguments: calling or
    differentiating it evaluates the jaxpr, never the Python function. Array leaves of (params,
    args) are inputs, other leaves fixed at their example values; inside `sharing_traces` an
    equal fn at equal avals reuses the first trace."""

    jaxpr: jax.extend.core.ClosedJaxpr = eqx.field(static=True)
    out_tree: jtu.PyTreeDef = eqx.field(static=True)

    def __init__(self, fn, params, *args):
        dynamic, static = eqx.partition((params, args), eqx.is_array)
        leaves = jtu.tree_leaves(dynamic)
        shared, key = _shared.get(), None
        if shared is not None:
            try:
                key = _share_key(fn, params, args)
            except TypeError:  # an unhashable fn or non-array leaf: traced here
                key = None
            found = None if key is None else shared.get(key)
            if found is not None:
                self.jaxpr, self.out_tree = found
                return

        def flat(leaves):
            params, args = eqx.combine(
                jtu.tree_unflatten(jtu.tree_structure(dynamic), leaves), static
            )
            return fn(params, *args)

        self.jaxpr, out_shape = jax.make_jaxpr(flat, return_shape=True)(leaves)
        self.out_tree = jtu.tree_structure(out_shape)
        if shared is not None and key is not None:
            shared[key] = (self.jaxpr, self.out_tree)

    def __call__(self, params, *args):
        dynamic, _ = eqx.partition((params, args), eqx.is_array)
        out = jax.extend.core.jaxpr_as_fun(self.jaxpr)(*jtu.tree_leaves(dynamic))
        return jtu.tree_unflatten(self.out_tree, out)


def split_output(out, has_aux: bool, residual: bool = False):
    """(value, aux) from fn's output, with a clear error when has_aux does not match it.
    With `residual` (a least-squares direction), value is fn's pytree of residuals, which may
    itself be a tuple."""
    if has_aux:
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError(
                "fn must return a pair (value, aux) when has_aux=True; it returned "
                f"{_described(out)}. Return (value, aux), or build the solver with "
                "has_aux=False if fn returns only the value."
            )
        return out
    if not residual and isinstance(out, tuple | list):
        raise TypeError(
            f"fn returned a {type(out).__name__} but has_aux=False: fn must return a scalar. "
            "If fn returns (value, aux), build the solver with has_aux=True."
        )
    return out, None


def _described(out) -> str:
    """fn's output in words: an array by its shape and dtype (a tracer's type says nothing)."""
    if hasattr(out, "shape") and hasattr(out, "dtype"):
        kind = "a scalar" if out.shape == () else f"an array of shape {tuple(out.shape)}"
        return f"{kind} of dtype {out.dtype}"
    if isinstance(out, tuple | list):
        return f"a {type(out).__name__} of {len(out)} elements"
    return f"a {type(out).__name__}"


def check_value(value) -> None:
    """Raise unless `value` is a real floating scalar (array or abstract value)."""
    shape, dtype = jnp.shape(value), jnp.result_type(value)
    if shape != ():
        raise TypeError(f"fn must return a scalar, got an array of shape {shape}.")
    if not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(
            f"fn must return a real floating scalar, got dtype {dtype}. "
            "Cast the result, e.g. `return loss.astype(jnp.float32)`."
        )


def check_residuals(residuals) -> None:
    """Raise unless `residuals` is a non-empty pytree of real floating arrays."""
    found = jtu.tree_leaves(residuals)
    if not found:
        raise TypeError(
            "fn must return a pytree of residuals for a least-squares direction; it "
            "returned one with no leaves."
        )
    for leaf in found:
        dtype = jnp.result_type(leaf)
        if jnp.issubdtype(dtype, jnp.complexfloating):
            raise TypeError(
                f"fn returned a residual of dtype {dtype}: a least-squares direction takes "
                "real residuals. Return the real and imaginary parts, "
                "`jnp.stack([r.real, r.imag])`: 0.5 |r|^2 is the same."
            )
        if not jnp.issubdtype(dtype, jnp.floating):
            raise TypeError(
                "fn must return real floating residuals for a least-squares direction, got "
                f"a leaf of dtype {dtype}. Cast it, e.g. `r.astype(jnp.float32)`."
            )


def split_own_gradient(out):
    """(fn's output without its gradient, the gradient) of a fn that returns its own gradient
    (`Solver(value_and_grad=True)`): `out` must be a pair `(value, grad)`, or `((value, aux),
    grad)` with `has_aux=True`."""
    if not (isinstance(out, tuple) and len(out) == 2):
        raise TypeError(
            "fn must return a pair (value, grad) when value_and_grad=True (((value, aux), "
            f"grad) with has_aux=True); it returned {_described(out)}."
        )
    return out


def own_gradient(grad, diff: PyTree, static: PyTree) -> PyTree:
    """The gradient fn returned as a pytree like `diff`, checked: structured as params (leaves at
    non-floating params ignored) or as `diff` (None there, as `eqx.filter_grad`), each leaf of
    its param's shape and a real floating or integer dtype. Raises a TypeError naming the first
    mismatch; no cast."""
    params = eqx.combine(diff, static)
    diff_tree = jtu.tree_structure(diff)
    grad_tree = jtu.tree_structure(grad)
    if grad_tree == diff_tree:  # type: ignore[operator]
        found = grad
    elif grad_tree == jtu.tree_structure(params):  # type: ignore[operator]
        mask = jtu.tree_unflatten(grad_tree, map(eqx.is_inexact_array, jtu.tree_leaves(params)))
        found = eqx.filter(grad, mask)
    else:
        raise TypeError(
            "value_and_grad=True: the gradient fn returned has another structure than "
            f"params: {grad_tree} where params are {jtu.tree_structure(params)}. Return a "
            "gradient with params' structure (e.g. a dict with the same keys)."
        )
    for (path, g), d in zip(jtu.tree_leaves_with_path(found), jtu.tree_leaves(diff), strict=True):
        shape, dtype = jnp.shape(g), jnp.result_type(g)
        where = f"grad{jtu.keystr(path)}"
        if shape != jnp.shape(d):
            raise TypeError(
                f"value_and_grad=True: {where} has shape {shape} where the param has shape "
                f"{jnp.shape(d)}: the gradient must have params' shapes."
            )
        if not (jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.integer)):
            raise TypeError(
                f"value_and_grad=True: {where} has dtype {dtype}; the gradient must be real."
            )
    return found
