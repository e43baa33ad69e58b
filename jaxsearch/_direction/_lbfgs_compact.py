"""L-BFGS's compact representation (Byrd, Nocedal & Schnabel, "Representations of
quasi-Newton matrices and their use in limited memory methods", Math. Programming 63, 1994,
eq. 3.13; Nocedal & Wright, eq. 7.24): d = -H g with no loop over the memory."""

import functools
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
from jax import lax
from jaxtyping import Array, Bool, Int, PyTree, Scalar

from .._misc import (
    at_least_float32,
    diagonal,
    explicit_replicated_sharding,
    leaves,
    scalar,
    select,
    widest_float,
)
from ._lbfgs_memory import AbstractLBFGSState
from ._slots import in_order, slot


class CompactLBFGSState(AbstractLBFGSState):
    """The state of `LBFGS`'s compact form (`form="compact"`, or "auto" on a GPU or for large
    params): the memory; `s_dot_y` (m, m), s_i'y_j in buffer order, current where pair i was
    stored no later than pair j (R's entries, the only ones read); `y_dot_y` (m, m), y_i'y_j;
    `pending`, pairs stored since both were brought up to date; `s_dot_grad`, `y_dot_grad` (m,),
    S'g and Y'g at the last `direction`'s g, and `follows` while the next pair's y starts there
    (`gradient_replaced` clears it), so S'y = S'g_new - S'g; all three None for gradients under
    32 bits (`_by_differences`)."""

    made_by: ClassVar[str] = 'js.LBFGS(form="compact")'  # named where a state is refused

    s: PyTree
    y: PyTree
    rho: Array
    s_dot_y: Array
    y_dot_y: Array
    gamma: Scalar
    count: Int[Array, ""]
    head: Int[Array, ""]
    pending: Int[Array, ""]
    s_dot_grad: Array | None
    y_dot_grad: Array | None
    follows: Bool[Array, ""] | None

    def direction(self, grad, dtype, precondition=None):
        """H g = gamma g + S p - gamma Y R^-1 a, pairs in storage order, R the upper triangle of
        S'Y, D its diagonal, a = S'g, b = Y'g, p = R^-T ((D + gamma Y'Y) R^-1 a - gamma b): one
        pass over each buffer (with the newest column, `_brought_up_to_date`), two triangular
        solves, one pass back. No preconditioner."""
        assert precondition is None
        m = self.rho.shape[0]
        vectors = [grad] if self.follows is not None else [grad, self._newest_y()]
        with_s = _memory_times(self.s, vectors, dtype)
        with_y = _memory_times(self.y, vectors, dtype)
        state = self._brought_up_to_date(with_s, with_y, dtype)

        # The slots in the order their pairs were stored: position k < count holds the k-th
        # oldest pair. Positions >= count hold none; they get an identity row and column in
        # R and zeros elsewhere, so that their coefficients are zero.
        positions = jnp.arange(m, dtype=jnp.int32)
        order = (state.head - state.count + positions) % m
        valid = positions < state.count
        both = valid[:, None] & valid[None, :]
        chronological = lambda matrix: in_order(in_order(matrix, order).T, order).T  # noqa: E731
        s_dot_y = chronological(state.s_dot_y)
        upper = both & (positions[:, None] <= positions[None, :])
        identity = jnp.eye(m, dtype=dtype)
        r = jnp.where(upper, s_dot_y, identity)
        d_diagonal = jnp.where(valid, diagonal(s_dot_y), 0)
        y_dot_y = jnp.where(both, chronological(state.y_dot_y), 0)
        a = jnp.where(valid, in_order(with_s[:, 0], order), 0)
        b = jnp.where(valid, in_order(with_y[:, 0], order), 0)
        gamma = state.gamma
        solve = functools.partial(_solve_upper, r)
        r_inv_a = solve(a, False)
        y_dot_y_r_inv_a = jnp.matmul(y_dot_y, r_inv_a, precision="highest")
        middle = d_diagonal * r_inv_a + gamma * y_dot_y_r_inv_a - gamma * b
        p = solve(middle, True)
        q = -gamma * r_inv_a
        # Back from positions to slots: slot j takes position (j - head + count) % m's coefficient,
        # a reordering (`in_order`), not a scatter (a kernel of its own).
        position = (positions - state.head + state.count) % m
        p, q = in_order(p, position), in_order(q, position)

        def leaf(g, s, y):
            work = at_least_float32(s.dtype)
            back = lambda c, buffer: jnp.tensordot(  # noqa: E731
                c.astype(work), buffer.astype(work), axes=1, precision="highest"
            )
            hg = gamma.astype(work) * g.astype(work) + back(p, s) + back(q, y)
            return (-hg).astype(g.dtype)

        d = jtu.tree_map(leaf, grad, state.s, state.y)
        return d, state

    def update(self, s, y, dtype, curvature_eps, accept, precondition=None):
        assert precondition is None  # LBFGS refuses a preconditioner with this form
        state, keep, sy, yy = self.offered(s, y, dtype, curvature_eps, accept)
        s_dot_y, y_dot_y = self.s_dot_y, self.y_dot_y
        if self.follows is not None:  # the new pair's own s'y and y'y, for `_by_differences`
            rows, columns = _indices(s_dot_y.shape[0])
            new = keep & (rows == self.head) & (columns == self.head)
            s_dot_y, y_dot_y = jnp.where(new, sy, s_dot_y), jnp.where(new, yy, y_dot_y)
        # `pending` counts one more where the pair is kept, up to 2 (several).
        pending = jnp.where(keep, jnp.minimum(self.pending + 1, 2), self.pending)
        return eqx.tree_at(
            lambda st: (st.s_dot_y, st.y_dot_y, st.pending),
            state,
            (s_dot_y, y_dot_y, pending.astype(jnp.int32)),
        )

    def reset(self):
        state = self.emptied()
        return eqx.tree_at(lambda st: st.pending, state, state.pending * 0)

    def gradient_replaced(self):
        """The products with the last gradient no longer give S'y for the next pair: its y
        will not start there."""
        if self.follows is None:
            return self
        return eqx.tree_at(lambda st: st.follows, self, jnp.zeros_like(self.follows))

    def _newest_y(self) -> PyTree:
        newest = (self.head - 1) % self.rho.shape[0]
        return jtu.tree_map(lambda b: slot(b, newest), self.y)

    def _brought_up_to_date(self, with_s, with_y, dtype) -> "CompactLBFGSState":
        """S'Y and Y'Y with the newest pair's column (and Y'Y's row), from this `direction`'s (m, k)
        products `with_s`, `with_y` of each buffer with g (column 1: with the newest y, where no
        products with the last gradient are kept); rebuilt after several pairs since the last
        `direction` (never from the solver). S'Y's newest row lies below R's diagonal for good:
        never computed. `_by_differences`, one pair since: S'y = S'g - S'g_last, Y'y = Y'g -
        Y'g_last, the pair's own s'y, y'y from `update`, no pass over the memory; after
        `gradient_replaced` the memory is multiplied by y."""
        newest = (self.head - 1) % self.rho.shape[0]

        def fold(st, s_dot_y_new, y_dot_y_new):
            rows, columns = _indices(st.s_dot_y.shape[0])
            return (
                jnp.where(columns == newest, s_dot_y_new[:, None], st.s_dot_y),
                jnp.where(
                    rows == newest,
                    y_dot_y_new[None, :],
                    jnp.where(columns == newest, y_dot_y_new[:, None], st.y_dot_y),
                ),
            )

        def rebuild(st):
            return _memory_products(st.s, st.y, dtype), _memory_products(st.y, st.y, dtype)

        if self.follows is None:  # the products with y came with those with g
            given = lambda st: fold(st, with_s[:, 1], with_y[:, 1])  # noqa: E731
            s_dot_y, y_dot_y = lax.cond(self.pending > 1, rebuild, given, self)
            return eqx.tree_at(
                lambda st: (st.s_dot_y, st.y_dot_y, st.pending),
                self,
                (s_dot_y, y_dot_y, self.pending * 0),
            )

        def by_differences(st):  # also where no pair was stored: the matrices stay
            at_newest = lax.iota(jnp.int32, st.s_dot_grad.shape[0]) == newest
            own_s, own_y = (slot(slot(mat, newest), newest) for mat in (st.s_dot_y, st.y_dot_y))
            s_column = jnp.where(at_newest, own_s, with_s[:, 0] - st.s_dot_grad)
            y_column = jnp.where(at_newest, own_y, with_y[:, 0] - st.y_dot_grad)
            return select(st.pending == 1, fold(st, s_column, y_column), (st.s_dot_y, st.y_dot_y))

        def by_products(st):
            y_new = st._newest_y()
            products = (_memory_times(b, [y_new], dtype)[:, 0] for b in (st.s, st.y))
            return fold(st, *products)

        one = (self.pending == 0) | ((self.pending == 1) & self.follows)
        branch = jnp.where(one, 0, jnp.minimum(self.pending, 2))
        s_dot_y, y_dot_y = lax.switch(branch, (by_differences, by_products, rebuild), self)
        return eqx.tree_at(
            lambda st: (
                st.s_dot_y,
                st.y_dot_y,
                st.pending,
                st.s_dot_grad,
                st.y_dot_grad,
                st.follows,
            ),
            self,
            (
                s_dot_y,
                y_dot_y,
                self.pending * 0,
                with_s[:, 0],
                with_y[:, 0],
                jnp.ones_like(self.follows),
            ),
        )


