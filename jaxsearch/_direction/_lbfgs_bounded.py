"""L-BFGS-B (Byrd, Lu, Nocedal & Zhu, "A limited memory algorithm for bound constrained
optimization", SIAM J. Sci. Comput. 16(5), 1995; Morales & Nocedal, "Remark on Algorithm 778",
ACM TOMS 38(1), 2011, for L-BFGS-B 3.0): the direction from either form of `LBFGS`'s memory
(`bounded_direction`), and its core math on flat 1-D arrays of one floating dtype: the compact
matrix B = theta I - W M W' (§3), the generalized Cauchy point (§4, algorithm CP), the direct
primal subspace minimisation (§5.1). Shapes are static: of `m` slots, `count` (traced) are valid,
the rest masked out (`count = 0`: B = theta I). `lower`, `upper` may hold -inf, +inf; `x` is
feasible (`_bounds.project` first). W's 2m columns are [Y, theta S], pairs oldest first."""

from collections.abc import Callable

import jax
import jax.numpy as jnp
import jax.tree_util as jtu
from jax import lax
from jaxtyping import Array, ArrayLike, Bool, Float, Int, PyTree, Scalar

from .._bounds import max_feasible_step, project
from .._misc import at_least_float32, diagonal, widest_float
from ._base import DirectionInfo
from ._lbfgs_memory import AbstractLBFGSState
from ._slots import in_order


def bounded_direction(
    state: AbstractLBFGSState, info: DirectionInfo
) -> tuple[PyTree, Bool[Array, ""], Scalar]:
    """(d, scaled, limit): L-BFGS-B's direction at `info.x` in `info.box` from `state`'s memory: the
    generalized Cauchy point of the model with B = theta I - W M W' (theta = 1 / gamma), then the
    subspace minimisation, projected onto the box; d = x_bar - x, on one flat vector in the
    widest leaf dtype (at least float32). As L-BFGS-B's first iteration: `scaled` once a pair is
    stored or where every variable has two finite bounds; with no pair and any finite bound,
    `limit` 1."""
    x, grad, box, dtype, while_loop = info.x, info.grad, info.box, info.dtype, info.while_loop
    work = widest_float(*(at_least_float32(b.dtype) for b in jtu.tree_leaves(state.s)), dtype)
    flat = lambda tree: jnp.concatenate(  # noqa: E731
        [leaf.reshape(-1).astype(work) for leaf in jtu.tree_leaves(tree)]
    )
    m = state.rho.shape[0]
    memory = lambda tree: jnp.concatenate(  # noqa: E731
        [b.reshape(m, -1).astype(work) for b in jtu.tree_leaves(tree)], axis=1
    )
    xf, gf, lower, upper = flat(x), flat(grad), flat(box.lower), flat(box.upper)
    theta = jnp.where(state.count > 0, 1 / state.gamma, 1).astype(work)
    loop = {} if while_loop is None else {"while_loop": while_loop}
    # Full-precision products: a TPU's default for float32 ones is one bfloat16 pass.
    with jax.default_matmul_precision("highest"):
        w, middle = compact_representation(
            memory(state.s), memory(state.y), state.count, state.head, theta
        )
        x_cauchy, c, free = cauchy_point(xf, gf, lower, upper, theta, w, middle, **loop)
        x_bar, _ = subspace_minimisation(xf, gf, lower, upper, x_cauchy, c, free, theta, w, middle)
    step = x_bar - xf
    parts, start = [], 0
    for g in jtu.tree_leaves(grad):
        parts.append(step[start : start + g.size].reshape(g.shape).astype(g.dtype))
        start += g.size
    d = jtu.tree_unflatten(jtu.tree_structure(grad), parts)
    boxed = jnp.all(jnp.isfinite(lower) & jnp.isfinite(upper))
    bounded = jnp.any(jnp.isfinite(lower) | jnp.isfinite(upper))
    limit = jnp.where((state.count == 0) & bounded, 1, jnp.inf).astype(dtype)
    return d, (state.count > 0) | boxed, limit


