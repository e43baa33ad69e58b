"""The Barzilai-Borwein direction (Barzilai & Borwein 1988)."""

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
import jax.tree_util as jtu
from jaxtyping import Array, Bool, Scalar

from .._misc import at_least_float32, check_setting, divide, scalar, tree_dot
from ._base import AbstractDirection, DirectionInfo, no_limit


class BarzilaiBorweinState(eqx.Module):
    alpha: Scalar  # the step of the last pair, in [alpha_min, alpha_max]
    has_pair: Bool[Array, ""]  # False until a pair with s'y > 0, and after `reset`


class BarzilaiBorwein(AbstractDirection):
    """d = -alpha_k g_k with the Barzilai-Borwein step of the last pair s = x_k - x_{k-1}, y = g_k -
    g_{k-1} (Barzilai & Borwein, "Two-point step size gradient methods", IMA J. Numer. Anal. 8,
    1988, eqs. 5 and 6): BB1 (`variant="long"`) alpha_k = s's / s'y, BB2 (`"short"`) s'y / y'y,
    clipped to [`alpha_min`, `alpha_max`]. Before the first pair, after `reset`, and where s'y <=
    0 or a product is not finite, d = -g (`scaled` False: the search starts from the solver's
    guess); otherwise `scaled`, the unit step the BB step. BB steps are not monotone: pair with a
    nonmonotone search (Raydan, SIAM J. Optim. 7(1), 1997), `NonmonotoneArmijo` by default."""

    variant: str = eqx.field(static=True, default="long")
    alpha_min: float = 1e-10
    alpha_max: float = 1e10

    supports_bounds: ClassVar[bool] = False

    def __check_init__(self):
        if self.variant not in ("long", "short"):
            raise ValueError(
                f"BarzilaiBorwein: variant must be 'long' (BB1) or 'short' (BB2), got "
                f"{self.variant!r}."
            )
        check_setting("BarzilaiBorwein", "alpha_min", self.alpha_min, lambda v: v > 0, "be > 0")
        check_setting(
            "BarzilaiBorwein",
            "alpha_max",
            self.alpha_max,
            lambda v: v > self.alpha_min,
            "be > alpha_min",
        )

    def init(self, params, dtype) -> BarzilaiBorweinState:
        return BarzilaiBorweinState(alpha=scalar(1, dtype), has_pair=jnp.array(False))

    def compute(self, state, info: DirectionInfo):
        alpha = jnp.where(state.has_pair, state.alpha, 1)

        def scale(g):
            wide = at_least_float32(g.dtype)
            return (-alpha.astype(wide) * g.astype(wide)).astype(g.dtype)

        d = jtu.tree_map(scale, info.grad)
        return d, state.has_pair, state, no_limit(info.dtype)

    def update(self, state, s, y, dtype, accept=True) -> BarzilaiBorweinState:
        sy = tree_dot(s, y, dtype)
        # `divide`: update also runs for pairs it does not take (s = 0 at a step's first
        # evaluation), where the quotient is 0 / 0 and its derivative by `/` NaN.
        if self.variant == "long":
            alpha = divide(tree_dot(s, s, dtype), sy)
        else:
            alpha = divide(sy, tree_dot(y, y, dtype))
        usable = (sy > 0) & jnp.isfinite(alpha)
        alpha = jnp.clip(alpha, self.alpha_min, self.alpha_max).astype(dtype)
        return BarzilaiBorweinState(
            alpha=jnp.where(accept & usable, alpha, state.alpha).astype(state.alpha.dtype),
            has_pair=jnp.where(accept, usable, state.has_pair),
        )

    def reset(self, state) -> BarzilaiBorweinState:
        return BarzilaiBorweinState(alpha=state.alpha, has_pair=jnp.array(False))

    def gradient_replaced(self, state):
        return state  # the step of the last pair still holds
