"""How `Solver.run` is differentiated with respect to `args`: at the solution by the implicit
function theorem, or through the iterations as they ran."""

import abc
import contextlib
import functools
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import equinox as eqx
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
from jax import lax
from jaxtyping import PyTree

from ._misc import (
    as_int,
    at_least_float32,
    check_count,
    leaves,
    renamed_keyword,
    tree_add_scaled,
    tree_cast_like,
    tree_dot,
    tree_zeros_like,
)


class Problem(NamedTuple):
    """What the optimality conditions at a run's solution need: the objective as the solver
    evaluates it (`fn`, whether it returns aux, its kind) and the box (None without bounds)."""

    objective: Any  # an `_objective.Objective`
    box: Any

    @property
    def fn(self) -> Callable:
        """The objective's fn, called as `fn(params, *args)`."""
        return self.objective.fn

    @property
    def has_aux(self) -> bool:
        return self.objective.has_aux


class AbstractAdjoint(eqx.Module):
    """How derivatives of `Solver.run` with respect to `args` are computed: the loops the solver
    runs (`while_loop`) and a wrapper of the whole run (`apply`)."""

    # Whether `run` may be differentiated in forward mode (`jax.jvp`, `jax.jacfwd`) with it.
    forward_mode: ClassVar[bool] = True

    @abc.abstractmethod
    def while_loop(self, cond, body, init, max_steps: int | None):
        """`lax.while_loop(cond, body, init)`, of at most `max_steps` iterations when given."""

    @abc.abstractmethod
    def apply(self, minimise: Callable, x0: PyTree, args: tuple, problem: Problem):
        """`minimise(x0, args)` (the whole run, a `Result`) with this adjoint's derivatives;
        `problem` states the solution's optimality conditions."""

    def step_outputs(self, outputs: PyTree) -> PyTree:
        """`Solver.step`'s (params, state) as this adjoint lets them be differentiated: unchanged by
        default."""
        return outputs


_STEP_IN_REVERSE = (
    "Solver.step cannot be differentiated in reverse mode (jax.grad, jax.vjp) with "
    "adjoint=js.ImplicitAdjoint(), the default: a step's loop is a lax.while_loop, which JAX "
    "differentiates in forward mode only. To differentiate a solution with respect to args, "
    "differentiate Solver.run (at the solution, by the implicit function theorem); to "
    "differentiate through the iterations, build the solver with "
    "adjoint=js.UnrolledAdjoint(), whose step and run are differentiable in reverse mode; "
    "or differentiate the step in forward mode (jax.jvp, jax.jacfwd)."
)


def _cg_steps_of_max_steps(cls, steps):
    """`max_cg_steps` of the deprecated `max_steps` (the same count, checked as given)."""
    steps = as_int(steps)
    if steps is not None:
        check_count(cls.__name__, "max_steps", steps)
    return steps


