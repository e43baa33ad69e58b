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
    """The Gauss-Newton direction for f = 0.5 |r(x)|^2 without forming J: d solves (J'J + mu I) d =
    -J'r approximately by `NewtonCG`'s conjugate gradient loop on v -> J'(J v) + mu v (inexact
    Gauss-Newton: Nocedal & Wright, 2nd ed., sections 7.1 and 10.3). Each step linearises r once
    (`jax.linearize`), each CG iteration is a JVP and a VJP (`jax.linear_transpose`): no m x n
    array, memory a few copies of x and r. Prefer `GaussNewton` (n JVPs and an SVD: O(m n^2)
    work, m n memory, exact) up to a few hundred unknowns.

    The loop's stopping rule, exits, fields and precision are `NewtonCG`'s (g = J'r, `eta_max` as
    there), but `forcing` defaults to the constant 1e-4, near the exact step whose unit step
    makes Gauss-Newton fast, and non-positive curvature happens only by rounding; `max_cg_steps`
    defaults to min(2n, 50). Every CG iterate z_j, j >= 1, minimises 0.5 z'(J'J + mu I)z + g'z
    over a Krylov space containing -g, so g'z_j < 0: a loop cut short still descends. `damping`
    is mu >= 0, absolute (J'J's units): 0 (the default) is Gauss-Newton, tending to
    `GaussNewton`'s least-norm step where J'J is singular; mu > 0 shortens the step (Levenberg's
    fixed damping; `LevenbergMarquardt` adapts it). The products run in the params' and
    residuals' own dtypes. `scaled` except where d = -g.
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
