"""The traced side of `Solver.run` and `step`, read top to bottom: the compiled run
(`compiled_run`), the adjoint handed the whole run (`traced_run`), then `minimise`: `start`
(the state checked against x0, the engine and its machine), the engine's loop, and `finish`,
the one place a `Result` is built (the point the run returns, its status and, with `throw`,
its error); `take_step` for a step. The host side, which checks a call and dispatches these
programs, is `_pipeline`.
"""

import dataclasses

import equinox as eqx
import jax.numpy as jnp
import jax.tree_util as jtu
from jax import lax

from . import _evaluate
from ._adjoint import Problem
from ._box import gradient_norm
from ._engine import Engine
from ._history import History, Report
from ._inputs import check_fn, partition
from ._machine import Machine
from ._misc import (
    select,
    tree_all_finite,
    tree_cast_like,
    tree_cast_to_avals,
    tree_equal,
    weak_settings,
)
from ._objective import Objective
from ._result import Result
from ._state import SolverState, check_state, fingerprint, same_point
from ._status import CAUSES, Cause, Status, stop_message
from ._stopping import returned_status, returns_last, run_status, stop_cause

_replace = dataclasses.replace

# What `throw=True` raises on: a run that did not converge; a step that could not go on (and,
# with `throw="failures"`, a run that could not go on: a fixed budget of steps is a normal end).
STEP_FAILURES = (Status.LINESEARCH_FAILED, Status.NONFINITE, Status.STALLED)
RUN_FAILURES = (Status.MAX_STEPS, Status.MAX_EVALS, *STEP_FAILURES)


def compiled_run(
    solver, search, fn, x0, args, box, report: Report, last_step, small, large
) -> Result:
    """The run's compiled program (`_compile.dispatch`: solver, search, fn and report static
    under `jax.jit`), from the state's `small` and `large` leaves (the large ones donated)."""
    state = eqx.combine(small, large)
    return traced_run(solver, search, fn, x0, args, box, report, state, last_step)


def traced_run(solver, search, fn, x0, args, box, report: Report, state, last_step=None) -> Result:
    """The run inside its compiled program: the adjoint is handed the whole run (`minimise`)
    and the result's state is packed into a few buffers (`Result`)."""
    # Trace fn once: its jaxpr serves both the check of the state and every evaluation.
    objective = Objective.of(solver, _evaluate.TracedOnce(fn, x0, *args))
    # The solution does not depend on where the run starts (as on x0, see the adjoints).
    state = lax.stop_gradient(state)
    # Numeric settings given as arrays, for any dtype; as pytrees (the solver's array
    # settings are their leaves, not hidden constants).
    solver, search = weak_settings((solver, search))
    minimise_from = jtu.Partial(
        minimise,
        solver,
        search,
        objective,
        box=box,
        report=report,
        state=state,
        last_step=last_step,
    )
    return solver.adjoint.apply(minimise_from, x0, args, Problem(objective, box))


def minimise(
    solver, search, objective, x0, args, *, box, report: Report, state: SolverState, last_step=None
) -> Result:
    """The whole run: the state checked, the engine's loop from x0 (and `state`) to a stopping
    criterion (or the step count `last_step`), the point it returns and, with `throw`, its
    error (the adjoint is handed this to run, see `AbstractAdjoint.apply`): `start`, the
    engine's loop, then `finish`."""
    engine, machine = start(
        solver,
        search,
        objective,
        x0,
        args,
        box=box,
        report=report,
        state=state,
        last_step=last_step,
    )
    machine = engine.loop(machine)
    return finish(engine, x0, machine.x, machine.state, machine.history, machine.last_eval)


def start(
    solver, search, objective, x0, args, *, box, report: Report, state: SolverState, last_step=None
) -> tuple[Engine, Machine]:
    """A run before its first iteration: the state checked against x0, x0's floating leaves
    (projected into the box), the engine of the run and its machine (`Engine.start`; the run
    stops at the step count `last_step`, by default `max_steps` after the state's)."""
    given, static = partition(x0)
    check_state(solver, search, state, x0, given, objective, args, bounded=box is not None)
    diff = tree_cast_like(given, given)  # strongly typed inside; x0's avals on the way out
    if box is not None:  # as scipy's L-BFGS-B, start from x0 projected into the box
        diff = box.project(diff)
    history = None
    if report.history:
        history = History.empty(solver.max_steps, state.value.dtype, state.scalar_dtype)
    engine = Engine(solver, search, objective, static, args, box, until_step=False, report=report)
    return engine, engine.start(diff, state, history, last_step)


def finish(engine: Engine, x0, x, state: SolverState, history, last_eval) -> Result:
    """The `Result` of a run from x0 whose machine ended at iterate `x` (x0's floating
    leaves) with `state`, `history` and `last_eval` (the machine's): its status
    (`run_status`), the point it returns (`returned_point`) and, with `throw`, its error."""
    solver, search, box = engine.solver, engine.linesearch, engine.box
    given, static = partition(x0)
    diff = last = x
    iterate = eqx.combine(tree_cast_to_avals(diff, given), static)
    status, no_progress = run_status(state, solver.stall_steps, last_eval)
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
    last_grad_norm = gradient_norm(diff, state.grad, box, dtype, solver.gtol_norm)
    best_grad_norm = gradient_norm(best.params, best.grad, box, dtype, solver.gtol_norm)
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
        state.search_end,
    )
    ends = [(s, c) for s in failures for c in CAUSES.get(s, (Cause.NONE,))]
    statuses = jnp.array([int(s) for s, _ in ends], jnp.int32)
    causes = jnp.array([int(c) for _, c in ends], jnp.int32)
    messages = tuple(f"jaxsearch: {s.name}. {stop_message(s, c, point)}" for s, c in ends)
    found = (status == statuses) & (cause == causes)
    return eqx.branched_error_if(diff, jnp.any(found), jnp.argmax(found), messages)


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


def take_step(solver, search, fn, params, args: tuple, box, state, evaluated: bool):
    """One step while traced, with the call's line search and box (None: no bounds), both
    made on the host (`_setup.prepare`): the state checked, and the engine until the next
    step boundary. `evaluated`: the state's f and gradient are at params on these args (the
    optax transformation was given them), so a search that `evaluates_each_step` uses them."""
    check_fn(fn)
    given, static = partition(params)
    diff = tree_cast_like(given, given)  # strongly typed inside; given avals on the way out
    # Trace fn once: its jaxpr serves both the check of the state and every evaluation.
    objective = Objective.of(solver, _evaluate.TracedOnce(fn, params, *args))
    check_state(solver, search, state, params, given, objective, args, bounded=box is not None)
    if search.evaluates_each_step and not evaluated:
        state = solver.reevaluate(state)  # f and its gradient on this step's args
    state = own_params(state, diff)
    if box is not None:
        inside = box.project(diff)
        moved = ~tree_equal(inside, diff)
        diff = inside
        state = _replace(state, has_eval=state.has_eval & ~moved)
    solver, search = weak_settings((solver, search))
    engine = Engine(solver, search, objective, static, args, box, until_step=True)
    machine = engine.loop(engine.start(diff, state))
    diff, state = machine.x, _replace(machine.state, fingerprint=fingerprint(machine.x))
    diff = raise_on_failure(solver, diff, state.status, STEP_FAILURES, state, diff, "params")
    return solver.adjoint.step_outputs(
        (eqx.combine(tree_cast_to_avals(diff, given), static), state)
    )