@renamed_keyword("max_steps", "max_cg_steps", _cg_steps_of_max_steps)
class ImplicitAdjoint(AbstractAdjoint):
    """Derivatives of the solution by the implicit function theorem (the default). At a minimiser
    x*(a) of f(x, a), grad_x f(x*, a) = 0, so dx*/da = -H^-1 (d/da grad_x f)(x*, a), H = grad_x^2
    f(x*, a); f, its gradient and aux follow by the chain rule. Nothing flows through the
    iterations (one linear solve per derivative, not the run's memory); derivatives with respect
    to x0 are zero. The derivative is the exact minimiser's: as accurate as the run converged
    (check `result.status`).

    H v = b is solved by conjugate gradients on Hessian-vector products, each leaf in at least
    float32, inside `lax.custom_linear_solve` (H symmetric): forward (`jax.jvp`, `jax.jacfwd`)
    and reverse mode (`jax.grad`, `jax.vjp`) work, under `vmap` too. CG starts from 0 and stops
    where |r|_2 <= `rtol` |b|_2 (default max(1e-10, 10 eps), eps of the widest work dtype), after
    `max_cg_steps` iterations (default 10 n, as scipy's `cg`), or where p'Hp <= 0 (H is assumed
    positive definite). With `Solver(value_and_grad=True)` fn's own gradient is differentiated in
    forward mode; one JAX cannot (a `jax.pure_callback`, a `jax.custom_vjp`) raises a TypeError
    when traced.
    """

    rtol: float | None = eqx.field(static=True, default=None)
    max_cg_steps: int | None = eqx.field(static=True, default=None, converter=as_int)

    def __check_init__(self):
        if self.rtol is not None and not 0 < self.rtol < 1:
            raise ValueError(f"ImplicitAdjoint: rtol must lie in (0, 1), got {self.rtol}.")
        if self.max_cg_steps is not None:
            check_count("ImplicitAdjoint", "max_cg_steps", self.max_cg_steps)

    def while_loop(self, cond, body, init, max_steps=None):
        return lax.while_loop(cond, body, init)

    def step_outputs(self, outputs):
        # A step is its `while_loop`, which JAX cannot transpose: a cotangent reaching its outputs
        # raises, naming what to do, when traced.
        floats, rest = eqx.partition(outputs, eqx.is_inexact_array)
        floats = eqxi.nondifferentiable_backward(floats, msg=_STEP_IN_REVERSE)
        return eqx.combine(floats, rest)

    def apply(self, minimise, x0, args, problem):
        result = _implicit_minimise(x0, args, adjoint=self, minimise=minimise, problem=problem)
        # A custom derivative returns arrays only: put back params' other leaves, which the solver
        # never changes.
        static = eqx.filter(x0, eqx.is_inexact_array, inverse=True)
        return eqx.tree_at(
            lambda r: (r.params, r.iterate),
            result,
            (eqx.combine(result.params, static), eqx.combine(result.iterate, static)),
        )

    def solve(self, matvec, b: PyTree) -> PyTree:
        """v with H v = b (`matvec(v)` = H v) by conjugate gradients, differentiable in b."""
        return lax.custom_linear_solve(
            matvec, b, functools.partial(self._conjugate_gradients), symmetric=True
        )

    def _conjugate_gradients(self, matvec, b: PyTree) -> PyTree:
        dtype = jnp.result_type(*(at_least_float32(x.dtype) for x in leaves(b)))
        rtol = max(1e-10, 10 * float(jnp.finfo(dtype).eps)) if self.rtol is None else self.rtol
        size = sum(x.size for x in leaves(b))
        max_steps = 10 * size if self.max_cg_steps is None else self.max_cg_steps
        bb = tree_dot(b, b, dtype)
        target = (rtol**2) * bb

        def keep_going(carry):
            k, _, _, _, rr, stop = carry
            return (k < max_steps) & (rr > target) & ~stop

        def body(carry):
            k, v, r, p, rr, _ = carry
            hp = tree_cast_like(matvec(p), p)
            curvature = tree_dot(p, hp, dtype)
            stop = ~(curvature > 0)  # not positive definite, or not finite
            alpha = jnp.where(stop, 0, rr / curvature).astype(dtype)
            v = tree_add_scaled(v, alpha, p)
            r = tree_add_scaled(r, -alpha, hp)
            rr_new = tree_dot(r, r, dtype)
            p = tree_add_scaled(r, (rr_new / rr).astype(dtype), p)
            return k + 1, v, r, p, rr_new, stop

        start = (jnp.array(0), tree_zeros_like(b), b, b, bb, jnp.array(False))
        return lax.while_loop(keep_going, body, start)[1]


class UnrolledAdjoint(AbstractAdjoint):
    """Derivatives through the iterations as `run` executed them, stopping decisions held fixed;
    reverse mode only (`jax.grad`, `jax.vjp`). The loops are checkpointed
    (`equinox.internal.while_loop(kind="checkpointed")`: binomial checkpointing, Griewank &
    Walther, *Algorithm 699*, 2000), `checkpoints` the states the solver's loop saves (default
    from its bound, `max_steps` times the search's trial budget). A direction's inner loop is
    unrolled too where it goes through `run_loop`."""

    checkpoints: int | None = eqx.field(static=True, default=None, converter=as_int)

    def __check_init__(self):
        if self.checkpoints is not None:
            check_count("UnrolledAdjoint", "checkpoints", self.checkpoints)

    def while_loop(self, cond, body, init, max_steps=None):
        checkpoints = self.checkpoints
        if max_steps is None and checkpoints is None:
            checkpoints = 16  # an unbounded loop needs a fixed number of saved states
        return eqxi.while_loop(
            cond, body, init, max_steps=max_steps, kind="checkpointed", checkpoints=checkpoints
        )

    forward_mode: ClassVar[bool] = False

    def apply(self, minimise, x0, args, problem):
        return minimise(x0, args)


# ------------------------------------------------------------------ implicit differentiation


