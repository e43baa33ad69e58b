"""An Adam-like diagonally preconditioned direction, for line searches on mini-batches."""

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
from jaxtyping import Array, Int, PyTree

from .._misc import Setting, at_least_float32, check_setting, safe_sqrt, zeros_sharded_like
from ._base import AbstractDirection, DirectionInfo, no_limit


class PreconditionedState(eqx.Module):
    """Adam's moment estimates, each leaf in its params leaf's dtype widened to at least
    float32 (a float16 g^2 would overflow above 256 and flush to 0 below 2.4e-4)."""

    mu: PyTree  # first moment m
    nu: PyTree  # second moment v
    nu_max: PyTree | None  # AMSGrad: the largest bias-corrected v so far (None without)
    count_mu: Int[Array, ""]  # gradients in m since the last reset (its bias correction)
    count_nu: Int[Array, ""]  # gradients in v


def _increment(count: Int[Array, ""]) -> Int[Array, ""]:
    """count + 1, saturating at the int32 maximum."""
    return jnp.where(count < np.iinfo(np.int32).max, count + 1, count).astype(count.dtype)


class Preconditioned(AbstractDirection):
    """d = -m_hat / (sqrt(v_hat) + eps), Adam's step (Kingma & Ba, "Adam: A Method for Stochastic
    Optimization", ICLR 2015, algorithm 1) as a direction for a line search. At each `compute`,
    with g the gradient and k the gradients seen (per coordinate):

        m = b1 m + (1 - b1) g,        v = b2 v + (1 - b2) g^2,
        m_hat = m / (1 - b1^k),        v_hat = v / (1 - b2^k),

    with `amsgrad` v_hat the largest so far (Reddi, Kale & Kumar, ICLR 2018, as
    `optax.scale_by_amsgrad`); m, v and k follow `optax.scale_by_adam` exactly, also at a step
    that fails (`update` does nothing). With D = diag(sqrt(v_hat) + eps), phi'(0) = -<g, D^{-1}
    m_hat>. `scaled` is False; no bounds; the moments cost two (three with `amsgrad`) copies of
    params in at least float32. Without momentum (`b1 = 0`, the default) d = -D^{-1} g always
    descends and Armijo's test is in the preconditioned norm: AdaSLS of Vaswani, Laradji,
    Kunstner, Meng, Schmidt & Lacoste-Julien, "Adaptive Gradient Methods Converge Faster with
    Over-Parameterization (but you should do a line-search)", 2020, as their experiments run it
    (b2 = 0.99 and `amsgrad` in their AMSGrad variant). With momentum the search is along -D^{-1}
    m_hat with its own slope (not AdaSLS's momentum, which moves to a point its search never
    evaluated); on mini-batches such steps raised `StochasticArmijo`'s training loss
    (docs/stochastic.md), hence the default. Where d points uphill the solver takes -g and calls
    `reset`, which forgets m and restarts its bias correction but keeps v, each coordinate's
    scale (forgetting it would give sign descent from one batch).

    **Arguments:** `b1`, the first moment's decay in [0, 1) (default 0: no momentum); `b2`, the
    second's, in [0, 1); `eps`, added to sqrt(v_hat), >= 0; `amsgrad`: use the largest v_hat so
    far (static).
    """

    supports_bounds: ClassVar[bool] = False

    b1: Setting = 0.0
    b2: Setting = 0.999
    eps: Setting = 1e-8
    amsgrad: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        name = "Preconditioned"
        check_setting(name, "b1", self.b1, lambda v: 0 <= v < 1, "lie in [0, 1)")
        check_setting(name, "b2", self.b2, lambda v: 0 <= v < 1, "lie in [0, 1)")
        check_setting(name, "eps", self.eps, lambda v: 0 <= v < float("inf"), "be >= 0")
        if not isinstance(self.amsgrad, bool):
            raise TypeError(f"Preconditioned: amsgrad must be a bool, got {self.amsgrad!r}.")

    def init(self, params, dtype) -> PreconditionedState:
        def zeros(x):
            return zeros_sharded_like(x, at_least_float32(x.dtype))

        count = jnp.zeros((), jnp.int32)
        return PreconditionedState(
            mu=jtu.tree_map(zeros, params),
            nu=jtu.tree_map(zeros, params),
            nu_max=jtu.tree_map(zeros, params) if self.amsgrad else None,
            count_mu=count,
            count_nu=count,
        )

    def compute(self, state: PreconditionedState, info: DirectionInfo):
        grad, dtype = info.grad, info.dtype
        count_mu, count_nu = _increment(state.count_mu), _increment(state.count_nu)

        def first(m, g):
            return (self.b1 * m + (1 - self.b1) * g.astype(m.dtype)).astype(m.dtype)

        def second(v, g):
            g = g.astype(v.dtype)
            return (self.b2 * v + (1 - self.b2) * (g * g)).astype(v.dtype)

        mu = jtu.tree_map(first, state.mu, grad)
        nu = jtu.tree_map(second, state.nu, grad)
        # 1 - b^k in the scalars' dtype (at least float32), then per leaf in its moment's.
        correct_mu = 1 - jnp.power(jnp.asarray(self.b1, dtype), count_mu.astype(dtype))
        correct_nu = 1 - jnp.power(jnp.asarray(self.b2, dtype), count_nu.astype(dtype))

        def unbiased(v):
            return (v / correct_nu.astype(v.dtype)).astype(v.dtype)

        nu_hat = jtu.tree_map(unbiased, nu)
        nu_max = state.nu_max
        if nu_max is not None:
            nu_max = jtu.tree_map(jnp.maximum, nu_max, nu_hat)
            nu_hat = nu_max

        def step(m, v, g):
            m_hat = m / correct_mu.astype(m.dtype)
            # v = 0 where a gradient entry has been 0 so far: no inf in the derivative there
            return (-m_hat / (safe_sqrt(v) + self.eps)).astype(g.dtype)

        d = jtu.tree_map(step, mu, nu_hat, grad)
        new = PreconditionedState(mu, nu, nu_max, count_mu, count_nu)
        return d, jnp.array(False), new, no_limit(dtype)

    def update(self, state, s, y, dtype, accept=True) -> PreconditionedState:
        return state

    def reset(self, state: PreconditionedState) -> PreconditionedState:
        mu = jtu.tree_map(jnp.zeros_like, state.mu)
        return PreconditionedState(
            mu, state.nu, state.nu_max, jnp.zeros_like(state.count_mu), state.count_nu
        )

    def gradient_replaced(self, state):
        return state  # nothing relies on the order of gradients
