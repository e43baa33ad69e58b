"""A pytree as one flat vector and back, for directions that work with matrices (`BFGS`)."""

import jax.numpy as jnp
import jax.tree_util as jtu
from jaxtyping import Array, PyTree

from .._misc import at_least_float32, leaves, widest_float


def flatten_tree(tree: PyTree, dtype) -> Array:
    """The leaves of `tree` (in `jax.tree.leaves` order), ravelled, cast to `dtype` and
    joined into one vector; `unflatten_tree` undoes it."""
    return jnp.concatenate([jnp.ravel(x).astype(dtype) for x in leaves(tree)])


def unflatten_tree(flat: Array, like: PyTree) -> PyTree:
    """Inverse of `flatten_tree`: pieces of `flat` with the structure, shapes and dtypes of
    `like`'s leaves (each cast back to its leaf's dtype)."""
    pieces, offset = [], 0
    for x in leaves(like):
        pieces.append(flat[offset : offset + x.size].reshape(x.shape).astype(x.dtype))
        offset += x.size
    return jtu.tree_unflatten(jtu.tree_structure(like), pieces)


def jacobian_dtype(diff: PyTree, residuals: PyTree):
    """The dtype of a dense least-squares direction's matrices: the widest of the params'
    (`diff`'s) and the residuals' float dtypes (arrays or abstract values), at least float32."""
    found = jtu.tree_leaves((diff, residuals))
    return at_least_float32(widest_float(*(jnp.result_type(a) for a in found)))
