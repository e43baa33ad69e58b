"""Steepest descent."""

import jax.numpy as jnp
import jax.tree_util as jtu

from ._base import AbstractDirection


class Gradient(AbstractDirection):
    """Steepest descent, d = -grad f(x). Its scale carries no curvature information, so the
    line searches start from a scaled guess (N&W eq. 3.60) rather than the unit step.

    With bounds: the projected gradient direction d = P(x - grad f(x)) - x, steepest descent
    cut at the box (Bertsekas, *Nonlinear Programming*, 2nd ed., section 2.3), searched
    along with the step capped where x + t d leaves the box."""

    supports_bounds = True

    def init(self, params, dtype) -> None:
        return None

    def compute(self, state, grad, dtype, hvp=None):
        return jtu.tree_map(jnp.negative, grad), jnp.array(False), state

    def compute_bounded(self, state, x, grad, box, dtype, while_loop=None):
        d = box.projected_gradient(x, grad)
        return d, jnp.array(False), state, jnp.full((), jnp.inf, dtype)

    def update(self, state, s, y, dtype, accept=True) -> None:
        return None

    def reset(self, state) -> None:
        return None
