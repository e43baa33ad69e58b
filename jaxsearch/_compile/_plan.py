"""The compile wing's door: a call's `plan`, made once on the host before anything is
compiled, and `dispatch`, the one way a program is compiled and called. `_programs` holds
the rules the plan reads (its module docstring says them: dispatch, donation, the "auto"
options and the cut of a run in two)."""

import dataclasses
import functools
from typing import Any, NamedTuple

import jax

from .._history import Report
from .._misc import leaves
from .._objective import Objective
from . import _closure, _computation, _programs, _retrace
from ._caches import Kept, bounded_cache


class Plan(NamedTuple):
    """How a call (`entry`: "run", "step", "update" for the optax update, or "batched" for
    `batched_run`) of a solver on fn at params and args is compiled and dispatched.

    `fn`, `args`: as the call's programs take them: the tracers fn closes over made one more
    argument (`_closure`), and, where each call compiles its own programs, fn's stand-in for
    its computation (`_computation`); `plain`: by `jax.jit` with the solver, search and fn
    static (else `eqx.filter_jit`); `options`: the call's compile options (sorted items, or
    None: XLA's defaults); `state_options`: those of a fresh state's program; `split`: 0 for
    one call, else the step count below which the run's steps run lean, the rest under the
    defaults (the run cut in two: `_programs.run_options`), `lean` the options of that first
    part; `report`: the run's, marked `batched` under `jax.vmap` (`batched`); `watched`:
    the call compiles its own programs, so that a retrace is watched for (`_retrace`);
    `priced`: within `js.jit`'s pricing trace, a step only priced (nothing to run)."""

    entry: str
    fn: Any
    args: tuple
    plain: bool = False
    options: tuple | None = None
    state_options: tuple | None = None
    split: int = 0
    report: Report | None = None
    batched: bool = False
    watched: bool = False
    priced: bool = False
    lean: tuple | None = None

    def call(self, program, arguments: tuple, *, static: tuple, donate: bool, options):
        """`program(*arguments)` dispatched as this plan says, with `options`, its traces
        watched for retraces where the plan is `watched`."""
        with _retrace.watching(self.watched):
            return dispatch(
                program,
                arguments,
                plain=self.plain,
                static=static,
                donate=donate,
                options=options,
                note=self.entry,
            )

    def fresh(self, program, arguments: tuple, static: tuple, options) -> tuple:
        """(state, donate): the fresh state `program(*arguments)` builds (dispatched as this
        plan says, with `options`), and whether the run donates it. A small one is kept for
        the next call with the same static arguments (the first, the solver, by identity)
        and the same avals and shardings of the others (`_fresh_states`)."""
        with _retrace.watching(self.watched):
            return _fresh(program, arguments, self.plain, static, options)

    def resumed(self, state) -> tuple:
        """(state, donate): a resumed run's `state`, and whether the run donates it; a
        donated one is a copy (the caller's state is never consumed)."""
        donate = _programs.donated(state)
        if donate:
            state = jax.device_put(state, may_alias=False)  # the run consumes a copy
        return state, donate

    @staticmethod
    def local(array):
        """A replicated array's value, read from this process's copy (`_programs.local_value`)."""
        return _programs.local_value(array)

    @staticmethod
    def unbatched(leaf):
        """The whole batch's array under an eager `jax.vmap`'s tracers (`_programs.unbatched`)."""
        return _programs.unbatched(leaf)


def plan(
    entry: str,
    solver,
    fn,
    params,
    args: tuple,
    *,
    report: tuple | None = None,
    state=None,
    compiler_options="auto",
) -> Plan:
    """The `Plan` of a call of `entry` ("run", "step", "update" or "batched"; see `Plan`).

    - "run": fn closure-converted and its stand-in taken, forward-mode differentiation
      refused through an adjoint that has none, the call priced within `js.jit`'s pricing
      trace (`_programs.price`), and its options and cut as `_programs.run_options` says
      for `compiler_options` (as `Solver.run` takes them); `report`: the `Report`'s
      settings (history, callback, verbose, progress), built once (`_report`).
    - "step": within `js.jit`'s pricing trace, only priced; else fn closure-converted and
      its stand-in taken where the call compiles its own programs (`state`'s), and the
      options "auto" chooses.
    - "update": the options "auto" chooses, fn and args as given.
    - "batched": params and args with the batch in front; fn closure-converted at one
      problem, nothing else (`batched_run` compiles its own program)."""
    if entry == "batched":
        if _programs.top_level():  # (at the top level, fn can close over no tracer)
            return Plan(entry, fn, args)
        one = jax.tree.map(lambda leaf: leaf[0], (params, args))
        return Plan(entry, *_closure.converted(fn, one[0], one[1]))
    if entry == "update":
        options = _programs.options("auto", solver, fn, params, args)
        return Plan(entry, fn, args, options=options)
    if entry == "step":
        if _programs.price(solver, fn, params, args):
            return Plan(entry, fn, args, priced=True)
        fn, args = _closure.converted(fn, params, args)  # the tracers fn closes over: args
        watched = _programs.compiled_per_call(state)
        if watched:
            fn = _same_computation(solver, fn, params, args)
        options = _programs.options("auto", solver, fn, params, args)
        return Plan(entry, fn, args, options=options, watched=watched)
    if entry != "run":
        raise ValueError(f"no entry {entry!r}")
    compiler_options = _programs.setting(compiler_options)
    fn, args = _closure.converted(fn, params, args)
    call = (params, args)
    watched = _programs.compiled_per_call(call)
    if watched:
        fn = _same_computation(solver, fn, params, args)
    if not solver.adjoint.forward_mode and _programs.differentiated_forward(call):
        raise TypeError(
            f"jaxsearch: {type(solver.adjoint).__name__} differentiates Solver.run in reverse "
            "mode only (jax.grad, jax.vjp); forward mode (jax.jvp, jax.jacfwd) needs "
            "adjoint=js.ImplicitAdjoint() (the default)."
        )
    kept = _report(*report) if report is not None else Report()
    batched = _programs.batched((*call, state))
    if batched:
        kept = dataclasses.replace(kept, batched=True)
    # equinox turns a `throw=True` error into a clean exception under its own jit only
    plain = not solver.throw and _programs.plain_call(fn, call) and _programs.hashable(solver)
    _programs.price(solver, fn, params, args)
    options, split = _programs.run_options(compiler_options, solver, fn, params, args, kept, state)
    state_options = options
    if compiler_options == "auto" and _programs.lean_eligible((*call, state)):
        state_options = _programs.LEAN_ITEMS  # the fresh state's program evaluates no fn
    return Plan(
        entry,
        fn,
        args,
        plain=plain,
        options=options,
        state_options=state_options,
        split=split,
        report=kept,
        batched=batched,
        watched=watched,
        lean=_programs.LEAN_ITEMS,
    )


