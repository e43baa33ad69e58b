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
from ._preconditioner import (
    Preconditioner,
    check_fits,
    check_preconditioner,
    prepared,
)

METHODS = ("fletcher-reeves", "polak-ribiere", "hestenes-stiefel", "dai-yuan", "hager-zhang")


class NonlinearCGState(eqx.Module):
    grad: PyTree  # g_{k-1}: the gradient given to the last `compute`, in the params' dtypes
    direction: PyTree  # d_{k-1}: the direction it returned (-g_{k-1} after `reset`)
    has_prev: Bool[Array, ""]  # False until the first `compute`


class NonlinearCG(AbstractDirection):
    """Nonlinear conjugate gradient direction d_k = -g_k + beta_k d_{k-1}.

    With g = g_k, p = g_{k-1}, d = d_{k-1} and y = g - p, the `method` chooses beta_k
    (Nocedal & Wright, *Numerical Optimization*, 2nd ed., section 5.2; Hager & Zhang, "A new
    conjugate gradient method with guaranteed descent and an efficient line search", SIAM J.
    Optim. 16 (2005) 170-192; Hager & Zhang, "A survey of nonlinear conjugate gradient
    methods", Pacific J. Optim. 2 (2006) 35-58):

    - "fletcher-reeves": beta = g'g / p'p  (N&W eq. 5.41a)
    - "polak-ribiere":   beta = max(0, g'y / p'p), PR+  (N&W eq. 5.45)
    - "hestenes-stiefel": beta = g'y / d'y  (N&W eq. 5.46)
    - "dai-yuan":        beta = g'g / d'y
    - "hager-zhang" (default): beta = max(beta_N, eta_k), the truncated rule of CG_DESCENT
      (Hager & Zhang 2005), with beta_N = (y - 2 d |y|^2 / d'y)' g / d'y and
      eta_k = -1 / (|d| min(eta, |p|)), `eta` = 0.01.

    Restarts (beta = 0, so d_k = -g_k):

    - on the first call (there is no d_{k-1} yet);
    - Powell's restart (Powell 1977), when consecutive gradients are far from orthogonal:
      |g'p| >= `restart_threshold` |g|^2 (N&W section 5.2), threshold 0.2 by default, None
      switches it off;
    - when beta is not finite (e.g. d'y = 0).

    The solver restarts too whenever d_k is not a descent direction: it takes -g_k instead
    and calls `reset`, which records -g_k as d_k so that the next beta builds on the direction
    actually used. FR and DY guarantee descent only with a strong Wolfe search with c2 < 1/2
    (e.g. `Zoom(c2=0.1)`); HZ's beta_N gives g'd <= -7/8 |g|^2 with any line search
    (Hager & Zhang 2005, theorem 1.1).

    With no line search given, `Solver` pairs it with `MoreThuente(gtol=0.1)`: a search close
    to a line minimisation, which the conjugacy of the directions assumes (N&W section 5.2
    recommend c2 = 0.1). On the Rosenbrock problems of tests/interop/test_against_scipy.py it spends
    far fewer evaluations than with `Zoom()`'s c2 = 0.9 (91 against 400 in 2-D, 308 against
    3,630 in 10-D); on its logistic regression, a little more (25 against 22).

    `scaled` is always False: the length of d carries no curvature information, so the solver
    starts each line search from its scaled guess (N&W eq. 3.60). The state keeps g_{k-1} and
    d_{k-1} in the params' dtypes; inner products accumulate in at least float32 and d is
    formed per leaf in at least float32, then rounded once to the leaf's dtype.

    **Preconditioning.** With `preconditioner` P (symmetric positive definite, an
    approximation of the inverse Hessian; the kinds `LBFGS` takes: a callable v -> P v, a
    params-shaped pytree of positive diagonal entries, dynamic leaves, or a symmetric lineax
    operator), each rule is the one above in the variables z = P^(-1/2) x (N&W section 5.1,
    "Preconditioning"; Hager & Zhang 2006, section 9), and d_k = -P g_k + beta_k d_{k-1}.
    With z = P g_k, that replaces g'g by g'P g, p'p by p'P p, g'y by z'y, y'y (in HZ) by
    y'P y and g'p (Powell's test) by z'p; d'y and d'g stay as they are.
    HZ's eta_k keeps the Euclidean norms of d and p (the norm of d in the variables z would
    need P^-1); any eta_k < 0 leaves beta between beta_N and max(beta_N, 0), where
    g'd <= -7/8 g'P g holds. P is fixed for a run (it does not depend on x). A restart
    takes d = -P g, and the direction the solver takes after a failed one is -g, as
    without. With P the identity (a diagonal of ones) the iterates are those without, bit for
    bit. Each step applies P to g, and a callable or lineax P also to g_{k-1} (FR, PR+) or to
    y (HZ), for p'P p and y'P y: recomputed rather than kept, no copy of params more in the
    state.
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
        """beta_k, from z = P g and g_p_g = g'P g (g and g'g without a preconditioner);
        `precondition` a `Preconditioning` or None. The forms v'P v are taken by
        `Preconditioning.quadratic_form`, which for P the identity is v'v to the last bit."""

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
