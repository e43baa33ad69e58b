"""Dense BFGS (Broyden, Fletcher, Goldfarb, Shanno, 1970), for small problems."""

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Float, Int, PyTree, Scalar

from .._misc import at_least_float32, dtype_eps, leaves, scalar, widest_float
from ._base import AbstractDirection, DirectionInfo, no_limit
from ._flat import flatten_tree, unflatten_tree

HIGHEST = lax.Precision.HIGHEST  # no reduced-precision (e.g. TF32) matrix products


class BFGSState(eqx.Module):
    inv_hessian: Float[Array, "n n"]  # H_k, n = total size of params, in the matrix dtype
    count: Int[Array, ""]  # pairs stored since init or the last reset
    eps: Scalar  # curvature-guard epsilon, in the matrix dtype


def matrix_dtype(tree: PyTree):
    """The widest leaf dtype of `tree`, widened to at least float32."""
    return at_least_float32(widest_float(*(x.dtype for x in leaves(tree))))


def check_curvature_eps(owner: str, eps: float | None) -> None:
    if eps is not None and not eps >= 0:
        raise ValueError(f"{owner}: curvature_eps must be non-negative, got {eps}.")


def identity_and_guard(params: PyTree, curvature_eps: float | None) -> tuple[Array, Scalar]:
    """H_0 = I (n x n, in `matrix_dtype`) and the curvature guard's eps: `curvature_eps`, else the
    least precise leaf's machine epsilon."""
    kind = matrix_dtype(params)
    n = sum(x.size for x in leaves(params))
    eps = dtype_eps(params) if curvature_eps is None else curvature_eps
    return jnp.eye(n, dtype=kind), scalar(eps, kind)


def usable_pair(s: Array, y: Array, eps: Scalar, accept) -> tuple[Array, Scalar, Scalar]:
    """(usable, s'y, y'y): usable where `accept`, s'y > eps |s| |y| and s'y, y'y finite with y'y >
    0; else s'y and y'y are 1, so no derivative through quotients by them is NaN (the update also
    runs for pairs it does not take)."""
    sy = jnp.dot(s, y, precision=HIGHEST)
    ss = jnp.dot(s, s, precision=HIGHEST)
    yy = jnp.dot(y, y, precision=HIGHEST)
    guard = sy > eps * jnp.sqrt(ss) * jnp.sqrt(yy)
    usable = guard & jnp.isfinite(sy) & jnp.isfinite(yy) & (yy > 0) & accept
    return usable, jnp.where(usable, sy, 1), jnp.where(usable, yy, 1)


class BFGS(AbstractDirection):
    """BFGS direction d = -H_k g_k with a dense inverse-Hessian approximation H_k. After a step s =
    x_{k+1} - x_k, y = g_{k+1} - g_k, rho = 1 / s'y,

        H_{k+1} = (I - rho s y') H_k (I - rho y s') + rho s s'

    (Nocedal & Wright, 2nd ed., eq. 6.17), in the O(n^2) form H - rho (s (Hy)' + (Hy) s') + rho
    (1 + rho y'Hy) s s', symmetrised. H_0 = I, replaced by (y's / y'y) I just before the first
    pair is stored (N&W eq. 6.20), and after `reset`. A pair is used only where s'y > eps |s| |y|
    and s'y, y'y and the new matrix are finite (keeping H positive definite); `eps` is
    `curvature_eps`, else the least precise leaf's machine epsilon (as `LBFGS`). The state is n x
    n over all leaves ravelled (small n; `LBFGS` for large), in the widest leaf dtype, at least
    float32. `scaled` once a pair is stored.
    """

    supports_bounds: ClassVar[bool] = False

    curvature_eps: float | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        check_curvature_eps("BFGS", self.curvature_eps)

    def init(self, params, dtype) -> BFGSState:
        eye, eps = identity_and_guard(params, self.curvature_eps)
        return BFGSState(inv_hessian=eye, count=scalar(0, jnp.int32), eps=eps)

    def compute(self, state, info: DirectionInfo):
        h = state.inv_hessian
        g = flatten_tree(info.grad, h.dtype)
        d = -jnp.matmul(h, g, precision=HIGHEST)
        return unflatten_tree(d, info.grad), state.count > 0, state, no_limit(info.dtype)

    def update(self, state, s, y, dtype, accept=True) -> BFGSState:
        h = state.inv_hessian
        kind = h.dtype
        s, y = flatten_tree(s, kind), flatten_tree(y, kind)
        usable, sy, yy = usable_pair(s, y, state.eps, accept)

        eye = jnp.eye(h.shape[0], dtype=kind)
        base = jnp.where(state.count == 0, (sy / yy) * eye, h)  # N&W eq. 6.20 before the first
        rho = 1 / sy
        hy = jnp.matmul(base, y, precision=HIGHEST)
        yhy = jnp.dot(y, hy, precision=HIGHEST)
        rs = rho * s  # rho is applied to s first so that rho^2 never overflows on its own
        new = base - jnp.outer(rs, hy) - jnp.outer(hy, rs) + (1 + rho * yhy) * jnp.outer(rs, s)
        new = (new + new.T) / 2

        keep = usable & jnp.isfinite(yhy) & jnp.all(jnp.isfinite(new))
        return BFGSState(
            inv_hessian=jnp.where(keep, new, h),
            count=(state.count + keep.astype(jnp.int32)).astype(jnp.int32),
            eps=state.eps,
        )

    def reset(self, state) -> BFGSState:
        h = state.inv_hessian
        return BFGSState(
            inv_hessian=jnp.eye(h.shape[0], dtype=h.dtype),
            count=jnp.zeros_like(state.count),
            eps=state.eps,
        )

    def gradient_replaced(self, state):
        return state  # nothing relies on the order of gradients
