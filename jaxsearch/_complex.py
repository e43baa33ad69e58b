"""Complex parameters, optimised as pairs of reals: a real f of z = x + iy is a real function of (x,
y). `run`, `step` and `init` hand the solver the *real view* of complex params, a leaf of shape s
becoming a real one of shape (*s, 2) holding (x, y) (complex64: float32; complex128: float64); fn
gets x + iy, and results are turned back. The state is the real view's; `result.grad` is df/dx +
i df/dy, the direction of steepest ascent (`params - t * result.grad` descends), where `jax.grad`
returns the conjugate."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
from jax import lax


def is_complex(leaf) -> bool:
    """Whether `leaf` is an array (JAX or NumPy) of a complex dtype."""
    # checked on every call: the dtype first, the (slower) array test on complex ones only
    kind = getattr(getattr(leaf, "dtype", None), "kind", None)
    return kind == "c" and eqx.is_array(leaf)


class RealView(eqx.Module):
    """Which leaves of params are complex: the tree structure of params and, per leaf in
    `jax.tree.leaves` order, True where it is a complex array. Static: two equal views share
    compiled programs."""

    treedef: jtu.PyTreeDef = eqx.field(static=True)
    mask: tuple[bool, ...] = eqx.field(static=True)

    @staticmethod
    def of(params) -> "RealView | None":
        """The view of params, or None where no leaf is complex (params go on as they are)."""
        found, treedef = jtu.tree_flatten(params)
        mask = tuple(is_complex(leaf) for leaf in found)
        return RealView(treedef, mask) if any(mask) else None

    def _kinds(self):
        return jtu.tree_unflatten(self.treedef, self.mask)

    def _map(self, f, tree):
        """f on each leaf of `tree` (like params, None allowed) the view marks complex; others as
        they are."""
        return jtu.tree_map(
            lambda leaf, kind: f(leaf) if kind and leaf is not None else leaf,
            tree,
            self._kinds(),
            is_leaf=lambda x: x is None,
        )

    def to_real(self, tree):
        """`tree` with each complex leaf z as jnp.stack([z.real, z.imag], -1)."""
        return self._map(lambda z: jnp.stack([jnp.real(z), jnp.imag(z)], axis=-1), tree)

    def to_complex(self, tree):
        """The inverse of `to_real`: each real pair (x, y) on the last axis as x + iy."""
        return self._map(lambda v: lax.complex(v[..., 0], v[..., 1]), tree)


def _to_real(view: RealView, params):
    return view.to_real(params)


def _to_complex(view: RealView, trees: tuple) -> tuple:
    return tuple(view.to_complex(tree) for tree in trees)


# Each conversion compiled once per view and avals: `jax.jit` (view static) where every leaf is a
# `jax.Array` (a cheap dispatch), else `eqx.filter_jit`.
_PLAIN = {f: jax.jit(f, static_argnums=0) for f in (_to_real, _to_complex)}
_FILTERED = {f: eqx.filter_jit(f) for f in (_to_real, _to_complex)}


def _compiled(f, view: RealView, tree):
    plain = all(isinstance(leaf, jax.Array) for leaf in jtu.tree_leaves(tree))
    return (_PLAIN if plain else _FILTERED)[f](view, tree)


def real_params(view: RealView, params):
    """`view.to_real(params)`, compiled (an eager call is one dispatch)."""
    return _compiled(_to_real, view, params)


def complex_params(view: RealView, trees: tuple) -> tuple:
    """`view.to_complex` of each tree of `trees`, compiled together."""
    return _compiled(_to_complex, view, trees)


class OnRealView(eqx.Module):
    """fn of complex params as a function of their real view: `fn(view.to_complex(p), *args)`.
    Equal for equal fn and view, so compiled programs are shared as for fn itself."""

    fn: object
    view: RealView

    def __call__(self, params, *args):
        return self.fn(self.view.to_complex(params), *args)  # type: ignore[operator]


def check_complex(solver, params, bounds) -> "RealView | None":
    """The real view of params (None: no complex leaf), refusing bounds (undefined for complex
    numbers) and fn's own gradient (its convention could not be checked)."""
    view = RealView.of(params)
    if view is None:
        return None
    if bounds is not None:
        raise TypeError(
            "bounds cannot constrain complex params: a box lower <= z <= upper is not "
            "defined for complex numbers. Pass the real and imaginary parts as real leaves "
            "to bound them."
        )
    if solver.value_and_grad:
        raise TypeError(
            "Solver(value_and_grad=True) does not take complex params: let jaxsearch "
            "differentiate fn, or pass the real and imaginary parts as real leaves with "
            "their gradient."
        )
    return view
