"""Nonlinear conjugate gradient directions (Fletcher-Reeves, Polak-Ribiere+, Hestenes-Stiefel,
Dai-Yuan, Hager-Zhang)."""

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
import jax.tree_util as jtu
from jaxtyping import Array, Bool, PyTree, Scalar

from .._misc import (
    at_least_float32,
    divide,
    scalar,
    tree_cast_like,
    tree_dot,
    tree_norm,
    tree_sub,
    tree_zeros_like,
)
from ._base import AbstractDirection, DirectionInfo, no_limit
from ._preconditioner import Preconditioner, check_fits, check_preconditioner, prepared

METHODS = ("fletcher-reeves", "polak-ribiere", "hestenes-stiefel", "dai-yuan", "hager-zhang")


class NonlinearCGState(eqx.Module):
    grad: PyTree  # g_{k-1}: the gradient given to the last `compute`, in the params' dtypes
    direction: PyTree  # d_{k-1}: the direction it returned (-g_{k-1} after `reset`)
    has_prev: Bool[Array, ""]  # False until the first `compute`


class NonlinearCG(AbstractDirection):
    """Nonlinear conjugate gradient direction d_k = -g_k + beta_k d_{k-1}. With g = g_k, p =
    g_{k-1}, d = d_{k-1} and y = g - p, `method` chooses beta_k (Nocedal & Wright, 2nd ed.,
    section 5.2; Hager & Zhang, SIAM J. Optim. 16 (2005) 170-192; Hager & Zhang, "A survey of
    nonlinear conjugate gradient methods", Pacific J. Optim. 2 (2006) 35-58):

    - "fletcher-reeves": beta = g'g / p'p  (N&W eq. 5.41a)
    - "polak-ribiere":   beta = max(0, g'y / p'p), PR+  (N&W eq. 5.45)
    - "hestenes-stiefel": beta = g'y / d'y  (N&W eq. 5.46)
    - "dai-yuan":        beta = g'g / d'y
    - "hager-zhang" (default): beta = max(beta_N, eta_k), CG_DESCENT's truncated rule, beta_N =
      (y - 2 d |y|^2 / d'y)' g / d'y, eta_k = -1 / (|d| min(eta, |p|)), `eta` = 0.01.

    Restarts (beta = 0): on the first call; Powell's (1977) where |g'p| >= `restart_threshold`
    |g|^2 (0.2; None: off); where beta is not finite. Where d_k does not descend the solver takes
    -g_k and calls `reset`, which records -g_k as d_k. FR and DY descend only under strong Wolfe
    with c2 < 1/2; HZ's beta_N gives g'd <= -7/8 |g|^2 with any search (Hager & Zhang 2005,
    theorem 1.1). With no line search given, `Solver` pairs it with `MoreThuente(gtol=0.1)`,
    close to the line minimisation conjugacy assumes (N&W recommend c2 = 0.1). `scaled` is False
    (the solver's guess, N&W eq. 3.60, starts each search). g_{k-1} and d_{k-1} are kept in the
    params' dtypes; d is formed in at least float32 and rounded once.

    **Preconditioning.** `preconditioner` P (of the kinds `LBFGS` takes) gives each rule in z =
    P^(-1/2) x (N&W section 5.1; Hager & Zhang 2006, section 9): d_k = -P g_k + beta_k d_{k-1},
    with g'g -> g'P g, p'p -> p'P p, g'y -> z'y, y'y (HZ) -> y'P y and g'p (Powell) -> z'p for z
    = P g; d'y and d'g stay. HZ's eta_k keeps Euclidean norms (any eta_k < 0 keeps g'd <= -7/8
    g'P g). P is fixed for a run; a restart takes -P g; the identity gives the iterates without,
    bit for bit. A callable or lineax P is applied again to g_{k-1} (FR, PR+) or y (HZ) rather
    than kept in the state.
    """

    supports_bounds: ClassVar[bool] = False

    method: str = eqx.field(static=True, default="hager-zhang")
    restart_threshold: float | None = eqx.field(static=True, default=0.2)
    eta: float = eqx.field(static=True, default=0.01)
    preconditioner: Preconditioner = None

    def __check_init__(self):
        if self.method not in METHODS:
            raise ValueError(
                f"NonlinearCG: unknown method {self.method!r}; valid methods are "
                + ", ".join(repr(m) for m in METHODS)
                + "."
            )
        if self.restart_threshold is not None and not self.restart_threshold > 0:
            raise ValueError(
                "NonlinearCG: restart_threshold must be positive or None, got "
                f"{self.restart_threshold}."
            )
        if not self.eta > 0:
            raise ValueError(f"NonlinearCG: eta must be positive, got {self.eta}.")
        check_preconditioner("NonlinearCG", self.preconditioner)

    def init(self, params, dtype) -> NonlinearCGState:
        check_fits("NonlinearCG", self.preconditioner, params)
        zeros = tree_zeros_like(params)  # sharded like params
        return NonlinearCGState(grad=zeros, direction=zeros, has_prev=jnp.array(False))

    def _beta(self, g, g_prev, d_prev, dtype, z, g_p_g, precondition) -> Scalar:
        """beta_k from z = P g and g_p_g = g'P g (g and g'g without one); v'P v by
        `Preconditioning.quadratic_form`, v'v to the last bit for the identity."""

        def form(v):  # v'P v
            if precondition is None:
                return tree_dot(v, v, dtype)
            return precondition.quadratic_form(v, dtype)

        # `divide`: the divisors are 0 at the first step (g_prev = d_prev = 0), where beta is
        # not finite (and not used) and its derivative by `/` NaN.
        y = tree_sub(g, g_prev)
        if self.method == "fletcher-reeves":
            return divide(g_p_g, form(g_prev))
        if self.method == "polak-ribiere":
            return jnp.maximum(divide(tree_dot(z, y, dtype), form(g_prev)), 0)
        if self.method == "hestenes-stiefel":
            return divide(tree_dot(z, y, dtype), tree_dot(d_prev, y, dtype))
        if self.method == "dai-yuan":
            return divide(g_p_g, tree_dot(d_prev, y, dtype))
        # Hager-Zhang
        dy = tree_dot(d_prev, y, dtype)
        yy = form(y)
        beta_n = divide(tree_dot(y, z, dtype) - divide(2 * yy * tree_dot(d_prev, g, dtype), dy), dy)
        scale = tree_norm(d_prev, dtype) * jnp.minimum(self.eta, tree_norm(g_prev, dtype))
        eta_k = divide(jnp.full_like(scale, -1), scale)
        return jnp.maximum(beta_n, eta_k)

    def compute(self, state, info: DirectionInfo):
        grad, dtype = info.grad, info.dtype
        g_prev, d_prev = state.grad, state.direction
        precondition = prepared(self.preconditioner)
        if precondition is None:
            z, g_p_g = grad, tree_dot(grad, grad, dtype)
        else:
            z = precondition(grad)
            g_p_g = precondition.quadratic_form(grad, dtype, z)
        beta = self._beta(grad, g_prev, d_prev, dtype, z, g_p_g, precondition)
        conjugate = state.has_prev & jnp.isfinite(beta)
        if self.restart_threshold is not None:
            overlap = jnp.abs(tree_dot(z, g_prev, dtype))
            conjugate = conjugate & (overlap < self.restart_threshold * g_p_g)
        # beta multiplies d_{k-1}: where it is not finite, the derivative of that product with
        # respect to d_{k-1} would be NaN, although the product is not used.
        beta = jnp.where(conjugate, beta, 0)

        def combine(g, zi, dp):
            acc = at_least_float32(g.dtype)
            d = -zi.astype(acc) + beta.astype(acc) * dp.astype(acc)
            return jnp.where(conjugate, d, -zi.astype(acc)).astype(g.dtype)

        d = jtu.tree_map(combine, grad, z, d_prev)
        new_state = NonlinearCGState(
            grad=tree_cast_like(grad, state.grad),
            direction=tree_cast_like(d, state.direction),
            has_prev=jnp.array(True),
        )
        return d, scalar(False, jnp.bool_), new_state, no_limit(dtype)

    def update(self, state, s, y, dtype, accept=True) -> NonlinearCGState:
        return state  # compute keeps g_{k-1} and d_{k-1}; y is recomputed from them

    def reset(self, state) -> NonlinearCGState:
        return NonlinearCGState(
            grad=state.grad,
            direction=jtu.tree_map(jnp.negative, state.grad),
            has_prev=state.has_prev,
        )

    def gradient_replaced(self, state):
        return state  # nothing relies on the order of gradients
