"""Gauss-Newton and Levenberg-Marquardt directions for nonlinear least squares, dense, for
problems of up to a few hundred unknowns."""

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jaxtyping import Array, Bool, Float, Int

from .._misc import at_least_float32, leaves, widest_float
from ._base import AbstractLeastSquares, DirectionInfo, no_limit
from ._bfgs import HIGHEST
from ._flat import flatten_tree, unflatten_tree


def _residuals_of(info: DirectionInfo, owner: str):
    if info.residuals is None:
        raise ValueError(
            f"{owner} needs the residuals: pass DirectionInfo(..., residuals=r) with r(p) the "
            "pytree of residuals at p (the Solver passes it to a least-squares direction)."
        )
    return info.residuals


def _jacobian(info: DirectionInfo, owner: str) -> tuple[Array, Array, int]:
    """(r, J, n): the flattened residuals at x and their Jacobian (m x n, n the total size of
    the params), in the matrix dtype: the widest of the params' and the residuals' dtypes,
    at least float32. J is formed from n Jacobian-vector products
    (`jax.linearize` once, then its linear map on the columns of the identity)."""
    residuals, x = _residuals_of(info, owner), info.x
    shapes = jax.eval_shape(residuals, x)
    dtype = at_least_float32(widest_float(*(a.dtype for a in leaves((x, shapes)))))

    def flat_residuals(v):
        return flatten_tree(residuals(unflatten_tree(v, x)), dtype)

    r, linear = jax.linearize(flat_residuals, flatten_tree(x, dtype))
    n = sum(p.size for p in leaves(x))
    columns = jax.vmap(linear)(jnp.eye(n, dtype=dtype))  # rows J e_i: J'
    return r, columns.T, n


class GaussNewtonState(eqx.Module):
    """Diagnostics only: Gauss-Newton keeps no information between steps."""

    num_jvp: Int[Array, ""]  # Jacobian-vector products since init (n per `compute`)


class GaussNewton(AbstractLeastSquares):
    """The Gauss-Newton direction for f = 0.5 |r(x)|^2: d minimises |r + J d| (J the
    Jacobian of the residuals r at x), the least-squares solution of J d = -r of least norm
    (Nocedal & Wright, *Numerical Optimization*, 2nd ed., section 10.3, eq. 10.23).

    With it, fn returns a pytree of residuals (see `AbstractLeastSquares`). J is formed from
    n Jacobian-vector products (n the number of parameters; forward-mode differentiation of
    the residuals) and the system is solved by `jnp.linalg.lstsq` (an SVD), in the widest of
    the params' and residuals' dtypes, at least float32. d descends wherever J'r != 0
    (g'd = -|J d|^2); `scaled` is True, so the line search tries the unit step, the
    Gauss-Newton step, first. Near a solution with small residuals the iterates converge
    quickly (quadratically at a zero-residual solution where J has full rank; N&W
    theorem 10.1 for the line-search version's global convergence when J's singular values
    stay bounded away from zero). Where J is rank deficient or the residuals at the solution
    are large, prefer `LevenbergMarquardt`.
    """

    supports_bounds: ClassVar[bool] = False

    def init(self, params, dtype) -> GaussNewtonState:
        return GaussNewtonState(num_jvp=jnp.zeros((), jnp.int32))

    def compute(self, state: GaussNewtonState, info: DirectionInfo):
        r, jac, n = _jacobian(info, "GaussNewton")
        d, *_ = jnp.linalg.lstsq(jac, -r)
        state = GaussNewtonState(num_jvp=state.num_jvp + jnp.array(n, jnp.int32))
        return unflatten_tree(d, info.grad), jnp.array(True), state, no_limit(info.dtype)

    def update(self, state, s, y, dtype, accept=True) -> GaussNewtonState:
        return state  # nothing accumulated

    def reset(self, state) -> GaussNewtonState:
        return state  # nothing accumulated: the next step forms J anew

    def gradient_replaced(self, state) -> GaussNewtonState:
        return state  # nothing relies on the order of gradients


