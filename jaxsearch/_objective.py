"""The objective of a call, normalised once: fn, whether it returns aux, and its kind (f; residuals
r with f = 0.5 |r|^2; f with its own gradient), with every evaluation the solver makes of it.
`_evaluate` traces fn once per call and checks what it returns."""

import math
from collections.abc import Callable
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
from jaxtyping import PyTree

from ._direction._base import least_squares
from ._direction._flat import flatten_tree, jacobian_dtype, unflatten_tree
from ._evaluate import check_residuals, check_value, own_gradient, split_output, split_own_gradient
from ._inputs import check_fn, partition
from ._misc import (
    at_least_float32,
    dtype_eps,
    tree_add_scaled,
    tree_cast_like,
    tree_norm,
    widest_float,
)


def half_squared_norm(residuals: PyTree):
    """f = 0.5 * sum_i r_i^2 over `residuals`' leaves, in the widest residual float dtype, at least
    float32."""
    found = jtu.tree_leaves(residuals)
    acc = at_least_float32(widest_float(*(jnp.result_type(r) for r in found)))
    total = jnp.zeros((), acc)
    for r in found:
        r = jnp.asarray(r).astype(acc)
        total = total + jnp.sum(r * r)
    return total / 2


def objective_value(out, has_aux: bool, residual: bool):
    """(f, aux) from fn's output: f, checked to be a real floating scalar; with `residual`, 0.5
    |r|^2."""
    value, aux = split_output(out, has_aux, residual)
    if residual:
        check_residuals(value)
        return half_squared_norm(value), aux
    check_value(value)
    return value, aux


class Objective(eqx.Module):
    """fn as the solver evaluates it, at params `combine(diff, static)` and `args`. `kind`: `SCALAR`
    (f), `RESIDUALS` (residuals r, f = 0.5 |r|^2) or `OWN_GRADIENT` (`(f, grad)` or `((f, aux),
    grad)`, the gradient used as given); `has_aux`: aux beside f (or r)."""

    SCALAR: ClassVar[str] = "scalar"
    RESIDUALS: ClassVar[str] = "residuals"
    OWN_GRADIENT: ClassVar[str] = "own_gradient"

    fn: Callable
    has_aux: bool = eqx.field(static=True)
    kind: str = eqx.field(static=True)

    @classmethod
    def of(cls, solver, fn) -> "Objective":
        """fn as `solver` takes it (direction, `has_aux`, `value_and_grad`), checked to be
        callable."""
        check_fn(fn)
        if solver.value_and_grad:
            kind = cls.OWN_GRADIENT
        elif least_squares(solver):
            kind = cls.RESIDUALS
        else:
            kind = cls.SCALAR
        return cls(fn, solver.has_aux, kind)

    @property
    def residual(self) -> bool:
        return self.kind == self.RESIDUALS

    @property
    def own_grad(self) -> bool:
        return self.kind == self.OWN_GRADIENT

    def __call__(self, params, *args):
        return self.fn(params, *args)

    def value_and_aux(self, params, args: tuple):
        """(f, aux) at params, for the state's shapes (fn's own gradient is checked, not kept)."""
        out = self.fn(params, *args)
        if self.own_grad:
            out, grad = split_own_gradient(out)
            own_gradient(grad, *partition(params))
        return objective_value(out, self.has_aux, self.residual)

    def value_and_grad(self, value_dtype, aux_like, diff: PyTree, static: PyTree, args):
        """f, grad f and aux at `combine(diff, static)`, strongly typed: the value in `value_dtype`,
        the gradient in `diff`'s dtypes, aux in `aux_like`'s. An `OWN_GRADIENT` is checked
        (`own_gradient`), not differentiated."""
        has_aux = self.has_aux
        if self.own_grad:
            out, grad = split_own_gradient(self.fn(eqx.combine(diff, static), *args))
            value, aux = objective_value(out, has_aux, residual=False)
            grad = own_gradient(grad, diff, static)
        else:

            def objective(d):
                out = self.fn(eqx.combine(d, static), *args)
                return objective_value(out, has_aux, self.residual)

            (value, aux), grad = jax.value_and_grad(objective, has_aux=True)(diff)
        grad = tree_cast_like(grad, diff)
        aux = tree_cast_like(aux, aux_like) if has_aux else None
        return jnp.asarray(value).astype(value_dtype), grad, aux

    def value_alone(self, value_dtype, aux_like, diff: PyTree, static: PyTree, args):
        """f and aux as `value_and_grad` gives them, from one forward pass (not for `OWN_GRADIENT`,
        whose fn computes its gradient anyway)."""
        out = self.fn(eqx.combine(diff, static), *args)
        value, aux = objective_value(out, self.has_aux, self.residual)
        aux = tree_cast_like(aux, aux_like) if self.has_aux else None
        return jnp.asarray(value).astype(value_dtype), aux

    def residuals(self, diff: PyTree, static: PyTree, args):
        """fn's residuals at `combine(diff, static)` (a least-squares direction's), aux
        dropped."""
        out = self.fn(eqx.combine(diff, static), *args)
        return split_output(out, self.has_aux, residual=True)[0]

    def value_grad_and_jacobian(self, value_dtype, aux_like, diff, static, args):
        """f, grad f and aux as `value_and_grad` gives them, and (r, J), the flattened residuals and
        their m x n Jacobian in `jacobian_dtype`, for a dense least-squares direction: one
        `jax.jacfwd` (r's primal once, n JVPs); f = `half_squared_norm`, grad f = J'r cast to the
        params' dtypes."""
        has_aux = self.has_aux
        shapes = jax.eval_shape(lambda d: self.residuals(d, static, args), diff)
        kind = jacobian_dtype(diff, shapes)

        def flat(v):
            out = self.fn(eqx.combine(unflatten_tree(v, diff), static), *args)
            r, aux = split_output(out, has_aux, residual=True)
            check_residuals(r)
            r_flat = flatten_tree(r, kind)
            return r_flat, (r_flat, half_squared_norm(r), aux)

        jac, (r, value, aux) = jax.jacfwd(flat, has_aux=True)(flatten_tree(diff, kind))
        grad = jnp.matmul(jac.T, r, precision=jax.lax.Precision.HIGHEST)
        grad = unflatten_tree(grad, diff)
        aux = tree_cast_like(aux, aux_like) if has_aux else None
        return jnp.asarray(value).astype(value_dtype), grad, aux, (r, jac)

    def hessian_vector_product(self, evaluate, x, v, grad):
        """H(x) v, `evaluate(x)` giving (f, grad f, ...): forward-over-reverse; for fn's own
        gradient (`grad` at x) by `difference_product`."""
        if self.own_grad:
            return difference_product(evaluate, x, v, grad)
        return jax.jvp(lambda p: evaluate(p)[1], (x,), (v,))[1]


def difference_product(evaluate, x, v, grad):
    """H(x) v ~ (g(x + eps v) - g(x)) / eps, g = grad f, `grad` = g(x): the forward difference of
    the gradient (Nocedal & Wright, 2nd ed., section 8.1), one evaluation of fn. eps = sqrt(u) (1
    + |x|_2) / |v|_2, u the least precise leaf's machine epsilon: sqrt(u) balances truncation
    against rounding, relative to |x|. x + eps v is rounded to x's dtypes; the difference in each
    leaf's dtype widened to at least float32, cast to v's. v = 0 gives 0."""
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
