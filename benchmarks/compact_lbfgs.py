"""L-BFGS in the compact representation (Byrd, Nocedal & Schnabel, 1994), as a jaxsearch
direction, to measure inside the solver against `js.LBFGS`'s two-loop recursion (issue 5;
`benchmarks/lbfgs_forms.py --in-solver`). Not part of the library: on the CPU it measured it
loses (see docs/benchmarks.md), and L-BFGS-B will need the same representation."""

import equinox as eqx
import jax.numpy as jnp
import jax.tree_util as jtu
from jax import lax
from jaxtyping import Array, Int, PyTree, Scalar

from jaxsearch import LBFGS, AbstractDirection
from jaxsearch._misc import at_least_float32, dtype_eps, leaves, scalar, tree_dot, widest_float


class CompactLBFGSState(eqx.Module):
    s: PyTree  # each leaf has a leading (memory_size,) axis: a circular buffer of steps
    y: PyTree  # ... and of gradient differences
    s_dot_y: Array  # (memory_size, memory_size): [i, j] = s_i'y_j, slots in buffer order
    y_dot_y: Array  # (memory_size, memory_size): [i, j] = y_i'y_j
    gamma: Scalar  # initial inverse-Hessian scale s'y / y'y of the newest pair
    count: Int[Array, ""]  # number of valid pairs, <= memory_size
    head: Int[Array, ""]  # slot the next pair is written to
    pending: Int[Array, ""]  # pairs stored since s_dot_y and y_dot_y were last brought up to date


def _memory_times(buffers: PyTree, *vectors: PyTree, dtype) -> list[Array]:
    """For each tree v in `vectors`, the (m,) vector [<b_i, v>] over the slots i of `buffers`,
    summed over leaves, each leaf accumulated in at least float32 by a matrix-vector product
    (which, unlike a product with several vectors at once, neither copies nor stacks)."""
    totals = []
    for v in vectors:
        total = jnp.zeros((), dtype)
        for b, x in zip(leaves(buffers), leaves(v), strict=True):
            work = at_least_float32(b.dtype)
            part = b.reshape(b.shape[0], -1).astype(work) @ x.reshape(-1).astype(work)
            total = total + part.astype(dtype)
        totals.append(total)
    return totals


def _memory_products(left: PyTree, right: PyTree, dtype) -> Array:
    """The (m, m) matrix [<l_i, r_j>] of two memories, summed over leaves."""
    total = jnp.zeros((), dtype)
    for a, b in zip(leaves(left), leaves(right), strict=True):
        work = at_least_float32(widest_float(a.dtype, b.dtype))
        a, b = a.reshape(a.shape[0], -1).astype(work), b.reshape(b.shape[0], -1).astype(work)
        total = total + (a @ b.T).astype(dtype)
    return total


def _solve_triangular(r: Array, b: Array, order: Array, transpose: bool) -> Array:
    """x with r x = b (`transpose`: r'x = b), where r is upper triangular once its rows and
    columns are permuted into `order` (slots, oldest pair first), by substitution in that
    order: m small dot products, where LAPACK's trsm would be a library call (and on a GPU a
    kernel launch per call) for an m x m system."""
    m = b.shape[0]

    def substitute(k, x):
        i = order[k] if transpose else order[m - 1 - k]
        known = r[:, i] if transpose else r[i]  # entries of x not yet solved for are zero
        return x.at[i].set((b[i] - known @ x) / r[i, i])

    return lax.fori_loop(0, m, substitute, jnp.zeros_like(b))


