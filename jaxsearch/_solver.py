"""The Solver: a descent direction composed with a line search."""

import dataclasses
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import PyTree

from . import _pipeline, _programs
from ._adjoint import AbstractAdjoint
from ._direction import LBFGS, AbstractDirection
from ._inputs import (
    check_adjoint,
    check_fn,
    check_own_gradient,
    check_parts,
    floating_dtype,
    throw_setting,
    tolerance,
)
from ._linesearch import AbstractInitialStep, AbstractLineSearch, InitialQuadratic
from ._misc import Setting, as_int, check_count
from ._pairing import searches
from ._result import Result
from ._state import SolverState

_SCIPY_FTOL = 2.220446049250313e-09  # scipy L-BFGS-B: factr = 1e7 times float64 epsilon


class Solver(eqx.Module):
    """Minimise f(params, *args) over params, any pytree of floating arrays, by a descent
    direction composed with a line search. Complex leaves (complex64, complex128) are
    optimised as pairs of reals, their real and imaginary parts; `result.grad` is then
    df/dx + i df/dy, and the state is that of the real view (docs/complex.md).

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

    - `direction`: an `AbstractDirection` (default `js.LBFGS()`). With a least-squares
      direction (`js.GaussNewton()`, `js.LevenbergMarquardt()`, any
      `js.AbstractLeastSquares`), fn returns a pytree of residuals r instead of f, and the
      solver minimises f = 0.5 |r|^2 (what `value`, the history and the stopping rules see).
    - `linesearch`: an `AbstractLineSearch` (default: the direction's own, `js.Zoom()` for
      L-BFGS; when none is given, runs with `bounds` use `js.MoreThuente()` with L-BFGS, as
      L-BFGS-B does).
    - `gtol` (1e-5), `ftol` (2.2e-9, scipy's), `xtol` (0: off), `max_steps` (1000),
      `max_evals` (None: no budget), `stall_steps` (100), `stop_when` (None): the stopping
      rules below.
    - `return_best` (True), `has_aux` (False: fn returns f alone), `throw` (False),
      `adjoint` (`js.ImplicitAdjoint()`): below.
    - `value_and_grad` (False): True when fn computes its own gradient (below).
    - `initial_step` (`js.InitialQuadratic()`): how each line search's first trial step is
      chosen, for any line search; also `js.InitialStatic`, `js.InitialPrevious`,
      `js.InitialConstantChange`, `js.InitialHagerZhang`, or an `js.AbstractInitialStep` of
      one's own (docs/methods.md, "Initial steps").

    **Stopping.** As scipy's L-BFGS-B: `gtol` on the infinity norm of the gradient, `ftol`
    on the relative decrease (f_k - f_{k+1}) / max(|f_k|, |f_{k+1}|, 1) (`ftol=0` switches
    it off), and `max_steps`; a run without progress (a new lowest f or least gradient norm)
    for `stall_steps` steps ends `Status.STALLED`, as does a step that changes no parameter.
    `result.message` says which rule ended a run. Three more, off by default:

    - `xtol`: a step that changed no parameter by more than xtol, max_i |x_{k+1,i} - x_{k,i}|
      <= xtol (torch's `tolerance_change` on params), ends `CONVERGED_XTOL`, a success.
      Tested after gtol and ftol (a step that meets either ends with theirs).
    - `max_evals`: a budget of evaluations of fn (torch's `max_eval`; of `num_fun_evals`,
      where a value and its gradient count as one): a run evaluates fn at most `max_evals`
      times more than its start state had (a fresh run: in all), and ends `MAX_EVALS` (not a
      success) when it has, unless that evaluation ended it otherwise. A search still in
      progress when the budget is spent is cut off as at its trial budget: the step takes no
      step and ends `MAX_EVALS` (a run returns the best point accepted before). `step` caps
      the state's count since `init` (which a run's state carries on): it evaluates fn only
      while the count is below `max_evals`, and a step from a state at the cap changes
      nothing and ends `MAX_EVALS`.
    - `stop_when`: a function of the step's record (a dict of 0-d arrays: `step`, `value`,
      `grad_norm`, `step_size`, `num_fun_evals`, `step_evals`, as in the history) to a
      boolean scalar, traced into the compiled loop (per problem under `jax.vmap`) and
      called after each step; True ends the run (or the step) `STOPPED`, not a success (the
      rule is the caller's: read `status`), where no other rule ended the step.

    `CONVERGED_FTOL`, `CONVERGED_XTOL` and `STOPPED` are kept: a `step` from a state that
    has one changes nothing until `reevaluate`, and a run resumed from one stops at once.

    **The best point.** A run returns the lowest f it has seen among x0 and the points it
    accepted, unless its last iterate is as low within the line search's rounding allowance,
    not above f(x0), and flatter; so f never ends above f(x0). `return_best=False` returns the
    last iterate always. Why, and what `step` keeps of it: docs/getting-started.md.

    `throw=True` raises a runtime error naming the status and its cause where a run ends in
    `MAX_STEPS`, `MAX_EVALS`, `LINESEARCH_FAILED`, `NONFINITE` or `STALLED` (a step, in one
    of the last three); `throw="failures"` raises on the last three only, in `run` as in
    `step`.

    After a step that did not move, the direction's memory is reset (the next `step` starts
    from steepest descent). A `step` from a converged state changes nothing until
    `reevaluate`, so under `vmap` finished problems stay put while others go on. A line search
    that has not ended after its trial budget (`max_trials` evaluations) is cut off there: the
    step takes no step and ends `LINESEARCH_FAILED`.

    `adjoint` says how `run` is differentiated with respect to `args`:
    `js.ImplicitAdjoint()` (default, at the solution) or `js.UnrolledAdjoint()` (through the
    iterations).

    **Objectives with their own gradient.** With `value_and_grad=True`, fn returns
    `(value, grad)` (`((value, aux), grad)` with `has_aux=True`), grad with params' structure
    and shapes (or None at params' non-floating leaves, as `eqx.filter_grad` gives), e.g. a
    hand-written adjoint or a simulator behind `jax.pure_callback`; a TypeError names a
    mismatch when fn is traced. jaxsearch never differentiates fn then: grad is cast to
    params' dtypes and value to the value dtype, as an autodiff gradient is. Hessian-vector
    products (`js.NewtonCG`, `js.Newton`) are forward differences of that gradient,
    H v ~ (g(x + eps v) - g(x)) / eps (Nocedal & Wright, *Numerical Optimization*, 2nd ed.,
    section 8.1), with eps = sqrt(u) (1 + |x|_2) / |v|_2, u the machine epsilon of params'
    least precise leaf, the difference taken in at least float32; each product is one more
    evaluation of fn, not counted in `num_fun_evals` (the direction's state counts them, as
    `num_hvp`). Differentiating `run` with `js.ImplicitAdjoint()` differentiates the gradient
    fn returns (forward mode): a gradient JAX cannot differentiate (a `pure_callback`) raises a
    TypeError there. Least-squares directions refuse `value_and_grad=True` here, and
    `as_optax()` refuses it (optax's `value_fn` returns f alone). docs/own-gradient.md.

    Structural settings (`max_steps`, `max_evals`, `stall_steps`, `stop_when`,
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
        gtol: Setting = 1e-5,
        ftol: Setting = _SCIPY_FTOL,
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
        direction = LBFGS() if direction is None else direction
        initial_step = InitialQuadratic() if initial_step is None else initial_step
        if not isinstance(initial_step, AbstractInitialStep):
            raise TypeError(
                "initial_step must be a js.AbstractInitialStep (e.g. js.InitialStatic(1.0)), "
                f"got {type(initial_step).__name__}."
            )
        check_parts(direction, linesearch)
        linesearch, bounded_linesearch = searches(direction, linesearch)
        gtol, ftol, xtol = (
            tolerance(name, v) for name, v in (("gtol", gtol), ("ftol", ftol), ("xtol", xtol))
        )
        steps, stall = as_int(max_steps), as_int(stall_steps)
        check_count("Solver", "max_steps", steps)
        check_count("Solver", "stall_steps", stall)
        evals = None if max_evals is None else as_int(max_evals)
        if evals is not None:
            check_count("Solver", "max_evals", evals)
        if stop_when is not None and not callable(stop_when):
            raise TypeError(f"stop_when must be callable, got {type(stop_when).__name__}.")
        self.direction = direction
        self.linesearch = linesearch
        self.bounded_linesearch = bounded_linesearch
        self.initial_step = initial_step
        self.gtol = gtol
        self.ftol = ftol
        self.xtol = xtol
        self.max_steps = steps
        self.max_evals = evals
        self.stall_steps = stall
        self.stop_when = stop_when
        self.return_best = bool(return_best)
        self.has_aux = bool(has_aux)
        self.value_and_grad = check_own_gradient(direction, value_and_grad)
        self.throw = throw_setting(throw)
        self.adjoint = check_adjoint(adjoint)

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
        honour them), and with bounds the state is that of the bounded line search (for
        `LBFGS` with no line search given, `MoreThuente` as in L-BFGS-B).
        """
        return _pipeline.init(self, params, value_dtype, fn, args, bounds)

    def step(
        self, fn, params: PyTree, state: SolverState, *args, bounds=None
    ) -> tuple[PyTree, SolverState]:
        """One iteration: direction, line search, state update. Returns (params, state).

        The state caches f and its gradient at the returned params, so the next step evaluates
        fn only at trial points; pass the params that `step` returned (with the same args, or
        call `reevaluate` for new ones). A line search with `evaluates_each_step`
        (`StochasticArmijo`) evaluates f and its gradient at params on the args of each step
        first, whatever the state caches.
        `state.status` tells how this step ended (`Status.RUNNING` if no criterion was met).
        `bounds` as in `run`; params outside them are first projected into the box (and then
        evaluated anew). Compiled by `eqx.filter_jit`, so an eager call compiles once too.
        """
        return _pipeline.step(self, fn, params, state, args, bounds)

    def reevaluate(self, state: SolverState) -> SolverState:
        """`state` with its cached f and gradient marked stale: the next `step` first evaluates
        fn at its params (through the same evaluation site as every other), then searches from
        there. Use it when the objective changed between steps, e.g. a new mini-batch in args;
        otherwise the next step would start from f and gradient on the previous batch (a line
        search with `evaluates_each_step`, `StochasticArmijo`, does this at every step by
        itself). The direction's memory and the line search's state are kept. Works inside
        `jit`."""
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

        New `x0` or `args` values of the same shapes and dtypes reuse the compiled program.
        A new `fn` object that computes the same thing (a closure made anew per call over the
        same numbers and arrays) reuses it too: a top-level call compares what fn computes
        (docs/recompiles.md, "New closures"). A closure over other data compiles again, so
        pass data through `args` (after two such recompiles for the same shapes,
        `js.RetraceWarning` says so, once). `value_dtype` as in `init`.

        Per step, a run can record `step`, `value`, `grad_norm`, `step_size`, `num_fun_evals`
        and `step_evals` (docs/history.md): `history=True` keeps them in `result.history`, a
        `js.History` of device buffers (under `jit` and `vmap` too); `callback=f` calls
        `f(record)` on the host after each step with a dict of 0-d NumPy arrays, bit for bit
        (under `jax.vmap`, each problem's own records, with its `batch_index`);
        `verbose=True` prints a line per step; `progress=True` shows a tqdm bar. These
        settings, the identity of `callback` included, are part of the compile key.

        `bounds=(lower, upper)` constrains lower <= params <= upper. Each is a scalar or a
        pytree like params whose leaves broadcast to the params' leaves, with -inf / +inf
        (or None) for no bound, rounded inwards to each leaf's dtype. x0 is projected into
        the box and so is every trial point, so no iterate leaves it, in any dtype. The
        direction is computed for the box (`LBFGS`: L-BFGS-B; `Gradient`: projected
        gradient; other directions raise a TypeError), the line search caps its step where
        the direction leaves the box, and `gtol` bounds the infinity norm of the projected
        gradient, max |P(x - grad) - x| (scipy's `pgtol`).

        `state=result.state` (with `x0=result.iterate`) resumes a run: `max_steps` more steps,
        counters, memory, best point and history numbering going on from the state's, so
        that two runs of k steps are one of 2k bit for bit. The first iteration evaluates fn
        at x0 to check the state belongs there (not counted when it does; otherwise taken as
        f at x0, as after `reevaluate`). A state that does not fit the solver and x0 raises a
        TypeError naming the leaf; the caller's state is never consumed. A fresh run starts
        from `init`'s state, built by a small compiled program of its own (and kept for the
        next run where it is small), so that fresh and resumed runs share one compiled run
        (see docs/training-loops.md).

        A call whose `x0` and `args` are all `jax.Array`s, with `fn` hashable and `throw` off,
        is dispatched by `jax.jit` (microseconds); others by `eqx.filter_jit`: one program.
        `compiler_options` are XLA's options for those programs (as `jax.jit`'s): None keeps
        XLA's defaults; "auto" (the default), on a CPU, compiles a problem whose x0 and args
        hold less than 1 MiB with options that halve the compile where the run time they may
        add (estimated from fn's jaxpr and `max_steps`) is below the compile time they save
        (docs/recompiles.md). Inside your own `jax.jit` that jit's options apply.
        """
        check_fn(fn)
        value_dtype = None if value_dtype is None else floating_dtype(value_dtype, "value_dtype")
        report = _pipeline.report(bool(history), callback, bool(verbose), bool(progress))
        options = _programs.setting(compiler_options)
        return _pipeline.run(self, fn, x0, args, value_dtype, bounds, report, state, options)

    def as_optax(self):
        """This solver as an `optax.GradientTransformationExtraArgs` that honours optax's
        line-search contract, `update(grad, state, params, *, value, grad, value_fn,
        **extra_args)`, so it drops into optax's documented L-BFGS loop in place of
        `optax.lbfgs()`, with `optax.value_and_grad_from_state`.

        Each `update` is one `step`: a direction from `grad`, a line search on
        `value_fn(params, **extra_args)`, and `updates` = new params - params, with the avals
        of params (weak types included; None for non-floating leaves). The state keeps f and
        its gradient at the new params as `value` and `grad`, which
        `value_and_grad_from_state` returns instead of evaluating again, and the number of
        updates as `count`: what optax's documented loop reads with `optax.tree.get`. Like
        `step`, it compiles once, eagerly too. `value_and_grad_from_state` (optax's) takes
        arrays only: for an Equinox model, partition it first (docs/optax.md). Needs optax
        (`pip install optax`, or `jaxsearch[optax]`), which `import jaxsearch` does not.
        """
        try:
            from ._optax import as_optax
        except ModuleNotFoundError as error:
            if error.name != "optax":
                raise
            raise ImportError("as_optax() needs optax: pip install optax") from error

        return as_optax(self)

    def as_optimistix(self):
        """This solver as an `optx.AbstractMinimiser`, for `optx.minimise(fn, minimiser, y0,
        args)` with optimistix's own `max_steps`, `throw`, `adjoint`
        (`optx.ImplicitAdjoint()`, `optx.RecursiveCheckpointAdjoint()`) and `has_aux`.

        Each optimistix step is one `step` (a direction and its line search); the first
        evaluates f at y0 first. The run stops where `run` would stop: `gtol`, `ftol`, a
        failed step, or `stall_steps` steps without progress; optimistix's `max_steps`
        replaces this solver's. `sol.value` is the point `run` returns (the best point seen,
        as `return_best` says) and `sol.aux` is fn's aux there. `sol.stats["status"]` is
        the `js.Status` code a run would end with (`MAX_STEPS` when optimistix's budget ran
        out) and `sol.stats["num_fun_evals"]` the evaluations of fn. `sol.result`:
        `successful` where the run converged (or `stop_when` ended it, `STOPPED`),
        `nonfinite` where x0, f or its gradient there is not finite, `nonlinear_divergence`
        where the line search failed (`LINESEARCH_FAILED`) or the run stalled (`STALLED`),
        and `nonlinear_max_steps_reached` at optimistix's `max_steps` or this solver's
        `max_evals` (`MAX_EVALS`);
        `js.Status(sol.stats["status"]).message` says which. This solver's `has_aux`,
        `throw`, `max_steps` and `adjoint` are unused (optimistix's arguments decide), and
        the line search's loops are checkpointed so that reverse mode works through them.

        A least-squares direction (`js.AbstractLeastSquares`: `GaussNewton`,
        `LevenbergMarquardt`), whose fn returns residuals, raises a TypeError here. Bounds
        are `run`'s: `options` other than `autodiff_mode="bwd"` raise a ValueError in
        `optx.minimise`. Needs optimistix (`pip install optimistix`, or
        `jaxsearch[optimistix]`), which `import jaxsearch` does not.
        """
        try:
            from ._optimistix import OptimistixMinimiser
        except ModuleNotFoundError as error:
            if error.name != "optimistix":
                raise
            raise ImportError("as_optimistix() needs optimistix: pip install optimistix") from error

        return OptimistixMinimiser(self)
