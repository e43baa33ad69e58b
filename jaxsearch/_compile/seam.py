"""The compile wing's seam for tests: what they may watch and set of how jaxsearch compiles
its programs, so that no test patches or reads the wing's private names.

- `dispatches()`: records every program compiled (or its compiled program reused) and
  called, as `Dispatched` (name, options, lean, filtered, donate, arguments);
- `jits()`: records every jit `js.jit` builds, as `Built` (fun, arrays, compiler_options);
- `options(...)`: the options hook: other lean options, another saving, or lean options
  unsupported (as on a GPU or a TPU, or a jaxlib that refuses them), for its duration;
- `lean_supported()`, `cached()`, `forget_computations()`: the wing's state, read or reset;
- the rules "auto" prices by, read only: `lean_eligible`, `lean_steps`,
  `lean_extra_seconds`, `auto_options`, `work`, `Work`, `lean_extra_per_work`, the
  constants below, and `by_computation`, `watching`, `note_trace`, `Kept`.
"""

import contextlib
from collections.abc import Callable, Iterator
from typing import NamedTuple

from . import _caches, _computation, _cost, _jit, _programs, _retrace
from ._programs import Dispatched as Dispatched

LEAN_OPTIONS = dict(_programs.LEAN_OPTIONS)
LEAN_ITEMS = _programs.LEAN_ITEMS
LEAN_SAVES_SECONDS = _programs.LEAN_SAVES_SECONDS
EVALUATIONS_PER_STEP = _programs.EVALUATIONS_PER_STEP
HORIZON = _programs.HORIZON
EXTRA_NS_PER_TRANSCENDENTAL = _cost.EXTRA_NS_PER_TRANSCENDENTAL
EXTRA_NS_PER_ELEMENTWISE = _cost.EXTRA_NS_PER_ELEMENTWISE
EXTRA_NS_PER_DOT_FLOP = _cost.EXTRA_NS_PER_DOT_FLOP
EXTRA_NS_PER_PARAMETER = _cost.EXTRA_NS_PER_PARAMETER

lean_eligible = _programs.lean_eligible
lean_steps = _programs.lean_steps
lean_extra_seconds = _programs.lean_extra_seconds
work = _cost.work
Work = _cost.Work
lean_extra_per_work = _cost.lean_extra_seconds
by_computation = _computation.by_computation
watching = _retrace.watching
note_trace = _retrace.note_trace
Kept = _caches.Kept


def auto_options(solver, fn, params, args: tuple):
    """The options "auto" chooses for a call of `step` of `solver` on fn at params and args
    (sorted items, or None: XLA's defaults)."""
    return _programs.options("auto", solver, fn, params, args)


class Built(NamedTuple):
    """A jit `js.jit` built: by `jax.jit` where `arrays`, else by `eqx.filter_jit`."""

    fun: Callable
    arrays: bool
    compiler_options: dict | None


@contextlib.contextmanager
def dispatches(*fields: str) -> Iterator[list]:
    """Within this context, the list it gives holds a `Dispatched` (or the tuple of its
    `fields`, if named) for every program compiled (or reused) and called, in order (a
    refused option's retry too)."""
    seen: list = []

    def record(dispatched: Dispatched) -> None:
        seen.append(tuple(getattr(dispatched, f) for f in fields) if fields else dispatched)

    with _recording(_programs.recorders, record):
        yield seen


@contextlib.contextmanager
def jits(field: str | None = None, *, of_module: str | None = None) -> Iterator[list]:
    """Within this context, the list it gives holds a `Built` (or its `field`, if named) for
    every jit `js.jit` builds (of a function of `of_module` only, if given), in order."""
    seen: list = []

    def record(fun, arrays, compiler_options) -> None:
        if of_module is None or getattr(fun, "__module__", None) == of_module:
            built = Built(fun, arrays, compiler_options)
            seen.append(built if field is None else getattr(built, field))

    with _recording(_jit.recorders, record):
        yield seen


@contextlib.contextmanager
def options(*, lean: dict | None = None, saving: float | None = None, supported=None):
    """The options hook: within this context, `lean` the lean options (every cache emptied
    on entry and exit, so that no program compiled with them outlives it), `saving` the
    compile time they are priced to save, `supported` whether this jaxlib takes them (False:
    as on another backend; True: to be found again); None leaves each as it is."""
    kept = (
        _programs.LEAN_OPTIONS,
        _programs.LEAN_ITEMS,
        _programs.LEAN_SAVES_SECONDS,
        _programs.lean_options_supported,
    )
    if lean is not None:
        _caches.clear_caches()
        _programs.LEAN_OPTIONS, _programs.LEAN_ITEMS = lean, tuple(sorted(lean.items()))
    if saving is not None:
        _programs.LEAN_SAVES_SECONDS = saving
    if supported is not None:
        _programs.lean_options_supported = supported
    try:
        yield
    finally:
        (
            _programs.LEAN_OPTIONS,
            _programs.LEAN_ITEMS,
            _programs.LEAN_SAVES_SECONDS,
            _programs.lean_options_supported,
        ) = kept
        if lean is not None:
            _caches.clear_caches()


def lean_supported() -> bool:
    """Whether the lean options are taken (False once this jaxlib refused one)."""
    return _programs.lean_options_supported


def cached() -> dict[str, int]:
    """The number of entries each of the wing's caches holds, by name: "fresh states",
    "programs", "prices", "computations", "retraces", "reports", ..."""
    return _caches.sizes()


def forget_computations() -> None:
    """Empty the cache of fn's stand-ins alone (`_computation`), the retrace records kept."""
    _computation.forget()


@contextlib.contextmanager
def _recording(recorders: list, record) -> Iterator[None]:
    """`record` among `recorders` within this context."""
    recorders.append(record)
    try:
        yield
    finally:
        recorders.remove(record)
