"""The bound-constrained core of L-BFGS-B (jaxsearch/_direction/_lbfgs_bounded.py, and the box
math in jaxsearch/_bounds.py) against references computed independently in NumPy: the dense
BFGS recursion, a segment-by-segment walk of the projected path with a grid check, dense solves
of the reduced quadratic, and scipy's pgtol test."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import minimize

from jaxsearch._bounds import max_feasible_step, project, projected_gradient_inf_norm
from jaxsearch._direction._lbfgs_bounded import (
    cauchy_point,
    compact_representation,
    compact_times,
    subspace_minimisation,
)

N, M = 10, 5


# ---------------------------------------------------------------- NumPy references


def random_pairs(rng, n, k):
    """k pairs with y = A s for a random SPD A, so s'y > 0."""
    root = rng.standard_normal((n, n))
    a = root @ root.T / n + 0.5 * np.eye(n)
    pairs = []
    for _ in range(k):
        s = rng.standard_normal(n)
        pairs.append((s, a @ s))
    return pairs


def circular_buffer(pairs, m, n):
    """Write the pairs as js.LBFGS does: slot `head`, then head = (head + 1) % m."""
    s_buf, y_buf = np.zeros((m, n)), np.zeros((m, n))
    head = count = 0
    for s, y in pairs:
        s_buf[head], y_buf[head] = s, y
        head, count = (head + 1) % m, min(count + 1, m)
    return s_buf, y_buf, count, head


def theta_of(pairs):
    if not pairs:
        return 1.0
    s, y = pairs[-1]
    return float(y @ y / (s @ y))


def dense_bfgs(pairs, theta, n):
    """B from B0 = theta I by the BFGS update, oldest pair first."""
    b = theta * np.eye(n)
    for s, y in pairs:
        bs = b @ s
        b = b - np.outer(bs, bs) / (s @ bs) + np.outer(y, y) / (y @ s)
    return b


def reference_cauchy(x, g, lower, upper, b):
    """First local minimiser t* of q(t) = g'(x(t) - x) + (x(t) - x)'B(x(t) - x)/2 along
    x(t) = clip(x - t g), walking the segments between distinct breakpoints in order."""
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(g < 0, (x - upper) / g, np.where(g > 0, (x - lower) / g, np.inf))
    t = np.where(np.isnan(t), np.inf, t)
    starts = np.concatenate([[0.0], np.unique(t[np.isfinite(t) & (t > 0)])])

    def path(tt):
        return np.clip(x - tt * g, lower, upper)

    t_star = starts[-1]
    for j, t_j in enumerate(starts):
        d = np.where(t > t_j, -g, 0.0)
        if not d.any():
            t_star = t_j
            break
        z = path(t_j) - x
        f1, f2 = g @ d + z @ b @ d, d @ b @ d
        if f1 >= 0:
            t_star = t_j
            break
        t_min = t_j - f1 / f2
        end = starts[j + 1] if j + 1 < len(starts) else np.inf
        if t_min < end:
            t_star = t_min
            break

    def model(tt):
        z = path(tt) - x
        return g @ z + 0.5 * z @ b @ z

    return path(t_star), t_star, model


def reference_feasible_step(x, d, lower, upper):
    best = np.inf
    for xi, di, lo, hi in zip(x, d, lower, upper, strict=True):
        if di > 0:
            best = min(best, (hi - xi) / di)
        elif di < 0:
            best = min(best, (lo - xi) / di)
    return max(best, 0.0)


def random_box_problem(rng, n):
    """x, g and a box around x mixing: finite bounds, infinite ones, x at a bound with g
    pointing out (t_i = 0), at a bound with g pointing in, g_i = 0, lower = upper, and two
    variables with the same breakpoint."""
    x = rng.uniform(-1, 1, n)
    g = rng.standard_normal(n)
    lower = x - rng.uniform(0.05, 1.0, n)
    upper = x + rng.uniform(0.05, 1.0, n)
    kinds = rng.permutation(n)
    lower[kinds[0]], upper[kinds[1]] = -np.inf, np.inf
    lower[kinds[2]], upper[kinds[2]] = -np.inf, np.inf
    # at a bound, g pointing out of the box: t_i = 0
    g[kinds[3]] = abs(g[kinds[3]]) + 0.1
    lower[kinds[3]] = x[kinds[3]]
    # at a bound, g pointing in
    g[kinds[4]] = abs(g[kinds[4]]) + 0.1
    upper[kinds[4]] = x[kinds[4]]
    g[kinds[5]] = 0.0
    lower[kinds[6]] = upper[kinds[6]] = x[kinds[6]]
    # a tie: variable 8 copies variable 7
    i, j = kinds[7], kinds[8]
    x[j], g[j], lower[j], upper[j] = x[i], g[i], lower[i], upper[i]
    return x, g, lower, upper


