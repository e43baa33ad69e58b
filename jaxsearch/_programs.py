"""The compiled programs behind `Solver.run` and `Solver.step` called outside a trace: which
one a call takes, how it is compiled, and the state a fresh run starts from.

- **Dispatch.** When every leaf of x0 and args is a `jax.Array` and fn is hashable, `run` is
  dispatched by `jax.jit` with the solver and fn static (microseconds); otherwise by
  `eqx.filter_jit`, with non-array leaves static (tens of microseconds). Both compile the
  same program.
- **Donation.** A run donates a state of at least `DONATE_BYTES` (its buffers become the
  loop's and the result's; a resumed run's caller keeps its own, as a copy is donated).
- **Compile options.** On a CPU, a call whose params and args together hold fewer than
  `LEAN_BYTES` is compiled with `LEAN_OPTIONS`: XLA's elemental fusion emitters and LLVM at
  -O1. XLA CPU compiles each fusion through its own MLIR and LLVM pipelines, and the
  solver's scalar logic is made of many small fusions: these options take about half the
  compile time off a small problem's run, which runs no slower (docs/benchmarks.md, "Fifth
  round"). Larger problems, whose elementwise work the default pipeline vectorises better,
  and other backends keep XLA's defaults. Where this jaxlib lacks an option, every program
  is compiled with the defaults. Inside a caller's trace the caller's compile decides.
"""

import functools
import math
from typing import Any, Literal

import equinox as eqx
import jax

from . import _evaluate
from ._history import Report
from ._inputs import check_is_state
from ._misc import leaves
from ._state import SolverState

DONATE_BYTES = 1 << 20
LEAN_BYTES = 1 << 20
LEAN_OPTIONS = {"xla_cpu_use_fusion_emitters": False, "xla_backend_optimization_level": 1}
_lean_options_supported = True  # until this jaxlib refuses one of them


def _bytes(tree) -> int:
    return sum(math.prod(jax.numpy.shape(x)) * x.dtype.itemsize for x in leaves(tree))


def _traced(tree) -> bool:
    return any(isinstance(leaf, jax.core.Tracer) for leaf in leaves(tree))


def _top_level() -> bool:
    """Whether no trace is under way (jax accepts compile options on top-level jits only)."""
    try:
        from jax._src.core import trace_state_clean
    except ImportError:  # a later jax: no lean options rather than an error
        return False
    return trace_state_clean()


def lean(arrays) -> bool:
    """Whether a call on `arrays` (params and args) is compiled with `LEAN_OPTIONS`: at the
    top level, on a CPU, for fewer than `LEAN_BYTES` of arrays."""
    return (
        _lean_options_supported
        and jax.default_backend() == "cpu"
        and _top_level()
        and _bytes(eqx.filter(arrays, eqx.is_array)) < LEAN_BYTES
    )


@functools.cache
def _compiled(fun, filtered: bool, donated: int | None, lean: bool, static_argnums: tuple):
    """`fun` under `eqx.filter_jit` (`filtered`: all arguments but the first donated when
    `donated` is not None) or `jax.jit` with `static_argnums` (argument `donated` donated);
    with `LEAN_OPTIONS` when `lean`. One object per setting, so that every call with it hits
    one compile cache."""
    options = LEAN_OPTIONS if lean else None
    if filtered:
        donate: Literal["none", "all-except-first"] = (
            "none" if donated is None else "all-except-first"
        )
        jit_options: dict[str, Any] = {"compiler_options": options}  # passed on to jax.jit
        return eqx.filter_jit(fun, donate=donate, **jit_options)
    donate_argnums = () if donated is None else (donated,)
    return jax.jit(
        fun, static_argnums=static_argnums, donate_argnums=donate_argnums, compiler_options=options
    )


def call(fun, *args, filtered: bool, donate: bool = False, lean: bool, static_argnums=()):
    """`fun(*args)` compiled as `_compiled` says, its last argument donated when `donate`;
    where this jaxlib refuses a lean option, the defaults from then on (the compiler refuses
    before any buffer is used)."""
    global _lean_options_supported
    donated = len(args) - 1 if donate else None
    if lean and _lean_options_supported:
        try:
            return _compiled(fun, filtered, donated, True, static_argnums)(*args)
        except jax.errors.JaxRuntimeError as error:
            if "compile option" not in str(error):
                raise
            _lean_options_supported = False
    return _compiled(fun, filtered, donated, False, static_argnums)(*args)


# ------------------------------------------------------------------------------------ run


def plain_call(fn, arguments) -> bool:
    """True when `jax.jit` with the solver and fn static compiles what `eqx.filter_jit` would:
    every leaf of the arguments is an array and fn is hashable."""
    try:
        hash(fn)
    except TypeError:
        return False
    return all(isinstance(leaf, jax.Array) for leaf in leaves(arguments))


def hashable(solver) -> bool:
    """False when a numeric setting is an array (a dynamic leaf, for `eqx.filter_jit`)."""
    try:
        hash(solver)
    except TypeError:
        return False
    return True


