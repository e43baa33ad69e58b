"""Hessian-free truncated Newton: Newton-CG (Nocedal & Wright, algorithm 7.1)."""

import enum
from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
import jax.tree_util as jtu
from jaxtyping import Array, Int, PyTree

from .._misc import (
    as_int,
    at_least_float32,
    check_count,
    divide,
    leaves,
    scalar,
    select,
    tree_dot,
    widest_float,
)
from ._base import AbstractMemorylessDirection, DirectionInfo, no_limit, run_loop

FORCING_RULES = ("sqrt", "linear")


class CGExit(enum.IntEnum):
    """Why the inner CG loop of the last `NewtonCG.compute` stopped."""

    RUNNING = -1  # internal: the loop goes on
    CONVERGED = 0  # |r| < eps_k (the forcing test), or g = 0
    NEGATIVE_CURVATURE = 1  # p'Hp <= 0
    MAX_STEPS = 2  # the inner iteration limit
    NONFINITE = 3  # Hp, p'Hp or the next iterate not finite


class NewtonCGState(eqx.Module):
    """Diagnostics only: Newton-CG keeps no information between steps."""

    cg_steps: Int[Array, ""]  # CG updates taken in the last `compute` (iterate index j)
    exit: Int[Array, ""]  # a CGExit code: why the last inner loop stopped
    num_hvp: Int[Array, ""]  # Hessian-vector products since init


class _Inner(eqx.Module):
    """Carry of the inner CG loop; vectors in the work dtypes, scalars in one scalar dtype."""

    j: Int[Array, ""]  # accepted CG updates so far
    z: PyTree  # current iterate z_j (the candidate direction)
    r: PyTree  # residual r_j = H z_j + g
    p: PyTree  # CG search direction p_j
    rr: Array  # r_j'r_j
    code: Int[Array, ""]  # CGExit
    hvps: Int[Array, ""]


def _axpy(a, x: PyTree, y: PyTree) -> PyTree:
    """y + a x per leaf, in the (common) leaf dtype of x and y."""
    return jtu.tree_map(lambda xi, yi: yi + a.astype(yi.dtype) * xi, x, y)