def to_jax(*arrays):
    return tuple(jnp.asarray(a, jnp.float64) for a in arrays)


@functools.cache
def jitted():
    return (
        jax.jit(compact_representation),
        jax.jit(cauchy_point),
        jax.jit(subspace_minimisation, static_argnames="projection"),
    )


def memory(rng, num_pairs, n=N, m=M):
    pairs = random_pairs(rng, n, num_pairs)
    kept = pairs[-m:]
    theta = theta_of(kept)
    s_buf, y_buf, count, head = circular_buffer(pairs, m, n)
    compact, _, _ = jitted()
    w, mid = compact(*to_jax(s_buf, y_buf), jnp.int32(count), jnp.int32(head), jnp.float64(theta))
    return w, mid, theta, dense_bfgs(kept, theta, n)


def in_box(z, lower, upper):
    z = np.asarray(z)
    return bool(np.all((z >= lower) & (z <= upper)))


# ---------------------------------------------------------------- tests


@pytest.mark.parametrize("num_pairs", [0, 1, 3, 5, 8, 12])
def test_compact_matrix_is_the_bfgs_recursion(num_pairs):
    """theta I - W M W' is the BFGS matrix of the last min(num_pairs, m) pairs from theta I,
    with the buffer not yet full (count < m), full, and wrapped around (head != 0)."""
    rng = np.random.default_rng(num_pairs)
    with jax.enable_x64(True):
        w, mid, theta, b_ref = memory(rng, num_pairs)
        w, mid = np.asarray(w), np.asarray(mid)
        b = theta * np.eye(N) - w @ mid @ w.T
        scale = np.max(np.abs(b_ref))
        assert np.max(np.abs(b - b_ref)) <= 1e-12 * scale
        v = rng.standard_normal(N)
        bv = compact_times(jnp.asarray(v), jnp.float64(theta), jnp.asarray(w), jnp.asarray(mid))
        np.testing.assert_allclose(bv, b_ref @ v, rtol=1e-11, atol=1e-12 * scale)
        if num_pairs == 0:
            np.testing.assert_array_equal(w, 0)
            np.testing.assert_array_equal(b, theta * np.eye(N))


@pytest.mark.parametrize("num_pairs", [0, 3, 8])
def test_cauchy_point_matches_path_walk(num_pairs):
    rng = np.random.default_rng(100 + num_pairs)
    _, cauchy, _ = jitted()
    with jax.enable_x64(True):
        w, mid, theta, b = memory(rng, num_pairs)
        for _ in range(12):
            x, g, lower, upper = random_box_problem(rng, N)
            x_ref, t_star, model = reference_cauchy(x, g, lower, upper, b)
            xc, c, free = cauchy(*to_jax(x, g, lower, upper), jnp.float64(theta), w, mid)
            xc, c, free = np.asarray(xc), np.asarray(c), np.asarray(free)
            assert in_box(xc, lower, upper)
            np.testing.assert_allclose(xc, x_ref, rtol=0, atol=1e-12)
            np.testing.assert_allclose(c, np.asarray(w).T @ (x_ref - x), rtol=0, atol=1e-11)
            tol = 1e-12
            free_ref = (x_ref > lower + tol) & (x_ref < upper - tol)
            np.testing.assert_array_equal(free, free_ref)
            # t* is the first local minimiser: q does not increase on [0, t*] and does not
            # decrease just after it (grid check of the segment walk)
            grid = np.linspace(0, t_star, 401)
            values = np.array([model(tt) for tt in grid])
            assert np.all(np.diff(values) <= 1e-12)
            after = np.array([model(t_star + h) for h in (1e-6, 1e-4, 1e-2)])
            assert np.all(after >= values[-1] - 1e-12)


def test_cauchy_point_all_bounds_reached_and_none_moving():
    """A tiny box: the path ends at the corner (every moving variable at its bound). And a
    point where every variable sits at the bound its gradient points out of: x^c = x."""
    rng = np.random.default_rng(7)
    _, cauchy, _ = jitted()
    with jax.enable_x64(True):
        w, mid, theta, _ = memory(rng, 3)
        x = rng.uniform(-1, 1, N)
        g = rng.standard_normal(N) * 100
        lower, upper = x - 1e-6, x + 1e-6
        xc, _, free = cauchy(*to_jax(x, g, lower, upper), jnp.float64(theta), w, mid)
        np.testing.assert_array_equal(xc, np.where(g > 0, lower, upper))
        assert not np.asarray(free).any()
        lower, upper = np.where(g > 0, x, -np.inf), np.where(g < 0, x, np.inf)
        xc, c, free = cauchy(*to_jax(x, g, lower, upper), jnp.float64(theta), w, mid)
        np.testing.assert_array_equal(xc, x)
        np.testing.assert_array_equal(c, 0)
        assert not np.asarray(free).any()


