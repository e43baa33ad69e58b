"""The warning for a run that never used its direction, given without waiting for the run.

Where every step of a run replaced its direction by steepest descent (`Result.num_replaced`
equals `num_steps`: `compute` never returned a descent direction), the solver's direction was
not used at all. Reading the counts on the host waits for the run to finish, and a caller who
dispatches runs back to back would lose the overlap of one run's host work with the last
one's device work. So one daemon thread reads the counts once the run has finished, and warns,
pointing at the caller's line. Measured on a CPU, back to back runs of 20 L-BFGS steps on
2-D Rosenbrock (the minimum of 9 interleaved blocks of 200): 395 us a run without the check,
533 us reading the counts in `run`, 425 us with this thread.
"""

import atexit
import collections
import threading
import time
import warnings

import jax
import numpy as np

from ._packing import PackedState

# Runs watched and not yet checked. The thread wakes on the first, waits `_GATHER` seconds for
# the runs dispatched after it, then checks them all: a run's own cost is an append (a thread
# woken for each run cost 70 us a run).
_pending: collections.deque = collections.deque()
_GATHER = 0.02
_wake = threading.Event()
_checked = threading.Condition()
_counts = {"watched": 0, "checked": 0}
_worker: threading.Thread | None = None
_lock = threading.Lock()


def watch(direction_name: str, packed_state, where: tuple[str, int, str]) -> None:
    """Warn, once the run whose state is `packed_state` has finished, where every one of its
    steps replaced the direction `direction_name`; `where`: the caller's (filename, line,
    module), for the warning. One problem only: a batched or traced state, or one with shards
    on other processes, is not watched."""
    if not isinstance(packed_state, PackedState):
        return
    steps, replaced = _places(packed_state)
    buffers = packed_state.buffers
    for place in (steps, replaced):
        if place[0] != "packed":
            return
        buffer = buffers[place[1]]
        if isinstance(buffer, jax.core.Tracer) or buffer.ndim != 1:
            return
        if not buffer.is_fully_addressable:
            return
    if _worker is None or not _worker.is_alive():
        _start_worker()
    _counts["watched"] += 1
    _pending.append((direction_name, buffers, steps, replaced, where))
    if not _wake.is_set():
        _wake.set()


_known: dict[int, tuple] = {}  # id(recipe) -> (recipe, places): one state's layout, once


def _places(packed_state: PackedState) -> tuple:
    """Where `num_steps` and `num_replaced` lie in a packed state (found once per layout)."""
    recipe = packed_state.recipe
    known = _known.get(id(recipe))
    if known is None or known[0] is not recipe:
        places = (
            packed_state.place_of(lambda s: s.num_steps),
            packed_state.place_of(lambda s: s.num_replaced),
        )
        if len(_known) > 64:
            _known.clear()
        known = _known[id(recipe)] = (recipe, places)
    return known[1]


def wait() -> None:
    """Until every run watched so far has been checked (its warning, if any, given)."""
    target = _counts["watched"]
    with _checked:
        _checked.wait_for(lambda: _counts["checked"] >= target)


def _start_worker() -> None:
    """The thread, started once; at exit the runs still pending are checked first (their
    warnings given, and no read left running while JAX shuts down)."""
    global _worker
    with _lock:
        if _worker is None or not _worker.is_alive():
            if _worker is None:
                atexit.register(wait)
            _worker = threading.Thread(target=_work, name="jaxsearch-direction-watch", daemon=True)
            _worker.start()


def _read(buffers, places) -> list[int]:
    """The counts at `places` (each buffer copied to the host once)."""
    host: dict[int, np.ndarray] = {}
    for _, index, _, _, _ in places:
        if index not in host:
            host[index] = np.asarray(buffers[index].block_until_ready())  # GIL released
    return [int(host[index][offset]) for _, index, offset, _, _ in places]


def _work() -> None:
    while True:
        _wake.wait()
        time.sleep(_GATHER)
        _wake.clear()
        while _pending:
            _check(*_pending.popleft())
            with _checked:
                _counts["checked"] += 1
                _checked.notify_all()


def _check(name, buffers, steps_at, replaced_at, where) -> None:
    filename, line, module = where
    try:
        steps, replaced = _read(buffers, (steps_at, replaced_at))
    except Exception:  # a buffer deleted (donated) before it was read: nothing to say
        return
    if steps > 0 and replaced >= steps:
        warnings.warn_explicit(
            f"{name}.compute returned no descent direction at any of the run's {steps} "
            "steps (phi'(0) = <g, d> not negative, or not finite): each step searched "
            f"along steepest descent instead and reset {name}'s memory, so {name} was "
            "never used (Result.num_replaced; check the direction's sign with "
            "jaxsearch.testing.check_direction).",
            RuntimeWarning,
            filename,
            line,
            module=module,
        )