def init(memory: dict, params: PyTree, dtype) -> CompactLBFGSState:
    """The compact form's state of the empty `memory` (`empty_memory`) for `params`."""
    m = memory["rho"].shape[0]
    differences = _by_differences(params)
    return CompactLBFGSState(
        **memory,
        s_dot_y=jnp.zeros((m, m), dtype),
        y_dot_y=jnp.zeros((m, m), dtype),
        pending=scalar(0, jnp.int32),
        s_dot_grad=jnp.zeros((m,), dtype) if differences else None,
        y_dot_grad=jnp.zeros((m,), dtype) if differences else None,
        follows=jnp.array(False) if differences else None,
    )


def _memory_times(buffers: PyTree, vectors: list[PyTree], dtype) -> Array:
    """The (m, k) matrix [<b_i, v_k>] over `buffers`' slots and the k trees of `vectors`, summed
    over leaves, in at least float32 at full precision (no TF32): one matrix-vector product per
    vector, which beats one product with the vectors stacked on a CPU and a GPU
    (docs/benchmarks.md, benchmarks/studies/lbfgs_products.py)."""
    total = jnp.zeros((), dtype)
    for i, b in enumerate(leaves(buffers)):
        work = at_least_float32(b.dtype)
        axes = tuple(range(b.ndim - 1))  # contract every param axis, with no reshape
        dims = ((tuple(a + 1 for a in axes), axes), ((), ()))
        product = functools.partial(
            lax.dot_general,
            b.astype(work),
            dimension_numbers=dims,
            precision="highest",
            out_sharding=explicit_replicated_sharding(b),
        )
        part = jnp.stack([product(leaves(v)[i].astype(work)) for v in vectors], axis=-1)
        total = total + part.astype(dtype)
    return total


