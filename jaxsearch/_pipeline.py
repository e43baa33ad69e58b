"""`Solver.run` and `step`, read top to bottom: the call's box, its one line search and its
state (from `_setup`), the compiled program (`_programs` says which and how), the engine's loop
inside the adjoint, the point a run returns, and `throw`.

A call resolves its line search once, at its top (`line_search`: the bounded one where there
are bounds), and hands that search down: the state is built for it, checked against it, and
the engine runs it. x0 (params) is partitioned once per trace: at the top where bounds need
its floating leaves, and once in each compiled program.
"""

import dataclasses
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
from jax import lax

from . import _evaluate
from ._adjoint import Problem
from ._box import gradient_norm
from ._compile import _closure, _computation, _programs, _retrace, bounded_cache, packed
from ._complex import OnRealView, check_complex, complex_params, real_params
from ._direction._base import least_squares
from ._engine import Engine
from ._history import History, Report
from ._inputs import (
    check_fn,
    check_params,
    partition,
)
from ._machine import Machine
from ._misc import (
    count_after,
    select,
    tree_all_finite,
    tree_cast_like,
    tree_cast_to_avals,
    tree_equal,
    weak_settings,
    with_fields,
)
from ._result import Result
from ._setup import (
    check_state,
    fresh_run_state,
    line_search,
    make_box,
    resumed_state,
)
from ._state import SolverState, fingerprint, same_point
from ._status import CAUSES, Cause, Status, stop_message
from ._stopping import returned_status, returns_last, run_status, stop_cause

_replace = dataclasses.replace

# What `throw=True` raises on: a run that did not converge; a step that could not go on (and,
# with `throw="failures"`, a run that could not go on: a fixed budget of steps is a normal end).
STEP_FAILURES = (Status.LINESEARCH_FAILED, Status.NONFINITE, Status.STALLED)
RUN_FAILURES = (Status.MAX_STEPS, Status.MAX_EVALS, *STEP_FAILURES)


# -------------------------------------------------------------------------------- a run


def report(history: bool, callback, verbose: bool, progress: bool) -> Report:
    """The `Report` of these settings, built once (a module's construction costs as much as
    a small problem's dispatch), once they are checked."""
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be callable, got {type(callback).__name__}.")
    if progress:
        try:
            import tqdm  # noqa: F401
        except ImportError as error:
            raise ImportError("progress=True needs tqdm: pip install tqdm") from error
    try:
        return _kept_report(history, callback, verbose, progress)
    except TypeError:  # an unhashable callback
        return Report(history, callback, verbose, progress)


_kept_report = bounded_cache(64)(Report)


def run(
    solver,
    fn,
    x0,
    args: tuple,
    value_dtype,
    bounds,
    report,
    state,
    compiler_options,
    last_step=None,
) -> Result:
    """`Solver.run` once its arguments are checked: the box and line search of the call, the
    state (`state` resumed, or a fresh one), then the compiled run (`_programs` chooses how
    it is compiled and dispatched; `compiler_options` as `_programs.setting` gives them).
    Complex params run as their real view (`_complex`), turned back in the result.
    `last_step`: the step count at which the run stops (per problem under `jax.vmap`; None:
    `max_steps` steps after the state's), for a run that `rent_then_buy` cuts in two."""
    view = check_complex(solver, x0, bounds)
    if view is not None:
        arguments = (args, value_dtype, bounds, report, state, compiler_options, last_step)
        result = run(solver, OnRealView(fn, view), real_params(view, x0), *arguments)
        params, grad, iterate = complex_params(view, (result.params, result.grad, result.iterate))
        return Result(
            params,
            result.value,
            grad,
            result.aux,
            result.status,
            result.packed_state,
            iterate,
            result.history,
        )
    check_params(x0)  # before fn is traced: fn would fail first on, say, a list of numbers
    box = None if bounds is None else make_box(solver, bounds, partition(x0)[0])
    search = line_search(solver, box)
    with _evaluate.sharing_traces():  # fn is traced once for its price, the state and the run
        fn, args = _closure.converted(fn, x0, args)  # the tracers fn closes over: args
        with _retrace.watching(_programs.compiled_per_call((x0, args))):
            return _run_converted(
                solver,
                search,
                fn,
                x0,
                args,
                value_dtype,
                bounds,
                box,
                report,
                state,
                compiler_options,
                last_step,
            )


