"""L-BFGS's two-loop recursion (Nocedal, 1980; Nocedal & Wright, algorithm 7.4)."""

from typing import ClassVar

import jax.numpy as jnp
import jax.tree_util as jtu
from jax import lax
from jaxtyping import Array, Int, PyTree, Scalar

from .._misc import at_least_float32, tree_dot
from ._lbfgs_memory import AbstractLBFGSState
from ._slots import slot, with_slot


class TwoLoopLBFGSState(AbstractLBFGSState):
    """The state of `LBFGS`'s two-loop form (`form="two_loop"`, or "auto" on a CPU or a TPU for
    small params): the memory alone."""

    made_by: ClassVar[str] = 'js.LBFGS(form="two_loop")'  # named where a state is refused

    s: PyTree
    y: PyTree
    rho: Array
    gamma: Scalar
    count: Int[Array, ""]
    head: Int[Array, ""]

    def direction(self, grad, dtype, precondition=None):
        """The two-loop recursion (Nocedal & Wright, algorithm 7.4, with any SPD H0): two
        `fori_loop`s over the m slots, newest first, then oldest first, with q multiplied by
        gamma I (or gamma P with `precondition`) between; worked in the memory's dtypes (at least
        float32), d in `grad`'s."""
        m = self.rho.shape[0]

        def pair(j):
            take = lambda b: slot(b, j)  # noqa: E731
            return jtu.tree_map(take, self.s), jtu.tree_map(take, self.y)

        # Both loops run over all m slots (a fixed trip count, which reverse-mode
        # differentiation and vmap need); a slot beyond `count` has a zero coefficient.
        def newest_first(i, carry):
            q, alpha = carry
            j = (self.head - 1 - i) % m
            s, y = pair(j)
            a = jnp.where(i < self.count, slot(self.rho, j) * tree_dot(s, q, dtype), 0)
            q = jtu.tree_map(lambda qi, yi: qi - a.astype(qi.dtype) * yi.astype(qi.dtype), q, y)
            return q, with_slot(alpha, j, a)

        def oldest_first(i, r):
            j = (self.head - self.count + i) % m
            s, y = pair(j)
            b = slot(self.rho, j) * tree_dot(y, r, dtype)
            coef = jnp.where(i < self.count, slot(alpha, j) - b, 0)
            return jtu.tree_map(
                lambda ri, si: ri + coef.astype(ri.dtype) * si.astype(ri.dtype), r, s
            )

        work = jtu.tree_map(lambda g, s: g.astype(at_least_float32(s.dtype)), grad, self.s)
        q, alpha = lax.fori_loop(0, m, newest_first, (work, jnp.zeros((m,), dtype)))
        if precondition is not None:
            q = precondition(q)
        r = jtu.tree_map(lambda qi: self.gamma.astype(qi.dtype) * qi, q)
        r = lax.fori_loop(0, m, oldest_first, r)
        d = jtu.tree_map(lambda ri, g: (-ri).astype(g.dtype), r, grad)
        return d, self

    def update(self, s, y, dtype, curvature_eps, accept, precondition=None):
        return self.offered(s, y, dtype, curvature_eps, accept, precondition)[0]

    def reset(self):
        return self.emptied()

    def gradient_replaced(self):
        """Itself: the recursion reads nothing of the last gradient."""
        return self
