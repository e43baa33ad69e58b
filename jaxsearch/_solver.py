"""The Solver: a descent direction composed with a line search."""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
from jax import lax
from jaxtyping import PyTree

from . import _evaluate, _programs, _retrace
from ._adjoint import AbstractAdjoint, ImplicitAdjoint, Problem
from ._box import Box, check_order
from ._direction import LBFGS, AbstractDirection
from ._engine import Engine, gradient_norm
from ._history import History, Report
from ._inputs import (
    check_fits,
    check_fn,
    check_instance,
    check_is_state,
    check_parts,
    floating_dtype,
    misfit,
    partition,
    throw_setting,
)
from ._linesearch import AbstractLineSearch
from ._misc import (
    Setting,
    as_int,
    at_least_float32,
    check_count,
    check_setting,
    leaves,
    scalar,
    select,
    tree_all_finite,
    tree_cast_like,
    tree_cast_to_avals,
    tree_equal,
    tree_zeros_like,
    weak_settings,
    widest_float,
)
from ._pairing import default_search
from ._result import Result
from ._state import BestPoint, SolverState
from ._status import CAUSES, Cause, Status, stop_message
from ._stopping import returned_status, returns_last, run_status, stop_cause

_SCIPY_FTOL = 2.220446049250313e-09  # scipy L-BFGS-B: factr = 1e7 times float64 epsilon


_replace = dataclasses.replace