class CompactLBFGS(AbstractDirection):
    """L-BFGS direction in compact form (Byrd, Nocedal & Schnabel, 1994, eq. 3.13).

    Keeps the last `memory_size` pairs (s, y) in buffers with a leading `(memory_size,)` axis
    per leaf, and their inner products S'Y and Y'Y. With the pairs in the order they were
    stored, R the upper triangle of S'Y, D its diagonal and gamma = s'y / y'y of the newest
    pair (Nocedal & Wright eq. 7.20), the direction is d = -H g with

        H g = gamma g + S p - gamma Y R^-1 a,
        p = R^-T ((D + gamma Y'Y) R^-1 a - gamma b),   a = S'g,  b = Y'g.

    This is the matrix of the two-loop recursion (Nocedal & Wright, algorithm 7.4), computed
    as two matrix-vector products with the memory, m x m triangular solves and two products
    back, instead of 4m vector updates. `update` only writes the pair: reading the memory
    there, before writing it in place, made XLA copy it. The next `compute` brings S'Y and
    Y'Y up to date with three more matrix-vector products (the newest s and y against the
    memory); after several `update`s without a `compute` it rebuilds both.

    A pair is stored only if it is finite after rounding to the memory dtype and satisfies the
    curvature guard s'y > eps |s| |y|, with `eps` the machine epsilon of the least precise
    memory dtype unless given; this keeps the implicit inverse Hessian positive definite.

    Memory leaves have the dtype of their param leaf, or at least `memory_dtype` when given
    (e.g. `memory_dtype=jnp.float32` for bfloat16 or float16 params). Inner products accumulate
    in at least float32 and are kept in the solver's scalar dtype, never float16.
    """

    memory_size: int = eqx.field(static=True, default=10)
    memory_dtype: object = eqx.field(static=True, default=None)
    curvature_eps: float | None = eqx.field(static=True, default=None)

    def __check_init__(self):  # the same settings as js.LBFGS, checked the same way
        LBFGS.__check_init__(self)

    def _memory_dtype(self, dtype):
        return LBFGS._memory_dtype(self, dtype)

    def init(self, params, dtype) -> CompactLBFGSState:
        m = self.memory_size

        def buffer(x):
            return jnp.zeros((m, *x.shape), self._memory_dtype(x.dtype))

        return CompactLBFGSState(
            s=jtu.tree_map(buffer, params),
            y=jtu.tree_map(buffer, params),
            s_dot_y=jnp.zeros((m, m), dtype),
            y_dot_y=jnp.zeros((m, m), dtype),
            gamma=scalar(1, dtype),
            count=scalar(0, jnp.int32),
            head=scalar(0, jnp.int32),
            pending=scalar(0, jnp.int32),
        )

    def compute(self, state, grad, dtype, hvp=None):
        m = self.memory_size
        # One pass over each buffer: the products with g, and the newest pair's products with
        # the memory, which `update` leaves to this pass (it would be a pass of its own there).
        newest = (state.head - 1) % m
        take = lambda b: b[newest]  # noqa: E731
        s_new, y_new = jtu.tree_map(take, state.s), jtu.tree_map(take, state.y)
        a, s_dot_y_new = _memory_times(state.s, grad, y_new, dtype=dtype)
        b, y_dot_s_new, y_dot_y_new = _memory_times(state.y, grad, s_new, y_new, dtype=dtype)

        def fold_newest(st):
            def fold(old, col, row):
                return old.at[:, newest].set(col).at[newest, :].set(row)

            return (
                fold(st.s_dot_y, s_dot_y_new, y_dot_s_new),
                fold(st.y_dot_y, y_dot_y_new, y_dot_y_new),
            )

        def rebuild(st):  # several pairs stored without a `compute` in between
            return _memory_products(st.s, st.y, dtype), _memory_products(st.y, st.y, dtype)

        branch = jnp.minimum(state.pending, 2)
        matrices = lax.switch(
            branch, [lambda st: (st.s_dot_y, st.y_dot_y), fold_newest, rebuild], state
        )
        state = eqx.tree_at(
            lambda st: (st.s_dot_y, st.y_dot_y, st.pending), state, (*matrices, state.pending * 0)
        )

        # Slots in the order their pairs were stored; those at positions >= count hold no
        # pair and get an identity row and column in R and zeros elsewhere, so that their
        # coefficients are zero.
        slots = jnp.arange(m, dtype=jnp.int32)
        oldest = state.head - state.count
        order = (oldest + slots) % m
        position = (slots - oldest) % m
        valid = position < state.count
        both = valid[:, None] & valid[None, :]
        upper = both & (position[:, None] <= position[None, :])
        r = jnp.where(upper, state.s_dot_y, jnp.eye(m, dtype=dtype))
        diagonal = jnp.where(valid, jnp.diagonal(state.s_dot_y), 0)
        y_dot_y = jnp.where(both, state.y_dot_y, 0)
        a, b = jnp.where(valid, a, 0), jnp.where(valid, b, 0)
        gamma = state.gamma
        r_inv_a = _solve_triangular(r, a, order, transpose=False)
        middle = diagonal * r_inv_a + gamma * (y_dot_y @ r_inv_a) - gamma * b
        # H g = gamma g + sum_i p_i s_i + q_i y_i, over the slots i.
        p = _solve_triangular(r, middle, order, transpose=True)
        q = -gamma * r_inv_a

        def leaf(g, s, y):
            work = at_least_float32(s.dtype)
            combine = lambda c, b: jnp.tensordot(c.astype(work), b.astype(work), axes=1)  # noqa: E731
            hg = gamma.astype(work) * g.astype(work) + combine(p, s) + combine(q, y)
            return (-hg).astype(g.dtype)

        d = jtu.tree_map(leaf, grad, state.s, state.y)
        return d, state.count > 0, state

    def update(self, state, s, y, dtype, accept=True) -> CompactLBFGSState:
        s = jtu.tree_map(lambda si, b: si.astype(b.dtype), s, state.s)
        y = jtu.tree_map(lambda yi, b: yi.astype(b.dtype), y, state.y)
        sy = tree_dot(s, y, dtype)
        yy = tree_dot(y, y, dtype)
        ss = tree_dot(s, s, dtype)
        eps = dtype_eps(state.s) if self.curvature_eps is None else self.curvature_eps
        guard = sy > eps * jnp.sqrt(ss) * jnp.sqrt(yy)
        keep = guard & jnp.isfinite(sy) & jnp.isfinite(yy) & jnp.isfinite(ss) & (yy > 0) & accept

        def write(buffer, new):
            return buffer.at[state.head].set(jnp.where(keep, new, buffer[state.head]))

        m = self.memory_size
        return CompactLBFGSState(
            s=jtu.tree_map(write, state.s, s),
            y=jtu.tree_map(write, state.y, y),
            s_dot_y=state.s_dot_y,
            y_dot_y=state.y_dot_y,
            gamma=jnp.where(keep, sy / yy, state.gamma).astype(dtype),
            count=jnp.where(keep, jnp.minimum(state.count + 1, m), state.count).astype(jnp.int32),
            head=jnp.where(keep, (state.head + 1) % m, state.head).astype(jnp.int32),
            pending=state.pending + keep.astype(jnp.int32),
        )

    def reset(self, state) -> CompactLBFGSState:
        return eqx.tree_at(lambda st: (st.count, st.head), state, (state.count * 0, state.head * 0))
