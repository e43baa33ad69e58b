"""The warning for a run that never used its direction, given without waiting for the run.

Where every step of a run replaced its direction by steepest descent (`Result.num_replaced`
equals `num_steps`: `compute` never returned a descent direction), the solver's direction was
not used at all. Reading the counts on the host waits for the run to finish, and a caller who
dispatches runs back to back would lose the overlap of one run's host work with the last one's
device work (measured on a CPU: 1.4 ms a run of 20 L-BFGS steps without the wait, 3.1 ms with
it). So the counts are read by one daemon thread, which warns once the run has finished,
pointing at the caller's line.
"""

import queue
import threading
import warnings

import jax
import numpy as np

from ._compile import PackedState

_pending: "queue.Queue[tuple]" = queue.Queue()
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
    _start_worker()
    _pending.put((direction_name, buffers, steps, replaced, where))


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
    _pending.join()


def _start_worker() -> None:
    global _worker
    with _lock:
        if _worker is None or not _worker.is_alive():
            _worker = threading.Thread(target=_work, name="jaxsearch-direction-watch", daemon=True)
            _worker.start()


def _read(buffers, place) -> int:
    _, index, offset, _, _ = place
    buffer = buffers[index].block_until_ready()  # waits without holding the GIL
    return int(np.asarray(buffer)[offset])


def _work() -> None:
    while True:
        name, buffers, steps_at, replaced_at, (filename, line, module) = _pending.get()
        try:
            steps, replaced = _read(buffers, steps_at), _read(buffers, replaced_at)
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
        except Exception:  # a buffer deleted (donated) before it was read: nothing to say
            pass
        finally:
            _pending.task_done()