class NewtonCG(AbstractMemorylessDirection):
    """Truncated (inexact) Newton direction by conjugate gradients on H d = -g, Hessian-free:
    line-search Newton-CG, Nocedal & Wright, 2nd ed., algorithm 7.1, one Hessian-vector product
    (forward-over-reverse) per inner iteration. From z_0 = 0, r_0 = g, p_0 = -g, for j = 0, 1,
    ...:

    - if p_j'H p_j <= 0: stop with d = -g if j = 0, else d = z_j (a descent direction);
    - alpha_j = r_j'r_j / p_j'H p_j, z_{j+1} = z_j + alpha_j p_j, r_{j+1} = r_j + alpha_j H p_j;
    - if `|r_{j+1}|_2 < eps_k`: stop with d = z_{j+1};
    - beta_{j+1} = r_{j+1}'r_{j+1} / r_j'r_j, p_{j+1} = -r_{j+1} + beta_{j+1} p_j.

    eps_k = eta_k |g|_2 (N&W eq. 7.3 and theorem 7.2; Eisenstat & Walker, SIAM J. Sci. Comput.
    17, 1996): `forcing="sqrt"` (default) eta_k = min(eta_max, sqrt(|g|_2)), superlinear;
    `"linear"` min(eta_max, |g|_2), quadratic; a float c in (0, 1), eta_k = c, linear
    convergence. `eta_max` = 0.5 (N&W; scipy's `Newton-CG` uses 1-norms). The loop also stops
    after `max_cg_steps` updates with d = z_{max_cg_steps} (default min(2n, 50): CG ends within n
    steps in exact arithmetic), and where Hp, p'Hp, alpha, r'r or z_{j+1} is not finite, with d =
    -g if j = 0, else z_j.

    Work vectors are in each leaf's dtype widened to at least float32, CG scalars in the widest
    of these and the scalar dtype, d cast back; the product is taken of p_j / |p_j|_2 (float16
    neither overflows nor underflows) and scaled back. `scaled` except where d = -g from the
    first iteration. The state holds diagnostics only.
    """

    supports_bounds: ClassVar[bool] = False

    forcing: str | float = eqx.field(static=True, default="sqrt")
    eta_max: float = eqx.field(static=True, default=0.5)
    max_cg_steps: int | None = eqx.field(static=True, default=None, converter=as_int)

    def __check_init__(self):
        if isinstance(self.forcing, str):
            if self.forcing not in FORCING_RULES:
                raise ValueError(
                    f"NewtonCG: forcing must be 'sqrt', 'linear' or a float in (0, 1), "
                    f"got {self.forcing!r}."
                )
        elif isinstance(self.forcing, bool) or not isinstance(self.forcing, int | float):
            raise ValueError(
                f"NewtonCG: forcing must be 'sqrt', 'linear' or a float in (0, 1), "
                f"got {self.forcing!r}."
            )
        elif not 0 < self.forcing < 1:
            raise ValueError(
                f"NewtonCG: a constant forcing must lie in (0, 1), got {self.forcing}."
            )
        if not 0 < self.eta_max < 1:
            raise ValueError(f"NewtonCG: eta_max must lie in (0, 1), got {self.eta_max}.")
        if self.max_cg_steps is not None:
            check_count("NewtonCG", "max_cg_steps", self.max_cg_steps)

    def _limit(self, grad) -> int:
        if self.max_cg_steps is not None:
            return self.max_cg_steps
        n = sum(x.size for x in leaves(grad))
        return max(1, min(2 * n, 50))

    def _eta(self, gnorm):
        if self.forcing == "sqrt":
            return jnp.minimum(self.eta_max, jnp.sqrt(gnorm))
        if self.forcing == "linear":
            return jnp.minimum(self.eta_max, gnorm)
        assert not isinstance(self.forcing, str)  # a constant, checked at construction
        return jnp.full((), self.forcing, gnorm.dtype)

    def init(self, params, dtype) -> NewtonCGState:
        zero = scalar(0, jnp.int32)
        return NewtonCGState(cg_steps=zero, exit=scalar(CGExit.CONVERGED, jnp.int32), num_hvp=zero)

    def compute(self, state, info: DirectionInfo):
        grad, dtype, hvp = info.grad, info.dtype, info.hvp
        if hvp is None:
            raise ValueError(
                "NewtonCG needs Hessian-vector products: pass DirectionInfo(..., hvp=hvp) "
                "with hvp(v) = H v (the Solver passes it)."
            )
        limit = self._limit(grad)
        work = jtu.tree_map(lambda g: g.astype(at_least_float32(g.dtype)), grad)
        sdtype = widest_float(dtype, *(x.dtype for x in leaves(work)))
        rr0 = tree_dot(work, work, sdtype)
        gnorm = jnp.sqrt(rr0)
        tol = self._eta(gnorm) * gnorm

        def hessian_times(p, pnorm):
            v = jtu.tree_map(lambda pi, g: (pi / pnorm.astype(pi.dtype)).astype(g.dtype), p, grad)
            hv = hvp(v)
            return jtu.tree_map(lambda h, pi: h.astype(pi.dtype) * pnorm.astype(pi.dtype), hv, p)

        def body(c: _Inner) -> _Inner:
            pnorm = jnp.sqrt(tree_dot(c.p, c.p, sdtype))
            hp = hessian_times(c.p, pnorm)
            curv = tree_dot(c.p, hp, sdtype)
            # Used where curv > 0 only, but it multiplies p and Hp first: 0 elsewhere (rr / 0
            # would make their derivatives NaN).
            alpha = jnp.where(curv > 0, divide(c.rr, curv), 0)
            z = _axpy(alpha, c.p, c.z)
            r = _axpy(alpha, hp, c.r)
            rr = tree_dot(r, r, sdtype)
            finite = jnp.isfinite(alpha) & jnp.isfinite(rr)
            for x in leaves(z):
                finite = finite & jnp.all(jnp.isfinite(x))
            code = jnp.select(
                [~jnp.isfinite(curv), curv <= 0, ~finite, jnp.sqrt(rr) < tol, c.j + 1 >= limit],
                [
                    CGExit.NONFINITE,
                    CGExit.NEGATIVE_CURVATURE,
                    CGExit.NONFINITE,
                    CGExit.CONVERGED,
                    CGExit.MAX_STEPS,
                ],
                CGExit.RUNNING,
            ).astype(jnp.int32)
            accept = (code != CGExit.NONFINITE) & (code != CGExit.NEGATIVE_CURVATURE)
            beta = rr / c.rr
            p = jtu.tree_map(lambda ri, pi: beta.astype(pi.dtype) * pi - ri, r, c.p)
            return _Inner(
                j=c.j + accept.astype(jnp.int32),
                z=select(accept, z, c.z),
                r=select(accept, r, c.r),
                p=select(accept, p, c.p),
                rr=jnp.where(accept, rr, c.rr),
                code=code,
                hvps=c.hvps + 1,
            )

        start = _Inner(
            j=scalar(0, jnp.int32),
            z=jtu.tree_map(jnp.zeros_like, work),
            r=work,
            p=jtu.tree_map(jnp.negative, work),
            rr=rr0,
            # g = 0: d = 0 at once (the solver stops by gtol before it asks for a direction).
            code=jnp.where(rr0 > 0, CGExit.RUNNING, CGExit.CONVERGED).astype(jnp.int32),
            hvps=scalar(0, jnp.int32),
        )
        end = run_loop(info, lambda c: c.code == CGExit.RUNNING, body, start, limit)
        failed = (end.code == CGExit.NEGATIVE_CURVATURE) | (end.code == CGExit.NONFINITE)
        steepest = failed & (end.j == 0)
        d = select(steepest, jtu.tree_map(jnp.negative, work), end.z)
        d = jtu.tree_map(lambda x, g: x.astype(g.dtype), d, grad)
        new_state = NewtonCGState(
            cg_steps=end.j, exit=end.code, num_hvp=(state.num_hvp + end.hvps).astype(jnp.int32)
        )
        return d, ~steepest, new_state, no_limit(dtype)
