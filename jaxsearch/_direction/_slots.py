"""One slot of a memory whose slot index is an array: read, written, or the slots reordered.

L-BFGS keeps its pairs in circular buffers, (m, ...) arrays whose newest slot `head` is an
array. Indexing such a buffer is a dynamic slice; under `jax.vmap`, where each problem has
its own `head`, it becomes a gather or a scatter over the whole batch. On a TPU v5e (jax
0.10.2) these were slow (10^4 vmapped 2-D Rosenbrock problems: 1.7 s a run, 0.005 s with
selects), and a vmapped scatter inside a `lax.while_loop` wrote wrong rows: with
`mode="drop"` from 30,920 buffer rows on, and in bounds too at 4000 problems of (10, 1000)
buffers (`benchmarks/tpu_vmap_failures.py`; benchmarks/results/tpu_vmap_failures_tpu.md).

So on a TPU a write whose slot index is batched (each problem its own `head`, under vmap) is
a select over the slots, a masked replace that reads and writes the whole buffer and is right
under any vmap; a write whose index is not batched (one problem, or problems that share the
slot) is a slice, one row read and one written, in place. `jax.custom_batching.custom_vmap`
tells the two apart when vmap batches the write, and a `jax.custom_jvp` around it gives the
write its derivative (custom_vmap has no transpose; the tangent is written by the select).
On a TPU at n = 10^6 the select over (10, n) buffers took 0.39 ms of each evaluation
(benchmarks/results/trace_tpu.md). A read is a masked sum over the slots for a buffer of at
most `SELECT_LIMIT` elements, and a slice above (vmapped gathers read right).
On other backends reads and writes are slices, as before: on a CPU the gathers are fast and
the selects are not (the same 10^4 problems: 0.45 s sliced, 2.7-3.1 s selected), and a GPU
keeps the slices it was measured with (H200, benchmarks/results/batched_gpu.md). Only a
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
        return _write_by_batching(buffer, jnp.asarray(index, jnp.int32), new, jnp.asarray(keep))
    if keep is True:
        return buffer.at[index].set(new)
    if jax.default_backend() == "cpu":
        # Where not `keep`, the write goes to slot m, which does not exist, and is dropped:
        # no read of the slot's old row (at n = 1e6 on a CPU, 0.45 ms against 0.73 ms per
        # buffer where kept, 0.09 against 0.60 where not).
        dropped = jnp.where(keep, index, buffer.shape[0])
        return buffer.at[dropped].set(new, mode="drop")
    return _sliced_write(buffer, index, new, keep)


def _sliced_write(buffer, index, new, keep):
    """One row read and one written, in place; `index` in bounds."""
    return lax.dynamic_update_index_in_dim(
        buffer, jnp.where(keep, new, lax.dynamic_index_in_dim(buffer, index, 0, False)), index, 0
    )


def _selected_write(buffer, index, new, keep):
    """A masked replace over all slots."""
    return jnp.where(_at(index, buffer) & keep, new[None], buffer)


@jax.custom_jvp
def _write_by_batching(buffer, index, new, keep):
    return _write_sliced_unless_batched(buffer, index, new, keep)


@_write_by_batching.defjvp
def _write_by_batching_jvp(primals, tangents):
    buffer, index, new, keep = primals
    buffer_dot, _, new_dot, _ = tangents
    out = _write_by_batching(buffer, index, new, keep)
    # The tangent is linear in (buffer_dot, new_dot): the select, which transposes.
    return out, _selected_write(buffer_dot, index, new_dot, keep)


@jax.custom_batching.custom_vmap
def _write_sliced_unless_batched(buffer, index, new, keep):
    return _sliced_write(buffer, index, new, keep)


@_write_sliced_unless_batched.def_vmap
def _write_batched(axis_size, in_batched, buffer, index, new, keep):
    """Under vmap: problems that share `index` write one slice of the batch; problems with
    their own index a select (no scatter)."""
    buffer_b, index_b, new_b, keep_b = in_batched

    def batched(x, is_batched):
        return x if is_batched else jnp.broadcast_to(x, (axis_size,) + jnp.shape(x))

    buffer, new, keep = batched(buffer, buffer_b), batched(new, new_b), batched(keep, keep_b)
    if not index_b:  # written along axis 1 by hand: vmap would make the write a scatter
        row = lax.dynamic_index_in_dim(buffer, index, 1, False)
        keep = keep.reshape(keep.shape + (1,) * (new.ndim - 1))
        return lax.dynamic_update_index_in_dim(buffer, jnp.where(keep, new, row), index, 1), True
    return jax.vmap(_selected_write)(buffer, index, new, keep), True


def in_order(array: Array, order: Int[Array, " m"]) -> Array:
    """`array[order]` along the leading axis, for 0 <= order < m."""
    if not _selected(array.size * order.shape[0]):
        return array[order]
    slots = lax.iota(jnp.int32, array.shape[0])
    hit = (order[:, None] == slots[None, :]).reshape(order.shape + (-1,) + (1,) * (array.ndim - 1))
    return jnp.sum(jnp.where(hit, array[None], jnp.zeros((), array.dtype)), 1)