def donated(state) -> bool:
    """Whether a run donates `state` (never under a trace: the state may be the caller's)."""
    return not _traced(state) and _bytes(state) >= DONATE_BYTES


def run(solver, fn, x0, args: tuple, value_dtype, box, report: Report, state):
    """`solver._run` on these arguments, from `state` (None: a fresh run), compiled and
    dispatched as the module docstring says."""
    # equinox turns a `throw=True` error into a clean exception under its own jit only
    plain = not solver.throw and plain_call(fn, (x0, args)) and hashable(solver)
    small = lean((x0, args))
    with _evaluate.sharing_traces():  # fn is traced once for the state and the run
        if state is None:
            state, donate = _fresh_run_state(solver, fn, x0, args, value_dtype, box, plain, small)
        else:
            state = _resumed_state(state, value_dtype)
            donate = donated(state)
            if donate:
                state = jax.device_put(state, may_alias=False)  # the run consumes a copy
        if plain:
            arguments = (solver, fn, x0, args, box, report, state)
            return call(
                _run_settled,
                *arguments,
                filtered=False,
                donate=donate,
                lean=small,
                static_argnums=(0, 1, 5),
            )
        settings = (solver, fn, x0, args, box, report)
        return call(_run_bundled, settings, state, filtered=True, donate=donate, lean=small)


def _run_settled(solver, fn, x0, args, box, report: Report, state):
    return solver._run(fn, x0, args, box, report, state)


def _run_bundled(settings, state):
    solver, fn, x0, args, box, report = settings
    return solver._run(fn, x0, args, box, report, state)


# ------------------------------------------------------------------------- the fresh state

# A fresh run starts from `init`'s state, built by a compiled program of its own, so that a
# fresh and a resumed run call the same compiled run. A small state (not donated) is kept for
# the next run: it depends only on the solver, fn, the avals and shardings of x0 and args,
# and whether there are bounds; building it again would cost a small problem as much as its
# run.
_fresh_states: dict = {}
_FRESH_STATES_KEPT = 16


def _fresh_run_state(solver, fn, x0, args, value_dtype, box, plain: bool, small: bool):
    """The state a fresh `run` starts from, and whether the run donates it."""
    bounded = box is not None

    def build():
        arguments = (solver, fn, x0, args, value_dtype, bounded)
        if plain:
            return call(
                _init_state, *arguments, filtered=False, lean=small, static_argnums=(0, 1, 4, 5)
            )
        return call(_init_state, *arguments, filtered=True, lean=small)

    if not plain or _traced((x0, args)):
        state = build()
        return state, donated(state)
    avals = tuple((jax.typeof(leaf), leaf.sharding) for leaf in leaves((x0, args)))
    # By identity: the entry holds the solver, so its id is not reused while it is kept.
    key = (id(solver), fn, jax.tree.structure((x0, args)), avals, value_dtype, bounded)
    kept = _fresh_states.get(key)
    if kept is not None and kept[0] is solver:
        return kept[1], False
    state = build()
    if donated(state):
        return state, True
    if len(_fresh_states) >= _FRESH_STATES_KEPT:
        _fresh_states.pop(next(iter(_fresh_states)))
    _fresh_states[key] = (solver, state)
    return state, False


def _init_state(solver, fn, x0, args, value_dtype, bounded: bool) -> SolverState:
    fn = _evaluate.TracedOnce(fn, x0, *args)  # the trace the run's program reuses
    return solver._init(x0, value_dtype, fn, args, bounded)


def _resumed_state(state, value_dtype) -> SolverState:
    """`state`, checked to be a `SolverState` of the value dtype asked for, with its leaves
    as arrays (NumPy leaves, of a checkpoint say, become new device buffers)."""
    check_is_state(state)
    if value_dtype is not None and jax.numpy.dtype(value_dtype) != state.value.dtype:
        raise TypeError(
            f"value_dtype {jax.numpy.dtype(value_dtype)} differs from the state's value dtype "
            f"{state.value.dtype}: a resumed run keeps the state's."
        )
    if all(isinstance(leaf, jax.Array) for leaf in leaves(state)):
        return state
    return jax.tree.map(jax.numpy.asarray, state)


# ------------------------------------------------------------------------------------ step


def step(solver, fn, params, state, args: tuple, bounds, evaluated: bool = False):
    """`solver._step` compiled by `eqx.filter_jit` (lean where `lean` says so)."""
    return call(
        _step,
        solver,
        fn,
        params,
        state,
        args,
        bounds,
        evaluated,
        filtered=True,
        lean=lean((params, args)),
    )


def _step(solver, fn, params, state, args, bounds, evaluated):
    return solver._step(fn, params, state, args, bounds, evaluated)


def report(history: bool, callback, verbose: bool, progress: bool) -> Report:
    """The `Report` of these settings, built once (a module's construction costs as much as
    a small problem's dispatch)."""
    try:
        return _kept_report(history, callback, verbose, progress)
    except TypeError:  # an unhashable callback
        return Report(history, callback, verbose, progress)


_kept_report = functools.lru_cache(maxsize=64)(Report)
