"""Which compiled program a call of `Solver.run` or `Solver.step` takes (`_pipeline` reads
the call top to bottom), and how it is compiled.

- **Dispatch.** When every leaf of x0 and args is a `jax.Array` and fn is hashable, `run` is
  dispatched by `jax.jit` with the solver and fn static (microseconds); otherwise by
  `eqx.filter_jit`, with non-array leaves static (tens of microseconds). Both compile the
  same program.
- **Donation.** A run donates a state of at least `DONATE_BYTES` (its buffers become the
  loop's and the result's; a resumed run's caller keeps its own, as a copy is donated).
- **Compile options.** `run(..., compiler_options=...)` chooses them: a dict is passed to
  XLA as given, None keeps XLA's defaults, and "auto" (the default) compiles with
  `LEAN_OPTIONS` (XLA's elemental fusion emitters and LLVM at -O1) on a CPU, at the top
  level (or under eager `jax.vmap`s, whose batched programs jax compiles at the top level,
  priced as their problems times one), where the run time these options may add stays below
  the compile time they save.
  XLA CPU compiles each fusion through its own MLIR and LLVM pipelines, and the solver's
  scalar logic is made of many small fusions: the lean options take about
  `LEAN_SAVES_SECONDS` off a run's compile, and run the solver's own logic no slower, but an
  objective's elementwise work, a network's tanh most of all, can run slower.
  So a step is priced at `EVALUATIONS_PER_STEP` evaluations, each slowed by what
  `jaxsearch._cost` estimates from fn's jaxpr (`benchmarks/studies/compile_options.py` measures both
  sides). A run does not know how many steps it will take, so "auto" rents before it buys
  (the ski rental rule, Karlin, Manasse, McGeoch & Owicki 1994): the steps of a run numbered
  below `lean_steps` from its fresh state, those whose price adds up to the saving, run lean,
  and the later ones under XLA's defaults, a call that spans both cut in two (the second part
  resumed from the first's state, as `run(..., state=...)` goes on; it evaluates f once more
  at its start). Numbering from the fresh state makes a run cut into calls compile as the
  whole does, so that it ends where the whole ends, bit for bit. A run's total compile and
  run time is then at most about twice the better of the two choices made in hindsight, and a
  short run compiles only the lean program. Under `jax.vmap` each problem is cut at its own
  step number (the parts stop at a step count given per problem, `run`'s `last_step`). A call
  that cannot be cut in two (`splits`: with a history or host calls, or a budget of
  evaluations) is lean where `lean_steps` reaches `HORIZON`. `step` called at the top level
  and `js.jit` price their program as a run of the solver's `max_steps` steps. Where this
  jaxlib lacks a lean option, "auto" compiles every program with the defaults. Inside a
  caller's trace the caller's compile decides.
"""

import contextvars
import math
import sys
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import equinox as eqx
import jax
import jax.tree_util as jtu
import numpy as np

from .. import _evaluate
from .._misc import leaves
from .._private_jax import (
    BatchTracer,
    DynamicJaxprTracer,
    JVPTracer,
    LinearizeTracer,
    trace_state_clean,
)
from . import _cost
from ._caches import Kept, bounded_cache

DONATE_BYTES = 1 << 20
LEAN_OPTIONS = {"xla_cpu_use_fusion_emitters": False, "xla_backend_optimization_level": 1}
# The compile time they take off a run's program: the least measured
# (benchmarks/studies/compile_options.py, "runs"; docs/benchmarks.md).
LEAN_SAVES_SECONDS = 0.9
EVALUATIONS_PER_STEP = 2  # L-BFGS averages 1.1 to 1.2 (benchmarks/studies/compile_options.py)
HORIZON = 1000  # steps at which "auto" prices a run it cannot cut in two (`run_options`)
LEAN_ITEMS = tuple(sorted(LEAN_OPTIONS.items()))  # as `setting` gives them
lean_options_supported = True  # until this jaxlib refuses one of them

# Within `js.jit`'s pricing trace: the run time the lean options may add to each solver
# call in it (see `price`).
pricing: contextvars.ContextVar[list | None] = contextvars.ContextVar("pricing", default=None)


def _bytes(tree) -> int:
    """The bytes of the arrays among the leaves of `tree`."""
    return sum(math.prod(x.shape) * x.dtype.itemsize for x in leaves(tree) if eqx.is_array(x))


def traced(tree) -> bool:
    """Whether a leaf of `tree` is a tracer (the call is inside a trace)."""
    return any(isinstance(leaf, jax.core.Tracer) for leaf in leaves(tree))


