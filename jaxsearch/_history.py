"""What a run records per step: device buffers (`history=True`) and host calls (`callback=`,
`verbose=`, `progress=`)."""

import dataclasses
import math
import sys
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Int

from ._host import host_call
from ._misc import tree_inf_norm, tree_norm
from ._stopping import goes_on

FIELDS = (
    "step",
    "value",
    "grad_norm",
    "step_size",
    "num_fun_evals",
    "step_evals",
    "num_grad_evals",
    "num_replaced",
    "search_end",
)


def step_record(
    evals_at_start, after, dtype, last_step, stall_steps: int, last_eval=None, norm: str = "inf"
) -> dict:
    """The record of the step that began after `evals_at_start` evaluations and ended in `after`:
    step number, f and the gradient's `norm` (`gtol_norm`) at the new point, step size,
    cumulative and this step's evaluations of fn, cumulative evaluations with a gradient and
    directions replaced by steepest descent, the `SearchEnd` code, and `final` where the run
    stops after it (a status, `last_step`, `stall_steps` without progress, `last_eval`). Step 0
    is this record of the state after evaluating x0 (`_transitions.take_base`)."""
    record = dict(
        step=after.num_steps,
        value=after.value,
        grad_norm=(tree_inf_norm if norm == "inf" else tree_norm)(after.grad, dtype),
        step_size=after.step_size,
        num_fun_evals=after.num_fun_evals,
        step_evals=after.num_fun_evals - evals_at_start,
        num_grad_evals=after.num_grad_evals,
        num_replaced=after.num_replaced,
        search_end=after.search_end,
        final=~goes_on(after, last_step, stall_steps, last_eval),
        steps_left=last_step - after.num_steps,  # for the progress bar of a resumed run
    )
    return record


class History(eqx.Module):
    """Per-step records of `Solver.run(..., history=True)`, on the device. Row k is step k (fields:
    see `Solver.run`); row 0 is x0, with f(x0), its one evaluation, step size 0 and
    `SearchEnd.NOT_SEARCHED`. A resumed run's rows go on from the state's step count (first the
    evaluation at its start where fn gave other values than the state holds). Each buffer has
    `max_steps + 1` rows; rows from `length` on are unused (NaN, or -1 for counts). Under
    `jax.vmap` every leaf has a leading batch axis. `to_numpy()` returns the used rows."""

    step: Int[Array, " rows"]
    value: Array
    grad_norm: Array
    step_size: Array
    num_fun_evals: Int[Array, " rows"]
    step_evals: Int[Array, " rows"]
    num_grad_evals: Int[Array, " rows"]
    num_replaced: Int[Array, " rows"]
    search_end: Int[Array, " rows"]
    length: Int[Array, ""]

    @staticmethod
    def empty(max_steps: int, value_dtype, dtype) -> "History":
        """The buffers of a run of `max_steps` steps (`max_steps + 1` rows), checked by
        `check_history_size` while traced, before anything is allocated."""
        check_history_size(max_steps, History.nbytes(max_steps, value_dtype, dtype))
        return History.filled(max_steps, value_dtype, dtype)

    @staticmethod
    def nbytes(max_steps: int, value_dtype, dtype) -> int:
        """The bytes `empty` allocates (nothing allocated)."""
        shapes = jax.eval_shape(lambda: History.filled(max_steps, value_dtype, dtype))
        return sum(math.prod(a.shape) * a.dtype.itemsize for a in jax.tree.leaves(shapes))

    @staticmethod
    def filled(max_steps: int, value_dtype, dtype) -> "History":
        rows = max_steps + 1  # x0 (step 0) and each step

        def floats(d):
            return jnp.full((rows,), jnp.nan, d)

        def counts():
            return jnp.full((rows,), -1, jnp.int32)

        return History(
            step=counts(),
            value=floats(value_dtype),
            grad_norm=floats(dtype),
            step_size=floats(dtype),
            num_fun_evals=counts(),
            step_evals=counts(),
            num_grad_evals=counts(),
            num_replaced=counts(),
            search_end=counts(),
            length=jnp.zeros((), jnp.int32),
        )

    def append(self, record: dict, taken) -> "History":
        """This history with `record` as its next row if `taken`, else unchanged."""
        k = self.length
        rows = {
            name: getattr(self, name)
            .at[k]
            .set(
                jnp.where(taken, record[name], getattr(self, name)[k]).astype(
                    getattr(self, name).dtype
                )
            )
            for name in FIELDS
        }
        return History(**rows, length=k + taken.astype(jnp.int32))

    def to_numpy(self) -> dict[str, np.ndarray]:
        """The used rows as NumPy arrays, one per field (one run; index a batched history first,
        e.g. `jax.tree.map(lambda a: a[i], history)`)."""
        if np.ndim(self.length) != 0:
            raise ValueError(
                "to_numpy() takes the history of one run; this one has a batch axis of size "
                f"{np.shape(self.length)[0]}: index it first, "
                "e.g. jax.tree.map(lambda a: a[i], result.history)."
            )
        n = int(self.length)
        return {name: np.asarray(getattr(self, name))[:n] for name in FIELDS}


# `history=True` refuses buffers above this share of the device's memory (the run needs the rest),
# or above HISTORY_CAP where JAX reports none (a CPU).
HISTORY_SHARE = 0.25
HISTORY_CAP = 2 * 2**30