def _run_converted(
    solver,
    search,
    fn,
    x0,
    args,
    value_dtype,
    bounds,
    box,
    report,
    state,
    compiler_options,
    last_step,
):
    """`run` once fn's closed-over tracers are among `args` (`_closure`), within the call's
    shared traces: the state (`state` resumed, or a fresh one), then the compiled run."""
    if not solver.adjoint.forward_mode and _programs.differentiated_forward((x0, args)):
        raise TypeError(
            f"jaxsearch: {type(solver.adjoint).__name__} differentiates Solver.run in reverse "
            "mode only (jax.grad, jax.vjp); forward mode (jax.jvp, jax.jacfwd) needs "
            "adjoint=js.ImplicitAdjoint() (the default)."
        )
    if _programs.batched((x0, args, state)):
        report = dataclasses.replace(report, batched=True)
    given_fn = fn
    fn = same_computation(solver, fn, x0, args)
    # equinox turns a `throw=True` error into a clean exception under its own jit only
    plain = not solver.throw and _programs.plain_call(fn, (x0, args)) and _programs.hashable(solver)
    _programs.price(solver, fn, x0, args)
    chosen, rented = _programs.run_options(compiler_options, solver, fn, x0, args, report, state)
    state_options = chosen
    if compiler_options == "auto" and _programs.lean_eligible((x0, args, state)):
        state_options = _programs.LEAN_ITEMS  # the fresh state's program evaluates no fn
    if rented and last_step is None:
        return rent_then_buy(solver, given_fn, x0, args, value_dtype, bounds, report, state, rented)
    if state is None:
        state, donate = fresh_run_state(
            solver, search, fn, x0, args, value_dtype, plain, state_options
        )
    else:
        state = resumed_state(state, value_dtype)
        donate = _programs.donated(state)
        if donate:
            state = jax.device_put(state, may_alias=False)  # the run consumes a copy
    # The state's small leaves come out packed (`Result`): only its larger ones, whose
    # buffers the result's can be, are donated.
    large, small = eqx.partition(state, lambda leaf: not packed(leaf))
    if plain:
        return _programs.call(
            settled_run,
            *(solver, search, fn, x0, args, box, report, last_step, small, large),
            filtered=False,
            donate=donate,
            options=chosen,
            static_argnums=(0, 1, 2, 6),
        )
    settings = (solver, search, fn, x0, args, box, report, last_step, small)
    return _programs.call(
        bundled_run, settings, large, filtered=True, donate=donate, options=chosen
    )


def rent_then_buy(
    solver, fn, x0, args: tuple, value_dtype, bounds, report, state, split: int
) -> Result:
    """A call of `run` that `_programs.run_options` cuts in two at the step count `split`:
    its steps before it compiled with the lean options and, where the run goes on after
    them, the rest of its `max_steps` resumed from that part's state and iterate under XLA's
    defaults (with `throw=True`, the lean part raises on failures only: its end at `split`
    is not the run's). Each problem under `jax.vmap` is cut at its own step: one that ended
    in the lean part keeps that part's result (one resumed from a failure would try again)."""
    lean_part = with_fields(solver, throw="failures" if solver.throw is True else solver.throw)
    given = (value_dtype, bounds, report)
    if not _programs.batched((x0, args, state)):  # counted on the host: nothing to compile
        start = 0 if state is None else int(_programs.local_value(state.num_steps))
        # (NumPy scalars: dynamic arguments, replicated on every process of a multi-host run)
        last = np.asarray(count_after(start, solver.max_steps), np.int32)  # as the engine's
        cut = np.asarray(split, np.int32)
        lean = run(lean_part, fn, x0, args, *given, state, _programs.LEAN_ITEMS, cut)
        if int(_programs.local_value(lean.status)) != Status.MAX_STEPS:  # ended before split
            return lean
        return run(solver, fn, lean.iterate, args, *given, lean.state, None, last)
    starts = jnp.zeros((), jnp.int32) if state is None else state.num_steps
    last, cut = _last_steps(starts, solver.max_steps, split)
    lean = run(lean_part, fn, x0, args, *given, state, _programs.LEAN_ITEMS, cut)
    going = _going_on(lean, last)  # some problems may end at their own last step first
    if not np.any(np.asarray(_programs.unbatched(going))):
        return lean  # (read on the host, for every problem: nothing compiled for it)
    later = run(solver, fn, lean.iterate, args, *given, lean.state, None, last)
    return _where_going(going, later, lean)


# The small computations around a run cut in two, each one program (under an eager
# `jax.vmap` too, where each operation on its own would compile one).
@functools.partial(jax.jit, static_argnums=(1, 2))
def _last_steps(start, max_steps: int, split: int):
    """The step counts at which a call from `start` ends, and its lean part ends."""
    last = count_after(start, max_steps)  # as the engine counts a call's steps
    return last, jnp.minimum(last, split)


@eqx.filter_jit
def _going_on(result: Result, last):
    return (result.status == Status.MAX_STEPS) & (result.num_steps < last)


@eqx.filter_jit
def _where_going(going, later: Result, ended: Result) -> Result:
    return jtu.tree_map(lambda a, b: jnp.where(going, a, b) if eqx.is_array(a) else a, later, ended)