def eager(tree) -> bool:
    """Whether every leaf of `tree` is concrete or a `jax.vmap` tracer over concrete values
    (nested vmaps included): the call runs eagerly, each of its programs compiled on its
    own, as at the top level."""
    return not any(isinstance(unbatched(leaf), jax.core.Tracer) for leaf in leaves(tree))


def compiled_per_call(tree) -> bool:
    """Whether a call on `tree` compiles its programs anew on each call unless their cache
    hits: every leaf is concrete under any nesting of `jax.vmap`, `jax.jvp` and `jax.grad`
    tracers (transformations applied eagerly, whose rules jax compiles at the top level),
    none under a `jax.jit`'s trace (the caller's program holds the call's)."""
    return not any(isinstance(_primal(leaf), jax.core.Tracer) for leaf in leaves(tree))


def differentiated_forward(tree) -> bool:
    """Whether a leaf of `tree` is a `jax.jvp` tracer (under any `jax.vmap`s): the call is
    differentiated in forward mode (`jax.jacfwd` too)."""
    return any(isinstance(unbatched(leaf), JVPTracer) for leaf in leaves(tree))


def _primal(leaf):
    """The value under the `jax.vmap`, `jax.jvp` and `jax.grad` tracers around `leaf`."""
    kinds = (BatchTracer, JVPTracer, LinearizeTracer)
    while isinstance(leaf, kinds):
        leaf = leaf.val if isinstance(leaf, BatchTracer) else leaf.primal  # type: ignore
    return leaf


def batched(tree) -> bool:
    """Whether a leaf of `tree` is a `jax.vmap` tracer (eager, or inside another trace)."""
    return any(isinstance(leaf, BatchTracer) for leaf in leaves(tree))


def unbatched(leaf):
    """The value under the `jax.vmap` tracers around `leaf` (nested ones included): the whole
    batch's array of an eager vmap."""
    while isinstance(leaf, BatchTracer):
        leaf = leaf.val  # type: ignore[attr-defined]
    return leaf


def eagerly_batched(tree) -> int:
    """The number of problems of a call on `tree` under eager `jax.vmap`s (the product of
    their batch sizes): 1 unbatched, 0 inside any other trace."""
    if not eager(tree):
        return 0
    return _problems(tree)