class LevenbergMarquardtState(eqx.Module):
    damping: Float[Array, ""]  # lambda, in the matrix dtype (0 before the first compute)
    nu: Float[Array, ""]  # Nielsen's growth factor of lambda after a failed step
    started: Bool[Array, ""]  # whether lambda was set (the first `compute` sets it)
    value: Float[Array, ""]  # f_k = 0.5 |r_k|^2 at the last `compute`'s point
    normal: Float[Array, "n n"]  # J'J at that point
    gradient: Float[Array, " n"]  # J'r at that point
    predicted: Float[Array, ""]  # L(0) - L(s) of the step s `update` accepted since
    stepped: Bool[Array, ""]  # whether `predicted` awaits the next `compute`
    num_jvp: Int[Array, ""]  # Jacobian-vector products since init (n per `compute`)


class LevenbergMarquardt(AbstractLeastSquares):
    """The Levenberg-Marquardt direction for f = 0.5 |r(x)|^2:

        d = -(J'J + lambda D)^-1 J'r,

    J the Jacobian of the residuals r at x, D = diag(J'J) with each entry floored at eps
    times the largest one (eps the matrix dtype's machine epsilon): the scaling of Marquardt
    (1963) and of J. J. Moré, "The Levenberg-Marquardt algorithm: implementation and
    theory", Numerical Analysis (Dundee 1977), LNM 630, 1978, section 2 (Moré keeps the
    running maximum of the column norms; here D is taken afresh at each point), which makes
    d invariant under a scaling of the parameters. The system is solved by Cholesky in the
    matrix dtype (the widest of the params' and residuals', at least float32). With it, fn
    returns a pytree of residuals (see `AbstractLeastSquares`); J is formed from n
    Jacobian-vector products, as in `GaussNewton`.

    lambda follows H. B. Nielsen, "Damping parameter in Marquardt's method", IMM-REP-1999-05,
    DTU 1999 (eq. 4.1 and its rule, as in Madsen, Nielsen & Tingleff, "Methods for
    non-linear least squares problems", 2004, algorithm 3.16): with the gain ratio

        rho = (f(x) - f(x + s)) / (L(0) - L(s)),  L(s) = 0.5 |r + J s|^2,

    for the step s the line search accepted (s = alpha d), if rho > 0 then
    lambda *= max(1/3, 1 - (2 rho - 1)^3) and nu = 2, else lambda *= nu and nu *= 2.
    lambda_0 = `tau` and nu_0 = 2. Nielsen's lambda_0 = tau * max_i (J'J)_ii is for the
    damping matrix D = I; with D = diag(J'J) the same initial damping scale is lambda_0 = tau,
    which keeps the direction invariant under a scaling of the parameters. The rule is
    applied at the `compute` after the step (where f(x + s) = 0.5 |r(x + s)|^2 is known from
    the residuals), from f, J'J and J'r recorded at x and L(0) - L(s) recorded by `update`.
    lambda is kept within [eps^2, 1 / eps^2] and nu at most 2^32, so neither overflows on
    steps that change nothing.

    `scaled` is True: the line search tries the unit step (the Levenberg-Marquardt step)
    first. `reset` forgets lambda (the next `compute` sets it to `tau` again); after
    `gradient_replaced` (e.g. new data) the step's gain ratio is not used.
    """

    tau: float = eqx.field(static=True, default=1e-3)

    supports_bounds: ClassVar[bool] = False

    def __check_init__(self):
        if not self.tau > 0:
            raise ValueError(f"LevenbergMarquardt: tau must be positive, got {self.tau}.")

    def init(self, params, dtype) -> LevenbergMarquardtState:
        kind = at_least_float32(widest_float(*(p.dtype for p in leaves(params))))
        n = sum(p.size for p in leaves(params))
        zero = jnp.zeros((), kind)
        return LevenbergMarquardtState(
            damping=zero,
            nu=jnp.full((), 2, kind),
            started=jnp.array(False),
            value=zero,
            normal=jnp.zeros((n, n), kind),
            gradient=jnp.zeros((n,), kind),
            predicted=zero,
            stepped=jnp.array(False),
            num_jvp=jnp.zeros((), jnp.int32),
        )

    def compute(self, state: LevenbergMarquardtState, info: DirectionInfo):
        r, jac, n = _jacobian(info, "LevenbergMarquardt")
        kind = r.dtype  # the matrix dtype: the state's (the params'), or the residuals' if wider
        stored = state
        state = jax.tree.map(
            lambda a: a.astype(kind) if jnp.issubdtype(a.dtype, jnp.floating) else a, state
        )
        eps = jnp.finfo(kind).eps
        value = jnp.dot(r, r, precision=HIGHEST) / 2
        # Nielsen's rule, from the step recorded since the last compute.
        actual = state.value - value
        gain = state.predicted > 0
        rho = jnp.where(gain, actual / jnp.where(gain, state.predicted, 1), -1)
        good = gain & (rho > 0)
        shrink = jnp.maximum(1 / 3, 1 - (2 * rho - 1) ** 3)
        damping = jnp.where(good, state.damping * shrink, state.damping * state.nu)
        nu = jnp.where(good, 2, jnp.minimum(2 * state.nu, 2.0**32))
        damping = jnp.where(state.stepped, damping, state.damping)
        nu = jnp.where(state.stepped, nu, state.nu)
        damping = jnp.where(state.started, damping, self.tau)
        nu = jnp.where(state.started, nu, 2)
        damping = jnp.clip(damping, eps**2, 1 / eps**2).astype(kind)
        nu = nu.astype(kind)

        normal = jnp.matmul(jac.T, jac, precision=HIGHEST)
        normal = (normal + normal.T) / 2
        gradient = jnp.matmul(jac.T, r, precision=HIGHEST)
        diagonal = jnp.diagonal(normal)
        largest = jnp.max(diagonal)
        scale = jnp.maximum(diagonal, jnp.where(largest > 0, eps * largest, 1))
        lower = jnp.linalg.cholesky(normal + jnp.diag(damping * scale))
        d = -jsl.cho_solve((lower, True), gradient)
        new = LevenbergMarquardtState(
            damping=damping,
            nu=nu,
            started=jnp.array(True),
            value=value,
            normal=normal,
            gradient=gradient,
            predicted=jnp.zeros((), kind),
            stepped=jnp.array(False),
            num_jvp=state.num_jvp + jnp.array(n, jnp.int32),
        )
        state = jax.tree.map(lambda a, like: a.astype(like.dtype), new, stored)
        return unflatten_tree(d, info.grad), jnp.array(True), state, no_limit(info.dtype)

    def update(self, state: LevenbergMarquardtState, s, y, dtype, accept=True):
        kind = state.normal.dtype
        step = flatten_tree(s, kind)
        # L(0) - L(s) = -s'J'r - 0.5 s'J'J s
        curvature = jnp.dot(step, jnp.matmul(state.normal, step, precision=HIGHEST))
        predicted = -jnp.dot(step, state.gradient, precision=HIGHEST) - curvature / 2
        accept = jnp.asarray(accept)
        return eqx.tree_at(
            lambda t: (t.predicted, t.stepped),
            state,
            (
                jnp.where(accept, predicted, state.predicted).astype(kind),
                accept | state.stepped,
            ),
        )

    def reset(self, state: LevenbergMarquardtState) -> LevenbergMarquardtState:
        return eqx.tree_at(
            lambda t: (t.started, t.stepped), state, (jnp.array(False), jnp.array(False))
        )

    def gradient_replaced(self, state: LevenbergMarquardtState) -> LevenbergMarquardtState:
        return eqx.tree_at(lambda t: t.stepped, state, jnp.array(False))