# What `throw=True` raises on: a run that did not converge; a step that could not go on (and,
# with `throw="failures"`, a run that could not go on: a fixed budget of steps is a normal end).
_STEP_FAILURES = (Status.LINESEARCH_FAILED, Status.NONFINITE, Status.STALLED)
_RUN_FAILURES = (Status.MAX_STEPS, *_STEP_FAILURES)


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

    - `direction`: an `AbstractDirection` (default `js.LBFGS()`).
    - `linesearch`: an `AbstractLineSearch` (default: the direction's own, `js.Zoom()` for
      L-BFGS; when none is given, runs with `bounds` use `js.MoreThuente()` with L-BFGS, as
      L-BFGS-B does).
    - `gtol` (1e-5), `ftol` (2.2e-9, scipy's), `max_steps` (1000), `stall_steps` (100):
      the stopping rules below.
    - `return_best` (True), `has_aux` (False: fn returns f alone), `throw` (False),
      `adjoint` (`js.ImplicitAdjoint()`): below.

    **Stopping.** As scipy's L-BFGS-B: `gtol` on the infinity norm of the gradient, `ftol`
    on the relative decrease (f_k - f_{k+1}) / max(|f_k|, |f_{k+1}|, 1) (`ftol=0` switches
    it off), and `max_steps`. A step that changes no parameter ends with `Status.STALLED`,
    never as converged; a step after which f did not change does not pass `ftol` when
    `ftol` is below the value dtype's resolution (the run goes on: near a minimiser the line
    searches judge steps by slopes). `result.message` says which rule ended a run.

    **The best point.** Near a minimiser, where the decrease of f is lost in its rounding
    error, the line searches judge a step by its slope and may accept one that raises f
    within their rounding allowance epsilon C_k (see `Zoom`); `FixedStep` has no decrease
    test at all. So a run keeps the best point it has seen, the lowest f among x0 and the
    points it accepted (the newer of equal ones), and returns it, unless the last iterate is
    as good within that allowance, not above f(x0), and flatter (a gradient norm no larger):
    there values are rounding noise, and a run that meets `gtol` at its noise floor ends
    there. So f never ends above f(x0), nor more than one allowance above any value the run
    accepted: rises never add up. A `CONVERGED_GTOL` that the point returned does not meet
    becomes `STALLED` (the precision of f is exhausted: scipy's "precision loss").
    `return_best=False` returns the last iterate always (and keeps no copy of the best
    point). Progress is a new lowest f or a new least gradient norm; `run` ends a run without
    progress for `stall_steps` consecutive steps (cycling within the allowance, or climbing
    on a wrong gradient) as `STALLED`, returning its lowest point. `step` counts such steps
    in `state.steps_since_best` and leaves the decision to the loop (whose objective may
    change from step to step, mini-batches say).

    With `throw=True`, a run that ends in `MAX_STEPS`, `LINESEARCH_FAILED`, `NONFINITE` or
    `STALLED`, and a step that ends in one of the last three, raise a runtime error naming the
    status and its cause (`eqx.branched_error_if`) instead of returning it. `throw="failures"`
    raises on the last three only, in `run` as in `step`: a run that uses up its `max_steps`
    returns `MAX_STEPS` as a normal end, for a fixed budget of steps (a phase of a training
    schedule, say) that should still stop on a real failure.

    After a step that did not move (its search failed, or it rounded away), the direction's
    memory is reset, so a further `step` starts again from steepest descent rather than
    repeating the direction that failed. A `step` from a converged state (by `gtol`, or by
    `ftol` in the step that reached it) changes nothing until `reevaluate`, so under `vmap`
    finished problems stay put while others go on. A line search that has not ended after
    its trial budget (`AbstractLineSearch.max_trials` evaluations) is cut off there: the step
    takes no step and ends `LINESEARCH_FAILED`.

    `adjoint` says how `run` is differentiated with respect to `args`:
    `js.ImplicitAdjoint()` (default, at the solution) or `js.UnrolledAdjoint()` (through the
    iterations).

    Structural settings (`max_steps`, `stall_steps`, `return_best`, `has_aux`, `throw`) are
    static, so two solvers with equal settings share compiled programs. Numeric settings
    (`gtol`, `ftol`, and those of the line search) may be Python numbers (hashed, as static
    ones) or 0-d arrays: dynamic leaves, so that a schedule or a sweep (`jax.vmap` over a
    setting) reuses one compiled program.
    """

    direction: AbstractDirection
    linesearch: AbstractLineSearch
    bounded_linesearch: AbstractLineSearch  # the line search of runs with bounds
    gtol: Setting
    ftol: Setting
    max_steps: int = eqx.field(static=True)
    stall_steps: int = eqx.field(static=True)
    return_best: bool = eqx.field(static=True)
    has_aux: bool = eqx.field(static=True)
    throw: bool | str = eqx.field(static=True)  # False, True or "failures"
    adjoint: AbstractAdjoint

    def __init__(
        self,
        direction: AbstractDirection | None = None,
        linesearch: AbstractLineSearch | None = None,
        *,
        gtol: Setting = 1e-5,
        ftol: Setting = _SCIPY_FTOL,
        max_steps: int | np.integer = 1000,
        stall_steps: int | np.integer = 100,
        return_best: bool = True,
        has_aux: bool = False,
        throw: bool | str = False,
        adjoint: AbstractAdjoint | None = None,
    ):
        direction = LBFGS() if direction is None else direction
        check_parts(direction, linesearch)
        bounded_linesearch = default_search(direction, bounded=True)
        if linesearch is None:
            linesearch = default_search(direction, bounded=False)
        else:
            bounded_linesearch = linesearch
        for name, value in (("gtol", gtol), ("ftol", ftol)):
            check_setting("Solver", name, value, lambda v: v >= 0, "be non-negative")
        adjoint = ImplicitAdjoint() if adjoint is None else adjoint
        check_instance("adjoint", adjoint, AbstractAdjoint)
        if not isinstance(adjoint, AbstractAdjoint):
            raise TypeError(
                "adjoint must be an AbstractAdjoint, js.ImplicitAdjoint() or "
                "js.UnrolledAdjoint(), got "
                f"{type(adjoint).__name__}."
            )
        steps, stall = as_int(max_steps), as_int(stall_steps)
        check_count("Solver", "max_steps", steps)
        check_count("Solver", "stall_steps", stall)
        self.direction = direction
        self.linesearch = linesearch
        self.bounded_linesearch = bounded_linesearch
        self.gtol = gtol if eqx.is_array(gtol) else float(gtol)
        self.ftol = ftol if eqx.is_array(ftol) else float(ftol)
        self.max_steps = steps
        self.stall_steps = stall
        self.return_best = bool(return_best)
        self.has_aux = bool(has_aux)
        self.throw = throw_setting(throw)
        self.adjoint = adjoint

    # ----------------------------------------------------------------------------- public

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
        self._box(bounds, partition(params)[0])
        return self._init(params, value_dtype, fn, args, bounds is not None)

    def _init(self, params, value_dtype, fn, args: tuple, bounded: bool) -> SolverState:
        """`init`, once the bounds (if any, `bounded`) are checked."""
        diff, _ = partition(params)
        out = None
        if fn is not None:
            check_fn(fn)
            out = eqx.filter_eval_shape(
                lambda p: _evaluate.split_output(fn(p, *args), self.has_aux), params
            )
            _evaluate.check_value(out[0])
        elif self.has_aux:
            raise TypeError("Solver(has_aux=True).init needs `fn=` to learn the structure of aux.")
        if value_dtype is None:
            if out is not None:
                value_dtype = out[0].dtype
            else:
                value_dtype = widest_float(*(x.dtype for x in leaves(diff)), jnp.float32)
        value_dtype = jnp.dtype(floating_dtype(value_dtype, "value_dtype"))
        aux_shapes = None
        if self.has_aux:
            assert out is not None  # has_aux without fn raised above
            # Aux leaves become arrays (a Python number too), zero until fn is evaluated.
            aux_shapes = jtu.tree_map(
                lambda a: jax.ShapeDtypeStruct(
                    jnp.shape(a), jax.dtypes.canonicalize_dtype(jnp.result_type(a))
                ),
                out[1],
            )
        return self._fresh_state(diff, value_dtype, aux_shapes, bounded)

    def _search(self, bounded: bool) -> AbstractLineSearch:
        """The line search of a run with (or without) bounds."""
        return self.bounded_linesearch if bounded else self.linesearch

    def _check_state(self, state, params, fn, args: tuple, bounded: bool) -> None:
        """Raise unless `state` is a `SolverState` with the structure, shapes and dtypes of
        the state `init` gives for params, fn and args with the state's own value dtype (so
        a value dtype other than params' fits): a TypeError that names the first leaf or node
        that differs, what it is and what this solver and params give; a state made with
        bounds for a step without them (or the reverse) is said so. `run`, `step` and the
        optax update call it while they are traced: it costs nothing per call."""
        check_is_state(state)
        value_dtype = jnp.result_type(state.value)
        expected = jax.eval_shape(lambda: self._init(params, value_dtype, fn, args, bounded))
        if self.linesearch is not self.bounded_linesearch:
            other = jax.eval_shape(
                lambda: self._search(not bounded).init(at_least_float32(value_dtype))
            )
            searches = state.linesearch, expected.linesearch
            if misfit(*searches, "") is not None and misfit(state.linesearch, other, "") is None:
                given, made = ("with", "without") if bounded else ("without", "with")
                raise TypeError(
                    f"step was called {given} bounds on a state that init made {made} them; "
                    "with bounds the default line search is another one (L-BFGS-B's): pass "
                    "the same bounds to init and step."
                )
        check_fits(state, expected, "state")

    @eqx.filter_jit
    def _fresh_state(self, diff, value_dtype, aux_shapes, bounded=False) -> SolverState:
        # One compiled program builds every leaf: built eagerly, each new shape of a leaf would
        # compile a program of its own, about ten for a first `init`.
        dtype = at_least_float32(value_dtype)
        aux = None
        if aux_shapes is not None:
            aux = jtu.tree_map(lambda a: jnp.zeros(a.shape, a.dtype), aux_shapes)
        best = None
        if self.return_best and not self._search(bounded).monotone:
            best = BestPoint(
                value=scalar(jnp.inf, value_dtype),
                params=tree_zeros_like(diff),
                grad=tree_zeros_like(diff),
                aux=jtu.tree_map(jnp.zeros_like, aux),
                start_value=scalar(jnp.inf, value_dtype),
            )
        return SolverState(
            value=scalar(jnp.inf, value_dtype),
            grad=tree_zeros_like(diff),
            aux=aux,
            has_eval=jnp.array(False),
            direction=self.direction.init(diff, dtype),
            linesearch=self._search(bounded).init(dtype),
            prev_decrease=scalar(jnp.nan, dtype),
            step_size=scalar(0, dtype),
            num_steps=scalar(0, jnp.int32),
            num_fun_evals=scalar(0, jnp.int32),
            status=scalar(Status.RUNNING, jnp.int32),
            best=best,
            steps_since_best=scalar(0, jnp.int32),
            lowest_grad_norm=scalar(jnp.inf, dtype),
        )

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
        return _programs.step(self, fn, params, state, args, bounds)

    def _step(self, fn, params, state, args: tuple, bounds, evaluated=False):
        """`step`, its state checked here; `evaluated`: the state's f and gradient are at
        params on these args (the optax transformation was given them), so a search that
        `evaluates_each_step` uses them."""
        check_fn(fn)
        _retrace.note_trace("step", self, fn, (params, args))
        given, static = partition(params)
        diff = tree_cast_like(given, given)  # strongly typed inside; given avals on the way out
        box = self._box(bounds, diff)
        # Trace fn once: its jaxpr serves both the check of the state and every evaluation.
        fn = _evaluate.TracedOnce(fn, params, *args)
        self._check_state(state, params, fn, args, box is not None)
        if self._search(box is not None).evaluates_each_step and not evaluated:
            state = self.reevaluate(state)  # f and its gradient on this step's args
        if box is not None:
            inside = box.project(diff)
            moved = ~tree_equal(inside, diff)
            diff = inside
            state = _replace(state, has_eval=state.has_eval & ~moved)
        engine = Engine(weak_settings(self), fn, static, args, box, until_step=True)
        machine = engine.loop(engine.start(diff, state))
        diff, state = machine.x, machine.state
        diff = self._raise_on_failure(diff, state.status, _STEP_FAILURES, state, diff, "params")
        return eqx.combine(tree_cast_to_avals(diff, given), static), state

    def reevaluate(self, state: SolverState) -> SolverState:
        """`state` with its cached f and gradient marked stale: the next `step` first evaluates
        fn at its params (through the same evaluation site as every other), then searches from
        there. Use it when the objective changed between steps, e.g. a new mini-batch in args;
        otherwise the next step would start from f and gradient on the previous batch (a line
        search with `evaluates_each_step`, `StochasticArmijo`, does this at every step by
        itself). The direction's memory and the line search's state are kept. Works inside
        `jit`."""
        return _replace(state, has_eval=jnp.zeros_like(state.has_eval))

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

        New `x0` or `args` values of the same shapes and dtypes reuse the compiled program;
        the identity of `fn` is part of the compile key, so pass data through `args` rather
        than through a new closure per call (after two such recompiles for the same shapes,
        `js.RetraceWarning` says so, once). `value_dtype` as in `init`.

        Per step, a run can record: `step` (its number, from 1), `value` and `grad_norm` (f and
        the infinity norm of its gradient after the step), `step_size`, `num_fun_evals`
        (cumulative) and `step_evals` (evaluations in this step: its line-search trials, and
        f at x0 in the first step).
        - `history=True`: `result.history` is a `js.History` of device buffers with `max_steps`
          rows and a row count, under `jit` and `vmap` too; `result.history.to_numpy()` gives
          the used rows as NumPy arrays.
        - `callback=f`: `f(record)` on the host after each step, with the record as a dict of
          0-d NumPy arrays of the run's dtypes, bit for bit (under a scoped
          `jax.enable_x64(True)` too), by `jax.debug.callback`. Under `jax.vmap`, each
          problem's records alone (those of its history), with `batch_index`, its index in
          the batch (a tuple under nested vmaps).
        - `verbose=True`: one printed line per step (of each problem, under `vmap`).
        - `progress=True`: a tqdm progress bar (one for a batch), closed when the run stops.
        These settings, the identity of `callback` included, are part of the compile key.

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

        When every leaf of `x0` and `args` is a `jax.Array`, `fn` is hashable and `throw` is
        off, the call is dispatched by `jax.jit` with the solver and fn static; otherwise by
        `eqx.filter_jit`, with non-array leaves static. Both compile the same program; the first
        dispatches in microseconds, which is most of the run time of a small problem.
        `compiler_options` are XLA's options for those programs (as `jax.jit`'s): None keeps
        XLA's defaults; "auto" (the default), on a CPU, compiles a problem whose x0 and args
        hold less than 1 MiB with options that halve the compile where the run time they may
        add (estimated from fn's jaxpr and `max_steps`) is below the compile time they save
        (docs/recompiles.md). Inside your own `jax.jit` that jit's options apply.
        """
        check_fn(fn)
        if value_dtype is not None:  # any spelling of a dtype shares one compiled program
            value_dtype = floating_dtype(value_dtype, "value_dtype")
        if progress:
            try:
                import tqdm  # noqa: F401
            except ImportError as error:
                raise ImportError("progress=True needs tqdm: pip install tqdm") from error
        if callback is not None and not callable(callback):
            raise TypeError(f"callback must be callable, got {type(callback).__name__}.")
        report = _programs.report(bool(history), callback, bool(verbose), bool(progress))
        box = None if bounds is None else self._box(bounds, partition(x0)[0])
        options = _programs.setting(compiler_options)
        return _programs.run(self, fn, x0, args, value_dtype, box, report, state, options)

    def _run(self, fn, x0, args, box, report: Report, state: SolverState) -> Result:
        _retrace.note_trace("run", self, fn, (x0, args))
        # Trace fn once: its jaxpr serves both the check of the state and every evaluation.
        fn = _evaluate.TracedOnce(fn, x0, *args)
        self._check_state(state, x0, fn, args, box is not None)
        # The solution does not depend on where the run starts (as on x0, see the adjoints).
        state = lax.stop_gradient(state)
        solver = weak_settings(self)  # numeric settings given as arrays, for any dtype
        # A pytree (the solver's array settings are its leaves, not hidden constants).
        minimise = jtu.Partial(Solver._minimise, solver, fn, box=box, report=report, state=state)
        problem = Problem(fn, solver.has_aux, box)
        return solver.adjoint.apply(minimise, x0, args, problem)

    def _minimise(self, fn, x0, args, *, box, report: Report, state: SolverState) -> Result:
        """The whole run: the engine's loop from x0 (and `state`) to a stopping criterion, and
        the point it returns (the adjoint is handed this to run, see `AbstractAdjoint.apply`)."""
        given, static = partition(x0)
        diff = tree_cast_like(given, given)  # strongly typed inside; x0's avals on the way out
        if box is not None:  # as scipy's L-BFGS-B, start from x0 projected into the box
            diff = box.project(diff)

        dtype = state.prev_decrease.dtype
        history = (
            History.empty(self.max_steps, state.value.dtype, dtype) if report.history else None
        )

        engine = Engine(self, fn, static, args, box, until_step=False, report=report)
        machine = engine.loop(engine.start(diff, state, history))
        diff, state, history = machine.x, machine.state, machine.history
        last = diff
        iterate = eqx.combine(tree_cast_to_avals(diff, given), static)
        status, no_progress = run_status(state.status, state.steps_since_best, self.stall_steps)
        value, grad, aux = state.value, state.grad, state.aux
        if state.best is not None:
            diff, value, grad, aux, status = self._best_of_run(
                diff, state, box, status, no_progress
            )
        failures = _STEP_FAILURES if self.throw == "failures" else _RUN_FAILURES
        diff = self._raise_on_failure(diff, status, failures, state, last, "x0")
        return Result(
            params=eqx.combine(tree_cast_to_avals(diff, given), static),
            value=value,
            grad=grad,
            aux=aux,
            status=status.astype(jnp.int32),
            state=state,
            iterate=iterate,
            history=history,
        )

    def _best_of_run(self, diff, state: SolverState, box, status, no_progress):
        """What a run returns when its search may let f rise: the last iterate or the best
        point, by `returns_last`, and the status for it (`returned_status`)."""
        best, dtype = state.best, state.prev_decrease.dtype
        assert best is not None
        last_grad_norm = gradient_norm(diff, state.grad, box, dtype)
        best_grad_norm = gradient_norm(best.params, best.grad, box, dtype)
        keep_last = returns_last(
            last=state.value,
            best=best.value,
            allowance=self._search(box is not None).allowance(state.linesearch),
            start=best.start_value,
            last_grad_norm=last_grad_norm,
            best_grad_norm=best_grad_norm,
            no_progress=no_progress,
        )
        diff, value, grad, aux, grad_norm = select(
            keep_last,
            (diff, state.value, state.grad, state.aux, last_grad_norm),
            (best.params, best.value, best.grad, best.aux, best_grad_norm),
        )
        status = returned_status(status, grad_norm, self.gtol)
        return diff, value, grad, aux, status

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

    # ---------------------------------------------------------------------------- private

    def _box(self, bounds, diff) -> Box | None:
        """The `Box` of `bounds` for params with floating leaves `diff` (None: no bounds),
        after checking that this solver can honour them and, when concrete, their order."""
        if bounds is None:
            return None
        if not self.direction.supports_bounds:
            raise TypeError(
                f"{type(self.direction).__name__} cannot honour bounds: use js.LBFGS() "
                "(L-BFGS-B; the default direction) or js.Gradient() (projected gradient)."
            )
        box = Box.from_bounds(bounds, diff)
        check_order(box)
        return box

    def _raise_on_failure(
        self, diff, status, failures: tuple[Status, ...], state: SolverState, x, point: str
    ):
        """With `throw` set: `diff`, with a runtime error (`eqx.branched_error_if`) that names
        the status and its cause (`stop_cause`, from `state` and the last iterate `x`, where
        the start point is called `point`) when `status` is one of `failures`."""
        if not self.throw:
            return diff
        cause = stop_cause(
            jnp,
            status,
            state.status,
            state.step_size,
            tree_all_finite(x),
            jnp.isfinite(state.value),
        )
        ends = [(s, c) for s in failures for c in CAUSES.get(s, (Cause.NONE,))]
        statuses = jnp.array([int(s) for s, _ in ends], jnp.int32)
        causes = jnp.array([int(c) for _, c in ends], jnp.int32)
        messages = tuple(f"jaxsearch: {s.name}. {stop_message(s, c, point)}" for s, c in ends)
        found = (status == statuses) & (cause == causes)
        return eqx.branched_error_if(diff, jnp.any(found), jnp.argmax(found), messages)
