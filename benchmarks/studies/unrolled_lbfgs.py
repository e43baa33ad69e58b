"""Does L-BFGS's two-loop recursion compile or run faster unrolled in Python (m is static)?
The variant here, for benchmarks/studies/engine.py: no loop over the memory, but 4m vector
passes in the program. Not part of the library: on the CPU it compiled slower than the
`fori_loop`s and ran no faster (benchmarks/HISTORY.md, rounds 1 and 5).
Date: 2026-12-07, commit f9fc49c
"""

import jax.numpy as jnp
import jax.tree_util as jtu
from jax import lax

from jaxsearch import LBFGS
from jaxsearch._misc import at_least_float32, tree_dot


class UnrolledLBFGS(LBFGS):
    """`js.LBFGS` with its two `fori_loop`s written out slot by slot."""

    def compute(self, state, info):
        grad, dtype, m = info.grad, info.dtype, self.memory_size

        def pair(i):  # the i-th newest pair
            j = (state.head - 1 - i) % m
            take = lambda b: lax.dynamic_index_in_dim(b, j, keepdims=False)  # noqa: E731
            return j, jtu.tree_map(take, state.s), jtu.tree_map(take, state.y)

        q = jtu.tree_map(lambda g, s: g.astype(at_least_float32(s.dtype)), grad, state.s)
        alphas = []
        for i in range(m):
            j, s, y = pair(i)
            a = jnp.where(i < state.count, state.rho[j] * tree_dot(s, q, dtype), 0)
            q = jtu.tree_map(
                lambda qi, yi, a=a: qi - a.astype(qi.dtype) * yi.astype(qi.dtype), q, y
            )
            alphas.append(a)
        r = jtu.tree_map(lambda qi: state.gamma.astype(qi.dtype) * qi, q)
        for i in reversed(range(m)):
            j, s, y = pair(i)
            coef = jnp.where(i < state.count, alphas[i] - state.rho[j] * tree_dot(y, r, dtype), 0)
            r = jtu.tree_map(
                lambda ri, si, coef=coef: ri + coef.astype(ri.dtype) * si.astype(ri.dtype), r, s
            )
        d = jtu.tree_map(lambda ri, g: (-ri).astype(g.dtype), r, grad)
        return d, state.count > 0, state, jnp.full((), jnp.inf, dtype)
