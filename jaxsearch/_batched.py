"""`batched_run`: many problems solved together, at a cost that follows the steps they take.

Under `jax.vmap`, `Solver.run`'s `lax.while_loop` runs every problem of the batch until the
slowest has finished. `batched_run` keeps a pool of `lanes` problems instead: one compiled
program runs `chunk_steps` steps of a resumed run on every lane, and after each chunk the
lanes whose problem ended hand its result out and take the next problems of the batch, so
that lanes stay busy with problems that still run.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._inputs import check_fn
from ._misc import with_fields
from ._result import Result
from ._status import Status

LANES = 1024  # the pool's default width
SHRINK = 8  # the tail's widths: the pool's width divided by 8, 64, ...
NARROWEST = 32  # ... down to no fewer lanes than this


def batched_run(
    solver,
    fn,
    x0s,
    *args,
    chunk_steps: int = 10,
    lanes: int = LANES,
    value_dtype=None,
) -> Result:
    """Minimise fn from each of a batch of starts, at a cost that follows the steps the
    problems take rather than the slowest problem's: per problem, what
    `jax.jit(jax.vmap(lambda x, *a: solver.run(fn, x, *a)))(x0s, *args)` returns (params,
    value, grad, aux, status, state, iterate, so `num_steps` and `num_fun_evals` too), bit
    for bit as said below.

    Every leaf of `x0s` and `args` has the batch on its leading axis, of one size B. A
    small program builds every problem's start (`init`'s state at x0). A pool of
    W = min(B, `lanes`) lanes then holds problems: one compiled program runs `chunk_steps`
    steps on every lane, a resumed `run(fn, iterate, *args, state=state)` under `vmap`.
    After each chunk, the host reads which lanes' problems ended (status other than
    `MAX_STEPS`, or `max_steps` steps in all); their results go out to the batch's result
    and the lanes take the next problems of the batch, in order. Once no problem waits, the
    pool shrinks to W / 8, W / 64, ... lanes (no fewer than 32) as soon as the problems
    still running fit, each width one more compiled program. Ends for want of progress
    (`stall_steps`) and the choice of the best point come from the state, which carries
    them, as in the whole run. Each chunk evaluates fn once more per problem (a resumed
    run's check of f at its iterate, not counted in `num_fun_evals`).

    Bit for bit where XLA computes each problem's arithmetic the same in any program and at
    any place of a batch. On XLA's CPU backend that holds where it does not contract a
    multiply and an add into a fused multiply-add (FMA): there, e.g. on x86 with
    `XLA_FLAGS=--xla_cpu_max_isa=AVX` (tests/test_batched.py checks float64 and float32, a
    pytree x0 and aux). With FMA (x86 from AVX2 on, the default), XLA's CPU code rounds some
    of a problem's multiply-adds differently in the last few places of a loop and from one
    program to another, so that its last bits depend on its place in the batch and on the
    program: even
    `jax.jit(jax.vmap(run))` on the batch in another order, or resumed once with `state=`,
    differs in the last bits for some problems, and so do some of `batched_run`'s
    (`benchmarks/batched.py` counts the problems that match).

    Compiles: the start program, a gather that fills the pool, and one program per pool
    width used (plus a gather per shrink), each once per (solver, fn, B, W, avals of x0s and
    args): new batches of the same size compile nothing.

    **Arguments:**

    - `solver`: a `js.Solver` with `throw=False` (read `result.status`), no `max_evals` (a
      chunk would start a new budget of evaluations) and `max_steps` a multiple of
      `chunk_steps` (every lane then ends its last chunk at `max_steps`).
    - `fn`, `x0s`, `*args`: as `Solver.run`'s, with the batch in front.
    - `chunk_steps`: steps per chunk, at least 1 (default 10). Shorter chunks hand finished
      problems out sooner, at a dispatch, a read of B / W flags and an evaluation of fn
      per lane per chunk.
    - `lanes`: the pool's width W when the batch is larger (default 1024). Wider pools
      dispatch fewer chunks; narrower ones spend less on the last, slowest problems.
    - `value_dtype`: as `Solver.run`'s.

    Returns a `js.Result` with the batch in front of every leaf (as `jax.vmap`'s).
    """
    check_fn(fn)
    chunk_steps, lanes = _count("chunk_steps", chunk_steps), _count("lanes", lanes)
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
    if solver.max_steps % chunk_steps:
        raise ValueError(
            f"batched_run needs the solver's max_steps ({solver.max_steps}) to be a multiple "
            f"of chunk_steps ({chunk_steps}), so that every problem's last chunk ends at "
            "max_steps."
        )
    size = _batch_size(x0s, args)
    widths = _widths(min(size, lanes))
    carry = _start((solver, fn, args, value_dtype), x0s)
    chunk = _with_max_steps(solver, chunk_steps)
    settings = (chunk, fn, args, solver.max_steps)
    width = widths.pop(0)
    pool = _take(carry, _device(np.arange(width)))
    owner = np.arange(width)  # each lane's problem
    live = np.ones(width, bool)  # lanes whose problem is still running
    fresh = np.arange(width)  # each lane's problem that starts in it, or -1
    waiting = width  # the next problem to start
    while True:
        plan = tuple(map(_device, (fresh, owner, live)))
        carry, pool, running = _chunk((settings, plan), carry, pool)
        live &= np.asarray(running)
        fresh = np.full(width, -1)
        if waiting < size:  # the lanes that are free take the next problems
            free = np.flatnonzero(~live)[: size - waiting]
            fresh[free] = owner[free] = np.arange(waiting, waiting + free.size)
            live[free], waiting = True, waiting + free.size
            continue
        count = int(live.sum())
        if not count:
            return carry
        if widths and count <= widths[0]:  # the tail: a narrower pool
            while len(widths) > 1 and count <= widths[1]:
                widths.pop(0)
            width = widths.pop(0)
            lane = np.flatnonzero(live)
            lane = np.concatenate([lane, np.full(width - count, lane[0])])  # copies: dropped
            pool = _take(pool, _device(lane))
            owner, live = owner[lane], np.arange(width) < count
            fresh = np.full(width, -1)


def _device(array: np.ndarray) -> jax.Array:
    """A copy on the device, int32 where integer (a transfer, no program)."""
    return jax.device_put(array.astype(np.int32) if array.dtype.kind == "i" else array.copy())


def _widths(width: int) -> list[int]:
    """The pool's widths, widest first: `width`, then divided by `SHRINK` while at least
    `NARROWEST`."""
    out = [width]
    while out[-1] // SHRINK >= NARROWEST:
        out.append(out[-1] // SHRINK)
    return out


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


def _with_max_steps(solver, max_steps: int):
    """`solver` with another `max_steps` (a static field: the chunk's own program)."""
    return solver if solver.max_steps == max_steps else with_fields(solver, max_steps=max_steps)


def _gather(tree, index):
    return jax.tree.map(lambda leaf: jnp.take(leaf, index, axis=0, mode="clip"), tree)


@eqx.filter_jit
def _take(tree, index):
    """The lanes (or problems) `index` of every leaf."""
    return _gather(tree, index)


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
def _chunk(settings, carry: Result, pool: Result):
    """One chunk on every lane: the lanes with a `fresh` problem (not -1) take its start
    from `carry`, every lane runs, and the lanes whose `live` problem ended write its result
    to `carry`. Returns carry, the pool, and which lanes' problems go on."""
    (solver, fn, args, max_steps), (fresh, owner, live) = settings

    def pick(new, old):
        return jnp.where(jnp.reshape(fresh >= 0, (-1,) + (1,) * (old.ndim - 1)), new, old)

    leaves, structure = jax.tree.flatten(pool)  # (carry's state may cache other metadata)
    starts = jax.tree.leaves(_gather(carry, fresh))
    pool = jax.tree.unflatten(structure, list(map(pick, starts, leaves)))

    def one(x, state, a):
        return solver.run(fn, x, *a, state=state)

    pool = jax.vmap(one)(pool.iterate, pool.state, _gather(args, owner))
    running = (pool.status == Status.MAX_STEPS) & (pool.state.num_steps < max_steps)
    size = jax.tree.leaves(carry.status)[0].shape[0]
    where = jnp.where(live & ~running, owner, size)  # the others are dropped: out of bounds
    carry = jax.tree.map(lambda whole, new: whole.at[where].set(new, mode="drop"), carry, pool)
    return carry, pool, running
