"""Gauss-Newton and Levenberg-Marquardt directions for nonlinear least squares, dense, for
problems of up to a few hundred unknowns."""

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from .._misc import at_least_float32, divide, leaves, safe_sqrt, widest_float
from ._base import AbstractDenseLeastSquares, AbstractMemorylessDirection, DirectionInfo, no_limit
from ._bfgs import HIGHEST
from ._flat import flatten_tree, jacobian_dtype, unflatten_tree


def residuals_of(info: DirectionInfo, owner: str):
    if info.residuals is None:
        raise ValueError(
            f"{owner} needs the residuals: pass DirectionInfo(..., residuals=r) with r(p) the "
            "pytree of residuals at p (the Solver passes it to a least-squares direction)."
        )
    return info.residuals


def _jacobian(info: DirectionInfo, owner: str) -> tuple[Array, Array, int, int]:
    """(r, J, n, products): the flattened residuals at x and their m x n Jacobian in the matrix
    dtype (the widest of the params' and residuals', at least float32), and the Jacobian-vector
    products formed here: none from `info.jacobian` (`Solver.run`), else n (`jax.linearize` once,
    mapped over the identity's columns)."""
    x = info.x
    n = sum(p.size for p in leaves(x))
    if info.jacobian is not None:
        r, jac = info.jacobian
        return r, jac, n, 0
    residuals = residuals_of(info, owner)
    dtype = jacobian_dtype(x, jax.eval_shape(residuals, x))

    def flat_residuals(v):
        return flatten_tree(residuals(unflatten_tree(v, x)), dtype)

    r, linear = jax.linearize(flat_residuals, flatten_tree(x, dtype))
    columns = jax.vmap(linear)(jnp.eye(n, dtype=dtype))  # rows J e_i: J'
    return r, columns.T, n, n


class GaussNewtonState(eqx.Module):
    """Diagnostics only: Gauss-Newton keeps no information between steps."""

    # Jacobian-vector products of `compute` since init (none where the solver hands it J)
    num_jvp: Int[Array, ""]


class GaussNewton(AbstractDenseLeastSquares, AbstractMemorylessDirection):
    """The Gauss-Newton direction for f = 0.5 |r(x)|^2: the least-norm d minimising |r + J d|
    (Nocedal & Wright, 2nd ed., section 10.3, eq. 10.23), J formed as `AbstractDenseLeastSquares`
    says and the system solved by `jnp.linalg.lstsq` (an SVD) in the widest of the params' and
    residuals' dtypes, at least float32. d descends wherever J'r != 0 (g'd = -|J d|^2); the unit
    step is tried first (`scaled`): quadratic convergence at a zero-residual solution with J of
    full rank (N&W theorem 10.1 for global convergence). Where J is rank deficient or residuals
    are large, prefer `LevenbergMarquardt`."""

    supports_bounds: ClassVar[bool] = False

    def init(self, params, dtype) -> GaussNewtonState:
        return GaussNewtonState(num_jvp=jnp.zeros((), jnp.int32))

    def compute(self, state: GaussNewtonState, info: DirectionInfo):
        r, jac, _, products = _jacobian(info, "GaussNewton")
        d, *_ = jnp.linalg.lstsq(jac, -r)
        state = GaussNewtonState(num_jvp=state.num_jvp + jnp.array(products, jnp.int32))
        return unflatten_tree(d, info.grad), jnp.array(True), state, no_limit(info.dtype)


# The Newton iterations of `_damping_for` (Moré 1978, after Hebden 1973): on the concave, increasing
# 1 / |p(lambda)| they approach the root from 0 monotonically, quadratically near it.
DAMPING_ITERATIONS = 20


