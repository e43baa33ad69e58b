"""`batched_run`: many problems solved together, at a cost that follows the steps they take. Under
`jax.vmap`, `Solver.run`'s loop runs every problem until the slowest ends; `batched_run` keeps a
pool of `lanes` problems in one compiled loop, one engine iteration (one evaluation of fn) per
lane per iteration, and a lane whose problem ended takes the next one."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import _evaluate, _setup, _state, _traced
from ._compile import plan
from ._engine import Engine
from ._history import Report
from ._inputs import check_fn, partition
from ._misc import select, weak_settings
from ._objective import Objective
from ._result import Result

LANES = 1024  # the pool's default width
SHRINK = 4  # the tail's widths: the pool's width divided by 4, 16, ...
# ... down to no fewer lanes than this: below about 200 problems, XLA's CPU code sums a small
# reduction under `vmap` in another order than over wider batches (benchmarks/suite/batched.py's
# decay fits).
NARROWEST = 256
REPORT = Report(batched=True)  # as `run` under `jax.vmap`: the search's state unpacked


def batched_run(solver, fn, x0s, *args, lanes: int = LANES, value_dtype=None) -> Result:
    """Minimise fn from each of a batch of starts, at a cost that follows the problems' evaluations
    rather than the slowest's: per problem, what `jax.jit(jax.vmap(lambda x, *a: solver.run(fn,
    x, *a)))(x0s, *args)` returns, bit for bit as said below. One compiled program per (solver,
    fn, B, W, value_dtype, avals of x0s and args) builds every start (`init`'s state), then runs
    W = min(B, `lanes`) lanes in a `lax.while_loop`, one engine iteration on every running lane
    under `vmap`; lanes whose problems end write them out and start the next in order. Once none
    waits, the pool shrinks to W / 4, W / 16, ... (no fewer than 256) as the running problems
    fit. Each `Result` is built as `run`'s (`_traced.finish`).

    Bit for bit where XLA computes a problem's arithmetic the same in any program and place of a
    batch: on XLA's CPU, where it contracts no multiply-adds into FMAs (e.g.
    `XLA_FLAGS=--xla_cpu_max_isa=AVX`; tests/scale/test_batched.py). With FMA (x86 from AVX2 on,
    the default) a problem's last bits depend on its place and program, even for
    `jax.jit(jax.vmap(run))` in another order (`benchmarks/suite/batched.py` counts the matches).

    **Arguments:** `solver`, a `js.Solver` with `throw=False` (read `result.status`); `fn`,
    `x0s`, `*args`, as `Solver.run`'s with the batch, of one size B, leading every leaf; `lanes`,
    the pool's width W for a larger batch (default 1024: wider runs fewer iterations, narrower
    spends less on ended lanes); `value_dtype`, as `Solver.run`'s. Returns a `js.Result` with the
    batch in front of every leaf.

    Its own path, by `eqx.filter_jit`, not `plan` and `dispatch` as `run` and `step`: the pool's
    loops and the compaction between them are one program; only fn's closure conversion is the
    compile wing's (`plan("batched", ...)`).
    """
    check_fn(fn)
    lanes = _count("lanes", lanes)
    if solver.throw:
        raise ValueError(
            "batched_run needs Solver(throw=False): one problem's failure would stop the "
            "whole batch; read result.status instead."
        )
    size = _batch_size(x0s, args)
    widths = tuple(_widths(min(size, lanes)))
    # The tracers fn closes over (the compile wing's closure conversion, at one problem),
    # shared by every problem: one more argument. This path compiles its own program (below),
    # not `plan`'s: it compacts the batch between the pool's loops, inside one program.
    planned = plan("batched", solver, fn, x0s, args)
    captured = planned.args[-1] if planned.fn is not fn else None
    return _solve((solver, planned.fn, value_dtype, widths), x0s, args, captured)


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


def _take(tree, index):
    """Rows `index` of every leaf (an index out of range takes the last row)."""
    return jax.tree.map(lambda leaf: jnp.take(leaf, index, axis=0, mode="clip"), tree)


def _where(mask, new, old):
    """Per lane (the leading axis): `new` where `mask`, else `old`."""
    return jax.vmap(select)(mask, new, old)


@eqx.filter_jit
def _solve(settings, x0s, args, captured) -> Result:
    """The whole batch in one program: the starts, the pool's loops (one per width), and
    every problem's `Result`; `captured`: what a closure-converted fn takes last."""
    solver, fn, value_dtype, widths = settings
    if captured is not None:
        closed_over = fn

        def fn(x, *a):
            return closed_over(x, *a, captured)

    search = _setup.line_search(solver, None)
    size = jax.tree.leaves(x0s)[0].shape[0]

    with _evaluate.sharing_traces():  # fn is traced once, for every use below

        def traced(x0, a):  # fn traced once, as the solver evaluates it
            return Objective.of(solver, _evaluate.TracedOnce(fn, x0, *a))

        def fresh(x0, a):  # the state a fresh run starts from (`_state.fresh_state`)
            f = traced(x0, a)
            return _state.initial_state(solver, search, x0, partition(x0)[0], value_dtype, f, a)

        states = lax.stop_gradient(jax.vmap(fresh)(x0s, args))  # as `traced_run`'s
        weak, weak_search = weak_settings((solver, search))

        def engine(x0, a):
            static = partition(x0)[1]
            f = traced(x0, a)
            return Engine(weak, weak_search, f, static, a, None, until_step=False, report=REPORT)

        def begin(x0, a, state):
            f = traced(x0, a)
            arguments = (weak, weak_search, f, x0, a)
            return _traced.start(*arguments, box=None, report=REPORT, state=state)[1]

        def iterate(x0, a, m):
            return engine(x0, a).iterate(m)

        def end(x0, a, x, state, last_eval):
            return _traced.finish(engine(x0, a), x0, x, state, None, last_eval)

        # Each lane: its problem (`size` where it has none), that problem's x0 and args, and
        # the engine's machine; the batch's final iterates, states and evaluation budgets.
        width = widths[0]
        first = jnp.arange(width, dtype=jnp.int32)
        lane_x0, lane_args = _take((x0s, args), first)
        machines = jax.vmap(begin)(lane_x0, lane_args, _take(states, first))
        out = jax.tree.map(
            lambda leaf: jnp.zeros((size, *leaf.shape[1:]), leaf.dtype),
            (machines.x, machines.state, machines.last_eval),
        )
        pool = (first, lane_x0, lane_args, machines, jnp.int32(width), out)

        def refill(pool, loads: bool):
            """Write the problems that ended out, and (`loads`) start the next ones."""
            owner, lane_x0, lane_args, machines, waiting, out = pool
            ended = (owner < size) & ~machines.open
            where = jnp.where(ended, owner, size)  # the others are dropped: out of range
            final = (machines.x, machines.state, machines.last_eval)
            out = jax.tree.map(lambda whole, new: whole.at[where].set(new, mode="drop"), out, final)
            owner = jnp.where(ended, size, owner)
            if loads:
                rank = jnp.cumsum(ended.astype(jnp.int32)) - 1
                loaded = ended & (waiting + rank < size)
                owner = jnp.where(loaded, waiting + rank, owner).astype(jnp.int32)
                new_x0, new_args = _take((x0s, args), owner)
                started = jax.vmap(begin)(new_x0, new_args, _take(states, owner))
                lane_x0 = _where(loaded, new_x0, lane_x0)
                lane_args = _where(loaded, new_args, lane_args)
                machines = _where(loaded, started, machines)
                waiting = jnp.minimum(waiting + jnp.sum(ended, dtype=jnp.int32), size)
            return owner, lane_x0, lane_args, machines, waiting, out

        for stage, width in enumerate(widths):
            narrower = widths[stage + 1] if stage + 1 < len(widths) else 0
            if stage:  # the lanes still running, into a narrower pool (the rest: none)
                owner = pool[0]
                (lanes,) = jnp.nonzero(owner < size, size=width, fill_value=0)
                held = jnp.arange(width) < jnp.sum(owner < size)
                owner, lane_x0, lane_args, machines = _take(pool[:4], lanes)
                owner = jnp.where(held, owner, size).astype(jnp.int32)
                machines = eqx.tree_at(lambda m: m.open, machines, machines.open & held)
                pool = (owner, lane_x0, lane_args, machines, *pool[4:])

            def going(pool, narrower=narrower):
                owner, waiting = pool[0], pool[4]
                return (waiting < size) | (jnp.sum(owner < size) > narrower)

            def body(pool, loads=stage == 0):
                owner, lane_x0, lane_args, machines = pool[:4]
                after = jax.vmap(iterate)(lane_x0, lane_args, machines)
                machines = _where(machines.open, after, machines)  # as `vmap` of a while loop
                pool = (owner, lane_x0, lane_args, machines, *pool[4:])
                ended = jnp.any((owner < size) & ~machines.open)
                return lax.cond(ended, lambda p: refill(p, loads), lambda p: p, pool)

            pool = lax.while_loop(going, body, pool)

        x, state, last_eval = pool[5]
        return jax.vmap(end)(x0s, args, x, state, last_eval)
