"""The Solver: a descent direction composed with a line search."""

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import PyTree

from . import _pipeline, _setup
from ._adjoint import AbstractAdjoint
from ._direction import AbstractDirection
from ._inputs import check_fn, floating_dtype, solver_settings
from ._linesearch import AbstractInitialStep, AbstractLineSearch
from ._misc import Setting
from ._result import Result
from ._state import SolverState


class Solver(eqx.Module):
    """Minimise f(params, *args) over params, any pytree of floating arrays, by a descent
    direction composed with a line search.

    `js.Solver()` is L-BFGS (`js.LBFGS()`, 10 pairs of memory) with a strong Wolfe line
    search (`js.Zoom()`), stopping when the gradient's largest entry is at most `gtol`
    (1e-5) or after `max_steps` (1000) steps. `js.Solver(direction, linesearch)` composes
    another pair. It is called in one of two ways:

    - `result = solver.run(fn, x0, *args)`: a whole minimisation, one compiled loop. The
      `js.Result` holds `params`, `value`, `grad`, `status`, `success` and `message`.
    - `state = solver.init(params)`, then `params, state = solver.step(fn, params, state,
      *args)` in your own (jitted) loop, one iteration per call.

    ```python
    import jax.numpy as jnp
    import jaxsearch as js


    def rosenbrock(x):
        return jnp.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


    result = js.Solver().run(rosenbrock, jnp.zeros(4))
    print(result.success, result.params.round(3))  # True [1. 1. 1. 1.]
    print(result.message)  # why it stopped, e.g. "Converged: the relative decrease ..."
    ```

    **Arguments** (all but the first two by keyword):

    - `direction` (`js.LBFGS()`): an `AbstractDirection`. With a least-squares direction
      (`js.GaussNewton()`, `js.LevenbergMarquardt()`, any `js.AbstractLeastSquares`), fn
      returns a pytree of residuals r, and f = 0.5 |r|^2 is minimised.
    - `linesearch`: an `AbstractLineSearch` (default: the direction's own, `js.Zoom()` for
      L-BFGS, and `js.MoreThuente()` for L-BFGS in runs with `bounds`, as L-BFGS-B).
    - `initial_step` (`js.InitialQuadratic()`): how each search's first trial step is chosen
      (docs/methods.md, "Initial steps").
    - When a run ends (docs/getting-started.md, "Stopping"; `result.message` says which):
      `gtol` (1e-5) on the gradient's infinity norm (`gtol_norm="2"`: its 2-norm, wherever
      a run tests or reports it), `ftol` (2.2e-9, scipy's) on the relative decrease (f_k -
      f_{k+1}) / max(|f_k|, |f_{k+1}|, 1); with a least-squares direction `gtol` 0, `ftol`
      1e-10 on MINPACK's test (actual and predicted decrease at most ftol f_k) and a step that
      rounds away below f's precision ends `CONVERGED_PRECISION`, a success (None: the
      direction's defaults); `xtol` (0: off) on max |x_{k+1} - x_k|, `max_steps`
      (1000), `max_evals` (None: no budget of evaluations of fn), `stall_steps` (100 steps
      without progress) and `stop_when` (None, or your function of the step's record).
    - `return_best` (True), `has_aux` (False: fn returns f alone, True: (f, aux)).
    - `value_and_grad` (False): True when fn returns (f, grad) of its own (docs/own-gradient.md).
    - `throw` (False): True raises a runtime error naming the status where a run ends in
      `MAX_STEPS`, `MAX_EVALS`, `LINESEARCH_FAILED`, `NONFINITE` or `STALLED`;
      `"failures"` on the last three only, in `run` as in `step`.
    - `adjoint` (`js.ImplicitAdjoint()`, at the solution, or `js.UnrolledAdjoint()`, through
      the iterations): how `run` is differentiated with respect to `args`.

    **The best point.** A run returns the lowest f it has seen among x0 and the points it
    accepted, unless its last iterate is as low within the line search's rounding allowance,
    not above f(x0), and flatter; so f never ends above f(x0). `return_best=False` returns the
    last iterate always. Why, and what `step` keeps of it: docs/getting-started.md.

    After a step that did not move, the direction's memory is reset. A `step` from a
    converged state changes nothing until `reevaluate` (or params that are not the state's),
    so under `vmap` finished problems stay put while others go on. Complex leaves are
    optimised as pairs of reals (docs/complex.md).

    Structural settings (`gtol_norm`, `max_steps`, `max_evals`, `stall_steps`, `stop_when`,
    `return_best`, `has_aux`, `value_and_grad`, `throw`) are static, so two solvers with equal
    settings share compiled programs (`stop_when` is compared by identity, as `run`'s
    `callback`). Numeric settings (`gtol`, `ftol`, `xtol`, and those of the line search) may be
    Python numbers (hashed, as static ones) or 0-d arrays: dynamic leaves, so that a schedule
    or a sweep (`jax.vmap` over a setting) reuses one compiled program.
    """

    direction: AbstractDirection
    linesearch: AbstractLineSearch
    bounded_linesearch: AbstractLineSearch  # the line search of runs with bounds
    initial_step: AbstractInitialStep
    gtol: Setting
    gtol_norm: str = eqx.field(static=True)  # "inf" or "2"
    ftol: Setting
    xtol: Setting
    max_steps: int = eqx.field(static=True)
    max_evals: int | None = eqx.field(static=True)
    stall_steps: int = eqx.field(static=True)
    stop_when: Callable[[dict], Any] | None = eqx.field(static=True)
    return_best: bool = eqx.field(static=True)
    has_aux: bool = eqx.field(static=True)
    value_and_grad: bool = eqx.field(static=True)
    throw: bool | str = eqx.field(static=True)  # False, True or "failures"
    adjoint: AbstractAdjoint

    def __init__(
        self,
        direction: AbstractDirection | None = None,
        linesearch: AbstractLineSearch | None = None,
        *,
        gtol: Setting | None = None,
        gtol_norm: str = "inf",
        ftol: Setting | None = None,
        xtol: Setting = 0.0,
        max_steps: int | np.integer = 1000,
        max_evals: int | np.integer | None = None,
        stall_steps: int | np.integer = 100,
        stop_when: Callable[[dict], Any] | None = None,
        return_best: bool = True,
        has_aux: bool = False,
        value_and_grad: bool = False,
        throw: bool | str = False,
        adjoint: AbstractAdjoint | None = None,
        initial_step: AbstractInitialStep | None = None,
    ):
        fields = solver_settings(
            direction, linesearch, initial_step, gtol=gtol, gtol_norm=gtol_norm, ftol=ftol,
            xtol=xtol, max_steps=max_steps, max_evals=max_evals, stall_steps=stall_steps,
            stop_when=stop_when, return_best=return_best, has_aux=has_aux,
            value_and_grad=value_and_grad, throw=throw, adjoint=adjoint,
        )  # fmt: skip
        for name, value in fields.items():
            setattr(self, name, value)

    def init(
        self, params: PyTree, value_dtype=None, *, fn=None, args: tuple = (), bounds=None
    ) -> SolverState:
        """The state for `params`, with every leaf's dtype fixed and strongly typed.

        `value_dtype` is the dtype of f in the state; a value of another dtype from fn is cast
        to it. If None: inferred from `fn(params, *args)` when `fn` is given, else the widest
        floating dtype of params, at least float32. Scalars of the line search use
        `value_dtype` widened to at least float32. `fn` is needed with `has_aux=True`, to
        learn the structure of aux. `bounds`, as in `run`: pass the same to `init` and `step`.
        They are checked here (their structure, their order, and that the direction can
        honour them), and with bounds the state is that of the bounded line search.
        """
        return _setup.init(self, params, value_dtype, fn, args, bounds)

    def step(
        self, fn, params: PyTree, state: SolverState, *args, bounds=None
    ) -> tuple[PyTree, SolverState]:
        """One iteration: direction, line search, state update. Returns (params, state).

        The state caches f and its gradient at the returned params, so the next step evaluates
        fn only at trial points; pass the params that `step` returned (with the same args, or
        call `reevaluate` for new ones). Given other params (beyond rounding), the step finds
        that the cache is not theirs by the state's fingerprint of its point: it evaluates fn
        at them first, as after `reevaluate`, and counts it in `state.num_foreign_params`.
        A line search with `evaluates_each_step`
        (`StochasticArmijo`) evaluates f and its gradient at params on the args of each step
        first. `state.status` tells how this step ended (`Status.RUNNING` if no criterion was
        met). `bounds` as in `run`; params outside them are first projected into the box. A
        search that has not ended after `max_trials` evaluations is cut off: the step takes
        no step and ends `LINESEARCH_FAILED`. Compiled by `eqx.filter_jit`, so an eager call
        compiles once too.
        """
        return _pipeline.step(self, fn, params, state, args, bounds)

    def reevaluate(self, state: SolverState) -> SolverState:
        """`state` with its cached f and gradient marked stale: the next `step` first evaluates
        fn at its params, then searches from there. Use it when the objective changed between
        steps, e.g. a new mini-batch in args (which `step` cannot tell), or after editing
        params yourself (an edit below the fingerprint's tolerance goes unseen). Memory and
        search state are kept. Works inside `jit`. L-BFGS on mini-batches: `js.Backtracking()`
        with `initial_step=js.InitialDecaying()` (docs/training-loops.md)."""
        return dataclasses.replace(state, has_eval=jnp.zeros_like(state.has_eval))

    def run(
        self,
        fn,
        x0: PyTree,
        *args,
        value_dtype=None,
        history: bool = False,
        callback=None,
        verbose: bool = False,
        progress: bool = False,
        bounds=None,
        state: SolverState | None = None,
        compiler_options="auto",
    ) -> Result:
        """Minimise fn from x0: one compiled `lax.while_loop` of which each iteration evaluates
        fn once.

        New `x0` or `args` values of the same shapes and dtypes reuse the compiled program, and
        so does a new `fn` object that computes the same thing (docs/recompiles.md). A closure
        over other data compiles again: pass data through `args`. `value_dtype` as in `init`.

        - `history=True` keeps x0's record (step 0) and each step's (fields: docs/history.md)
          in `result.history`, buffers of `max_steps + 1` rows (36 bytes a row in float32)
          allocated on the device when the run starts: one larger than a quarter of the
          device's memory (2 GiB where JAX reports none, as on a CPU) is refused with a
          ValueError. `callback=f` calls `f(record)` on the host at x0 and after each step,
          keeping nothing on the device; `verbose=True` prints a line per record,
          `progress=True` shows a tqdm bar.
        - `bounds=(lower, upper)` keeps lower <= params <= upper, scalars or pytrees like
          params, -inf / +inf (or None) for no bound; `gtol` then bounds the projected
          gradient (docs/bounds.md).
        - `state=result.state` (with `x0=result.iterate`) resumes a run: `max_steps` more
          steps, so that two runs of k steps are one of 2k bit for bit
          (docs/training-loops.md). A state that does not fit raises a TypeError naming the
          leaf; the caller's state is never consumed.
        - `compiler_options`: XLA's options for the run's programs (as `jax.jit`'s); None keeps
          XLA's defaults, and "auto" (the default) compiles with options that halve the compile
          on a CPU for the steps whose run time they may add stays below the compile time they
          save (docs/recompiles.md). Inside your own `jax.jit`, that jit's options apply.
        """
        check_fn(fn)
        value_dtype = None if value_dtype is None else floating_dtype(value_dtype, "value_dtype")
        report = _pipeline.report(bool(history), callback, bool(verbose), bool(progress))
        return _pipeline.run(
            self, fn, x0, args, value_dtype, bounds, report, state, compiler_options
        )

    def as_optax(self):
        """This solver as an `optax.GradientTransformationExtraArgs` that honours optax's
        line-search contract (`update(grad, state, params, *, value, grad, value_fn,
        **extra_args)`), for optax's documented L-BFGS loop in place of `optax.lbfgs()`, with
        `optax.value_and_grad_from_state`. Each `update` is one `step` (docs/optax.md). Needs
        optax (`pip install optax`, or `jaxsearch[optax]`)."""
        return _optional("optax", "as_optax").as_optax(self)

    def as_optimistix(self):
        """This solver as an `optx.AbstractMinimiser`, for `optx.minimise(fn, minimiser, y0,
        args)` with optimistix's own `max_steps`, `throw`, `adjoint` and `has_aux` (this
        solver's are unused). Each optimistix step is one `step`; `sol.value` is the point
        `run` returns, `sol.stats["status"]` the `js.Status` a run would end with, and
        `sol.result` its optimistix counterpart (docs/optimistix.md). A least-squares direction
        raises a TypeError. Needs optimistix (`pip install optimistix`, or
        `jaxsearch[optimistix]`)."""
        return _optional("optimistix", "as_optimistix").OptimistixMinimiser(self)


def _optional(package: str, method: str):
    """This package's module for `package` (`_optax`, `_optimistix`), or an ImportError that
    says how to install it."""
    try:
        return importlib.import_module(f"._{package}", __package__)
    except ModuleNotFoundError as error:
        if error.name != package:
            raise
        raise ImportError(f"{method}() needs {package}: pip install {package}") from error