def compact_representation(
    s: Float[Array, "m n"],
    y: Float[Array, "m n"],
    count: Int[ArrayLike, ""],
    head: Int[ArrayLike, ""],
    theta: Float[ArrayLike, ""],
) -> tuple[Float[Array, "n two_m"], Float[Array, "two_m two_m"]]:
    """W and M of the compact limited-memory BFGS matrix B = theta I - W M W' (§3, eqs. 3.2-3.4;
    Byrd, Nocedal & Schnabel 1994), from `js.LBFGS`'s circular buffers `s`, `y` (the `count`
    valid pairs in slots head - count, ..., head - 1 mod m). With S, Y the n x k matrices of the
    k valid pairs, oldest first,

        W = [Y, theta S]    (n x 2m),
        M = [[-D, L'], [L, theta S'S]]^-1    (2m x 2m),

    D = diag(s_i'y_i), L the strict lower triangle of S'Y (eq. 3.4). The m - k columns past the
    valid pairs are zero, with identity rows and columns in M^-1, so they decouple: B is the BFGS
    matrix of the k pairs from theta I. Requires s_i'y_i > 0 and theta > 0 (usually y'y / s'y of
    the newest pair).
    """
    dtype = s.dtype
    m = s.shape[0]
    theta = jnp.asarray(theta).astype(dtype)
    count = jnp.asarray(count).astype(jnp.int32)
    head = jnp.asarray(head).astype(jnp.int32)
    slots = jnp.arange(m, dtype=jnp.int32)
    order = (head - count + slots) % m  # oldest valid pair first
    valid = slots < count
    s_ord = jnp.where(valid[:, None], in_order(s, order), 0)
    y_ord = jnp.where(valid[:, None], in_order(y, order), 0)
    sy = s_ord @ y_ord.T  # [i, j] = s_i'y_j
    ss = s_ord @ s_ord.T
    both = valid[:, None] & valid[None, :]
    eye = jnp.eye(m, dtype=dtype)
    minus_d = jnp.where(valid, -diagonal(sy), -1) * eye
    lower_l = jnp.where(both, jnp.tril(sy, -1), 0)
    theta_ss = jnp.where(both, theta * ss, eye)
    m_inv = jnp.block([[minus_d, lower_l.T], [lower_l, theta_ss]])
    middle = jnp.linalg.solve(m_inv, jnp.eye(2 * m, dtype=dtype))
    w = jnp.concatenate([y_ord.T, theta * s_ord.T], axis=1)
    return w, middle


def compact_times(
    v: Float[Array, " n"],
    theta: Float[ArrayLike, ""],
    w: Float[Array, "n two_m"],
    middle: Float[Array, "two_m two_m"],
) -> Float[Array, " n"]:
    """B v = theta v - W (M (W' v)) for the compact matrix of `compact_representation`."""
    theta = jnp.asarray(theta).astype(v.dtype)
    return theta * v - w @ (middle @ (w.T @ v))


def _breakpoints(x, g, lower, upper):
    """t_i of eq. 4.1, when x_i - t g_i reaches the bound g_i drives it to (+inf for g_i = 0 or an
    infinite bound, 0 at that bound), and that bound."""
    toward = jnp.where(g < 0, upper, lower)
    moving = g != 0
    t = jnp.where(moving, (x - toward) / jnp.where(moving, g, 1), jnp.inf)
    t = jnp.where(moving & jnp.isfinite(toward), jnp.maximum(t, 0), jnp.inf)
    return t, toward