def same_computation(solver, fn, params, args: tuple):
    """Where each call compiles its own programs (`_programs.compiled_per_call`: at the top
    level, or under eager `jax.vmap`, `jax.jvp` or `jax.grad`), fn's stand-in that is equal
    to any fn computing the same thing (`_computation`): a new closure over the same
    computation takes the program compiled for an earlier one. Inside a `jax.jit`'s trace,
    fn (the caller's compile decides)."""
    if not _programs.compiled_per_call((params, args)):
        return fn
    return _computation.by_computation(
        fn, solver.has_aux, params, args, least_squares(solver), solver.value_and_grad
    )


def settled_run(
    solver, search, fn, x0, args, box, report: Report, last_step, small, large
) -> Result:
    """The compiled run under `jax.jit` (solver, search, fn and report static), from the
    state's `small` and `large` leaves."""
    state = eqx.combine(small, large)
    return traced_run(solver, search, fn, x0, args, box, report, state, last_step)


def bundled_run(settings, large) -> Result:
    """The compiled run under `eqx.filter_jit` (non-array leaves static)."""
    solver, search, fn, x0, args, box, report, last_step, small = settings
    state = eqx.combine(small, large)
    return traced_run(solver, search, fn, x0, args, box, report, state, last_step)


def traced_run(solver, search, fn, x0, args, box, report: Report, state, last_step=None) -> Result:
    """The run inside its compiled program: the adjoint is handed the whole run (`minimise`)
    and the result's state is packed into a few buffers (`Result`)."""
    _retrace.note_trace("run", solver, fn, (x0, args))
    # Trace fn once: its jaxpr serves both the check of the state and every evaluation.
    fn = _evaluate.TracedOnce(fn, x0, *args)
    # The solution does not depend on where the run starts (as on x0, see the adjoints).
    state = lax.stop_gradient(state)
    # Numeric settings given as arrays, for any dtype; as pytrees (the solver's array
    # settings are their leaves, not hidden constants).
    solver, search = weak_settings((solver, search))
    minimise_from = jtu.Partial(
        minimise, solver, search, fn, box=box, report=report, state=state, last_step=last_step
    )
    problem = Problem(fn, solver.has_aux, box, least_squares(solver), solver.value_and_grad)
    return solver.adjoint.apply(minimise_from, x0, args, problem)


def minimise(
    solver, search, fn, x0, args, *, box, report: Report, state: SolverState, last_step=None
) -> Result:
    """The whole run: the state checked, the engine's loop from x0 (and `state`) to a stopping
    criterion (or the step count `last_step`), the point it returns and, with `throw`, its
    error (the adjoint is handed this to run, see `AbstractAdjoint.apply`): `start`, the
    engine's loop, then `finish`."""
    engine, machine = start(
        solver, search, fn, x0, args, box=box, report=report, state=state, last_step=last_step
    )
    machine = engine.loop(machine)
    return finish(engine, x0, machine.x, machine.state, machine.history, machine.last_eval)


def start(
    solver, search, fn, x0, args, *, box, report: Report, state: SolverState, last_step=None
) -> tuple[Engine, Machine]:
    """A run before its first iteration: the state checked against x0, x0's floating leaves
    (projected into the box), the engine of the run and its machine (`Engine.start`; the run
    stops at the step count `last_step`, by default `max_steps` after the state's)."""
    given, static = partition(x0)
    check_state(solver, search, state, x0, given, fn, args, bounded=box is not None)
    diff = tree_cast_like(given, given)  # strongly typed inside; x0's avals on the way out
    if box is not None:  # as scipy's L-BFGS-B, start from x0 projected into the box
        diff = box.project(diff)
    history = None
    if report.history:
        history = History.empty(solver.max_steps, state.value.dtype, state.scalar_dtype)
    engine = Engine(solver, search, fn, static, args, box, until_step=False, report=report)
    return engine, engine.start(diff, state, history, last_step)


def finish(engine: Engine, x0, x, state: SolverState, history, last_eval) -> Result:
    """The `Result` of a run from x0 whose machine ended at iterate `x` (x0's floating
    leaves) with `state`, `history` and `last_eval` (the machine's): its status
    (`run_status`), the point it returns (`returned_point`) and, with `throw`, its error."""
    solver, search, box = engine.solver, engine.linesearch, engine.box
    given, static = partition(x0)
    diff = last = x
    iterate = eqx.combine(tree_cast_to_avals(diff, given), static)
    spent = None if last_eval is None else state.num_fun_evals >= last_eval
    status, no_progress = run_status(
        state.status, state.steps_since_best, solver.stall_steps, spent
    )
    value, grad, aux = state.value, state.grad, state.aux
    state = _replace(state, fingerprint=fingerprint(x))  # the point of `result.iterate`
    if state.best is not None:
        diff, value, grad, aux, status = returned_point(
            solver, search, diff, state, box, status, no_progress
        )
    failures = STEP_FAILURES if solver.throw == "failures" else RUN_FAILURES
    diff = raise_on_failure(solver, diff, status, failures, state, last, "x0")
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


