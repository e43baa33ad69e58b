"""A user's preconditioner P (an approximation of the inverse Hessian) for `LBFGS` and
`NonlinearCG`: how it is checked and how P v is formed."""

import sys
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
from jaxtyping import PyTree, Scalar

from .._misc import at_least_float32, leaves, tree_dot

# None, a callable v -> P v, a params-shaped pytree of positive diagonal entries, or a lineax
# operator.
Preconditioner = Any


def _lineax_operator(p) -> bool:
    """Whether `p` is a lineax operator; never imports lineax (whoever built one has)."""
    lineax = sys.modules.get("lineax")
    return lineax is not None and isinstance(p, lineax.AbstractLinearOperator)


def check_preconditioner(owner: str, p: Preconditioner) -> None:
    """Raise unless `p` is None, a lineax operator that lineax knows to be symmetric, a
    callable, or a pytree whose leaves are all floating arrays with positive finite entries
    (entries traced when the direction is built are not checked)."""
    if p is None or callable(p) and not _lineax_operator(p):
        return
    if _lineax_operator(p):
        if not sys.modules["lineax"].is_symmetric(p):
            raise ValueError(
                f"{owner}: a lineax preconditioner must be symmetric (positive definite): "
                "tag it with lineax.symmetric_tag and lineax.positive_semidefinite_tag."
            )
        return
    tree_leaves = jtu.tree_leaves(p)
    if not tree_leaves:
        raise ValueError(f"{owner}: a diagonal preconditioner must have at least one leaf.")
    for leaf in tree_leaves:
        floating = isinstance(leaf, jax.Array | np.ndarray) and jnp.issubdtype(
            leaf.dtype, jnp.floating
        )
        if not floating:
            raise TypeError(
                f"{owner}: preconditioner must be None, a callable v -> P v, a lineax "
                "operator, or a pytree like params of floating arrays (the diagonal of P); "
                f"got a leaf {leaf!r}."
            )
        if not isinstance(leaf, jax.core.Tracer):
            values = np.asarray(leaf)
            if not np.all(np.isfinite(values) & (values > 0)):
                raise ValueError(
                    f"{owner}: a diagonal preconditioner's entries must be positive and "
                    f"finite, got a leaf with minimum {np.min(values)}."
                )


def check_fits(owner: str, p: Preconditioner, params: PyTree) -> None:
    """Raise unless a diagonal `p` has the tree structure and the leaf shapes of `params`."""
    if p is None or callable(p) or _lineax_operator(p):
        return
    want, got = str(jtu.tree_structure(params)), str(jtu.tree_structure(p))
    shapes = [np.shape(x) for x in leaves(params)]
    if want != got or shapes != [np.shape(x) for x in leaves(p)]:
        raise ValueError(
            f"{owner}: a diagonal preconditioner must have the structure and shapes of "
            f"params: params {want} with shapes {shapes}, preconditioner {got} with shapes "
            f"{[np.shape(x) for x in leaves(p)]}."
        )


def _widened(v: PyTree) -> PyTree:
    return jtu.tree_map(lambda x: x.astype(at_least_float32(x.dtype)), v)


class Preconditioning(NamedTuple):
    """P as the directions use it: `P(v)`, and `quadratic_form(v, dtype)`, v'P v."""

    p: Preconditioner

    def __call__(self, v: PyTree) -> PyTree:
        """P v, each leaf in the dtype of v's leaf widened to at least float32 (P is applied
        in that precision)."""
        w = _widened(v)
        if _lineax_operator(self.p):
            given = jtu.tree_map(lambda x, sd: x.astype(sd.dtype), w, self.p.in_structure())
            result = self.p.mv(given)
        elif callable(self.p):
            result = self.p(w)
        else:
            return jtu.tree_map(lambda d, x: x * d.astype(x.dtype), self.p, w)
        return jtu.tree_map(lambda r, x: jnp.asarray(r).astype(x.dtype), result, w)

    def quadratic_form(self, v: PyTree, dtype, pv: PyTree | None = None) -> Scalar:
        """v'P v in `dtype` (as `tree_dot`), from `pv` = P v where given and P is not diagonal. A
        diagonal P gives |u|^2, u = sqrt(P) v: v'v to the last bit for the identity (v'(P v)
        accumulates in another order on XLA's CPU)."""
        if callable(self.p) or _lineax_operator(self.p):
            return tree_dot(v, self(v) if pv is None else pv, dtype)

        def root(d, x):
            x = x.astype(at_least_float32(x.dtype))
            return x * jnp.sqrt(d.astype(x.dtype))

        u = jtu.tree_map(root, self.p, v)
        return tree_dot(u, u, dtype)


def prepared(p: Preconditioner) -> Preconditioning | None:
    """`p` ready to apply, or None where there is no preconditioner."""
    return None if p is None else Preconditioning(p)
