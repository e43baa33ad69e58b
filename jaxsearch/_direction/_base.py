"""What a descent direction must provide to the solver."""

import abc
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Bool, PyTree, Scalar


class DirectionInfo(NamedTuple):
    """What a direction may use at the current point.

    `hvp(v)` is the Hessian-vector product at x (forward-over-reverse autodiff of fn, or with
    `Solver(value_and_grad=True)` a forward difference of fn's gradient; v and the result are
    like `grad`): the solver always passes it, and fn is traced for it only if
    a direction calls it. `box` is the `Box` x lies in, or None without bounds. A loop inside
    `compute` runs through `run_loop(info, cond, body, init, max_steps)`: `while_loop(cond,
    body, init, max_steps)` when given (the solver passes its adjoint's, so that a run can be
    differentiated through its iterations, which needs the bound `max_steps` on the loop's
    iterations: a Python int); None: `lax.while_loop`. All scalars are in `dtype`, at least
    float32.

    `residuals(p)` is fn's pytree of residuals r(p) at the point p (like `x`), at the call's
    args, aux dropped: the solver passes it only to a least-squares direction
    (`AbstractLeastSquares`, whose fn returns residuals and whose objective is
    f = 0.5 |r|^2), None to any other; like `hvp`, fn is traced for it only if the direction
    calls it.

    `jacobian` is (r, J) at x: the residuals flattened (`flatten_tree`) and their Jacobian,
    m x n (n the total size of x), both in the widest of x's and the residuals' dtypes, at
    least float32. `Solver.run` passes it to a dense least-squares direction
    (`AbstractDenseLeastSquares`), from the evaluation of fn at x that gave `grad` (r is not
    evaluated again); None otherwise (`Solver.step` passes None: such a direction then forms
    J from `residuals` itself)."""

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
    """`lax.while_loop(cond, body, init)` of at most `max_steps` iterations (`cond` must turn
    False within them), through the loop the engine hands a direction in `info`: a direction's
    inner loop written this way can be differentiated through by `UnrolledAdjoint`."""
    if info.while_loop is None:
        return lax.while_loop(cond, body, init)
    return info.while_loop(cond, body, init, max_steps)


class AbstractDirection(eqx.Module):
    """A rule for the search direction d at the current point.

    Subclasses are immutable configuration (static fields); their data lives in the state
    returned by `init`, whose leaves have fixed dtypes so that a jitted step never retraces.
    All scalars are in `dtype`, at least float32.

    A subclass implements the abstract members below and nothing else (Equinox's
    abstract/final rule): `supports_bounds` (a class attribute), `init`, `compute`, `update`,
    `reset` and `gradient_replaced`. An inner loop goes through `run_loop`. Check it with
    `jaxsearch.testing.check_direction`; `flatten_tree` and `unflatten_tree` turn a pytree into
    one vector and back.
    """

    @abc.abstractmethod
    def init(self, params: PyTree, dtype) -> PyTree:
        """This direction's state for `params` (the inexact array leaves of the user's params)."""

    supports_bounds: eqx.AbstractClassVar[bool]  # whether `compute` honours `info.box`

    @abc.abstractmethod
    def compute(
        self, state: PyTree, info: DirectionInfo
    ) -> tuple[PyTree, Bool[Array, ""], PyTree, Scalar]:
        """Return (d, scaled, state, limit) at the point `info` describes.

        d has the structure and dtypes of `info.grad`; `scaled` is True when d carries
        curvature information, so that the unit step is the natural first trial; `state` may
        record what the next `compute` needs (e.g. d itself); `limit` bounds the step along d
        (+inf for none; a direction with bounds may cap it beyond where d leaves the box).

        With `info.box` (only for directions with `supports_bounds`), d must be a feasible
        direction: x + d inside the box."""

    @abc.abstractmethod
    def update(self, state: PyTree, s: PyTree, y: PyTree, dtype, accept=True) -> PyTree:
        """Record an accepted step: s = x_new - x, y = grad_new - grad (in at least float32).
        Where `accept` (a traced boolean) is False the state is returned unchanged: the
        solver calls `update` at every iteration of its loop without branching, so that memory
        buffers are written in place (inside a branch XLA would copy them)."""

    @abc.abstractmethod
    def reset(self, state: PyTree) -> PyTree:
        """Forget the pairs, momentum or memory of earlier steps. The solver resets the state
        that `compute` returned where its d is not a descent direction (and steps along -g).

        After `reset`, `compute` at x and g gives the d it gives there from `init`'s state,
        but for what a reset may keep: a positive scale of d (`LBFGS` keeps its gamma) or a
        diagonal preconditioner (`Preconditioned` keeps its second moments). So where d from
        `init`'s state is steepest descent, d after `reset` is a positive multiple of -g
        (each element within its rounding); elsewhere it is d from `init`'s state or a
        positive diagonal scaling of -g. `jaxsearch.testing.check_direction` checks this."""

    @abc.abstractmethod
    def gradient_replaced(self, state: PyTree) -> PyTree:
        """`state` once the gradient at x was replaced by another than the one the last step
        ended with (`Solver.reevaluate`, a resumed run on new data, a gradient passed to the
        optax transformation). Otherwise the solver keeps this order: `compute` at g, an
        `update` whose y ends at g_new = g + y, then `compute` at g_new; a direction may rely
        on it (L-BFGS's compact form does, see `LBFGS`). A direction that does not, returns
        `state`."""