def _damping_for(singular, projected, radius, cut):
    """The damping lambda >= 0 with |p(lambda)| = radius, p(lambda) = -V diag(s / (s^2 + lambda))
    U'r, or 0 where the Gauss-Newton step (singular values <= `cut` dropped) has |p(0)| <= 1.1
    radius (Moré 1978)."""
    live = singular > cut
    numerators = jnp.where(live, singular * projected, 0) ** 2
    squares = singular * singular

    def norm_and_slope(damping):
        denominators = jnp.where(live, squares + damping, 1)
        norm = jnp.sqrt(jnp.sum(numerators / denominators**2))
        return norm, jnp.sum(numerators / denominators**3)

    def newton(_, damping):
        norm, slope = norm_and_slope(damping)
        # A radius that is not positive and finite comes with a restart, which ignores this damping:
        # 0, not a NaN (whose derivative would be NaN).
        usable = (radius > 0) & jnp.isfinite(radius)
        step = divide(norm * norm / jnp.where(slope > 0, slope, 1) * (norm - radius), radius)
        step = jnp.where(usable, step, 0)
        return jnp.maximum(damping + step, 0)

    zero = jnp.zeros((), squares.dtype)
    inside = norm_and_slope(zero)[0] <= 1.1 * radius
    damping = jax.lax.fori_loop(0, DAMPING_ITERATIONS, newton, zero)
    return jnp.where(inside, zero, damping)


# The first damping of `LevenbergMarquardt(factor=None)` where `tau` is not given.
DEFAULT_TAU = 1e-3


class LevenbergMarquardtState(eqx.Module):
    damping: Float[Array, ""]  # lambda of the last step, in the matrix dtype
    radius: Float[Array, ""]  # Delta, the bound on |D^(1/2) d| the last step was solved for
    started: Bool[Array, ""]  # whether Delta was set (the first `compute` sets it)
    value: Float[Array, ""]  # f_k = 0.5 |r_k|^2 at the last `compute`'s point
    scale: Float[Array, " n"]  # D^(1/2): the running maximum of J's column norms
    basis: Float[Array, "n n"]  # V': the right singular vectors of J D^(-1/2), by rows
    singular: Float[Array, " n"]  # its singular values s
    projected: Float[Array, " n"]  # U'r: the residuals on its left singular vectors
    direction: Float[Array, " n"]  # d, the direction the last `compute` returned
    predicted: Float[Array, ""]  # L(0) - L(s) of the step s `update` accepted since
    fraction: Float[Array, ""]  # alpha = s'd / d'd of that step (1: the unit step)
    length: Float[Array, ""]  # |D^(1/2) s| of that step
    stepped: Bool[Array, ""]  # whether that step awaits the next `compute`
    # Jacobian-vector products of `compute` since init (none where the solver hands it J)
    num_jvp: Int[Array, ""]


