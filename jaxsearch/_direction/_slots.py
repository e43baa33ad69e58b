"""One slot of a memory whose slot index is an array: read, written, or the slots reordered.

L-BFGS keeps its pairs in circular buffers, (m, ...) arrays whose newest slot `head` is an
array. Indexing such a buffer is a dynamic slice; under `jax.vmap`, where each problem has
its own `head`, it becomes a gather or a scatter over the whole batch. On a TPU (jax 0.10.2)
these were far slower than selects (10^4 vmapped 2-D Rosenbrock problems), and a vmapped
scatter inside a `lax.while_loop` wrote wrong rows: with `mode="drop"` from 30,920 buffer
rows on, and in bounds too at 4000 problems of (10, 1000) buffers
(`benchmarks/studies/tpu_vmap_failures.py`; benchmarks/results/tpu_vmap_failures_tpu.md; the
figures in docs/benchmarks.md).

So on a TPU every write is a select over the slots (a masked replace), whatever the size
and whether or not vmap batches the slot index: it reads and writes the whole buffer, and is
right under any vmap. A write of one row in place where the index is not batched (a
`custom_vmap` rule) was tried and measured against it on a TPU: faster a step for L-BFGS on
one large 1-D leaf, but slower for the whole MLP run of benchmarks/suite/networks.py (six 2-D
leaves, about five evaluations a step), which counts for more (docs/benchmarks.md).
A read is a masked sum over the slots for a buffer of at most `SELECT_LIMIT` elements, and a
slice above (vmapped gathers read right).
On other backends reads and writes are slices, as before: on a CPU the gathers are fast and
the selects are not (on the same 10^4 problems; docs/benchmarks.md), and a GPU keeps the
slices it was measured with (benchmarks/results/batched_gpu.md). Only a
CPU writes with `mode="drop"`; elsewhere a write stays in bounds.
"""

import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Bool, Int

# Elements of one buffer (m slots in all) up to which a read on a TPU is a select.
SELECT_LIMIT = 1 << 14


def _selected(elements: int) -> bool:
    """Whether a read of a buffer of `elements` elements is a select."""
    return _writes_selected() and elements <= SELECT_LIMIT


def _writes_selected() -> bool:
    return jax.default_backend() == "tpu"


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
    if _writes_selected():
        return jnp.where(_at(index, buffer) & keep, new[None], buffer)
    if keep is True:
        return buffer.at[index].set(new)
    if jax.default_backend() == "cpu":
        # Where not `keep`, the write goes to slot m, which does not exist, and is dropped:
        # no read of the slot's old row: faster, kept or not (benchmarks/HISTORY.md).
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