def history_limit() -> tuple[int, str]:
    """The most bytes a run's history may take on the first device, and why."""
    stats = jax.local_devices()[0].memory_stats() or {}
    memory = stats.get("bytes_limit")
    if not memory:
        return HISTORY_CAP, "2 GiB, the cap where JAX reports no memory size for the device"
    limit = int(HISTORY_SHARE * memory)
    return limit, f"a quarter of the device's {_gib(memory)} of memory"


def _gib(size: int) -> str:
    return f"{size / 2**30:.3g} GiB"


def check_history_size(max_steps: int, size: int) -> None:
    """Raise a ValueError, before allocating, where `size` bytes exceed `history_limit`."""
    limit, why = history_limit()
    if size <= limit:
        return
    rows = max_steps + 1
    raise ValueError(
        f"Solver.run(..., history=True) would keep {size} bytes ({_gib(size)}) of history on the "
        f"device, {rows} rows (x0 and max_steps steps) of {size // rows} bytes, more than the "
        f"limit of {limit} bytes ({why}). Record fewer steps: a Solver with a smaller "
        "max_steps (resume with state=result.state for the next ones, each with its own "
        "history), or pass callback= instead, which streams each step's record to the host "
        "and keeps nothing on the device."
    )


class Report(eqx.Module):
    """What `run` records per step, and whether it runs under `jax.vmap` (`batched`: the loop
    carries the search's state unpacked, `_machine.PACKED_LEAVES`); static, part of the compile
    key."""

    history: bool = eqx.field(static=True, default=False)
    callback: Callable[[dict], object] | None = eqx.field(static=True, default=None)
    verbose: bool = eqx.field(static=True, default=False)
    progress: bool = eqx.field(static=True, default=False)
    batched: bool = eqx.field(static=True, default=False)

    @property
    def per_step(self) -> bool:
        return self.history or self.host

    @property
    def host(self) -> bool:
        return self.callback is not None or self.verbose or self.progress

    def send(self, record: dict, recorded, running, max_steps: int) -> None:
        """Hand `record` to the host functions asked for where `recorded` (a step ended this
        iteration); `running`: the run had not ended before it. Under `jax.vmap` the host gets
        the batch (`_host.host_call`)."""
        host = _HostCalls(self.callback, self.verbose, self.progress, max_steps)
        ended = ~running | (recorded & record["final"])
        host_call(host, record, recorded, ended)


@dataclasses.dataclass(frozen=True)
class _HostCalls:
    """The host side of `Report.send`; equal instances hash equal, so a compiled run is reused.
    Leaves have the batch's shape (() for one run, (n,) under `jax.vmap`, ...); each problem that
    ended a step gets its record in order, tagged with `batch_index` (an int, a tuple under
    nested vmaps) in a batch."""

    callback: Callable[[dict], object] | None
    verbose: bool
    progress: bool
    max_steps: int

    def __call__(self, record, recorded, ended):
        if not np.any(recorded):
            return
        batch_shape = np.shape(recorded)
        for where in np.argwhere(recorded):  # in the batch's order
            index = tuple(int(i) for i in where)
            # 0-d arrays of the run's dtypes (a plain index would give NumPy scalars)
            one: dict[str, object] = {
                name: np.array(record[name][(*index, ...)]) for name in FIELDS
            }
            if batch_shape:
                one["batch_index"] = index[0] if len(index) == 1 else index
            if self.verbose:
                print(_line(one), flush=True)
            if self.callback is not None:
                self.callback(one)
        if self.progress:
            _progress(record, recorded, ended, self.max_steps)


def _line(record) -> str:
    """One step as a line; under `jax.vmap` led by the problem's index in the batch."""
    index = record.get("batch_index")
    if isinstance(index, tuple):
        index = ",".join(map(str, index))
    return ("" if index is None else f"problem {index}  ") + (
        f"step {int(record['step']):5d}  f {float(record['value']): .6e}  "
        f"|g| {float(record['grad_norm']):.3e}  t {float(record['step_size']):.3e}  "
        f"evals {int(record['num_fun_evals'])}"
    )


@dataclasses.dataclass
class _Bar:
    """The tqdm bar of a run or a batch in progress, and the steps each problem has taken."""

    tqdm: Any
    steps: np.ndarray


_bar: _Bar | None = None  # the progress bar of the run in progress, if any


def _progress(record, recorded, ended, max_steps: int) -> None:
    """One tqdm bar per run or batch: it opens at x0 (0 of `max_steps`), counts the furthest
    problem's steps (a resumed run from its start) and a batch's ended problems, and closes once
    all have ended; one left open by an unfinished run closes when a new run starts."""
    global _bar
    try:
        from tqdm.auto import tqdm
    except ImportError as error:  # checked in `run` already; kept for a direct call
        raise ImportError("progress=True needs tqdm: pip install tqdm") from error
    steps = max_steps - np.asarray(record["steps_left"], np.int64)  # steps of this run
    if _bar is not None and (
        _bar.steps.shape != steps.shape or np.any(recorded & (steps <= _bar.steps))
    ):
        _bar.tqdm.close()
        _bar = None
    if _bar is None:
        bar = tqdm(total=max_steps, unit="step", file=sys.stderr, leave=True)
        _bar = _Bar(bar, np.zeros_like(steps))
    _bar.steps = np.where(recorded, steps, _bar.steps)
    bar = _bar.tqdm
    bar.update(int(np.max(_bar.steps)) - bar.n)
    if np.ndim(ended):
        bar.set_postfix(ended=f"{int(np.sum(ended))}/{np.size(ended)}", refresh=False)
    else:
        bar.set_postfix(f=f"{float(record['value']):.4e}", refresh=False)
    if np.all(ended):
        bar.close()
        _bar = None