class AbstractMemorylessDirection(AbstractDirection):
    """A direction that keeps nothing between steps: d at x depends on x, the gradient at x
    and the problem (fn, its Hessian-vector products or residuals, the box) only, never on
    earlier points, steps or gradients. Its state holds at most diagnostics that `compute`
    writes (a count of products, the last shift, ...).

    So `update`, `reset` and `gradient_replaced` return the state as it is, here once: a step
    leaves nothing to record, a reset nothing to forget, and no `compute` relies on the order
    of gradients. A subclass implements `supports_bounds`, `init` and `compute` (`Gradient`,
    `Newton`, `NewtonCG`, `GaussNewton`, `GaussNewtonCG`); a least-squares one derives from
    `AbstractLeastSquares` (or `AbstractDenseLeastSquares`) too."""

    def update(self, state: PyTree, s: PyTree, y: PyTree, dtype, accept=True) -> PyTree:
        return state

    def reset(self, state: PyTree) -> PyTree:
        return state

    def gradient_replaced(self, state: PyTree) -> PyTree:
        return state


class AbstractLeastSquares(AbstractDirection):
    """A direction for nonlinear least squares: with one, `fn(params, *args)` returns a pytree
    of residuals r (or `(r, aux)` with `has_aux=True`) instead of a scalar, and the objective
    that the line searches, the stopping rules, the history and `result.value` see is
    f = 0.5 * sum_i r_i^2 over all leaves (summed in the widest residual float dtype, at least
    float32, then cast to the value dtype). `compute` is handed `info.residuals`, the map
    p -> r(p) at the call's args; `info.grad` is J'r, J the Jacobian of r.

    A marker base: a subclass implements the members of `AbstractDirection`."""


class AbstractDenseLeastSquares(AbstractLeastSquares):
    """A least-squares direction that forms the dense Jacobian J of the residuals at each
    point (`GaussNewton`, `LevenbergMarquardt`): with one, `Solver.run` evaluates r and J
    together at every trial point (`jax.jacfwd`: one execution of r and n Jacobian-vector
    products, n the number of parameters), takes f = 0.5 |r|^2 and grad f = J'r from them,
    and hands the accepted point's r and J to `compute` as `info.jacobian`.

    A marker base: a subclass implements the members of `AbstractDirection`."""


def least_squares(solver) -> bool:
    """Whether `solver`'s fn returns residuals (its direction is an `AbstractLeastSquares`)."""
    return isinstance(solver.direction, AbstractLeastSquares)


def dense_least_squares(solver) -> bool:
    """Whether `solver`'s direction is an `AbstractDenseLeastSquares` (it is handed r and J)."""
    return isinstance(solver.direction, AbstractDenseLeastSquares)