def returned_point(solver, search, diff, state: SolverState, box, status, no_progress):
    """What a run returns when its search may let f rise: the last iterate or the best
    point, by `returns_last`, and the status for it (`returned_status`)."""
    best, dtype = state.best, state.scalar_dtype
    assert best is not None
    last_grad_norm = gradient_norm(diff, state.grad, box, dtype)
    best_grad_norm = gradient_norm(best.params, best.grad, box, dtype)
    keep_last = returns_last(
        last=state.value,
        best=best.value,
        allowance=search.allowance(state.linesearch),
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
    status = returned_status(status, grad_norm, solver.gtol)
    return diff, value, grad, aux, status


def raise_on_failure(solver, diff, status, failures: tuple, state: SolverState, x, point: str):
    """With `throw` set: `diff`, with a runtime error (`eqx.branched_error_if`) that names
    the status and its cause (`stop_cause`, from `state` and the last iterate `x`, where
    the start point is called `point`) when `status` is one of `failures`."""
    if not solver.throw:
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


# ------------------------------------------------------------------------------- a step


def step(solver, fn, params, state, args: tuple, bounds):
    """`Solver.step`: `take_step` compiled by `eqx.filter_jit` with the options "auto"
    chooses; within `js.jit`'s pricing trace, only priced (params and state come back as
    they went in)."""
    view = check_complex(solver, params, bounds)
    if view is not None:  # complex params: a step of their real view (`_complex`)
        real = real_params(view, params)
        real, state = step(solver, OnRealView(fn, view), real, state, args, bounds)
        return complex_params(view, (real,))[0], state
    check_params(params)  # before fn is traced, as in `run`
    if _programs.price(solver, fn, params, args):
        return params, state
    # fn is traced once for its stand-in and the step
    with _evaluate.sharing_traces(), _retrace.watching(_programs.compiled_per_call(state)):
        fn, args = _closure.converted(fn, params, args)  # the tracers fn closes over: args
        if _programs.compiled_per_call(state):
            fn = same_computation(solver, fn, params, args)
        chosen = _programs.options("auto", solver, fn, params, args)
        arguments = (solver, fn, params, state, args, bounds, False)
        return _programs.call(take_step, *arguments, filtered=True, options=chosen)


def own_params(state: SolverState, diff) -> SolverState:
    """`state` for a step from params with floating leaves `diff`: where its cached f and
    gradient are of other params (their `fingerprint` differs from the state's), marked
    stale as by `Solver.reevaluate`, and counted in `num_foreign_params`. A state without
    them (`has_eval` False) fits any params. Changed args cannot be told this cheaply: that
    is `reevaluate`'s."""
    foreign = state.has_eval & ~same_point(fingerprint(diff), state.fingerprint)
    return _replace(
        state,
        has_eval=state.has_eval & ~foreign,
        num_foreign_params=state.num_foreign_params + foreign.astype(jnp.int32),
    )


def take_step(solver, fn, params, state, args: tuple, bounds, evaluated: bool):
    """One step while traced: the box and line search of the call, the state checked, and
    the engine until the next step boundary. `evaluated`: the state's f and gradient are at
    params on these args (the optax transformation was given them), so a search that
    `evaluates_each_step` uses them."""
    check_fn(fn)
    _retrace.note_trace("step", solver, fn, (params, args))
    given, static = partition(params)
    diff = tree_cast_like(given, given)  # strongly typed inside; given avals on the way out
    box = make_box(solver, bounds, diff)
    search = line_search(solver, box)
    # Trace fn once: its jaxpr serves both the check of the state and every evaluation.
    fn = _evaluate.TracedOnce(fn, params, *args)
    check_state(solver, search, state, params, given, fn, args, bounded=box is not None)
    if search.evaluates_each_step and not evaluated:
        state = solver.reevaluate(state)  # f and its gradient on this step's args
    state = own_params(state, diff)
    if box is not None:
        inside = box.project(diff)
        moved = ~tree_equal(inside, diff)
        diff = inside
        state = _replace(state, has_eval=state.has_eval & ~moved)
    solver, search = weak_settings((solver, search))
    engine = Engine(solver, search, fn, static, args, box, until_step=True)
    machine = engine.loop(engine.start(diff, state))
    diff, state = machine.x, _replace(machine.state, fingerprint=fingerprint(machine.x))
    diff = raise_on_failure(solver, diff, state.status, STEP_FAILURES, state, diff, "params")
    return solver.adjoint.step_outputs(
        (eqx.combine(tree_cast_to_avals(diff, given), static), state)
    )
