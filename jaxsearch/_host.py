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
    """`fn(*args)` on the host by `jax.debug.callback`, each array leaf a NumPy array of its own
    dtype and bits: a bare callback takes the x64 setting of the thread running it, which may
    round a float64 to float32, so 64-bit leaves travel as bytes. Under `jax.vmap`, `fn` is
    called once for the batch, each leaf with a leading axis per batching vmap (outermost first;
    unbatched leaves broadcast). No derivative reaches the host (`lax.stop_gradient`)."""
    leaves, tree = jtu.tree_flatten(args)
    leaves = [lax.stop_gradient(jnp.asarray(leaf)) for leaf in leaves]
    dtypes = tuple(_dtype_if_wide(leaf) for leaf in leaves)
    _send(_Received(fn, tree, dtypes), leaves)


def _send(received: "_Received", leaves: list) -> None:
    """`received(*leaves)` from the program; under vmap the rule sends the batch, its axis first, by
    a call an outer vmap batches in turn."""

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