def _problems(tree) -> int:
    """The product of the batch sizes of the `jax.vmap`s around the leaves of `tree`."""
    problems = 1
    for leaf in leaves(tree):
        if eqx.is_array(leaf) and isinstance(leaf, BatchTracer):
            per_problem = math.prod(jax.typeof(leaf).shape)
            whole = math.prod(jax.numpy.shape(unbatched(leaf)))
            problems = max(problems, whole // max(per_problem, 1))
    return problems


def top_level() -> bool:
    """Whether no trace is under way (jax accepts compile options on top-level jits only)."""
    return trace_state_clean()


def setting(compiler_options):
    """`compiler_options` as `options` takes it: "auto", None, or a dict's sorted items."""
    if isinstance(compiler_options, str) and compiler_options == "auto":
        return "auto"
    if compiler_options is None:
        return None
    if isinstance(compiler_options, dict) and all(isinstance(k, str) for k in compiler_options):
        return tuple(sorted(compiler_options.items())) or None
    raise TypeError(
        'compiler_options must be "auto", None (XLA\'s defaults) or a dict of XLA options, '
        f"got {compiler_options!r}."
    )


def lean_eligible(tree=None) -> bool:
    """Whether a call (on the arrays of `tree`) may be compiled with `LEAN_OPTIONS`: on a
    CPU, with a jaxlib that takes them, at the top level or under eager `jax.vmap`s only
    (jax compiles the batched program at the top level, with its jit's options)."""
    if not (lean_options_supported and jax.default_backend() == "cpu"):
        return False
    return compiled_at_top_level(tree)


def compiled_at_top_level(tree=None) -> bool:
    """Whether a call on `tree` compiles its programs at the top level, where jax takes
    compile options: no trace is under way, or only eager `jax.vmap`s (`eagerly_batched`)."""
    return top_level() or (tree is not None and batched(tree) and eagerly_batched(tree) > 0)


def lean_extra_seconds(solver, fn, params, args: tuple) -> float:
    """The run time the lean options may add to a run of `solver` (all its `max_steps`
    steps, `EVALUATIONS_PER_STEP` evaluations each) on fn at params and args: under eager
    `jax.vmap`s, its problems times one problem's; infinite inside any other trace."""
    return solver.max_steps * EVALUATIONS_PER_STEP * _extra_per_evaluation(fn, params, args)


def lean_steps(fn, params, args: tuple) -> int:
    """The steps of a run on fn at params and args whose price under the lean options
    (`EVALUATIONS_PER_STEP` evaluations each) stays below `LEAN_SAVES_SECONDS`: the lean
    part of a run that rents before it buys (module docstring); under eager `jax.vmap`s,
    priced as its problems times one problem's; 0 inside any other trace."""
    per_step = EVALUATIONS_PER_STEP * _extra_per_evaluation(fn, params, args)
    if per_step <= 0:
        return sys.maxsize
    return int(min(LEAN_SAVES_SECONDS / per_step, sys.maxsize))


def run_options(compiler_options, solver, fn, params, args: tuple, report, state):
    """(options, split) of a call of `run` (see the module docstring): `options` as
    `options` gives them for a setting other than "auto"; with "auto", the lean options for
    the steps of the whole run numbered below `lean_steps` (counted from a fresh state, so
    that a run cut into calls compiles as the whole does), XLA's defaults for the rest. A
    call that runs steps of both kinds (any of its problems, under `jax.vmap`) has `split` =
    `lean_steps` > 0: its steps numbered below it lean, the others resumed under the
    defaults. A call that cannot be cut so (`splits`) compiles lean where `lean_steps`
    reaches `HORIZON`."""
    if compiler_options != "auto":
        return options(compiler_options, solver, fn, params, args), 0
    call = (params, args, state)
    if not lean_eligible(call):
        return None, 0
    steps = lean_steps(fn, params, args)
    if not splits(solver, report):
        return (LEAN_ITEMS if steps >= HORIZON else None), 0
    start = 0 if state is None else np.asarray(local_value(unbatched(state.num_steps)))
    lean = np.clip(steps - start, 0, solver.max_steps)  # per problem
    if np.all(lean == solver.max_steps):
        return LEAN_ITEMS, 0
    if np.all(lean == 0):
        return None, 0
    return None, steps


def local_value(array):
    """A replicated array's value, read from this process's copy (a multi-process array is
    not fully addressable, and reading it whole would need every process)."""
    if isinstance(array, jax.Array) and not array.is_fully_addressable:
        return array.addressable_data(0)
    return array


def splits(solver, report) -> bool:
    """Whether a call of `run` may be cut into a lean part and a part under the defaults: not
    one that records a history or calls the host per step (they would see two runs) or has
    a budget of evaluations (it would start again)."""
    return not report.per_step and solver.max_evals is None


# The estimate per evaluation, kept by fn and the avals (and other leaves) of params and args.
_extra_kept = Kept(64, "prices")


def _extra_per_evaluation(fn, params, args: tuple) -> float:
    flat, treedef = jtu.tree_flatten((params, args))
    arrays = [leaf for leaf in flat if eqx.is_array(leaf)]
    traced = any(
        isinstance(leaf, jax.core.Tracer) and not isinstance(leaf, DynamicJaxprTracer)
        for leaf in arrays
    )
    if traced:  # a transformation's: priced per problem only under eager vmaps
        problems = eagerly_batched((params, args))
        if problems == 0 and pricing.get() is not None and _vmapped_in_pricing((params, args)):
            problems = _problems((params, args))  # `js.jit` compiles them with its options
        if problems == 0:
            return math.inf
        per_problem = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(jax.typeof(x).shape, x.dtype) if eqx.is_array(x) else x,
            (params, args),
        )
        return problems * _extra_per_evaluation(fn, *per_problem)
    try:
        key = (fn, treedef, tuple(jax.typeof(x) if eqx.is_array(x) else (type(x), x) for x in flat))
        kept = _extra_kept.get(key)
    except TypeError:  # unhashable: estimated anew
        key, kept = None, None
    if kept is not None:
        return kept
    try:
        if any(isinstance(x, jax.ShapeDtypeStruct) for x in flat):  # one problem of a batch
            jaxpr = eqx.filter_make_jaxpr(fn)(params, *args)[0].jaxpr
        else:
            jaxpr = _evaluate.TracedOnce(fn, params, *args).jaxpr.jaxpr  # shared with the run's
    except Exception:  # noqa: BLE001 - the call itself raises it, with the solver's message
        return math.inf
    parameters = sum(
        math.prod(x.shape)
        for x in leaves(params)
        if (eqx.is_inexact_array(x) or isinstance(x, jax.ShapeDtypeStruct))
        and jax.numpy.issubdtype(x.dtype, jax.numpy.inexact)
    )
    extra = _cost.lean_extra_seconds(_cost.work(jaxpr), parameters)
    if key is not None:
        _extra_kept.put(key, extra)
    return extra


def options(compiler_options, solver, fn, params, args: tuple):
    """The options (sorted items, or None for XLA's defaults) of a call of `solver` on fn at
    params and args, for the `setting` `compiler_options`: "auto" as the module docstring
    says. Options given inside a trace are refused, as jax refuses them."""
    if compiler_options == "auto":
        cheap = lean_eligible((params, args)) and (
            lean_extra_seconds(solver, fn, params, args) < LEAN_SAVES_SECONDS
        )
        return LEAN_ITEMS if cheap else None
    check_top_level(compiler_options, (params, args))
    return compiler_options


