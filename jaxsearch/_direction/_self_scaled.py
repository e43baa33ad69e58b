"""Self-scaled BFGS and Broyden directions (Al-Baali 1998; Al-Baali & Khalfan 2005), dense, for
small problems: behind the most accurate PINN fits in float64 (Urbán, Stefanou & Pons, J. Comput.
Phys. 2025; Kiyani et al., arXiv 2501.16371)."""

import abc
from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, Scalar

from .._misc import divide, safe_sqrt, scalar
from ._base import AbstractDirection, DirectionInfo, no_limit
from ._bfgs import HIGHEST, check_curvature_eps, identity_and_guard, usable_pair
from ._flat import flatten_tree, unflatten_tree


class SelfScaledState(eqx.Module):
    inv_hessian: Float[Array, "n n"]  # H_k, n = total size of params, in the matrix dtype
    grad: Float[Array, " n"]  # g_k, the gradient the last `compute` saw
    curvature: Scalar  # g_k' H_k g_k
    count: Int[Array, ""]  # pairs stored since init or the last reset
    eps: Scalar  # curvature-guard epsilon, in the matrix dtype


class AbstractSelfScaled(AbstractDirection):
    """A dense member of the self-scaled Broyden family, d = -H_k g_k. After a step s = x_{k+1} -
    x_k, y = g_{k+1} - g_k,

        H_{k+1} = (H_k - H y y'H / y'Hy + phi_k (y'Hy) v v') / tau_k + s s' / s'y,
        v = s / s'y - H y / y'Hy,

    tau_k and phi_k (1: BFGS, 0: DFP) from `scaling(b, h, n)`, b = s'B_k s / s'y (= (s'g_k)^2 /
    (g_k'H_k g_k s'y), no inverse formed), h = y'H_k y / s'y; H_{k+1} y = s for every tau, phi;
    H_0 = I, unscaled. A pair is used only if it passes `BFGS`'s curvature guard and b, h, tau,
    phi and the new matrix are finite with b, h > 0. Work in the widest param dtype, at least
    float32; the state is n x n; `scaled` once a pair is stored. Pair it with a Wolfe search
    (`Zoom`, `MoreThuente`), as the papers do.
    """

    supports_bounds: ClassVar[bool] = False
    curvature_eps: eqx.AbstractVar[float | None]

    @abc.abstractmethod
    def scaling(self, b: Scalar, h: Scalar, n: int) -> tuple[Scalar, Scalar]:
        """(tau_k, phi_k) for b, h > 0 and the problem size n."""

    def init(self, params, dtype) -> SelfScaledState:
        eye, eps = identity_and_guard(params, self.curvature_eps)
        return SelfScaledState(
            inv_hessian=eye,
            grad=jnp.zeros(eye.shape[:1], eye.dtype),
            curvature=scalar(0, eye.dtype),
            count=scalar(0, jnp.int32),
            eps=eps,
        )

    def compute(self, state, info: DirectionInfo):
        h = state.inv_hessian
        g = flatten_tree(info.grad, h.dtype)
        hg = jnp.matmul(h, g, precision=HIGHEST)
        state = eqx.tree_at(
            lambda t: (t.grad, t.curvature), state, (g, jnp.dot(g, hg, precision=HIGHEST))
        )
        return unflatten_tree(-hg, info.grad), state.count > 0, state, no_limit(info.dtype)

    def update(self, state, s, y, dtype, accept=True) -> SelfScaledState:
        h = state.inv_hessian
        kind = h.dtype
        s, y = flatten_tree(s, kind), flatten_tree(y, kind)
        usable, sy, _ = usable_pair(s, y, state.eps, accept)
        hy = jnp.matmul(h, y, precision=HIGHEST)
        yhy = jnp.dot(y, hy, precision=HIGHEST)
        sg = jnp.dot(s, state.grad, precision=HIGHEST)
        # The curvature g'H g is 0 before the first direction (and where g = 0), where the
        # quotient is not finite and the pair not used. b = 0 there keeps the pair unusable
        # (b > 0 fails) and finite: sg * inf would make the derivative of sg NaN.
        quotient = divide(sg, state.curvature * sy)
        b = sg * jnp.where(jnp.isfinite(quotient), quotient, 0)
        c = yhy / sy
        usable = usable & jnp.isfinite(b) & (b > 0) & jnp.isfinite(c) & (c > 0)
        # Divisors of 1 where the pair is not used, so that no quotient (or its derivative)
        # is NaN in an update that is then discarded.
        b, c, yhy = (jnp.where(usable, v, 1) for v in (b, c, yhy))
        tau, phi = self.scaling(b, c, h.shape[0])
        usable = usable & jnp.isfinite(tau) & (tau > 0) & jnp.isfinite(phi)
        tau, phi = jnp.where(usable, tau, 1), jnp.where(usable, phi, 1)

        rs = s / sy  # s / s'y first, so that (s'y)^2 never overflows on its own
        old = (
            h - (1 - phi) * jnp.outer(hy, hy / yhy) - phi * (jnp.outer(rs, hy) + jnp.outer(hy, rs))
        )
        new = (old + (phi * yhy) * jnp.outer(rs, rs)) / tau + jnp.outer(rs, s)
        new = (new + new.T) / 2
        keep = usable & jnp.all(jnp.isfinite(new))
        return SelfScaledState(
            inv_hessian=jnp.where(keep, new, h),
            grad=state.grad,
            curvature=state.curvature,
            count=(state.count + keep.astype(jnp.int32)).astype(jnp.int32),
            eps=state.eps,
        )

    def reset(self, state) -> SelfScaledState:
        """H = I; the solver then steps along -g, so the next pair's b divides by g'I g."""
        h = state.inv_hessian
        return eqx.tree_at(
            lambda t: (t.inv_hessian, t.count, t.curvature),
            state,
            (
                jnp.eye(h.shape[0], dtype=h.dtype),
                jnp.zeros_like(state.count),
                jnp.dot(state.grad, state.grad, precision=HIGHEST),
            ),
        )

    def gradient_replaced(self, state):
        return state  # the next `compute` records the gradient the next pair starts from


