"""One slot of a memory whose slot index is an array: read, written, or the slots reordered.

L-BFGS keeps its pairs in circular buffers, (m, ...) arrays whose newest slot `head` is an
array. Indexing such a buffer is a dynamic slice; under `jax.vmap`, where each problem has
its own `head`, it becomes a gather or a scatter over the whole batch. On a TPU these are
slow (10^4 vmapped 2-D Rosenbrock problems: 1.7 s a run against 0.006 s with selects, TPU
v5e, jax 0.10.2), and a scatter with `mode="drop"` inside a `lax.while_loop` writes wrong
rows past about 29,000 slots in all (`benchmarks/tpu_vmap_failures.py`, issue 48).

So on a TPU a buffer of at most `SELECT_LIMIT` elements is read and written by selects over
its slots (a masked sum, a masked replace): each touches all m slots, which costs little at
that size and vectorises under vmap. A larger buffer, and any buffer on another backend,
is sliced: a read or write touches one slot, as a large problem needs. On a CPU the gathers
are fast and the selects are not (the same 10^4 problems: 0.45 s sliced, 2.7-3.1 s
selected); a GPU keeps the slices it was measured with (H200, benchmarks/results/
batched_gpu.md). Only the CPU writes with `mode="drop"`; elsewhere a write stays in bounds.
"""

import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Bool, Int

# Elements of one buffer (m slots in all) up to which a slot is selected, not sliced.
SELECT_LIMIT = 1 << 14


def _selected(elements: int) -> bool:
    return jax.default_backend() == "tpu" and elements <= SELECT_LIMIT


def _at(index: Int[Array, ""], buffer: Array) -> Bool[Array, "..."]:
    """Whether each slot of `buffer` (its leading axis) is `index`, broadcast over a slot."""
    slots = lax.iota(jnp.int32, buffer.shape[0])
    return (slots == index).reshape((-1,) + (1,) * (buffer.ndim - 1))


def slot(buffer: Array, index: Int[Array, ""]) -> Array:
    """`buffer[index]`, for 0 <= index < m."""
    if _selected(buffer.size):
        # One slot is kept and the others are zeros: the sum is that slot exactly.
        return jnp.sum(jnp.where(_at(index, buffer), buffer, jnp.zeros((), buffer.dtype)), 0)
    return lax.dynamic_index_in_dim(buffer, index, keepdims=False)


def with_slot(
    buffer: Array, index: Int[Array, ""], new: Array, keep: Bool[Array, ""] | bool = True
) -> Array:
    """`buffer` with slot `index` set to `new` where `keep`, for 0 <= index < m."""
    new = new.astype(buffer.dtype)
    if _selected(buffer.size):
        return jnp.where(_at(index, buffer) & keep, new[None], buffer)
    if keep is True:
        return buffer.at[index].set(new)
    if jax.default_backend() == "cpu":
        # Where not `keep`, the write goes to slot m, which does not exist, and is dropped:
        # no read of the slot's old row (at n = 1e6 on a CPU, 0.45 ms against 0.73 ms per
        # buffer where kept, 0.09 against 0.60 where not).
        dropped = jnp.where(keep, index, buffer.shape[0])
        return buffer.at[dropped].set(new, mode="drop")
    return buffer.at[index].set(jnp.where(keep, new, buffer[index]))


def in_order(array: Array, order: Int[Array, " m"]) -> Array:
    """`array[order]` along the leading axis, for 0 <= order < m."""
    if not _selected(array.size * order.shape[0]):
        return array[order]
    slots = lax.iota(jnp.int32, array.shape[0])
    hit = (order[:, None] == slots[None, :]).reshape(order.shape + (-1,) + (1,) * (array.ndim - 1))
    return jnp.sum(jnp.where(hit, array[None], jnp.zeros((), array.dtype)), 1)