def _same_computation(solver, fn, params, args: tuple):
    """fn's stand-in that is equal to any fn computing the same thing (`_computation`), for
    a call that compiles its own programs: a new closure over the same computation takes
    the program compiled for an earlier one."""
    return _computation.by_computation(Objective.of(solver, fn), params, args)


def _report(history: bool, callback, verbose: bool, progress: bool) -> Report:
    """The `Report` of these settings, kept (a module's construction costs as much as a small
    problem's dispatch); built anew for an unhashable callback."""
    try:
        return _kept_report(history, callback, verbose, progress)
    except TypeError:
        return Report(history, callback, verbose, progress)


_kept_report = bounded_cache(64, "reports")(Report)

# A fresh run starts from `init`'s state, built by a compiled program of its own, so that a
# fresh and a resumed run call the same compiled run. A small state (not donated) is kept for
# the next run: it depends only on the solver, fn, the avals and shardings of x0 and args,
# and the line search; building it again would cost a small problem as much as its run.
_fresh_states = Kept(16, "fresh states")


def _fresh(program, arguments: tuple, plain: bool, static: tuple, options) -> tuple:
    """`Plan.fresh`."""

    def build():
        return dispatch(
            program, arguments, plain=plain, static=static, donate=False, options=options
        )

    dynamic = tuple(a for i, a in enumerate(arguments) if i not in static)
    if not plain or _programs.traced(dynamic):
        state = build()
        return state, _programs.donated(state)
    avals = tuple((jax.typeof(leaf), leaf.sharding) for leaf in leaves(dynamic))
    first, settings = arguments[static[0]], tuple(arguments[i] for i in static[1:])
    # By identity: the entry holds the first argument, so its id is not reused while kept.
    key = (program, id(first), settings, jax.tree.structure(dynamic), avals)
    kept = _fresh_states.get(key)
    if kept is not None and kept[0] is first:
        return kept[1], False
    state = build()
    if _programs.donated(state):
        return state, True
    _fresh_states.put(key, (first, state))
    return state, False


@bounded_cache(16)
def _bundled(program):
    """`program(*settings, last)` called as `program(settings, last)`, under its own name:
    the form `eqx.filter_jit` compiles with the last argument alone donated."""

    def bundled(settings: tuple, last):
        return program(*settings, last)

    bundled.__name__ = bundled.__qualname__ = program.__name__
    return bundled


@bounded_cache(16)
def _noted(program, entry: str):
    """`program`, under its own name, that notes each trace of it as one of `entry`
    (`_retrace.note_trace`, counted where `_retrace.watching` is on). Every program of a
    run or a step takes (solver, search, fn, params, args, ...) first."""

    @functools.wraps(program)
    def noted(*arguments):
        solver, _, fn, params, args = arguments[:5]
        _retrace.note_trace(entry, solver, fn, (params, args))
        return program(*arguments)

    return noted


def dispatch(
    program,
    arguments: tuple,
    *,
    plain: bool,
    static: tuple,
    donate: bool,
    options,
    note: str | None = None,
):
    """`program(*arguments)`, compiled and called as a `Plan` says: by `jax.jit` with the
    arguments at positions `static` static where `plain`, else by `eqx.filter_jit` (non-array
    leaves static); the last argument donated when `donate`; with `options` (XLA's defaults
    where this jaxlib refuses the lean ones: `_programs.with_fallback`). `note`: the entry
    ("run" or "step") whose traces `_retrace` counts, None for none."""
    if note is not None:
        program = _noted(program, note)
    if plain:
        return _programs.call(
            program,
            *arguments,
            filtered=False,
            donate=donate,
            options=options,
            static_argnums=static,
        )
    bundled = _bundled(program)
    return _programs.call(
        bundled, arguments[:-1], arguments[-1], filtered=True, donate=donate, options=options
    )
