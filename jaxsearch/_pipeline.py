"""The host side of `Solver.run` and `step`, read top to bottom: the call prepared once
(`_setup.prepare`: x0 checked, complex params as their real view, the box and the one line
search), the compile wing's `plan` (fn's closed-over tracers made arguments, fn's stand-in,
the options, retrace watching), the state (resumed, or a fresh one, `Plan.fresh`), and the
compiled run dispatched (`Plan.call`). The run's program itself is `_traced`'s. A run that
"auto" cuts in two (`Plan.split`) is two dispatches of the same program (`run_in_two`),
never a second call of `run`.
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np

from . import _evaluate
from ._compile import plan as _plan
from ._complex import complex_params
from ._misc import count_after, with_fields
from ._packing import packed
from ._result import Result
from ._setup import prepare
from ._state import fresh_state, resumed_state
from ._status import Status
from ._traced import compiled_run, take_step

# -------------------------------------------------------------------------------- a run


def report(history: bool, callback, verbose: bool, progress: bool) -> tuple:
    """The settings of the run's `Report`, checked (`plan` builds it once)."""
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be callable, got {type(callback).__name__}.")
    if progress:
        try:
            import tqdm  # noqa: F401
        except ImportError as error:
            raise ImportError("progress=True needs tqdm: pip install tqdm") from error
    return history, callback, verbose, progress


def run(solver, fn, x0, args: tuple, value_dtype, bounds, report, state, compiler_options):
    """`Solver.run` once its arguments are checked: the call prepared (`_setup.prepare`), the
    compile wing's `plan` (fn's closed-over tracers made arguments, fn's stand-in for its
    computation, the options and the cut `compiler_options` ask for), then the compiled run,
    in one call or cut in two (`run_in_two`). Complex params run as their real view, turned
    back in the result."""
    with _evaluate.sharing_traces():  # fn is traced once for its price, the state and the run
        call = prepare(solver, fn, x0, args, bounds)
        params, search, box = call.params, call.search, call.box
        plan = _plan(
            "run",
            solver,
            call.fn,
            params,
            call.args,
            report=report,
            state=state,
            compiler_options=compiler_options,
        )
        problem = (solver, search, box, plan, value_dtype)
        if plan.split:
            result = run_in_two(*problem, params, state)
        else:
            result = dispatched_run(*problem, params, state, plan.options, None)
    if call.view is None:
        return result
    turned = complex_params(call.view, (result.params, result.grad, result.iterate))
    return eqx.tree_at(lambda r: (r.params, r.grad, r.iterate), result, turned)


def dispatched_run(solver, search, box, plan, value_dtype, x0, state, options, last_step) -> Result:
    """One compiled run from x0 with `options`: from `state` (resumed) or a fresh one (built
    by its own program, `_state.fresh_state`, kept for the next run by `Plan.fresh`), until
    the step count `last_step` (per problem under `jax.vmap`; None: `max_steps` after the
    state's)."""
    fn, args = plan.fn, plan.args
    if state is None:
        state_options = plan.state_options if options == plan.options else options
        state_arguments = (solver, search, fn, x0, args, value_dtype)
        state, donate = plan.fresh(fresh_state, state_arguments, (0, 1, 2, 5), state_options)
    else:
        state, donate = plan.resumed(resumed_state(state, value_dtype))
    # The state's small leaves come out packed (`Result`): only its larger ones, whose
    # buffers the result's can be, are donated.
    large, small = eqx.partition(state, lambda leaf: not packed(leaf))
    arguments = (solver, search, fn, x0, args, box, plan.report, last_step, small, large)
    return plan.call(compiled_run, arguments, static=(0, 1, 2, 6), donate=donate, options=options)


def run_in_two(solver, search, box, plan, value_dtype, x0, state) -> Result:
    """A run that `plan` cuts in two at the step count `plan.split`: its steps before it
    compiled with the lean options and, where the run goes on after them, the rest of its
    `max_steps` resumed from that part's state and iterate under XLA's defaults (with
    `throw=True`, the lean part raises on failures only: its end at the split is not the
    run's). Each problem under `jax.vmap` is cut at its own step: one that ended in the lean
    part keeps that part's result (one resumed from a failure would try again)."""
    lean_part = with_fields(solver, throw="failures" if solver.throw is True else solver.throw)
    common = (search, box, plan, value_dtype)
    if not plan.batched:  # counted on the host: nothing to compile
        start = 0 if state is None else int(plan.local(state.num_steps))
        # (NumPy scalars: dynamic arguments, replicated on every process of a multi-host run)
        last = np.asarray(count_after(start, solver.max_steps), np.int32)  # as the engine's
        cut = np.asarray(plan.split, np.int32)
        lean = dispatched_run(lean_part, *common, x0, state, plan.lean, cut)
        if int(plan.local(lean.status)) != Status.MAX_STEPS:  # ended before split
            return lean
        return dispatched_run(solver, *common, lean.iterate, lean.state, None, last)
    starts = jnp.zeros((), jnp.int32) if state is None else state.num_steps
    last, cut = _last_steps(starts, solver.max_steps, plan.split)
    lean = dispatched_run(lean_part, *common, x0, state, plan.lean, cut)
    going = _going_on(lean, last)  # some problems may end at their own last step first
    if not np.any(np.asarray(plan.unbatched(going))):
        return lean  # (read on the host, for every problem: nothing compiled for it)
    later = dispatched_run(solver, *common, lean.iterate, lean.state, None, last)
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


# ------------------------------------------------------------------------------- a step


def step(solver, fn, params, state, args: tuple, bounds):
    """`Solver.step`, down the path `run` takes: the call prepared (`_setup.prepare`: params
    checked before fn is traced, complex params as their real view, the box and the one line
    search), the compile wing's `plan` (within `js.jit`'s pricing trace, only priced: params
    and state come back as they went in), then `_traced.take_step` dispatched as it says (by
    `eqx.filter_jit`, with the options "auto" chooses)."""
    with _evaluate.sharing_traces():  # fn is traced once for its stand-in and the step
        call = prepare(solver, fn, params, args, bounds)
        plan = _plan("step", solver, call.fn, call.params, call.args, state=state)
        if plan.priced:
            return params, state
        arguments = (solver, call.search, plan.fn, call.params, plan.args, call.box, state, False)
        options = plan.options
        new, state = plan.call(take_step, arguments, static=(), donate=False, options=options)
    if call.view is not None:
        new = complex_params(call.view, (new,))[0]
    return new, state
