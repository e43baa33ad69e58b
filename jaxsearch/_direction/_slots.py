"""One slot of a memory whose slot index is an array: read, written, or the slots reordered.
L-BFGS's circular buffers are (m, ...) arrays with an array `head`; indexing them is a dynamic
slice, under `jax.vmap` a gather or scatter over the batch. On a TPU these are far slower than
selects, and a vmapped scatter inside a `lax.while_loop` wrote wrong rows
(`benchmarks/studies/tpu_vmap_failures.py`; docs/benchmarks.md), so there every write is a select
over the slots, right under any vmap, and a read a masked sum up to `SELECT_LIMIT` elements, a
slice above (vmapped gathers read right); a row written in place where the index is not batched
made a network run slower. Elsewhere reads and writes are slices (on a CPU gathers are fast and
selects are not); only a CPU writes with `mode="drop"`."""

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
        # Where not `keep`, the write goes to slot m, which does not exist, and is dropped: no read
        # of the old row.
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
