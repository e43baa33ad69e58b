"""Host calls from inside a compiled program that see its values bit for bit, and under
`jax.vmap` see the whole batch at once."""

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
from jax import lax
from jax.custom_batching import custom_vmap


def host_call(fn, *args) -> None:
    """`fn(*args)` on the host, by `jax.debug.callback`, with each array leaf of `args` as a
    NumPy array of its own dtype and bits.

    A bare `jax.debug.callback` places its arguments on a CPU device under the x64 setting of
    the thread that runs the callback, which need not be the caller's: under a thread-local
    `jax.enable_x64(True)` a float64 value then reaches `fn` rounded to float32. Here each
    64-bit leaf travels as its bytes (uint8) and is viewed back in its dtype on the host.

    Under `jax.vmap`, `fn` is called once for the batch, not once per element with no word of
    which (as a bare `jax.debug.callback` is): each leaf arrives with one leading axis per
    vmap that batches the call, the outermost first, and a leaf that a vmap does not batch is
    broadcast along that vmap's axis. No derivative reaches the host (the leaves are sent
    through `lax.stop_gradient`).
    """
    leaves, tree = jtu.tree_flatten(args)
    leaves = [lax.stop_gradient(jnp.asarray(leaf)) for leaf in leaves]
    dtypes = tuple(_dtype_if_wide(leaf) for leaf in leaves)
    _send(_Received(fn, tree, dtypes), leaves)


def _send(received: "_Received", leaves: list) -> None:
    """`received(*leaves)` from the program. Under vmap the rule sends the batch, its axis
    first, by a call of its own that an outer vmap batches in turn (its axis then goes in
    front)."""

    @custom_vmap
    def send(leaves):
        sent = [
            leaf if dtype is None else lax.bitcast_convert_type(leaf, jnp.uint8)
            for leaf, dtype in zip(leaves, received.dtypes, strict=True)
        ]
        jax.debug.callback(received, *sent)
        return ()

    @send.def_vmap
    def batched(axis_size: int, in_batched: list, leaves: list):
        _send(
            received,
            [
                leaf if is_batched else jnp.broadcast_to(leaf, (axis_size, *leaf.shape))
                for leaf, is_batched in zip(leaves, in_batched[0], strict=True)
            ],
        )
        return (), ()

    send(leaves)


def _dtype_if_wide(leaf):
    """The dtype of an array leaf of 8 bytes an element (which x64 off would narrow), else None."""
    dtype = getattr(leaf, "dtype", None)
    if dtype is None or jnp.dtype(dtype).itemsize != 8 or jnp.dtype(dtype).kind == "c":
        return None
    return jnp.dtype(dtype)


@dataclasses.dataclass(frozen=True)
class _Received:
    """The host side of `host_call`: the leaves viewed back in their dtypes, then `fn`.
    Equal instances hash equal, so a compiled program that sends to them is reused."""

    fn: Callable
    tree: jtu.PyTreeDef
    dtypes: tuple

    def __call__(self, *sent):
        leaves = [
            np.asarray(leaf)
            if dtype is None
            else np.ascontiguousarray(np.asarray(leaf)).view(dtype)[..., 0]
            for leaf, dtype in zip(sent, self.dtypes, strict=True)
        ]
        self.fn(*jtu.tree_unflatten(self.tree, leaves))