class SSBFGS(AbstractSelfScaled):
    """Self-scaled BFGS (Al-Baali, J. Optim. Theory Appl. 96, 1998): phi_k = 1, tau_k = min(1,
    1/b_k), scaling H up where the step's curvature says H_k is too small; tau_k = 1 is `BFGS`'s
    update without its initial scaling. Update and guards: `AbstractSelfScaled`; `curvature_eps`
    as `BFGS`'s."""

    curvature_eps: float | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        check_curvature_eps("SSBFGS", self.curvature_eps)

    def scaling(self, b, h, n):
        return jnp.minimum(1, 1 / b), jnp.ones_like(b)


class SSBroyden(AbstractSelfScaled):
    """Self-scaled Broyden (Al-Baali & Khalfan, "A wide interval for efficient self-scaling
    quasi-Newton algorithms", Optim. Methods Softw. 20, 2005), with Urbán, Stefanou & Pons's
    (2025) rules for PINNs. With a = b h - 1 (>= 0), c = sqrt(a / (1 + a)),

        rho- = min(1, h (1 - c)),  theta- = (rho- - 1) / a,  theta+ = 1 / rho-,
        theta = max(theta-, min(theta+, (1 - b) / b)),  sigma = 1 + a theta,
        rho+ = min(1, 1 / b),
        tau = min(rho+ sigma^(-1/(n-1)), sigma) if theta <= 0
              else rho+ min(sigma^(-1/(n-1)), 1 / theta),
        phi = (1 - theta) / sigma

    (theta on B: 0 is BFGS, 1 DFP); theta- = -inf where a = 0; the power term is 1 for n = 1.
    Update and guards: `AbstractSelfScaled`; `curvature_eps` as `BFGS`'s.
    """

    curvature_eps: float | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        check_curvature_eps("SSBroyden", self.curvature_eps)

    def scaling(self, b, h, n):
        a = jnp.maximum(b * h - 1, 0)
        c = safe_sqrt(a / (1 + a))  # a = 0 where y = B s: no inf in the derivative
        rho_minus = jnp.minimum(1, h * (1 - c))
        theta_minus = jnp.where(a > 0, (rho_minus - 1) / jnp.where(a > 0, a, 1), -jnp.inf)
        theta = jnp.maximum(theta_minus, jnp.minimum(1 / rho_minus, (1 - b) / b))
        sigma = 1 + a * theta
        rho_plus = jnp.minimum(1, 1 / b)
        power = sigma ** (-1 / (n - 1)) if n > 1 else jnp.ones_like(sigma)
        positive = theta > 0
        tau = jnp.where(
            positive,
            rho_plus * jnp.minimum(power, 1 / jnp.where(positive, theta, 1)),
            jnp.minimum(rho_plus * power, sigma),
        )
        return tau, (1 - theta) / sigma
