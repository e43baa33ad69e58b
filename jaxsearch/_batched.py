"""`batched_run`: many problems solved together, at a cost that follows the steps they take.

Under `jax.vmap`, `Solver.run`'s `lax.while_loop` runs every problem of the batch until the
slowest has finished. `batched_run` runs the batch `chunk_steps` steps at a time instead:
after each chunk the problems that ended keep their results, and the rest resume from their
states (a resumed run goes on bit for bit), gathered into the smallest of a few fixed bucket
sizes, so that no chunk compiles a program of its own.
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
    """Minimise fn from each of a batch of starts, at a cost that follows the steps the
    problems take rather than the slowest problem's: per problem, what
    `jax.jit(jax.vmap(lambda x, *a: solver.run(fn, x, *a)))(x0s, *args)` returns (params,
    value, grad, aux, status, state, iterate, so `num_steps` and `num_fun_evals` too), bit
    for bit as said below.

    Every leaf of `x0s` and `args` has the batch on its leading axis, of one size B. The
    batch starts from `init`'s state and runs `chunk_steps` steps at a time, each chunk a
    resumed `run` under `vmap` (`run(fn, iterate, *args, state=state)` with `max_steps` set
    to the chunk's steps). After a chunk, a problem goes on only where its chunk ended at its
    step budget (`MAX_STEPS`) below the solver's `max_steps`; the last chunk runs the steps
    left to `max_steps`. Ends for want of progress (`stall_steps`) and the choice of the
    best point come from the state, which carries them, as in the whole run. The problems
    that go on are gathered into the smallest of the `buckets` that holds them; its spare
    places compute copies of a live problem, and their results are dropped. Each resumed
    chunk evaluates fn once more per problem (a resumed run's check of f at its iterate,
    not counted in `num_fun_evals`).

    Bit for bit where resuming a vmapped run is: on XLA's CPU backend, a problem's arithmetic
    is the same in a batch of any size from B % 64 + 64 on, except for the last B % 64
    problems, which a batch computes apart from its vectorised loop; every bucket is B % 64
    plus a multiple of 64 and keeps those problems at their distance from its end
    (tests/test_batched.py checks float64 and float32, a pytree x0 and aux, at B = 133). At
    B = 10,000 on a 2-core CPU, `jax.jit(jax.vmap(run))` resumed once already differs in the
    last bits for about 5% of problems, and so do about 15 to 20% of `batched_run`'s; other
    backends may round batches of other sizes differently. `benchmarks/batched.py` counts
    the problems that match.

    Compiles: one small program for the start, and one per (bucket size, chunk length)
    used, each once per (solver, fn, B, avals of x0s and args): new batches of the same size
    compile nothing. Where `max_steps` is not a multiple of `chunk_steps`, the last chunk
    has a length of its own.

    **Arguments:**

    - `solver`: a `js.Solver` with `throw=False` (read `result.status`) and no `max_evals`
      (a chunk would start a new budget of evaluations).
    - `fn`, `x0s`, `*args`: as `Solver.run`'s, with the batch in front.
    - `chunk_steps`: steps per chunk, at least 1 (default 16). Shorter chunks drop
      finished problems sooner, at a dispatch and an evaluation of fn per chunk.
    - `buckets`: the batch sizes of the chunks, each B % 64 plus a positive multiple of 64,
      or B (which is always one). None: B, and halvings of B's multiple of 64 down to about
      B / 64 (for B = 10,000: 10000, 5008, 2512, 1296, 656, 336, 208, 144).
    - `value_dtype`: as `Solver.run`'s.

    Returns a `js.Result` with the batch in front of every leaf (as `jax.vmap`'s).
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
    carry = _start((solver, fn, args, value_dtype), x0s)
    live, done = np.arange(size), 0
    while live.size and done < solver.max_steps:
        later = _with_max_steps(solver, min(chunk_steps, solver.max_steps - done))
        index, keep = _placement(live, size, sizes)
        settings = (later, fn, args, solver.max_steps, jnp.asarray(index), jnp.asarray(keep))
        carry, running = _later_chunk(settings, carry)
        live = np.sort(index[keep & np.asarray(running)])
        done += later.max_steps
    return carry


def _placement(live: np.ndarray, size: int, sizes: list[int]):
    """(index, keep) of a chunk on the `live` problems, in the smallest bucket that holds
    them: `index` the problem at each of the bucket's places, `keep` where that place's
    result is kept (the others hold copies of a live problem). The batch's last
    `size % LANES` problems keep their distance from the bucket's end: XLA's CPU loops
    compute a batch's last places apart from its vectorised body, and a bucket that keeps
    them there computes every problem as the batch did (`LANES`: a multiple of any vector
    loop's width times its unrolling)."""
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
def _start(settings, x0s) -> Result:
    """The batch before its first step: a `Result` per problem at x0 with `init`'s state (the
    state a fresh run starts from), so that every chunk, the first too, is a resumed run."""
    solver, fn, args, value_dtype = settings

    def one(x, a):
        state = solver.init(x, value_dtype, fn=fn, args=a)
        return Result(x, state.value, state.grad, state.aux, state.status, state, x)

    return jax.vmap(one)(x0s, args)


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
