"""`batched_run`: many problems solved together, at a cost that follows the steps they take.

Under `jax.vmap`, `Solver.run`'s `lax.while_loop` runs every problem of the batch until the
slowest has finished. `batched_run` runs the batch `chunk_steps` steps at a time instead:
after each chunk the problems that ended keep their results, and the rest resume from their
states (`run(fn, result.iterate, *args, state=result.state)`, bit for bit), gathered into the
smallest of a few fixed bucket sizes, so that no chunk compiles a program of its own.
"""

import copy
from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._inputs import check_fn
from ._result import Result
from ._status import Status

LANES = 64  # see `_placement`


def batched_run(
    solver,
    fn,
    x0s,
    *args,
    chunk_steps: int = 16,
    buckets: Sequence[int] | None = None,
    value_dtype=None,
) -> Result:
    """Minimise fn from each of a batch of starts: per problem, the result of
    `jax.jit(jax.vmap(lambda x, *a: solver.run(fn, x, *a)))(x0s, *args)`, bit for bit
    (params, value, grad, aux, status, step and evaluation counts, state and iterate), at a
    cost that follows the steps the problems take rather than the slowest problem's.

    Every leaf of `x0s` and of `args` has the batch on its leading axis, of one size B. The
    first chunk runs all B problems for `chunk_steps` steps (a `run` with
    `max_steps=chunk_steps`, under `vmap`); each later chunk resumes only the problems whose
    chunk ended at its step budget (`MAX_STEPS`) and that are below the solver's
    `max_steps`, gathered into the smallest bucket that holds them (the spare places are
    copies of a live problem, whose results are dropped; more problems than the largest
    bucket are run in several calls). The last chunk of a problem that reaches
    `max_steps` runs the steps left. A run that stops for want of progress (`stall_steps`)
    or returns its best point does so as the whole run would: the state carries both.

    One program is compiled for the first chunk and one per bucket size used, each once per
    (solver, fn, B, avals of x0s and args); where `max_steps` is not a multiple of
    `chunk_steps`, one more for the bucket of the problems that reach `max_steps`.

    **Arguments:**

    - `solver`: a `js.Solver` with `throw=False` and no `max_evals` (a budget of evaluations
      would restart with each chunk).
    - `fn`, `x0s`, `*args`: as `Solver.run`'s, with the batch axis in front.
    - `chunk_steps`: steps per chunk, at least 1. Each resumed chunk evaluates fn once more
      per problem (the check of the state at its iterate) and costs a dispatch, so chunks of
      about the spread of the step counts' lower quantiles are best.
    - `buckets`: the batch sizes of the later chunks (positive, at most B); None: B // 2,
      B // 4, ... down to max(B // 128, 1).
    - `value_dtype`: as `Solver.run`'s.
    """
    check_fn(fn)
    chunk_steps = _count("chunk_steps", chunk_steps)
    if solver.throw:
        raise ValueError(
            "batched_run needs Solver(throw=False): a chunk that ends at its step budget is "
            "not a failure of the run; read result.status instead."
        )
    if solver.max_evals is not None:
        raise ValueError(
            "batched_run does not take a Solver with max_evals: each chunk would start a "
            "new budget of evaluations."
        )
    size = _batch_size(x0s, args)
    sizes = _buckets(buckets, size)
    first = _with_max_steps(solver, min(chunk_steps, solver.max_steps))
    carry, running = _first_chunk((first, fn, args, value_dtype, solver.max_steps), x0s)
    done = first.max_steps
    live = np.flatnonzero(np.asarray(running))
    while live.size and done < solver.max_steps:
        later = _with_max_steps(solver, min(chunk_steps, solver.max_steps - done))
        index, keep = _placement(live, size, sizes)
        settings = (later, fn, args, solver.max_steps, jnp.asarray(index), jnp.asarray(keep))
        carry, running = _later_chunk(settings, carry)
        live = np.sort(index[keep & np.asarray(running)])
        done += later.max_steps
    return carry


