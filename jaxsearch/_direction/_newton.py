"""Newton's direction with a modified Hessian (Nocedal & Wright, section 3.4, algorithm 3.3)."""

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jaxtyping import Array, Float, Int

from ._base import AbstractMemorylessDirection, DirectionInfo, no_limit, run_loop
from ._flat import flatten_tree, unflatten_tree

MAX_SHIFTS = 64  # attempts of algorithm 3.3: beta 2^62 is past any finite Hessian's scale


class NewtonState(eqx.Module):
    """Diagnostics only: Newton keeps no information between steps."""

    shift: Float[Array, ""]  # tau of the last `compute`: 0 where H was positive definite
    num_hvp: Int[Array, ""]  # Hessian-vector products since init (n per `compute`)


class Newton(AbstractMemorylessDirection):
    """Newton's direction d = -(H + tau I)^-1 g, for up to a few hundred unknowns (n^2 entries, n^3
    / 3 flops a step: for large n `NewtonCG` or `LBFGS`). H is formed from n Hessian-vector
    products (as `NewtonCG`'s) and symmetrised, in the widest of the scalar dtype, float32 and
    the params' dtype. Where it is not positive definite it is modified by Nocedal & Wright, 2nd
    ed., algorithm 3.3 (Cholesky with added multiple of the identity): tau_0 = 0 if H's diagonal
    is positive, else beta - min_i H_ii; while Cholesky of H + tau_k I fails, tau_{k+1} = max(2
    tau_k, beta), at most `MAX_SHIFTS` times; beta = `beta` times max |H_ii| (`beta` where the
    diagonal is zero), scale free (N&W suggest 1e-3). d descends wherever g != 0 and is the
    Newton step where H is positive definite, so with the unit step tried first (`scaled`)
    convergence is quadratic there (N&W theorem 3.5). A non-finite Hessian gives a non-finite d,
    and the solver steps along -g."""

    beta: float = eqx.field(static=True, default=1e-3)

    supports_bounds: ClassVar[bool] = False

    def __check_init__(self):
        if not 0 < self.beta < 1:
            raise ValueError(f"Newton: beta must lie in (0, 1), got {self.beta}.")

    def init(self, params, dtype) -> NewtonState:
        return NewtonState(shift=jnp.zeros((), dtype), num_hvp=jnp.zeros((), jnp.int32))

    def compute(self, state: NewtonState, info: DirectionInfo):
        grad, hvp = info.grad, info.hvp
        if hvp is None:
            raise ValueError(
                "Newton needs Hessian-vector products: pass DirectionInfo(..., hvp=hvp) "
                "with hvp(v) = H v (the Solver passes it)."
            )
        dtypes = [info.dtype, *(x.dtype for x in jax.tree.leaves(grad))]
        wide = any(jnp.dtype(d) == jnp.float64 for d in dtypes)
        dtype = jnp.float64 if wide else jnp.float32  # float32 at least, as the solver's
        g = flatten_tree(grad, dtype)
        n = g.size

        def column(unit):
            return flatten_tree(hvp(unflatten_tree(unit, grad)), dtype)

        h = jax.vmap(column)(jnp.eye(n, dtype=dtype))  # rows H e_i: H' (H symmetric)
        h = (h + h.T) / 2
        diagonal = jnp.diagonal(h)
        largest = jnp.max(jnp.abs(diagonal))
        beta = jnp.where(largest > 0, self.beta * largest, self.beta).astype(dtype)
        smallest = jnp.min(diagonal)
        shift = jnp.where(smallest > 0, 0, beta - smallest).astype(dtype)
        finite = jnp.all(jnp.isfinite(h))

        def factor(tau):
            lower = jnp.linalg.cholesky(h + tau * jnp.eye(n, dtype=dtype))
            return lower, jnp.all(jnp.isfinite(lower))

        def failed(carry):
            k, _, _, ok = carry
            return finite & ~ok & (k < MAX_SHIFTS)

        def next_shift(carry):
            k, tau, _, _ = carry
            tau = jnp.maximum(2 * tau, beta)
            return (k + 1, tau, *factor(tau))

        start = (jnp.array(1, jnp.int32), shift, *factor(shift))
        _, shift, lower, _ = run_loop(info, failed, next_shift, start, MAX_SHIFTS)
        d = unflatten_tree(-jsl.cho_solve((lower, True), g), grad)
        hvps = state.num_hvp + jnp.array(n, jnp.int32)
        state = NewtonState(shift=shift.astype(state.shift.dtype), num_hvp=hvps)
        return d, jnp.array(True), state, no_limit(info.dtype)
