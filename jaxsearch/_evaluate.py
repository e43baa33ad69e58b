"""The single place where the user's objective is evaluated."""

import contextlib
import contextvars
import math

import equinox as eqx
import jax
import jax.extend
import jax.numpy as jnp
import jax.tree_util as jtu
from jaxtyping import PyTree

from ._misc import (
    at_least_float32,
    dtype_eps,
    tree_add_scaled,
    tree_cast_like,
    tree_norm,
    widest_float,
)

# The traces of the call in progress (see `sharing_traces`), or None outside one.
_shared: contextvars.ContextVar[dict | None] = contextvars.ContextVar("traces", default=None)


@contextlib.contextmanager
def sharing_traces():
    """Within this context, `TracedOnce` traces each fn once for equal arguments' avals (and
    equal non-array leaves), across the programs one call compiles: `run` compiles its fresh
    state and its loop, and fn is traced for both once. The traces live as long as the
    context: their constants may be tracers of the caller's trace."""
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
    """`fn(params, *args)` traced to a jaxpr once, at the example arguments; calling it (or
    differentiating it) evaluates the jaxpr and never runs the Python function again.

    Array leaves of (params, args) are inputs; every other leaf is fixed at its example value.
    Inside `sharing_traces`, an equal fn at equal avals reuses the first trace.
    """

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


def half_squared_norm(residuals: PyTree):
    """f = 0.5 * sum_i r_i^2 over every leaf of `residuals`, summed in the widest residual
    float dtype widened to at least float32 (the objective of a least-squares direction)."""
    found = jtu.tree_leaves(residuals)
    acc = at_least_float32(widest_float(*(jnp.result_type(r) for r in found)))
    total = jnp.zeros((), acc)
    for r in found:
        r = jnp.asarray(r).astype(acc)
        total = total + jnp.sum(r * r)
    return total / 2


def objective_value(out, has_aux: bool, residual: bool):
    """(f, aux) from fn's output: f itself, checked to be a real floating scalar; or, with
    `residual` (a least-squares direction), 0.5 |r|^2 of fn's residuals r."""
    value, aux = split_output(out, has_aux, residual)
    if residual:
        check_residuals(value)
        return half_squared_norm(value), aux
    check_value(value)
    return value, aux


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
    """The gradient fn returned, as a pytree like `diff` (params' floating leaves, None
    elsewhere), after checking it: its structure must be that of params (`combine(diff,
    static)`; its leaves at params' other leaves are ignored) or that of `diff` (None at
    params' other leaves, as `eqx.filter_grad` gives), and each leaf must have the shape of
    the param leaf and a real floating or integer dtype. Raises a TypeError naming the first
    mismatch; leaves are not cast here."""
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


def value_and_grad(
    fn,
    has_aux: bool,
    value_dtype,
    aux_like,
    diff: PyTree,
    static: PyTree,
    args,
    residual: bool = False,
    own_grad: bool = False,
):
    """f, grad f and aux at `combine(diff, static)`: value cast to `value_dtype`, gradient
    leaves cast to the dtypes of `diff`, aux leaves to those of `aux_like` (all strongly typed).
    With `residual`, fn returns residuals r and f = 0.5 |r|^2 (`half_squared_norm`). With
    `own_grad` (`Solver(value_and_grad=True)`), fn returns its own gradient beside its output
    (`split_own_gradient`, checked by `own_gradient`) and is not differentiated here."""
    if own_grad:
        out, grad = split_own_gradient(fn(eqx.combine(diff, static), *args))
        value, aux = objective_value(out, has_aux, residual=False)
        grad = own_gradient(grad, diff, static)
    else:

        def objective(d):
            return objective_value(fn(eqx.combine(d, static), *args), has_aux, residual)

        (value, aux), grad = jax.value_and_grad(objective, has_aux=True)(diff)
    grad = tree_cast_like(grad, diff)
    aux = tree_cast_like(aux, aux_like) if has_aux else None
    return jnp.asarray(value).astype(value_dtype), grad, aux