def _placement(live: np.ndarray, size: int, sizes: list[int]):
    """(index, keep) of a later chunk on the `live` problems, in the smallest bucket that
    holds them: `index` the problem of each of the bucket's places, `keep` where that place's
    result is kept (the others hold copies of a live problem). A problem among the batch's
    last `size % LANES` keeps its distance from the bucket's end: XLA's CPU loops compute those last places apart from
    the vectorised rest, and a bucket that keeps them there computes every problem as the
    batch did, bit for bit (`LANES` above any vector loop's width times its unrolling)."""
    tail = size % LANES
    body = live[live < size - tail]
    at_tail = np.isin(np.arange(size - tail, size), live)
    bucket = min(s for s in sizes if s - tail >= body.size)
    index = np.full(bucket, live[0], np.int32)
    keep = np.zeros(bucket, bool)
    index[: body.size], keep[: body.size] = body, True
    if tail:  # the tail problems, in place
        places = np.arange(bucket - tail, bucket)[at_tail]
        index[places], keep[places] = np.arange(size - tail, size)[at_tail], True
    return index, keep


def _count(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name} must be an integer of at least 1, got {value!r}.")
    return int(value)


def _batch_size(x0s, args: tuple) -> int:
    """B, the leading axis of every leaf of x0s and args (a ValueError names the first that
    has none or another)."""
    found = None
    for path, leaf in jax.tree_util.tree_leaves_with_path((x0s, args)):
        where = "x0s" if path[0].idx == 0 else "args"  # type: ignore[attr-defined]
        where += jax.tree_util.keystr(path[1:])
        shape = np.shape(leaf)
        if not shape:
            raise ValueError(f"batched_run: {where} has no batch axis (a scalar).")
        if found is None:
            found = shape[0]
        elif shape[0] != found:
            raise ValueError(
                f"batched_run: {where} has a batch axis of {shape[0]}, the leaves before it "
                f"{found}: every leaf of x0s and args has the batch in front."
            )
    if not found:
        raise ValueError("batched_run: x0s holds no arrays with a batch, or the batch is empty.")
    return int(found)


def _buckets(buckets, size: int) -> list[int]:
    """The bucket sizes, largest first: each `size % LANES` plus a multiple of `LANES` (see
    `_placement`), at most `size`."""
    tail = size % LANES
    if buckets is None:
        units = [(size - tail) // LANES]
        while units[-1] > 1 and units[-1] * LANES > size / 64:
            units.append(-(-units[-1] // 2))
        return [tail + LANES * u for u in units if u] or [size]
    out = sorted({_count("each bucket", b) for b in buckets}, reverse=True)
    if out[0] > size or any((b - tail) % LANES or b < min(size, tail + LANES) for b in out):
        raise ValueError(
            f"buckets must be sizes of at most the batch's {size}, each {tail} (the batch's "
            f"size modulo {LANES}) plus a positive multiple of {LANES} (or the batch's size), "
            f"got {list(buckets)!r}."
        )
    if out[0] != size:
        out.insert(0, size)
    return out


def _with_max_steps(solver, max_steps: int):
    """`solver` with another `max_steps` (a static field: the chunk's own program)."""
    if solver.max_steps == max_steps:
        return solver
    chunk = copy.copy(solver)
    object.__setattr__(chunk, "max_steps", max_steps)
    return chunk


def _running(result: Result, max_steps):
    """Per problem: whether its run goes on after this chunk (it ended at the chunk's step
    budget, below the whole run's)."""
    return (result.status == Status.MAX_STEPS) & (result.state.num_steps < max_steps)


@eqx.filter_jit
def _first_chunk(settings, x0s):
    solver, fn, args, value_dtype, max_steps = settings

    def one(x, a):
        return solver.run(fn, x, *a, value_dtype=value_dtype)

    result = jax.vmap(one)(x0s, args)
    return result, _running(result, max_steps)


@eqx.filter_jit(donate="all-except-first")
def _later_chunk(settings, carry: Result):
    solver, fn, args, max_steps, index, keep = settings

    def take(tree):
        return jax.tree.map(lambda leaf: jnp.take(leaf, index, axis=0, mode="clip"), tree)

    def one(x, state, a):
        return solver.run(fn, x, *a, state=state)

    part = jax.vmap(one)(take(carry.iterate), take(carry.state), take(args))
    # the spare places (from `count` on) are dropped: scattered out of bounds
    size = jax.tree.leaves(carry.status)[0].shape[0]
    where = jnp.where(keep, index, size)
    carry = jax.tree.map(lambda whole, new: whole.at[where].set(new, mode="drop"), carry, part)
    return carry, _running(part, max_steps)
