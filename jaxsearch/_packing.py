"""A run's state carried out of its compiled program in a few buffers.

A compiled program pays for each output array when it is called (a fixed cost each on a
CPU), and a state has some twenty small leaves: the scalars of the solver, the direction and
the line search, and at small sizes the direction's memory. `pack` concatenates every leaf of
fewer than `PACKED_SIZE` elements into one flat buffer per dtype (the larger leaves, a
parameter-sized gradient or memory, stay as they are, sharded as they were); `PackedState.unpack`
slices them back, bit for bit, with their shapes, dtypes and weak types. A `Result` keeps its
state packed and unpacks it when `result.state` is read: once per result, on the host (no
program is compiled for it, and in a run over many processes no collective runs, so one
process may read it alone); inside a trace, as slices that a caller who returns only
`result.params` never computes.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import PyTree

from ._private_jax import with_weak_type

PACKED_SIZE = 64  # a leaf of fewer elements is packed (at most 63 * itemsize bytes each)


class PackedState(eqx.Module):
    """A pytree (a `SolverState`, a search's state) as flat buffers (`buffers`: one per dtype,
    or per group of leaves of a dtype), and the leaves not packed (`kept`); `recipe` (static)
    says where each leaf lies: ("packed", buffer, offset, shape, weak) or ("kept", index), in
    the order of the state's leaves, with their tree."""

    buffers: tuple
    kept: tuple
    recipe: tuple = eqx.field(static=True)

    def unpack(self) -> PyTree:
        """The state, its leaves of the shapes and dtypes they were packed from, with the
        leading batch axes of the buffers (a `vmap`'s) in front; computed once per object of
        concrete buffers."""
        found = self.__dict__.get("_unpacked")
        if found is None:
            tree, places = self.recipe
            arrays = (*self.buffers, *jax.tree.leaves(self.kept))
            concrete = not any(isinstance(a, jax.core.Tracer) for a in arrays)
            packed = iter((_unpack_on_host if concrete else _unpack)(places, self.buffers))
            leaves = [self.kept[p[1]] if p[0] == "kept" else next(packed) for p in places]
            found = jax.tree.unflatten(tree, leaves)
            if concrete:  # a traced state is unpacked anew: its slices belong to the trace
                object.__setattr__(self, "_unpacked", found)
        return found

    def place_of(self, field) -> tuple:
        """Where the leaf `field(state)` lies (e.g. `lambda s: s.num_steps`): ("packed",
        buffer, offset, shape, weak) or ("kept", index), as in `recipe`."""
        tree, places = self.recipe
        return places[field(jax.tree.unflatten(tree, list(range(len(places)))))]


def packed(leaf) -> bool:
    """Whether `pack` packs `leaf`: an array of fewer than `PACKED_SIZE` elements."""
    return eqx.is_array(leaf) and leaf.size < PACKED_SIZE


def pack(state: PyTree, max_leaves: int | None = None, which=packed) -> PackedState:
    """`state` as a `PackedState` (inside a compiled program: the concatenations are its):
    the leaves for which `which(leaf)` holds packed, the others kept. `max_leaves`: at most
    this many leaves per buffer (more buffers of a dtype where needed); None: one buffer per
    dtype."""
    leaves, tree = jax.tree.flatten(state)
    parts: list[list] = []
    sizes: list[int] = []
    open_part: dict[str, int] = {}  # dtype -> the buffer that takes its next leaf
    kept: list = []
    places: list[tuple] = []
    for leaf in leaves:
        if not which(leaf):
            places.append(("kept", len(kept)))
            kept.append(leaf)
            continue
        name = jnp.dtype(leaf.dtype).name
        index = open_part.get(name)
        if index is None or (max_leaves is not None and len(parts[index]) >= max_leaves):
            index = open_part[name] = len(parts)
            parts.append([])
            sizes.append(0)
        weak = bool(getattr(leaf, "weak_type", False))
        places.append(("packed", index, sizes[index], tuple(leaf.shape), weak))
        parts[index].append(jnp.ravel(leaf))
        sizes[index] += int(leaf.size)
    buffers = tuple(jnp.concatenate(part) for part in parts)
    return PackedState(buffers, tuple(kept), (tree, tuple(places)))


def _unpack_on_host(places: tuple, buffers: tuple) -> list:
    """The packed leaves of concrete buffers, in order: sliced on the host and put back on
    the buffers' devices, replicated, so that reading a state compiles nothing."""
    shardings = [_replicated(b) for b in buffers]
    host = [np.asarray(b) for b in buffers]
    leaves = []
    for place in places:
        if place[0] == "kept":
            continue
        _, index, offset, shape, weak = place
        buffer = host[index]
        size = int(np.prod(shape, dtype=int))
        leaf = buffer[..., offset : offset + size].reshape((*buffer.shape[:-1], *shape))
        leaf = _place(leaf, shardings[index])
        if weak:
            leaf = _unpack_weak(leaf)
        leaves.append(leaf)
    return leaves


def _place(leaf: np.ndarray, sharding):
    """`leaf` put on `sharding`'s devices, replicated. A sharding that spans other processes'
    devices too (a multi-process run) gets the copies of this process's devices only: each
    process has the same buffers, and `jax.device_put` would first check that they are equal
    with a collective, a compiled program that every process must run at once."""
    if sharding is None or sharding.is_fully_addressable:
        return jax.device_put(leaf, sharding)
    return jax.make_array_from_callback(leaf.shape, sharding, lambda index: leaf[index])


def _replicated(buffer):
    """A sharding that puts a leaf of any rank where `buffer` lies, replicated (None, the
    default device uncommitted, where `buffer` is not committed: as a fresh state's leaves,
    so that a resumed run's arguments key the same compiled run)."""
    if not getattr(buffer, "committed", False):
        return None
    sharding = getattr(buffer, "sharding", None)
    if isinstance(sharding, jax.sharding.NamedSharding):
        return jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec())
    if isinstance(sharding, jax.sharding.SingleDeviceSharding):
        return sharding
    return None


def _unpack_weak(leaf):
    return with_weak_type(leaf, leaf.dtype)


def _unpack(places: tuple, buffers: tuple) -> list:
    """The packed leaves, in order, while traced (slices of the caller's program)."""
    leaves = []
    for place in places:
        if place[0] == "kept":
            continue
        _, index, offset, shape, weak = place
        buffer = buffers[index]
        size = int(np.prod(shape, dtype=int))
        leaf = buffer[..., offset : offset + size].reshape(*buffer.shape[:-1], *shape)
        if weak:
            leaf = _unpack_weak(leaf)
        leaves.append(leaf)
    return leaves