def check_top_level(compiler_options, tree=None) -> None:
    """Refuse options given for a call (on `tree`) inside a trace, as jax refuses them."""
    if compiler_options not in ("auto", None) and not compiled_at_top_level(tree):
        raise ValueError(
            "compiler_options apply to a call at the top level (or under jax.vmap alone); "
            "inside your own jax.jit, that jit's options apply: pass them to it, or use js.jit."
        )


class PricedOut(BaseException):
    """Raised within `js.jit`'s pricing trace once its solver calls are priced above the
    saving: the choice is made, and the rest of the trace is not needed. (Not an
    `Exception`: a user's `except Exception` around a solver call lets it through.)"""


def price(solver, fn, params, args: tuple) -> bool:
    """Within `js.jit`'s pricing trace, record what the lean options may add to this call of
    `solver` (`lean_extra_seconds`) and return True, or raise `PricedOut` once the calls
    priced so far add up to `LEAN_SAVES_SECONDS` or more; elsewhere False."""
    priced = pricing.get()
    if priced is None:
        return False
    priced.append(lean_extra_seconds(solver, fn, params, args))
    if sum(priced) >= LEAN_SAVES_SECONDS:
        raise PricedOut
    return True


def _vmapped_in_pricing(tree) -> bool:
    """Whether every leaf of `tree`, under its `jax.vmap` tracers, is concrete or a tracer of
    a jaxpr (`js.jit`'s pricing trace, or a `jax.jit` inside it: one program with it)."""
    inner = [unbatched(leaf) for leaf in leaves(tree)]
    return all(
        not isinstance(x, jax.core.Tracer) or isinstance(x, DynamicJaxprTracer) for x in inner
    )


@bounded_cache(256, "programs")
def _compiled(fun, filtered: bool, donated: int | None, options, static_argnums: tuple):
    """`fun` under `eqx.filter_jit` (`filtered`: all arguments but the first donated when
    `donated` is not None) or `jax.jit` with `static_argnums` (argument `donated` donated);
    with `options` (sorted items, or None). One object per setting, so that every call with
    it hits one compile cache."""
    compiler_options = None if options is None else dict(options)
    if filtered:
        donate: Literal["none", "all-except-first"] = (
            "none" if donated is None else "all-except-first"
        )
        jit_options: dict[str, Any] = {"compiler_options": compiler_options}  # to jax.jit
        return eqx.filter_jit(fun, donate=donate, **jit_options)
    donate_argnums = () if donated is None else (donated,)
    return jax.jit(
        fun,
        static_argnums=static_argnums,
        donate_argnums=donate_argnums,
        compiler_options=compiler_options,
    )


def with_fallback(compile_and_call, options):
    """`compile_and_call(options)`; where `options` are `LEAN_OPTIONS` and this jaxlib
    refuses one, `compile_and_call(None)`, and the defaults from then on (the compiler refuses
    before any buffer is used)."""
    global lean_options_supported
    if options == LEAN_ITEMS:
        if not lean_options_supported:
            return compile_and_call(None)
        try:
            return compile_and_call(options)
        except jax.errors.JaxRuntimeError as error:
            if "compile option" not in str(error):
                raise
            lean_options_supported = False
            return compile_and_call(None)
    return compile_and_call(options)


class Dispatched(NamedTuple):
    """A program compiled (or its compiled program reused) and called by `call`, as the test
    seam (`seam.dispatches`) records it: `lean` where `options` are the lean ones."""

    name: str
    options: tuple | None
    lean: bool
    filtered: bool
    donate: bool
    arguments: tuple


# Functions each told of every `Dispatched` (the test seam's recorders; none otherwise).
recorders: list[Callable[[Dispatched], None]] = []


def call(fun, *args, filtered: bool, donate: bool = False, options, static_argnums=()):
    """`fun(*args)` compiled as `_compiled` says, its last argument donated when `donate`,
    with `options` (falling back to the defaults where `with_fallback` says)."""
    donated = len(args) - 1 if donate else None

    def compile_and_call(chosen):
        for record in recorders:
            record(Dispatched(fun.__name__, chosen, chosen == LEAN_ITEMS, filtered, donate, args))
        return _compiled(fun, filtered, donated, chosen, static_argnums)(*args)

    return with_fallback(compile_and_call, options)


# ------------------------------------------------------------------------------ dispatch


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
    return not traced(state) and _bytes(state) >= DONATE_BYTES
