"""Steepest descent."""

from typing import ClassVar

import jax.numpy as jnp
import jax.tree_util as jtu

from ._base import AbstractMemorylessDirection, DirectionInfo, no_limit


class Gradient(AbstractMemorylessDirection):
    """Steepest descent, d = -grad f(x); its scale carries no curvature, so searches start from a
    scaled guess (N&W eq. 3.60). With bounds, the projected gradient d = P(x - grad f(x)) - x
    (Bertsekas, *Nonlinear Programming*, 2nd ed., section 2.3), the step capped where x + t d
    leaves the box."""

    supports_bounds: ClassVar[bool] = True

    def init(self, params, dtype) -> None:
        return None

    def compute(self, state, info: DirectionInfo):
        if info.box is None:
            d = jtu.tree_map(jnp.negative, info.grad)
        else:
            d = info.box.projected_gradient(info.x, info.grad)
        return d, jnp.array(False), state, no_limit(info.dtype)