@pytest.mark.parametrize("projection", [True, False])
@pytest.mark.parametrize("num_pairs", [0, 4, 8])
def test_subspace_step_unbounded_is_newton(num_pairs, projection):
    """No bound anywhere (or all far away): Cauchy point, then subspace minimisation give the
    model's minimiser x - B^-1 g."""
    rng = np.random.default_rng(200 + num_pairs)
    _, cauchy, subspace = jitted()
    with jax.enable_x64(True):
        w, mid, theta, b = memory(rng, num_pairs)
        for far in (np.inf, 1e3):
            x, g = rng.standard_normal(N), rng.standard_normal(N)
            lower, upper = np.full(N, -far), np.full(N, far)
            args = to_jax(x, g, lower, upper)
            xc, c, free = cauchy(*args, jnp.float64(theta), w, mid)
            assert np.asarray(free).all()
            x_bar, projected = subspace(
                *args, xc, c, free, jnp.float64(theta), w, mid, projection=projection
            )
            newton = x - np.linalg.solve(b, g)
            np.testing.assert_allclose(x_bar, newton, rtol=1e-10, atol=1e-12)
            assert bool(projected) == projection


@pytest.mark.parametrize("num_pairs", [0, 3, 8])
def test_subspace_step_matches_reduced_quadratic(num_pairs):
    """Variables fixed at the Cauchy point: the free ones minimise the reduced quadratic
    (dense solve), then the 1995 truncation (alpha*) or L-BFGS-B 3.0's projection with its
    descent check."""
    rng = np.random.default_rng(300 + num_pairs)
    _, cauchy, subspace = jitted()
    seen = {"inside": 0, "truncated": 0, "fallback": 0}
    with jax.enable_x64(True):
        w, mid, theta, b = memory(rng, num_pairs)
        for _ in range(12):
            x, g, lower, upper = random_box_problem(rng, N)
            args = to_jax(x, g, lower, upper)
            xc, c, free = cauchy(*args, jnp.float64(theta), w, mid)
            xc_np, f = np.asarray(xc), np.asarray(free)
            rhs = -(g + b @ (xc_np - x))[f]
            d_u = np.zeros(N)
            if f.any():
                d_u[f] = np.linalg.solve(b[np.ix_(f, f)], rhs)
            alpha = min(1.0, reference_feasible_step(xc_np, d_u, lower, upper))
            truncated = xc_np + alpha * d_u
            projected = np.clip(xc_np + d_u, lower, upper)
            descent = g @ (projected - x) < 0
            seen["inside" if alpha == 1 else "truncated"] += 1
            seen["fallback"] += not descent

            x_bar, used = subspace(*args, xc, c, free, jnp.float64(theta), w, mid, projection=False)
            assert in_box(x_bar, lower, upper)
            np.testing.assert_allclose(x_bar, truncated, rtol=0, atol=1e-10)
            np.testing.assert_array_equal(np.asarray(x_bar)[~f], xc_np[~f])

            x_bar, used = subspace(*args, xc, c, free, jnp.float64(theta), w, mid, projection=True)
            assert in_box(x_bar, lower, upper)
            assert bool(used) == descent
            np.testing.assert_allclose(x_bar, projected if descent else truncated, atol=1e-10)
            # the step is a descent direction whenever the Cauchy point moved
            if np.any(xc_np != x):
                assert g @ (np.asarray(x_bar) - x) < 0
    # with B = theta I (no pairs) the model is separable and the Cauchy point already
    # minimises it over the free variables; otherwise both kinds of case occur
    assert seen["inside"] and (seen["truncated"] or num_pairs == 0), seen
    print(seen)