def jacobian_dtype(diff: PyTree, residuals: PyTree):
    """The dtype of a dense least-squares direction's matrices: the widest of the params'
    (`diff`'s) and the residuals' float dtypes (arrays or abstract values), at least float32."""
    found = jtu.tree_leaves((diff, residuals))
    return at_least_float32(widest_float(*(jnp.result_type(a) for a in found)))


def value_grad_and_jacobian(fn, has_aux: bool, value_dtype, aux_like, diff, static, args):
    """f, grad f and aux at `combine(diff, static)` as `value_and_grad` gives them with
    `residual`, and (r, J): fn's residuals flattened and their Jacobian (m x n, n the size of
    `diff`), both in `jacobian_dtype`, for a dense least-squares direction. One forward-mode
    Jacobian (`jax.jacfwd`: n Jacobian-vector products) executes r's primal once; f is
    0.5 |r|^2 (`half_squared_norm`, as `value_and_grad` forms it) and grad f = J'r, each
    leaf cast to its param's dtype."""
    from ._direction._flat import flatten_tree, unflatten_tree

    def residuals(d):
        r, _ = split_output(fn(eqx.combine(d, static), *args), has_aux, residual=True)
        return r

    kind = jacobian_dtype(diff, jax.eval_shape(residuals, diff))

    def flat(v):
        out = fn(eqx.combine(unflatten_tree(v, diff), static), *args)
        r, aux = split_output(out, has_aux, residual=True)
        check_residuals(r)
        r_flat = flatten_tree(r, kind)
        return r_flat, (r_flat, half_squared_norm(r), aux)

    jac, (r, value, aux) = jax.jacfwd(flat, has_aux=True)(flatten_tree(diff, kind))
    grad = jnp.matmul(jac.T, r, precision=jax.lax.Precision.HIGHEST)
    grad = unflatten_tree(grad, diff)
    aux = tree_cast_like(aux, aux_like) if has_aux else None
    return jnp.asarray(value).astype(value_dtype), grad, aux, (r, jac)


def hessian_vector_product(evaluate, x, v, grad=None):
    """H(x) v by forward-mode differentiation of the gradient (forward-over-reverse); given
    `grad`, the gradient at x that fn returned itself (`Solver(value_and_grad=True)`), by
    the forward difference of that gradient instead (`_difference_product`)."""
    if grad is not None:
        return _difference_product(evaluate, x, v, grad)
    return jax.jvp(lambda p: evaluate(p)[1], (x,), (v,))[1]


def _difference_product(evaluate, x, v, grad):
    """H(x) v ~ (g(x + eps v) - g(x)) / eps, g = grad f and `grad` = g(x): the forward
    difference of the gradient along v (Nocedal & Wright, *Numerical Optimization*, 2nd ed.,
    section 8.1), one evaluation of fn. eps = sqrt(u) (1 + |x|_2) / |v|_2, u the machine
    epsilon of x's least precise leaf: sqrt(u) balances the difference's truncation error
    against rounding (N&W 8.1), scaled so that the perturbation eps |v| is relative to |x|.
    x + eps v is rounded to x's dtypes (fn's inputs); the difference and the division are
    taken in each leaf's dtype widened to at least float32, and the product is cast to v's
    dtypes. v = 0 gives 0 (with no new information: fn is evaluated at x)."""
    work = at_least_float32(widest_float(*(leaf.dtype for leaf in jtu.tree_leaves(x))))
    root_u = math.sqrt(dtype_eps(x))
    v_norm = tree_norm(v, work)
    scale = (1 + tree_norm(x, work)) / jnp.where(v_norm > 0, v_norm, 1)
    eps = (root_u * scale).astype(work)
    moved = evaluate(tree_add_scaled(x, eps, v))[1]

    def quotient(g_new, g, vi):
        acc = at_least_float32(widest_float(g_new.dtype, g.dtype))
        return ((g_new.astype(acc) - g.astype(acc)) / eps.astype(acc)).astype(vi.dtype)

    return jtu.tree_map(quotient, moved, grad, v)
