"""What a descent direction must provide to the solver."""

import abc
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Bool, PyTree, Scalar


class DirectionInfo(NamedTuple):
    """What a direction may use at the current point (scalars in `dtype`, at least float32):
    `hvp(v)`, the Hessian-vector product (forward-over-reverse, or with
    `Solver(value_and_grad=True)` a forward difference of fn's gradient); `box`, the `Box` x lies
    in (None without bounds); `while_loop`, the loop `run_loop` runs with (the adjoint's; None:
    `lax.while_loop`); `residuals(p)`, fn's residuals at the call's args, aux dropped, for an
    `AbstractLeastSquares` (else None); `jacobian`, (r, J) at x, the flattened residuals and
    their m x n Jacobian in the widest of x's and r's dtypes (at least float32) from the
    evaluation that gave `grad`, for an `AbstractDenseLeastSquares` in `Solver.run` (else None:
    such a direction forms J from `residuals`). fn is traced for `hvp` and `residuals` only where
    they are called."""

    x: PyTree
    grad: PyTree
    dtype: Any
    hvp: Callable[[PyTree], PyTree] | None = None
    box: Any = None
    while_loop: Callable | None = None
    residuals: Callable[[PyTree], PyTree] | None = None
    jacobian: tuple[Array, Array] | None = None


def no_limit(dtype) -> Scalar:
    """The `limit` of a direction that sets none (+inf in `dtype`)."""
    return jnp.full((), jnp.inf, dtype)


def run_loop(info: DirectionInfo, cond: Callable, body: Callable, init: PyTree, max_steps: int):
    """`lax.while_loop(cond, body, init)` of at most `max_steps` (a Python int) iterations, through
    `info`'s loop, so that `UnrolledAdjoint` can differentiate through it."""
    if info.while_loop is None:
        return lax.while_loop(cond, body, init)
    return info.while_loop(cond, body, init, max_steps)


class AbstractDirection(eqx.Module):
    """A rule for the search direction d at the current point. Subclasses are immutable
    configuration (static fields); their data lives in `init`'s state, whose leaves keep fixed
    dtypes so a jitted step never retraces; scalars are in `dtype`, at least float32. A subclass
    implements `supports_bounds` (a class attribute), `init`, `compute`, `update`, `reset` and
    `gradient_replaced` (Equinox's abstract/final rule); inner loops go through `run_loop`. Check
    it with `jaxsearch.testing.check_direction`; `flatten_tree` and `unflatten_tree` turn a
    pytree into one vector and back."""

    @abc.abstractmethod
    def init(self, params: PyTree, dtype) -> PyTree:
        """This direction's state for `params` (the inexact array leaves of the user's params)."""

    supports_bounds: eqx.AbstractClassVar[bool]  # whether `compute` honours `info.box`

    @abc.abstractmethod
    def compute(
        self, state: PyTree, info: DirectionInfo
    ) -> tuple[PyTree, Bool[Array, ""], PyTree, Scalar]:
        """Return (d, scaled, state, limit) at the point `info` describes: d like `info.grad`;
        `scaled` True where d carries curvature (the unit step is the natural first trial);
        `state` for the next `compute`; `limit` bounds the step along d (+inf: none). With
        `info.box` (`supports_bounds` only), x + d lies in the box."""

    @abc.abstractmethod
    def update(self, state: PyTree, s: PyTree, y: PyTree, dtype, accept=True) -> PyTree:
        """Record an accepted step: s = x_new - x, y = grad_new - grad (at least float32). Where
        `accept` (traced) is False, return the state unchanged: the solver calls `update` every
        iteration without branching, so buffers are written in place (a branch would copy them)."""

    @abc.abstractmethod
    def reset(self, state: PyTree) -> PyTree:
        """Forget the pairs, momentum or memory of earlier steps; the solver resets the state
        `compute` returned where d does not descend. After `reset`, `compute` gives the d it
        gives from `init`'s state, but for what a reset may keep: a positive scale of d
        (`LBFGS`'s gamma) or a diagonal preconditioner (`Preconditioned`'s second moments).
        `jaxsearch.testing.check_direction` checks this."""

    @abc.abstractmethod
    def gradient_replaced(self, state: PyTree) -> PyTree:
        """`state` once the gradient at x was replaced (`Solver.reevaluate`, a resumed run on new
        data, a gradient passed to the optax transformation). Otherwise the order is: `compute`
        at g, `update` with y ending at g_new = g + y, `compute` at g_new, which a direction may
        rely on (L-BFGS's compact form does). One that does not returns `state`."""


class AbstractMemorylessDirection(AbstractDirection):
    """A direction that keeps nothing between steps: d depends on x, the gradient and the problem
    only; its state holds at most diagnostics. So `update`, `reset` and `gradient_replaced`
    return the state as it is, here once. A subclass implements `supports_bounds`, `init` and
    `compute` (`Gradient`, `Newton`, `NewtonCG`, `GaussNewton`, `GaussNewtonCG`)."""

    def update(self, state: PyTree, s: PyTree, y: PyTree, dtype, accept=True) -> PyTree:
        return state

    def reset(self, state: PyTree) -> PyTree:
        return state

    def gradient_replaced(self, state: PyTree) -> PyTree:
        return state


class AbstractLeastSquares(AbstractDirection):
    """A direction for nonlinear least squares: `fn(params, *args)` returns a pytree of residuals r
    (or `(r, aux)` with `has_aux=True`), and the objective the searches, stopping rules, history
    and `result.value` see is f = 0.5 * sum_i r_i^2 (summed in the widest residual float dtype,
    at least float32, cast to the value dtype). `compute` gets `info.residuals`; `info.grad` is
    J'r. A marker base."""


class AbstractDenseLeastSquares(AbstractLeastSquares):
    """A least-squares direction that forms the dense Jacobian J at each point (`GaussNewton`,
    `LevenbergMarquardt`): `Solver.run` evaluates r and J together at every trial (`jax.jacfwd`:
    r once and n Jacobian-vector products), takes f and grad f = J'r from them, and hands the
    accepted point's r and J as `info.jacobian`. A marker base."""


def least_squares(solver) -> bool:
    """Whether `solver`'s fn returns residuals (its direction is an `AbstractLeastSquares`)."""
    return isinstance(solver.direction, AbstractLeastSquares)


def dense_least_squares(solver) -> bool:
    """Whether `solver`'s direction is an `AbstractDenseLeastSquares` (it is handed r and J)."""
    return isinstance(solver.direction, AbstractDenseLeastSquares)