class LevenbergMarquardt(AbstractDenseLeastSquares):
    """The Levenberg-Marquardt direction for f = 0.5 |r(x)|^2, a trust region whose radius the line
    search's outcome also sets:

        d = -(J'J + lambda D)^-1 J'r,  the minimiser of |r + J d|^2 + lambda |D^(1/2) d|^2,

    D = diag(J'J) as Moré's running maximum (J. J. Moré, "The Levenberg-Marquardt algorithm:
    implementation and theory", Numerical Analysis, Dundee 1977, LNM 630, 1978): each parameter's
    largest column norm of J so far (floored at sqrt(eps) times the largest), making d invariant
    under scaling the parameters. d comes from the SVD of J D^(-1/2) (never J'J, whose condition
    number is J's squared; singular values below eps s_max max(m, n) dropped), in `GaussNewton`'s
    matrix dtype. lambda is Moré's: 0 where the Gauss-Newton step has |D^(1/2) d| <= 1.1 Delta,
    else the root of |D^(1/2) d(lambda)| = Delta by `DAMPING_ITERATIONS` Newton iterations on 1 /
    |D^(1/2) d(lambda)| - 1 / Delta (Hebden's scheme).

    The first step (and after `reset`, or Delta rounded to 0) takes MINPACK lmder's radius Delta
    = factor |D^(1/2) x| (factor where that is 0; lmder recommends [0.1, 100]), or with
    `factor=None` the damping `tau` (1e-3 unless given): lambda = tau, Delta = |D^(1/2) d(tau)|.
    After a step s = alpha d, with rho = (f(x) - f(x + s)) / (L(0) - L(s)), L(s) = 0.5 |r + J
    s|^2, Delta becomes |D^(1/2) s| / 2 if rho < 1/4; 2 |D^(1/2) s| if rho > 3/4 or lambda was 0
    (Moré's rule); else it stays, or is |D^(1/2) s| where the search cut the unit step (alpha <
    0.9, standing in for rejected trust-region trials; with `factor=None` whatever rho), applied
    at the next `compute`.

    `factor=1.0` solves all 16 higher-difficulty NIST runs in float64
    (benchmarks/suite/least_squares.py), MGH10 from start 1 among them, where the `tau` start
    reaches b1 < 0 and the flat asymptote. With it `Solver` defaults to `gtol=0`, `ftol=1e-10` on
    MINPACK's test and `CONVERGED_PRECISION` for a step within f's rounding
    (docs/getting-started.md, "Stopping"; benchmarks/studies/least_squares_defaults.py), and to
    `Backtracking(epsilon=0)` for the rejected steps; the unit step is tried first (`scaled`).
    `reset` forgets Delta and D; after `gradient_replaced` the gain ratio is not used.
    """

    factor: float | None = eqx.field(static=True, default=1.0)
    tau: float | None = eqx.field(static=True, default=None)  # with factor=None: 1e-3 if None

    supports_bounds: ClassVar[bool] = False

    def __check_init__(self):
        if self.tau is not None and self.factor is not None:
            raise ValueError(
                "LevenbergMarquardt: tau is the first damping of the start without a radius "
                f"factor; pass factor=None with it (factor is {self.factor})."
            )
        if self.tau is not None and not self.tau > 0:
            raise ValueError(f"LevenbergMarquardt: tau must be positive, got {self.tau}.")
        if self.factor is not None and not self.factor > 0:
            raise ValueError(f"LevenbergMarquardt: factor must be positive, got {self.factor}.")

    def init(self, params, dtype) -> LevenbergMarquardtState:
        kind = at_least_float32(widest_float(*(p.dtype for p in leaves(params))))
        n = sum(p.size for p in leaves(params))
        zero, vector = jnp.zeros((), kind), jnp.zeros((n,), kind)
        return LevenbergMarquardtState(
            damping=zero,
            radius=zero,
            started=jnp.array(False),
            value=zero,
            scale=vector,
            basis=jnp.zeros((n, n), kind),
            singular=vector,
            projected=vector,
            direction=vector,
            predicted=zero,
            fraction=zero,
            length=zero,
            stepped=jnp.array(False),
            num_jvp=jnp.zeros((), jnp.int32),
        )

    def compute(self, state: LevenbergMarquardtState, info: DirectionInfo):
        r, jac, n, products = _jacobian(info, "LevenbergMarquardt")
        kind = r.dtype  # the matrix dtype: the state's (the params'), or the residuals' if wider
        stored = state
        state = jax.tree.map(
            lambda a: a.astype(kind) if jnp.issubdtype(a.dtype, jnp.floating) else a, state
        )
        eps = jnp.finfo(kind).eps
        value = jnp.dot(r, r, precision=HIGHEST) / 2

        squares = jnp.sum(jac * jac, axis=0)
        largest = jnp.max(squares)
        scale = jnp.sqrt(jnp.maximum(squares, jnp.where(largest > 0, eps * largest, 1)))
        scale = jnp.where(state.started, jnp.maximum(scale, state.scale), scale)
        scaled = jac / scale
        if scaled.shape[0] < n:  # fewer residuals than unknowns: n singular values all the same
            scaled = jnp.pad(scaled, ((0, n - scaled.shape[0]), (0, 0)))
            r = jnp.pad(r, (0, n - r.shape[0]))
        left, singular, basis = jnp.linalg.svd(scaled, full_matrices=False)
        projected = jnp.matmul(left.T, r, precision=HIGHEST)
        cut = eps * jnp.max(singular) * max(scaled.shape)

        # Delta from the step recorded since the last compute (Moré's rule, and the search's).
        gain = state.predicted > 0
        rho = jnp.where(gain, (state.value - value) / jnp.where(gain, state.predicted, 1), -1)
        shortened = state.fraction < 0.9  # the search cut the unit step
        kept = jnp.where(shortened, state.length, state.radius)  # MINPACK: the shrunk Delta
        radius = jnp.where(
            rho < 0.25,
            state.length / 2,
            jnp.where((rho > 0.75) | (state.damping == 0), 2 * state.length, kept),
        )
        if self.factor is None:
            radius = jnp.where(shortened, state.length, radius)
        radius = jnp.where(state.stepped, radius, state.radius)
        # The first step (after `reset`, or a radius rounded to 0): from tau, or factor |D^(1/2) x|.
        restart = ~state.started | ~(radius > 0) | ~jnp.isfinite(radius)
        if self.factor is not None:
            size = safe_sqrt(jnp.sum(jnp.square(scale * flatten_tree(info.x, kind))))  # x = 0
            first = self.factor * jnp.where(size > 0, size, 1)
            radius = jnp.where(restart, first, radius)
        damping = _damping_for(singular, projected, radius, cut)
        if self.factor is None:
            tau = DEFAULT_TAU if self.tau is None else self.tau
            damping = jnp.where(restart, jnp.asarray(tau, kind), damping)
        filtered = jnp.where(singular > cut, singular / (singular * singular + damping), 0)
        step = -filtered * projected  # d = D^(-1/2) V step
        if self.factor is None:
            radius = jnp.where(restart, jnp.sqrt(jnp.sum(step * step)), radius)
        d = jnp.matmul(basis.T, step, precision=HIGHEST) / scale
        new = LevenbergMarquardtState(
            damping=damping,
            radius=radius,
            started=jnp.array(True),
            value=value,
            scale=scale,
            basis=basis,
            singular=singular,
            projected=projected,
            direction=d,
            predicted=jnp.zeros((), kind),
            fraction=jnp.zeros((), kind),
            length=jnp.zeros((), kind),
            stepped=jnp.array(False),
            num_jvp=state.num_jvp + jnp.array(products, jnp.int32),
        )
        state = jax.tree.map(lambda a, like: a.astype(like.dtype), new, stored)
        return unflatten_tree(d, info.grad), jnp.array(True), state, no_limit(info.dtype)

    def update(self, state: LevenbergMarquardtState, s, y, dtype, accept=True):
        kind = state.basis.dtype
        step = flatten_tree(s, kind)
        scaled = state.scale * step
        # L(0) - L(s) = -(J s)'r - 0.5 |J s|^2 with J s = U z, z = diag(s) V' D^(1/2) s
        z = state.singular * jnp.matmul(state.basis, scaled, precision=HIGHEST)
        predicted = -jnp.dot(z, state.projected, precision=HIGHEST) - jnp.dot(z, z) / 2
        norm = jnp.dot(state.direction, state.direction, precision=HIGHEST)
        fraction = jnp.dot(step, state.direction, precision=HIGHEST) / jnp.where(norm > 0, norm, 1)
        length = safe_sqrt(jnp.dot(scaled, scaled))  # s = 0 at a step's first evaluation
        accept = jnp.asarray(accept)
        return eqx.tree_at(
            lambda t: (t.predicted, t.fraction, t.length, t.stepped),
            state,
            (
                jnp.where(accept, predicted, state.predicted).astype(kind),
                jnp.where(accept, fraction, state.fraction).astype(kind),
                jnp.where(accept, length, state.length).astype(kind),
                accept | state.stepped,
            ),
        )

    def reset(self, state: LevenbergMarquardtState) -> LevenbergMarquardtState:
        return eqx.tree_at(
            lambda t: (t.started, t.stepped), state, (jnp.array(False), jnp.array(False))
        )

    def gradient_replaced(self, state: LevenbergMarquardtState) -> LevenbergMarquardtState:
        return eqx.tree_at(lambda t: t.stepped, state, jnp.array(False))
