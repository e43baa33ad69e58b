"""Matrix-free Gauss-Newton: conjugate gradients on J'J products, for large least squares."""

from typing import ClassVar

import equinox as eqx
import jax
import jax.tree_util as jtu
from jaxtyping import Array, Int

from .._misc import as_int, scalar
from ._base import AbstractLeastSquares, AbstractMemorylessDirection, DirectionInfo
from ._least_squares import residuals_of
from ._newton_cg import CGExit, NewtonCG


class GaussNewtonCGState(eqx.Module):
    """Diagnostics only: matrix-free Gauss-Newton keeps no information between steps."""

    cg_steps: Int[Array, ""]  # CG updates taken in the last `compute`
    exit: Int[Array, ""]  # a CGExit code: why the last inner loop stopped
    num_products: Int[Array, ""]  # products v -> J'(J v), one JVP and one VJP each, since init


class GaussNewtonCG(AbstractLeastSquares, AbstractMemorylessDirection):
    """The Gauss-Newton direction for f = 0.5 |r(x)|^2 without forming the Jacobian J:
    d solves

        (J'J + mu I) d = -J'r

    approximately, by conjugate gradients (CG) on products v -> J'(J v) + mu v. Each step
    linearises the residuals once (`jax.linearize`: one evaluation of r and a stored
    tangent map) and each CG iteration applies that map (J v, a JVP) and its transpose
    (`jax.linear_transpose`: J'w, a VJP): no m x n array is formed, so memory grows as a few
    copies of x and r, not as m n. (Inexact Gauss-Newton: Nocedal & Wright, *Numerical
    Optimization*, 2nd ed., sections 7.1 and 10.3; the CG loop is `NewtonCG`'s, with J'J + mu I
    in place of the Hessian.)

    The CG loop, its stopping rule and its exits are `NewtonCG`'s, with the same fields:
    from z_0 = 0 it stops when |(J'J + mu I) z_j + g|_2 < eta_k |g|_2 (g = J'r, eta_k from
    `forcing` and `eta_max` as in `NewtonCG`; here the default is the constant eta = 1e-4,
    near the exact Gauss-Newton step, whose unit step is what makes Gauss-Newton fast), after
    `max_cg_steps` updates (default min(2n, 50), n the number of parameters), at a
    non-positive curvature p'(J'J + mu I)p <= 0 (only by rounding: p stays in the range of
    J', where J p != 0) or at a non-finite value; d is the last accepted iterate, or -g if none was
    accepted. Descent: J'J + mu I is positive semidefinite, and every CG iterate z_j with
    j >= 1 minimises the model q(z) = 0.5 z'(J'J + mu I)z + g'z over a Krylov space that
    contains -g, so g'z_j = -z_j'(J'J + mu I)z_j < 0: a CG loop cut short (by the tolerance,
    the iteration limit or a bad curvature) still returns a descent direction.

    `damping` is mu >= 0, absolute (in the units of J'J). mu = 0 (the default) is
    Gauss-Newton: where J'J is singular CG from 0 stays in the range of J' (g lies there) and
    tends to the least-norm Gauss-Newton step, `GaussNewton`'s; a zero curvature from
    rounding ends the loop with the last iterate. mu > 0 makes the system positive definite
    and shortens the step (Levenberg's damping, fixed; `LevenbergMarquardt` adapts it).

    Dense or CG: `GaussNewton` forms J from n JVPs and solves by an SVD, O(m n^2) work and m n
    memory per step, exact; prefer it up to a few hundred unknowns. Beyond, or where m n
    numbers do not fit in memory, use `GaussNewtonCG`: a step costs one linearisation and
    at most `max_cg_steps` JVP + VJP pairs.

    Work vectors and CG scalars are in at least float32 as in `NewtonCG`; the products run in
    the params' and residuals' own dtypes. `scaled` is True (the line search tries the unit
    step first) except when d = -g. The state holds diagnostics only.
    """

    damping: float = eqx.field(static=True, default=0.0)
    forcing: str | float = eqx.field(static=True, default=1e-4)
    eta_max: float = eqx.field(static=True, default=0.5)
    max_cg_steps: int | None = eqx.field(static=True, default=None, converter=as_int)

    supports_bounds: ClassVar[bool] = False

    def __check_init__(self):
        if isinstance(self.damping, bool) or not (
            isinstance(self.damping, int | float) and self.damping >= 0
        ):
            raise ValueError(f"GaussNewtonCG: damping must be >= 0, got {self.damping!r}.")
        self._cg()  # checks forcing, eta_max and max_cg_steps as NewtonCG does

    def _cg(self) -> NewtonCG:
        return NewtonCG(self.forcing, self.eta_max, self.max_cg_steps)

    def init(self, params, dtype) -> GaussNewtonCGState:
        zero = scalar(0, "int32")
        return GaussNewtonCGState(
            cg_steps=zero, exit=scalar(CGExit.CONVERGED, "int32"), num_products=zero
        )

    def compute(self, state: GaussNewtonCGState, info: DirectionInfo):
        residuals = residuals_of(info, "GaussNewtonCG")
        _, linear = jax.linearize(residuals, info.x)
        transpose = jax.linear_transpose(linear, info.x)
        mu = self.damping

        def product(v):
            (jtjv,) = transpose(linear(v))
            if mu == 0:
                return jtjv
            return jtu.tree_map(lambda a, b: a + (mu * b).astype(a.dtype), jtjv, v)

        cg = self._cg()
        d, scaled, inner, limit = cg.compute(
            cg.init(info.x, info.dtype), info._replace(hvp=product)
        )
        new_state = GaussNewtonCGState(
            cg_steps=inner.cg_steps,
            exit=inner.exit,
            num_products=state.num_products + inner.num_hvp,
        )
        return d, scaled, new_state, limit
