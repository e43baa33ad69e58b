"""Box constraints lower <= params <= upper, leaf by leaf, as the solver uses them."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
from jaxtyping import PyTree, Scalar

from . import _bounds
from ._misc import (
    at_least_float32,
    leaves,
    tree_add_scaled,
    tree_cast_like,
    tree_inf_norm,
    tree_norm,
    widest_float,
)


def _rounded_inward(bound, dtype, direction: float):
    """`bound` in `dtype`, rounded inwards (`direction` +inf for a lower bound, -inf for an upper),
    so a point within it is within the bound as given; Python and NumPy numbers at float64
    precision."""
    if isinstance(bound, jax.Array):
        wide = bound.astype(widest_float(bound.dtype, dtype))
        rounded = wide.astype(dtype)
        back = rounded.astype(wide.dtype)
        outside = back < wide if direction > 0 else back > wide
        toward = jnp.asarray(direction, dtype)
        return jnp.where(outside, jnp.nextafter(rounded, toward), rounded)
    exact = np.asarray(bound, np.float64)
    near = exact.astype(dtype)
    beyond = near.astype(np.float64) < exact if direction > 0 else near.astype(np.float64) > exact
    inward = np.where(beyond, np.nextafter(near, np.asarray(direction, dtype)), near)
    return jnp.asarray(inward, dtype)


class Box(eqx.Module):
    """Bounds with the structure, shapes and dtypes of the params' floating leaves. Each bound
    is rounded inwards to its leaf's dtype; -inf and +inf mean no bound."""

    lower: PyTree
    upper: PyTree

    @classmethod
    def from_bounds(cls, bounds, diff: PyTree) -> "Box":
        """The box of `bounds = (lower, upper)` for params with floating leaves `diff`: each a
        scalar or a pytree like params broadcasting to its leaves."""
        lower, upper = _split(bounds)
        return cls(
            lower=_like(lower, diff, "lower", -np.inf), upper=_like(upper, diff, "upper", np.inf)
        )

    def project(self, x: PyTree) -> PyTree:
        """The nearest point of the box: min(max(x, lower), upper) per component."""
        return jtu.tree_map(_bounds.project, x, *self)

    def projected_gradient_norm(self, x: PyTree, grad: PyTree, dtype, norm: str = "inf") -> Scalar:
        """max |P(x - grad) - x| (scipy L-BFGS-B's `pgtol` measure); with `norm` "2" its Euclidean
        norm. Each leaf in at least float32."""
        if norm == "2":
            steps = [
                _bounds.project(xi - gi, lo, up) - xi
                for xi, gi, lo, up in self._widened(x, grad, at_least_float32)
            ]
            return tree_norm(steps, dtype)
        largest = jnp.zeros((), dtype)
        for parts in self._widened(x, grad, at_least_float32):
            part = _bounds.projected_gradient_inf_norm(*parts).astype(dtype)
            largest = jnp.maximum(largest, part)
        return largest

    def projected_gradient(self, x: PyTree, grad: PyTree) -> PyTree:
        """P(x - grad) - x: steepest descent cut at the box, zero exactly where x is stationary."""
        return jtu.tree_map(
            lambda xi, gi, lo, up: _bounds.project(xi - gi, lo, up) - xi,
            x,
            tree_cast_like(grad, x),
            *self,
        )

    def max_step(self, x: PyTree, d: PyTree, dtype) -> Scalar:
        """The largest t >= 0 with x + t d in the box (+inf where no bound limits it)."""
        cap = jnp.full((), jnp.inf, dtype)
        for parts in self._widened(x, d, lambda t: widest_float(at_least_float32(t), dtype)):
            cap = jnp.minimum(cap, _bounds.max_feasible_step(*parts).astype(dtype))
        return cap

    def _widened(self, x: PyTree, v: PyTree, work):
        """Per leaf, (x, v, lower, upper) in the dtype `work(x's dtype)`."""
        for parts in zip(*map(leaves, (x, v, self.lower, self.upper)), strict=True):
            dtype = work(parts[0].dtype)
            yield tuple(part.astype(dtype) for part in parts)

    def __iter__(self):
        return iter((self.lower, self.upper))