def cauchy_point(
    x: Float[Array, " n"],
    g: Float[Array, " n"],
    lower: Float[Array, " n"],
    upper: Float[Array, " n"],
    theta: Float[ArrayLike, ""],
    w: Float[Array, "n two_m"],
    middle: Float[Array, "two_m two_m"],
    while_loop: Callable = lambda cond, body, init, max_steps: lax.while_loop(cond, body, init),
) -> tuple[Float[Array, " n"], Float[Array, " two_m"], Bool[Array, " n"]]:
    """The generalized Cauchy point (§4, algorithm CP): the first local minimiser x^c of m(z) = g'(z
    - x) + (z - x)'B(z - x)/2 along x(t) = P(x - t g). The breakpoints (eqs. 4.1-4.2) are sorted
    once; a loop (`while_loop`, at most n segments) walks the segments, updating f', f'', p = W'd
    and c = W'(x(t) - x) by eqs. 4.6-4.9 (O(m^2) each), and stops in the first whose minimiser
    t_old - f'/f'' comes before the next breakpoint (or where f' >= 0 at one). Tied breakpoints
    are zero-length segments, handled exactly. f'' is kept at least eps * f''(0), a rounding
    safeguard not in the paper. Returns `(x_cauchy, c, free)`: x^c in the box (reached variables
    exactly at their bounds), c = W'(x^c - x), and the mask of variables strictly between their
    bounds. x feasible, theta > 0."""
    dtype = x.dtype
    n = x.shape[0]
    theta = jnp.asarray(theta).astype(dtype)
    eps = jnp.finfo(dtype).eps
    t, toward = _breakpoints(x, g, lower, upper)
    d = jnp.where(t > 0, -g, 0)
    # Variables with t_i = 0 never move: they sort last with the unbounded ones, out of the loop.
    keys = jnp.where(t > 0, t, jnp.inf)
    order = jnp.argsort(keys)
    keys = keys[order]

    p = w.T @ d
    f1 = -(d @ d)
    f2 = theta * (d @ d) - p @ (middle @ p)
    f2_floor = eps * f2

    def minimiser_step(f1, f2):  # -f'/f'', the step to the model's minimum on this segment
        safe = jnp.where(f2 > 0, f2, 1)
        return jnp.where(f1 >= 0, 0, jnp.where(f2 > 0, -f1 / safe, jnp.inf))

    zero = jnp.zeros((), dtype)
    init = (jnp.zeros((), jnp.int32), zero, f1, f2, p, jnp.zeros_like(p))

    def cond(carry):
        k, t_old, f1, f2, _, _ = carry
        k_safe = jnp.minimum(k, n - 1)
        next_t = keys[k_safe]
        return (k < n) & jnp.isfinite(next_t) & (minimiser_step(f1, f2) >= next_t - t_old)

    def body(carry):
        k, t_old, f1, f2, p, c = carry
        b = order[k]
        t_b = keys[k]
        dt = t_b - t_old
        g_b = g[b]
        z_b = toward[b] - x[b]
        w_b = w[b]
        c = c + dt * p
        m_w = middle @ w_b
        f1 = f1 + dt * f2 + g_b * g_b + theta * g_b * z_b - g_b * (m_w @ c)
        f2 = f2 - theta * g_b * g_b - 2 * g_b * (m_w @ p) - g_b * g_b * (m_w @ w_b)
        f2 = jnp.maximum(f2, f2_floor)
        p = p + g_b * w_b
        return k + 1, t_b, f1, f2, p, c

    k, t_old, f1, f2, p, c = while_loop(cond, body, init, n)
    # Once every moving variable has reached its bound the path stops: f' and f'' are 0 up
    # to rounding, and their ratio is noise.
    num_moving = jnp.sum((t > 0) & (g != 0)).astype(jnp.int32)
    dt_min = jnp.maximum(minimiser_step(f1, f2), 0)
    dt_min = jnp.where((k < num_moving) & jnp.isfinite(dt_min), dt_min, 0)
    t_star = t_old + dt_min
    c = c + dt_min * p
    reached = t <= t_star
    x_cauchy = project(jnp.where(reached, toward, x - t_star * g), lower, upper)
    x_cauchy = jnp.where(t == 0, x, x_cauchy)
    free = (x_cauchy > lower) & (x_cauchy < upper)
    return x_cauchy, c, free


def subspace_minimisation(
    x: Float[Array, " n"],
    g: Float[Array, " n"],
    lower: Float[Array, " n"],
    upper: Float[Array, " n"],
    x_cauchy: Float[Array, " n"],
    c: Float[Array, " two_m"],
    free: Bool[Array, " n"],
    theta: Float[ArrayLike, ""],
    w: Float[Array, "n two_m"],
    middle: Float[Array, "two_m two_m"],
    projection: bool = True,
) -> tuple[Float[Array, " n"], Bool[Array, ""]]:
    """The direct primal subspace minimisation (§5.1) of m over the free variables (a mask Z,
    keeping shapes static), the others at the Cauchy point. With r^c = Z'(g + theta (x^c - x) - W
    M c), Sherman-Morrison-Woodbury gives the 2m x 2m solve

        d^u = -r^c / theta - Z'W N^-1 M W'Z r^c / theta^2,   N = I - M W'Z Z'W / theta.

    `projection=False`, the 1995 paper (eq. 5.8): x_bar = x^c + alpha* d^u, alpha* = min(1,
    max{a: x^c + a d^u feasible}); `projection=True` (default), L-BFGS-B 3.0: x_bar = P(x^c +
    d^u) where g'(x_bar - x) < 0, else the 1995 point (a descent direction wherever x^c != x).
    Returns `(x_bar, projected)`; without free variables x_bar = x^c.
    """
    dtype = x.dtype
    theta = jnp.asarray(theta).astype(dtype)
    two_m = w.shape[1]
    w_z = jnp.where(free[:, None], w, 0)
    r = jnp.where(free, g + theta * (x_cauchy - x) - w @ (middle @ c), 0)
    v = middle @ (w_z.T @ r)
    n_mat = jnp.eye(two_m, dtype=dtype) - (middle @ (w_z.T @ w_z)) / theta
    v = jnp.linalg.solve(n_mat, v)
    d_u = -r / theta - (w_z @ v) / (theta * theta)
    d_u = jnp.where(free, d_u, 0)

    alpha = jnp.minimum(max_feasible_step(x_cauchy, d_u, lower, upper), 1)
    truncated = project(x_cauchy + alpha * d_u, lower, upper)
    if not projection:
        return truncated, jnp.zeros((), bool)
    projected = project(x_cauchy + d_u, lower, upper)
    descent = g @ (projected - x) < 0
    return jnp.where(descent, projected, truncated), descent