def test_subspace_step_falls_back_when_projection_ascends():
    """Morales & Nocedal (2011): the projected subspace point P(x^c + d^u) is refused when
    g'(P(x^c + d^u) - x) >= 0. Here B couples the two variables strongly: d^u runs variable 0
    far past its lower bound and variable 1 up along +g_1; clipping variable 0 alone leaves an
    ascent direction, and the 1995 truncated step (a descent direction) is taken instead."""
    pairs = [
        (np.array([0.12, 0.80]), np.array([0.66, 0.69])),
        (np.array([-0.50, 0.36]), np.array([-0.12, -0.09])),
    ]
    n, m = 2, 3
    theta = theta_of(pairs)
    b = dense_bfgs(pairs, theta, n)
    s_buf, y_buf, count, head = circular_buffer(pairs, m, n)
    x, g = np.zeros(n), np.array([0.37, 0.31])
    lower, upper = np.array([-0.25, -np.inf]), np.full(n, np.inf)
    with jax.enable_x64(True):
        w, mid = compact_representation(
            *to_jax(s_buf, y_buf), jnp.int32(count), jnp.int32(head), jnp.float64(theta)
        )
        args = to_jax(x, g, lower, upper)
        xc, c, free = cauchy_point(*args, jnp.float64(theta), w, mid)
        x_ref, _, _ = reference_cauchy(x, g, lower, upper, b)
        np.testing.assert_allclose(xc, x_ref, rtol=0, atol=1e-14)
        assert np.asarray(free).all()  # the Cauchy point is before both breakpoints
        d_u = np.linalg.solve(b, -(g + b @ (x_ref - x)))
        projected = np.clip(x_ref + d_u, lower, upper)
        assert g @ (projected - x) > 0.1  # the projected point ascends
        alpha = min(1.0, reference_feasible_step(x_ref, d_u, lower, upper))
        x_bar, used = subspace_minimisation(*args, xc, c, free, jnp.float64(theta), w, mid)
        assert not bool(used)
        np.testing.assert_allclose(x_bar, x_ref + alpha * d_u, rtol=0, atol=1e-13)
        assert g @ (np.asarray(x_bar) - x) < 0


def test_max_feasible_step_by_hand():
    with jax.enable_x64(True):
        inf = np.inf

        def step(x, d, lo, hi):
            return float(max_feasible_step(*to_jax(x, d, lo, hi)))

        x = [0.0, 0.0, 0.0, 0.0]
        assert step(x, [1, -2, 0, 1], [-1, -1, -1, -inf], [2, inf, 1, inf]) == 0.5
        assert step(x, [0, 1, -1, 0], [-1, -inf, -inf, -1], [1, inf, 1, 1]) == inf
        assert step(x, [0, 0, 0, 0], [-1, -1, -1, -1], [1, 1, 1, 1]) == inf
        assert step(x, [1, 1, 0, 0], [-1, -1, -1, -1], [1, 0, 1, 1]) == 0.0  # at u, moving out
        assert step([0.0, 0.5], [0.0, -0.25], [-1, 0], [1, 1]) == 2.0
        rng = np.random.default_rng(11)
        for _ in range(5):
            x, lower, upper = random_box_problem(rng, N)[0], *random_box_problem(rng, N)[2:]
            lower, upper = np.minimum(lower, x), np.maximum(upper, x)
            d = rng.standard_normal(N)
            ref = reference_feasible_step(x, d, lower, upper)
            assert step(x, d, lower, upper) == pytest.approx(ref, rel=1e-14)
            t = step(x, d, lower, upper)
            assert in_box(np.clip(x + t * d, lower, upper), lower, upper)


def test_projected_gradient_by_hand():
    with jax.enable_x64(True):
        inf = np.inf
        x = np.array([0.0, 1.0, 0.5, -1.0, 3.0])
        g = np.array([1.0, -2.0, 0.3, -0.7, 0.0])
        lower = np.array([0.0, -inf, 0.4, -2.0, 3.0])
        upper = np.array([1.0, 1.0, inf, inf, 3.0])
        # 0: at lower, g > 0 points out -> 0; 1: at upper, g < 0 -> 0; 2: 0.1 to lower -> 0.1;
        # 3: unbounded upwards -> 0.7; 4: fixed -> 0
        assert float(projected_gradient_inf_norm(*to_jax(x, g, lower, upper))) == 0.7
        g[3] = 0.05
        assert float(projected_gradient_inf_norm(*to_jax(x, g, lower, upper))) == abs(0.4 - 0.5)
        np.testing.assert_array_equal(
            project(*to_jax([-5.0, 0.5, 7.0], [-1, 0, -inf], [1, 1, 3])), [-1.0, 0.5, 3.0]
        )


def test_projected_gradient_is_scipys_pgtol():
    """scipy's L-BFGS-B stops before its first iteration exactly when the projected gradient
    norm is <= gtol: just above our value it stops with nit = 0, just below it does not."""
    rng = np.random.default_rng(5)
    with jax.enable_x64(True):
        for _ in range(4):
            x, g, lower, upper = random_box_problem(rng, N)

            def fun(z, x=x, g=g):
                return g @ z + 0.5 * np.sum((z - x) ** 2), g + (z - x)

            pg = float(projected_gradient_inf_norm(*to_jax(x, g, lower, upper)))
            assert pg > 0
            for gtol, stops in ((pg * (1 + 1e-9), True), (pg * (1 - 1e-6), False)):
                res = minimize(
                    fun,
                    x,
                    jac=True,
                    method="L-BFGS-B",
                    bounds=list(zip(lower, upper, strict=True)),
                    options={"gtol": gtol, "maxiter": 1},
                )
                assert (res.nit == 0) == stops