def _split(bounds):
    if not (isinstance(bounds, tuple | list) and len(bounds) == 2):
        raise TypeError(
            "bounds must be a pair (lower, upper), each a scalar or a pytree like params; got "
            f"{type(bounds).__name__}."
        )
    return bounds


def _like(bound, diff: PyTree, name: str, default: float) -> PyTree:
    """`bound` (a scalar, or a pytree like params; None: no bound) broadcast to every leaf
    of `diff`, in that leaf's dtype, rounded inwards."""
    direction = -default  # a lower bound rounds up, an upper bound down
    if bound is None:
        bound = default
    if _is_scalar(bound):
        parts = [bound] * len(leaves(diff))
    else:
        try:
            parts = jtu.tree_structure(diff).flatten_up_to(bound)  # type: ignore[attr-defined]
        except (ValueError, TypeError) as error:
            raise TypeError(
                f"bounds: {name} must be a scalar or a pytree with the structure of params; {error}"
            ) from None
    out = []
    for part, x in zip(parts, leaves(diff), strict=True):
        part = default if part is None else part
        if not isinstance(part, int | float | np.number | np.ndarray | jax.Array):
            raise TypeError(
                f"bounds: {name} must be a scalar or a pytree with the structure of params, "
                f"whose leaves are numbers or arrays; got {type(part).__name__} where params "
                f"has an array of shape {x.shape}."
            )
        if not jnp.issubdtype(jnp.result_type(part), jnp.number) or jnp.issubdtype(
            jnp.result_type(part), jnp.complexfloating
        ):
            raise TypeError(f"bounds: {name} must hold real numbers, got {part!r}.")
        try:
            part = (
                np.broadcast_to(part, x.shape)
                if not isinstance(part, jax.Array)
                else (jnp.broadcast_to(part, x.shape))
            )
        except ValueError:
            raise ValueError(
                f"bounds: {name} of shape {jnp.shape(part)} does not broadcast to a params "
                f"leaf of shape {x.shape}."
            ) from None
        out.append(_rounded_inward(part, x.dtype, direction))
    return jtu.tree_unflatten(jtu.tree_structure(diff), out)


def _is_scalar(bound) -> bool:
    return isinstance(bound, int | float | np.number) or (
        isinstance(bound, jax.Array | np.ndarray) and bound.ndim == 0
    )


def check_order(box: Box) -> None:
    """Raise where a concrete lower bound exceeds its upper bound (traced bounds: no check)."""
    for lo, up in zip(leaves(box.lower), leaves(box.upper), strict=True):
        if isinstance(lo, jax.core.Tracer) or isinstance(up, jax.core.Tracer):
            continue
        if bool(jnp.any(lo > up)):
            raise ValueError("bounds: lower must not exceed upper in any component.")


# The norms `gradient_norm` takes (`gtol_norm`): the infinity norm (scipy's gtol) and the Euclidean.
GRADIENT_NORMS = ("inf", "2")


def gradient_norm(x, grad, box: Box | None, dtype, norm: str = "inf") -> Scalar:
    """The `norm` ("inf" or "2") of the gradient, projected onto the box where there is one, in at
    least float32, returned in `dtype`."""
    if box is None:
        return tree_inf_norm(grad, dtype) if norm == "inf" else tree_norm(grad, dtype)
    return box.projected_gradient_norm(x, grad, dtype, norm)


def trial_point(x, t, d, box: Box | None):
    """x + t d, projected into the box when there is one (rounding never leaves it)."""
    trial = tree_add_scaled(x, t, d)
    return trial if box is None else box.project(trial)
