"""What a descent direction must provide to the solver."""

import abc
from collections.abc import Callable
from typing import Any, ClassVar

import equinox as eqx
from jaxtyping import Array, Bool, PyTree, Scalar


class AbstractDirection(eqx.Module):
    """A rule for the search direction d at the current point.

    Subclasses are immutable configuration (static fields); their data lives in the state
    returned by `init`, whose leaves have fixed dtypes so that a jitted step never retraces.
    All scalars are in `dtype`, at least float32.
    """

    @abc.abstractmethod
    def init(self, params: PyTree, dtype) -> PyTree:
        """This direction's state for `params` (the inexact array leaves of the user's params)."""

    @abc.abstractmethod
    def compute(
        self, state: PyTree, grad: PyTree, dtype, hvp: Callable[[PyTree], PyTree] | None = None
    ) -> tuple[PyTree, Bool[Array, ""], PyTree]:
        """Return (d, scaled, state): d has the structure and dtypes of `grad`; `scaled` is
        True when d carries curvature information, so that the unit step is the natural first
        trial; `state` may record what the next `compute` needs (e.g. d itself).

        `hvp(v)` is the Hessian-vector product at the current point (forward-over-reverse
        autodiff of fn; v and the result are like `grad`); the solver always passes it, and fn
        is traced for it only if a direction calls it."""

    supports_bounds: ClassVar[bool] = False  # whether `compute_bounded` is provided

    def compute_bounded(
        self,
        state: PyTree,
        x: PyTree,
        grad: PyTree,
        box: Any,
        dtype,
        while_loop: Callable | None = None,
    ) -> tuple[PyTree, Bool[Array, ""], PyTree, Scalar]:
        """As `compute`, for the box `box` (a `Box`, x inside it): d must be a feasible
        direction, x + d inside the box. Returns (d, scaled, state, limit): `limit` bounds
        the step along d beyond where d leaves the box (+inf for none). Directions with
        `supports_bounds` provide it. A loop inside it runs through `while_loop(cond, body,
        init, max_steps)` when given (the solver passes its adjoint's, so that a run can be
        differentiated through its iterations); None: `lax.while_loop`."""
        raise NotImplementedError(f"{type(self).__name__} does not support bounds.")

    @abc.abstractmethod
    def update(self, state: PyTree, s: PyTree, y: PyTree, dtype, accept=True) -> PyTree:
        """Record an accepted step: s = x_new - x, y = grad_new - grad (in at least float32).
        Where `accept` (a traced boolean) is False the state is returned unchanged: the
        solver calls `update` at every step boundary without branching, so that memory
        buffers are written in place (inside a branch XLA would copy them)."""

    @abc.abstractmethod
    def reset(self, state: PyTree) -> PyTree:
        """Forget accumulated information (used when d fails to be a descent direction)."""
