"""Limited-memory BFGS (Nocedal, 1980; Liu & Nocedal, 1989)."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
from jax import lax
from jaxtyping import Array, Bool, Int, PyTree, Scalar

from .._bounds import cauchy_point, compact_representation, subspace_minimisation
from .._misc import (
    as_int,
    at_least_float32,
    check_count,
    diagonal,
    dtype_eps,
    explicit_replicated_sharding,
    leaves,
    scalar,
    select,
    tree_dot,
    tree_norm,
    widest_float,
    zeros_sharded_like,
)
from ._base import AbstractDirection, DirectionInfo, no_limit


class LBFGSState(eqx.Module):
    s: PyTree  # each leaf has a leading (memory_size,) axis: a circular buffer of steps
    y: PyTree  # ... and of gradient differences
    rho: Array  # (memory_size,) 1 / s'y, in the scalar dtype (never float16: it would overflow)
    # (memory_size, memory_size): [i, j] = s_i'y_j, slots in buffer order, kept up to date where
    # pair i was stored no later than pair j (R's entries: the compact form reads no others)
    s_dot_y: Array | None
    y_dot_y: Array | None  # (memory_size, memory_size): [i, j] = y_i'y_j
    gamma: Scalar  # initial inverse-Hessian scale s'y / y'y of the newest pair
    count: Int[Array, ""]  # number of valid pairs, <= memory_size
    head: Int[Array, ""]  # slot the next pair is written to
    pending: Int[Array, ""] | None  # pairs stored since s_dot_y, y_dot_y were brought up to date
    # s_dot_y, y_dot_y and pending are None where the form in use is the two-loop recursion,
    # which never reads them (three arrays fewer to carry through the loop and to return)
    # (m,) S'g and Y'g at the last `compute`'s gradient g; `follows` while that g is where the
    # next pair's y starts (`gradient_replaced` clears it), so that S'y = S'g_new - S'g; all
    # three None unless the compact form takes S'y so (`_by_differences`: on a CPU)
    s_dot_grad: Array | None
    y_dot_grad: Array | None
    follows: Bool[Array, ""] | None


_FORMS = ("auto", "two_loop", "compact")
# Where "auto" takes the compact form on a CPU (benchmarks/engine.py, extended Rosenbrock in
# float32, whole runs): the two forms measured equal at n = 1e3, the compact one 0.8 times
# the two-loop recursion's wall at 1e4 and 1e6, and 1.6 times it at n = 2.
COMPACT_FROM = 5000


def _is_floating(dtype) -> bool:
    try:
        return bool(jnp.issubdtype(dtype, jnp.floating))
    except TypeError:  # not a dtype at all, e.g. "bogus"
        return False


def _memory_times(buffers: PyTree, vectors: list[PyTree], dtype) -> Array:
    """The (m, k) matrix [<b_i, v_k>] over the slots i of `buffers` and the k trees of
    `vectors`, summed over leaves, accumulated in at least float32 at full precision (no TF32
    on a GPU): one matrix-vector product per vector. (One product with the vectors stacked
    measured slower on both backends: XLA's CPU product of an (m, n) and an (n, k) matrix runs
    several times slower than k of them, and on an H200 the stacking copies the vectors and
    the skinny product runs below bandwidth: extended Rosenbrock n = 1e7, 71 ms against 47 ms,
    `benchmarks/lbfgs_products.py`.)"""
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
    """The (m, m) matrix [<l_i, r_j>] of two memories, summed over leaves, accumulated in at
    least float32. Only a rebuild, which the solver never takes, calls it, so it is written for
    the memory it costs the program: a matrix product on a CPU; elsewhere a product and a sum
    that XLA fuses into one reduction. (As matrix products, XLA's GPU compiler merged S'Y and
    Y'Y into one cuBLAS product of [S; Y] padded to a multiple of its split: 69 n-vectors of
    peak memory for the compact form's run at n = 1e6 on an H200 against 32 fused,
    `benchmarks/hlo_anatomy.py`; fused, XLA's CPU compiler keeps the m x m x n product: 126
    n-vectors of temporaries at m = 10 against 29 as matrix products, tests/test_engine.py.)"""
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
    """x with r x = b (`transpose`: r'x = b) for an upper triangular m x m `r`, by
    substitution written out (m is static): small scalar work that XLA fuses, where LAPACK's
    trsm is a library call (and crashed the XLA CPU compiler twice; CHANGELOG.md)."""
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
    """The row and the column index of each entry of an m x m matrix. S'Y and Y'Y take a new
    column, row or entry by a select on these (not a scatter or a dynamic update, which XLA
    compiles as a kernel of its own each, where a select fuses with the work around it:
    188 fusions -> 170 in the compact form's run; CHANGELOG.md, "Engineering history", round 11)."""
    rows = lax.broadcasted_iota(jnp.int32, (m, m), 0)
    return rows, lax.broadcasted_iota(jnp.int32, (m, m), 1)


def _count_up(pending, keep):
    """`pending` after a pair is offered: one more where it is kept, at most 2 (several)."""
    return jnp.where(keep, jnp.minimum(pending + 1, 2), pending).astype(jnp.int32)


def _by_differences(grad: PyTree) -> bool:
    """Whether the compact form takes the newest pair's S'y and Y'y from its products with the
    gradients (y = g - g_last, so S'y = S'g - S'g_last) rather than multiplying the memory by
    y, a pass over the memory of its own (`_memory_times`): for gradients of at least 32 bits
    (y computed in 16 bits is rounded more coarsely than the products, whose differences would
    then not be those of the y the memory holds)."""
    return all(jnp.finfo(leaf.dtype).bits >= 32 for leaf in leaves(grad))


def _newest_y(state: LBFGSState) -> PyTree:
    newest = (state.head - 1) % state.rho.shape[0]
    return jtu.tree_map(lambda b: lax.dynamic_index_in_dim(b, newest, keepdims=False), state.y)


def _bring_up_to_date(state: LBFGSState, with_s, with_y, dtype):
    """S'Y and Y'Y with the newest pair's column (Y'Y's row too: it is symmetric), from this
    `compute`'s products of each buffer with its gradient g (the (m, k) `with_s`, `with_y`;
    where the state keeps no products with the last gradient, column 1 holds the products with
    the newest y, taken in the same pass). After several pairs stored since the last `compute`
    (which the solver never does), both are rebuilt from the whole memory. S'Y's row of the
    newest pair, s_new'y_j for the older pairs j, lies below R's diagonal in the order the
    pairs were stored, now and after any later pair, so it is never read and not computed.

    With products with the last gradient (`_by_differences`), one pair stored since, whose
    y = g - g_last ends here: S'y = S'g - S'g_last and Y'y = Y'g - Y'g_last for the older
    pairs, and the pair's own s'y and y'y are those `update` wrote: no pass over the memory.
    Where the gradient was replaced since (`gradient_replaced`), the memory is multiplied by y.
    """
    assert state.s_dot_y is not None and state.y_dot_y is not None  # the compact form's state
    assert state.pending is not None
    newest = (state.head - 1) % state.rho.shape[0]

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

    if state.follows is None:  # the products with y came with those with g
        given = lambda st: fold(st, with_s[:, 1], with_y[:, 1])  # noqa: E731
        s_dot_y, y_dot_y = lax.cond(state.pending > 1, rebuild, given, state)
        return eqx.tree_at(
            lambda st: (st.s_dot_y, st.y_dot_y, st.pending),
            state,
            (s_dot_y, y_dot_y, state.pending * 0),
        )

    def by_differences(st):  # also where no pair was stored: the matrices stay
        at_newest = lax.iota(jnp.int32, st.s_dot_grad.shape[0]) == newest
        own_s, own_y = st.s_dot_y[newest, newest], st.y_dot_y[newest, newest]
        s_column = jnp.where(at_newest, own_s, with_s[:, 0] - st.s_dot_grad)
        y_column = jnp.where(at_newest, own_y, with_y[:, 0] - st.y_dot_grad)
        return select(st.pending == 1, fold(st, s_column, y_column), (st.s_dot_y, st.y_dot_y))

    def by_products(st):
        y_new = _newest_y(st)
        products = (_memory_times(b, [y_new], dtype)[:, 0] for b in (st.s, st.y))
        return fold(st, *products)

    one = (state.pending == 0) | ((state.pending == 1) & state.follows)
    branch = jnp.where(one, 0, jnp.minimum(state.pending, 2))
    s_dot_y, y_dot_y = lax.switch(branch, (by_differences, by_products, rebuild), state)
    return eqx.tree_at(
        lambda st: (st.s_dot_y, st.y_dot_y, st.pending, st.s_dot_grad, st.y_dot_grad, st.follows),
        state,
        (
            s_dot_y,
            y_dot_y,
            state.pending * 0,
            with_s[:, 0],
            with_y[:, 0],
            jnp.ones_like(state.follows),
        ),
    )


class LBFGS(AbstractDirection):
    """L-BFGS direction (Nocedal & Wright, section 7.2).

    Keeps the last `memory_size` pairs (s, y) in buffers with a leading `(memory_size,)` axis
    per leaf. The initial matrix is gamma * I with gamma = s'y / y'y from the newest pair
    (N&W eq. 7.20). `form` picks how d = -H g is computed; both give the same matrix:

    - `"two_loop"`: the two-loop recursion (N&W algorithm 7.4), two `fori_loop`s over the m
      slots.
    - `"compact"`: the compact representation (Byrd, Nocedal & Schnabel, 1994, eq. 3.13;
      N&W eq. 7.24), with no loop. With the pairs in the order they were stored, R the upper
      triangle of S'Y and D its diagonal, H g = gamma g + S p - gamma Y R^-1 a, where
      p = R^-T ((D + gamma Y'Y) R^-1 a - gamma b), a = S'g and b = Y'g. It takes one pass
      over each buffer for a and b, two m x m triangular solves, and one pass back: 4m
      vectors read. S'Y and Y'Y are kept in the state, and the newest pair's column is
      folded in: off a CPU, from the products of each buffer with the newest y, in the same
      pass as g; on a CPU, where each vector costs a pass of its own, from a and b less
      those of the previous `compute` (y = g - g_previous), except after
      `gradient_replaced` or for gradients of fewer than 32 bits (two passes more).
    - `"auto"` (the default): the compact form, which has no loop trips (each one on a GPU
      waits for its predicate on the host), except on a CPU (jax's default backend) for
      params of fewer than `COMPACT_FROM` = 5000 elements in all, where the two-loop
      recursion measured faster (benchmarks/engine.py).

    A pair is stored only if it is finite after rounding to the memory dtype and satisfies the
    curvature guard s'y > eps |s| |y|, with `eps` the machine epsilon of the least precise
    memory dtype unless given; this keeps the implicit inverse Hessian positive definite.

    Memory leaves have the dtype of their param leaf, or at least `memory_dtype` when given
    (e.g. `memory_dtype=jnp.float32` for bfloat16 or float16 params). Inner products accumulate
    in at least float32 and are kept in the solver's scalar dtype, never float16.

    With bounds (`Solver.run(..., bounds=...)`) it is L-BFGS-B: see `_bounded`.
    """

    supports_bounds = True

    memory_size: int = eqx.field(static=True, default=10, converter=as_int)
    memory_dtype: jnp.dtype | type | str | None = eqx.field(static=True, default=None)
    curvature_eps: float | None = eqx.field(static=True, default=None)
    form: str = eqx.field(static=True, default="auto")

    def __check_init__(self):
        check_count("LBFGS", "memory_size", self.memory_size)
        if self.form not in _FORMS:
            raise ValueError(f"LBFGS: form must be one of {_FORMS}, got {self.form!r}.")
        if self.memory_dtype is not None and not _is_floating(self.memory_dtype):
            raise ValueError(
                f"LBFGS: memory_dtype must be a floating dtype such as jnp.float32, "
                f"got {self.memory_dtype!r}."
            )
        if self.curvature_eps is not None and not self.curvature_eps >= 0:
            raise ValueError(
                f"LBFGS: curvature_eps must be non-negative, got {self.curvature_eps}."
            )

    def _memory_dtype(self, dtype):
        return dtype if self.memory_dtype is None else widest_float(dtype, self.memory_dtype)

    def init(self, params, dtype) -> LBFGSState:
        m = self.memory_size
        size = sum(x.size for x in leaves(params))
        compact = self.form_in_use(size) == "compact"
        differences = compact and _by_differences(params)

        def buffer(x):  # sharded like x, replicated along the memory axis
            return zeros_sharded_like(x, self._memory_dtype(x.dtype), (m,))

        return LBFGSState(
            s=jtu.tree_map(buffer, params),
            y=jtu.tree_map(buffer, params),
            rho=jnp.zeros((m,), dtype),
            s_dot_y=jnp.zeros((m, m), dtype) if compact else None,
            y_dot_y=jnp.zeros((m, m), dtype) if compact else None,
            gamma=scalar(1, dtype),
            count=scalar(0, jnp.int32),
            head=scalar(0, jnp.int32),
            pending=scalar(0, jnp.int32) if compact else None,
            s_dot_grad=jnp.zeros((m,), dtype) if differences else None,
            y_dot_grad=jnp.zeros((m,), dtype) if differences else None,
            follows=jnp.array(False) if differences else None,
        )

    def form_in_use(self, size: int) -> str:
        """ "two_loop" or "compact": `form`, where "auto" is the compact form unless jax's
        default backend is the CPU and the params have fewer than `COMPACT_FROM` elements in
        all (`size`)."""
        if self.form != "auto":
            return self.form
        small = jax.default_backend() == "cpu" and size < COMPACT_FROM
        return "two_loop" if small else "compact"

    def compute(self, state, info: DirectionInfo):
        if info.box is not None:
            return self._bounded(state, info)
        size = sum(b[0].size for b in leaves(state.s))
        if self.form_in_use(size) == "two_loop":
            d, state = self._two_loop(state, info.grad, info.dtype)
        else:
            d, state = self._compact(state, info.grad, info.dtype)
        return d, state.count > 0, state, no_limit(info.dtype)

    def _two_loop(self, state, grad, dtype):
        m = self.memory_size

        def pair(j):
            take = lambda b: lax.dynamic_index_in_dim(b, j, keepdims=False)  # noqa: E731
            return jtu.tree_map(take, state.s), jtu.tree_map(take, state.y)

        # Both loops run over all m slots (a fixed trip count, which reverse-mode
        # differentiation and vmap need); a slot beyond `count` has a zero coefficient.
        def newest_first(i, carry):
            q, alpha = carry
            j = (state.head - 1 - i) % m
            s, y = pair(j)
            a = jnp.where(i < state.count, state.rho[j] * tree_dot(s, q, dtype), 0)
            q = jtu.tree_map(lambda qi, yi: qi - a.astype(qi.dtype) * yi.astype(qi.dtype), q, y)
            return q, alpha.at[j].set(a)

        def oldest_first(i, r):
            j = (state.head - state.count + i) % m
            s, y = pair(j)
            b = state.rho[j] * tree_dot(y, r, dtype)
            coef = jnp.where(i < state.count, alpha[j] - b, 0)
            return jtu.tree_map(
                lambda ri, si: ri + coef.astype(ri.dtype) * si.astype(ri.dtype), r, s
            )

        work = jtu.tree_map(lambda g, s: g.astype(at_least_float32(s.dtype)), grad, state.s)
        q, alpha = lax.fori_loop(0, m, newest_first, (work, jnp.zeros((m,), dtype)))
        r = jtu.tree_map(lambda qi: state.gamma.astype(qi.dtype) * qi, q)
        r = lax.fori_loop(0, m, oldest_first, r)
        d = jtu.tree_map(lambda ri, g: (-ri).astype(g.dtype), r, grad)
        return d, state

    def _compact(self, state, grad, dtype):
        m = self.memory_size
        vectors = [grad] if state.follows is not None else [grad, _newest_y(state)]
        with_s = _memory_times(state.s, vectors, dtype)
        with_y = _memory_times(state.y, vectors, dtype)
        state = _bring_up_to_date(state, with_s, with_y, dtype)

        # The slots in the order their pairs were stored: position k < count holds the k-th
        # oldest pair. Positions >= count hold none; they get an identity row and column in
        # R and zeros elsewhere, so that their coefficients are zero.
        positions = jnp.arange(m, dtype=jnp.int32)
        order = (state.head - state.count + positions) % m
        valid = positions < state.count
        both = valid[:, None] & valid[None, :]
        chronological = lambda matrix: matrix[order][:, order]  # noqa: E731
        s_dot_y = chronological(state.s_dot_y)
        upper = both & (positions[:, None] <= positions[None, :])
        identity = jnp.eye(m, dtype=dtype)
        r = jnp.where(upper, s_dot_y, identity)
        d_diagonal = jnp.where(valid, diagonal(s_dot_y), 0)
        y_dot_y = jnp.where(both, chronological(state.y_dot_y), 0)
        a = jnp.where(valid, with_s[order, 0], 0)
        b = jnp.where(valid, with_y[order, 0], 0)
        gamma = state.gamma
        solve = functools.partial(_solve_upper, r)
        r_inv_a = solve(a, False)
        middle = d_diagonal * r_inv_a + gamma * (y_dot_y @ r_inv_a) - gamma * b
        p = solve(middle, True)
        q = -gamma * r_inv_a
        # Back from positions to slots: slot order[k] gets the coefficient of position k, so
        # slot j that of position (j - head + count) % m (a gather, which fuses; a scatter
        # would be a kernel of its own).
        position = (positions - state.head + state.count) % m
        p, q = p[position], q[position]

        def leaf(g, s, y):
            work = at_least_float32(s.dtype)
            back = lambda c, buffer: jnp.tensordot(  # noqa: E731
                c.astype(work), buffer.astype(work), axes=1, precision="highest"
            )
            hg = gamma.astype(work) * g.astype(work) + back(p, s) + back(q, y)
            return (-hg).astype(g.dtype)

        d = jtu.tree_map(leaf, grad, state.s, state.y)
        return d, state

    def _bounded(self, state, info: DirectionInfo):
        """L-BFGS-B's direction (Byrd, Lu, Nocedal & Zhu 1995; Morales & Nocedal 2011): the
        generalized Cauchy point of the quadratic model with B = theta I - W M W' from this
        memory (theta = 1 / gamma), then the subspace minimisation over the variables free
        there, projected onto the box; d = x_bar - x. Worked on one flat vector of all the
        leaves in the widest of their dtypes (at least float32). `scaled` (the unit step as
        the first trial) holds once a pair is stored, or when every variable has two finite
        bounds (L-BFGS-B's first iteration on a boxed problem). With no pair stored and any
        finite bound, the step is capped at 1, as L-BFGS-B's first iteration does."""
        x, grad, box, dtype, while_loop = info.x, info.grad, info.box, info.dtype, info.while_loop
        work = widest_float(*(at_least_float32(b.dtype) for b in jtu.tree_leaves(state.s)), dtype)
        flat = lambda tree: jnp.concatenate(  # noqa: E731
            [leaf.reshape(-1).astype(work) for leaf in jtu.tree_leaves(tree)]
        )
        m = self.memory_size
        memory = lambda tree: jnp.concatenate(  # noqa: E731
            [b.reshape(m, -1).astype(work) for b in jtu.tree_leaves(tree)], axis=1
        )
        xf, gf, lower, upper = flat(x), flat(grad), flat(box.lower), flat(box.upper)
        theta = jnp.where(state.count > 0, 1 / state.gamma, 1).astype(work)
        w, middle = compact_representation(
            memory(state.s), memory(state.y), state.count, state.head, theta
        )
        loop = {} if while_loop is None else {"while_loop": while_loop}
        x_cauchy, c, free = cauchy_point(xf, gf, lower, upper, theta, w, middle, **loop)
        x_bar, _ = subspace_minimisation(xf, gf, lower, upper, x_cauchy, c, free, theta, w, middle)
        step = x_bar - xf
        parts, start = [], 0
        for g in jtu.tree_leaves(grad):
            parts.append(step[start : start + g.size].reshape(g.shape).astype(g.dtype))
            start += g.size
        d = jtu.tree_unflatten(jtu.tree_structure(grad), parts)
        # The unit step is the first trial once there is curvature information, and, as in
        # L-BFGS-B's first iteration, also without it when every variable has both bounds.
        boxed = jnp.all(jnp.isfinite(lower) & jnp.isfinite(upper))
        # L-BFGS-B's first iteration on a problem with any finite bound caps the step at 1.
        bounded = jnp.any(jnp.isfinite(lower) | jnp.isfinite(upper))
        limit = jnp.where((state.count == 0) & bounded, 1, jnp.inf).astype(dtype)
        return d, (state.count > 0) | boxed, state, limit

    def update(self, state, s, y, dtype, accept=True) -> LBFGSState:
        s = jtu.tree_map(lambda si, b: si.astype(b.dtype), s, state.s)
        y = jtu.tree_map(lambda yi, b: yi.astype(b.dtype), y, state.y)
        sy = tree_dot(s, y, dtype)
        yy = tree_dot(y, y, dtype)
        eps = dtype_eps(state.s) if self.curvature_eps is None else self.curvature_eps
        guard = sy > eps * tree_norm(s, dtype) * jnp.sqrt(yy)
        keep = guard & jnp.isfinite(sy) & jnp.isfinite(yy) & (yy > 0) & accept

        # Divisors of 1 where the pair is not kept: the update also runs for pairs it does
        # not take (s = 0, say), and a derivative through the unused quotient would be NaN.
        sy_, yy_ = jnp.where(keep, sy, 1), jnp.where(keep, yy, 1)

        m = self.memory_size

        def write(buffer, new):
            # A pair not kept goes to slot m, which does not exist, and is dropped: the write
            # needs no read of the slot's old row to mask it (at n = 1e6, 0.45 ms against
            # 0.73 ms per buffer for a kept pair, 0.09 ms against 0.60 ms for one not kept).
            return buffer.at[jnp.where(keep, state.head, m)].set(new, mode="drop")

        def diagonal_entry(matrix, entry):  # s'y and y'y of the new pair, for `_by_differences`
            if state.follows is None:
                return matrix
            rows, columns = _indices(matrix.shape[0])
            return jnp.where(keep & (rows == state.head) & (columns == state.head), entry, matrix)

        return LBFGSState(
            s=jtu.tree_map(write, state.s, s),
            y=jtu.tree_map(write, state.y, y),
            rho=jnp.where(keep, state.rho.at[state.head].set(1 / sy_), state.rho),
            s_dot_y=diagonal_entry(state.s_dot_y, sy),
            y_dot_y=diagonal_entry(state.y_dot_y, yy),
            gamma=jnp.where(keep, sy_ / yy_, state.gamma).astype(dtype),
            count=jnp.where(keep, jnp.minimum(state.count + 1, m), state.count).astype(jnp.int32),
            head=jnp.where(keep, (state.head + 1) % m, state.head).astype(jnp.int32),
            pending=None if state.pending is None else _count_up(state.pending, keep),
            s_dot_grad=state.s_dot_grad,
            y_dot_grad=state.y_dot_grad,
            follows=state.follows,
        )

    def reset(self, state) -> LBFGSState:
        zeros = (state.count * 0, state.head * 0)
        state = eqx.tree_at(lambda st: (st.count, st.head), state, zeros)
        if state.pending is None:  # the two-loop form keeps no S'Y, Y'Y
            return state
        return eqx.tree_at(lambda st: st.pending, state, state.pending * 0)

    def gradient_replaced(self, state) -> LBFGSState:
        """The compact form's products with the last gradient no longer give S'y for the
        next pair: its y will not start there."""
        if state.follows is None:
            return state
        return eqx.tree_at(lambda st: st.follows, state, jnp.zeros_like(state.follows))