def _memory_products(left: PyTree, right: PyTree, dtype) -> Array:
    """The (m, m) matrix [<l_i, r_j>] of two memories, summed over leaves, in at least float32. Only
    a rebuild (never from the solver) calls it, so it is written for peak memory: a matrix
    product on a CPU (fused, XLA's CPU compiler keeps the m x m x n product:
    tests/solver/test_engine.py); elsewhere a product and sum XLA fuses into one reduction (as
    matrix products XLA's GPU compiler pads [S; Y] into one cuBLAS product:
    benchmarks/studies/hlo_anatomy.py)."""
    total = jnp.zeros((), dtype)
    for a, b in zip(leaves(left), leaves(right), strict=True):
        work = at_least_float32(widest_float(a.dtype, b.dtype))
        a, b = a.astype(work), b.astype(work)
        if jax.default_backend() == "cpu":
            axes = tuple(range(1, a.ndim))
            part = lax.dot_general(
                a,
                b,
                ((axes, axes), ((), ())),
                precision="highest",
                out_sharding=explicit_replicated_sharding(a),
            )
        else:
            part = jnp.sum(a[:, None] * b[None, :], axis=tuple(range(2, a.ndim + 1)))
        total = total + part.astype(dtype)
    return total


def _solve_upper(r: Array, b: Array, transpose: bool) -> Array:
    """x with r x = b (`transpose`: r'x = b) for an upper triangular m x m `r`, by substitution
    written out (m is static): scalar work XLA fuses, where LAPACK's trsm is a library call (and
    crashed XLA's CPU compiler)."""
    m = b.shape[0]
    x: dict[int, Array] = {}
    for i in range(m) if transpose else reversed(range(m)):
        # The solved entries: those before i (r' is lower triangular), else those after.
        done = range(0, i) if transpose else range(i + 1, m)
        part = slice(done.start, done.stop)
        coefficients = r[part, i] if transpose else r[i, part]
        partial = coefficients @ jnp.stack([x[j] for j in done]) if done else 0
        x[i] = (b[i] - partial) / r[i, i]
    return jnp.stack([x[i] for i in range(m)])


def _indices(m: int) -> tuple[Array, Array]:
    """Row and column index of each entry of an m x m matrix: S'Y and Y'Y take a new column, row or
    entry by a select on these, which fuses with the work around it (a scatter or dynamic update
    is a kernel of its own)."""
    rows = lax.broadcasted_iota(jnp.int32, (m, m), 0)
    return rows, lax.broadcasted_iota(jnp.int32, (m, m), 1)


def _by_differences(grad: PyTree) -> bool:
    """Whether the newest pair's S'y, Y'y come from the products with the gradients (S'y = S'g -
    S'g_last) rather than a pass over the memory (`_memory_times`): for gradients of at least 32
    bits (a 16-bit y is rounded more coarsely than those differences)."""
    return all(jnp.finfo(leaf.dtype).bits >= 32 for leaf in leaves(grad))