@eqx.filter_custom_jvp
def _implicit_minimise(x0, args, *, adjoint, minimise, problem):
    """`minimise(x0, args)`, with `params` reduced to its floating leaves."""
    result = minimise(x0, args)
    return eqx.tree_at(
        lambda r: (r.params, r.iterate),
        result,
        tuple(eqx.filter(p, eqx.is_inexact_array) for p in (result.params, result.iterate)),
    )


@_implicit_minimise.def_jvp
def _implicit_minimise_jvp(primals, tangents, **settings):
    x0, args = primals
    _, args_dot = tangents  # the solution does not depend on x0
    result = _implicit_minimise(x0, args, **settings)
    adjoint, (objective, box) = settings["adjoint"], settings["problem"]
    has_aux = objective.has_aux
    # Split args into the leaves being differentiated and everything else.
    flat, treedef = jtu.tree_flatten(args)
    # args_dot is args with None where a leaf is not differentiated
    flat_dot = [None] * len(flat)
    if args_dot is not None:
        flat_dot = treedef.flatten_up_to(args_dot)  # type: ignore[attr-defined]
    moving = [i for i, t in enumerate(flat_dot) if t is not None]
    # The tangent of the status, counters and history is zero (None) ...
    nothing = jtu.tree_map(lambda _: None, result)
    if not moving:  # ... and of everything else when no argument moves (x0 alone, say)
        return result, nothing
    a = [flat[i] for i in moving]
    a_dot = [flat_dot[i] for i in moving]

    def with_args(a):
        new = list(flat)
        for i, leaf in zip(moving, a, strict=True):
            new[i] = leaf
        return jtu.tree_unflatten(treedef, new)

    x, static = result.params, eqx.filter(x0, eqx.is_inexact_array, inverse=True)

    def at(x, a):  # f, grad f and aux at (x, a)
        dtype, aux_like = result.value.dtype, result.aux
        return objective.value_and_grad(dtype, aux_like, x, static, with_args(a))

    def grad_x(x, a):
        return at(x, a)[1]

    # With bounds, components at a bound stay there (derivative 0): the system is solved over the
    # free ones, the identity on the others.
    free = None
    if box is not None:
        free = jtu.tree_map(lambda xi, lo, up: (xi > lo) & (xi < up), x, *box)

    def only_free(v):
        if free is None:
            return v
        return jtu.tree_map(lambda vi, fi: jnp.where(fi, vi, 0).astype(vi.dtype), v, free)

    def hessian_times(v):  # H on the free components, the identity on the others
        v_free = tree_cast_like(only_free(v), x)
        hv = tree_cast_like(jax.jvp(lambda x: grad_x(x, a), (x,), (v_free,))[1], v)
        if free is None:
            return hv
        return jtu.tree_map(lambda h, vi, fi: jnp.where(fi, h, vi), hv, v, free)

    # d/da grad_x f(x*, a) . a_dot, then x_dot = -H^-1 of it (on the free components).
    with _own_gradient_differentiated(objective.own_grad):
        mixed = only_free(jax.jvp(lambda a: grad_x(x, a), (a,), (a_dot,))[1])
        work = jtu.tree_map(lambda m: m.astype(at_least_float32(m.dtype)), mixed)
        x_dot = tree_cast_like(jtu.tree_map(jnp.negative, adjoint.solve(hessian_times, work)), x)
        value_dot, grad_dot, aux_dot = jax.jvp(at, (x, a), (x_dot, a_dot))[1]
    result_dot = eqx.tree_at(
        lambda r: (r.params, r.value, r.grad, r.aux),
        nothing,
        (x_dot, value_dot, grad_dot, aux_dot if has_aux else None),
        is_leaf=lambda node: node is None,
    )
    return result, result_dot


@contextlib.contextmanager
def _own_gradient_differentiated(own_grad: bool):
    """Within it, an error from differentiating fn's own gradient (`own_grad`) is raised again as a
    TypeError saying what to do."""
    if not own_grad:
        yield
        return
    try:
        yield
    except (TypeError, ValueError) as error:
        raise TypeError(
            "Differentiating run with js.ImplicitAdjoint() and value_and_grad=True "
            "differentiates the gradient fn returns (forward mode), and JAX could not: "
            f"{error} Make fn's value and gradient differentiable by JAX (e.g. a jax.custom_jvp "
            "rule for a callback), use js.UnrolledAdjoint() (reverse mode through the "
            "iterations) with a gradient JAX can differentiate in reverse mode, or do not "
            "differentiate run (e.g. jax.lax.stop_gradient on its args)."
        ) from error
