"""Dense BFGS and nonlinear CG: BFGS against the explicit inverse-Hessian recursion, its guard
and dtypes, its evaluations against scipy; each CG beta against its formula, Powell's restart,
reset, CG's finite termination on a quadratic; both on Rosenbrock in float64 and float32."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js
from jaxsearch._direction._bfgs import BFGS
from jaxsearch._direction._nonlinear_cg import METHODS, NonlinearCG

from ..helpers import compute, random_pair
from ..problems import (
    ROSENBROCK_START,
    avals,
    inf_norm,
    quadratic,
    rosenbrock,
    rosenbrock_f32,
    scipy_minimize,
    spd_quadratic_data,
)

# ------------------------------------------------------------------------------ BFGS


def explicit_bfgs(pairs, n):
    """H after the pairs by N&W eq. 6.17, with H0 = (s'y / y'y) I from the first pair (6.20)."""
    s0, y0 = pairs[0]
    h = (s0 @ y0) / (y0 @ y0) * np.eye(n)
    for s, y in pairs:
        rho = 1.0 / (s @ y)
        v = np.eye(n) - rho * np.outer(y, s)
        h = v.T @ h @ v + rho * np.outer(s, s)
    return h


def random_pairs(rng, n, k):
    pairs = [random_pair(rng, n) for _ in range(k)]
    assert all(s @ y > 0 for s, y in pairs)
    return pairs


@pytest.mark.parametrize("num_pairs", [1, 2, 6])
def test_bfgs_matches_explicit_recursion(num_pairs):
    n = 5
    rng = np.random.default_rng(num_pairs)
    pairs = random_pairs(rng, n, num_pairs)
    direction = BFGS()
    with jax.enable_x64(True):
        state = direction.init(jnp.zeros(n), jnp.float64)
        for s, y in pairs:
            state = direction.update(state, jnp.asarray(s), jnp.asarray(y), jnp.float64)
        assert int(state.count) == num_pairs
        expected = explicit_bfgs(pairs, n)
        np.testing.assert_allclose(state.inv_hessian, expected, rtol=1e-10, atol=1e-12)
        g = rng.standard_normal(n)
        d, scaled, same = compute(direction, state, jnp.asarray(g), jnp.float64)
        assert bool(scaled) and same is state
        np.testing.assert_allclose(d, -expected @ g, rtol=1e-10)
        # Secant equation of the newest pair: H y = s.
        s, y = pairs[-1]
        np.testing.assert_allclose(np.asarray(state.inv_hessian) @ y, s, rtol=1e-10)


def test_bfgs_without_pairs_is_steepest_and_unscaled():
    direction = BFGS()
    state = direction.init(jnp.zeros(3), jnp.float32)
    g = jnp.array([1.0, -2.0, 3.0])
    d, scaled, _ = compute(direction, state, g, jnp.float32)
    np.testing.assert_array_equal(d, -g)
    assert not bool(scaled)


def test_bfgs_reset_restarts_from_scaled_identity():
    """After reset, H = I and the next pair gets the eq. 6.20 scaling again."""
    n = 4
    pairs = random_pairs(np.random.default_rng(7), n, 3)
    direction = BFGS()
    with jax.enable_x64(True):
        state = direction.init(jnp.zeros(n), jnp.float64)
        for s, y in pairs[:2]:
            state = direction.update(state, jnp.asarray(s), jnp.asarray(y), jnp.float64)
        state = direction.reset(state)
        assert int(state.count) == 0
        np.testing.assert_array_equal(state.inv_hessian, np.eye(n))
        s, y = pairs[2]
        state = direction.update(state, jnp.asarray(s), jnp.asarray(y), jnp.float64)
        np.testing.assert_allclose(state.inv_hessian, explicit_bfgs([pairs[2]], n), rtol=1e-10)


BAD_PAIRS = [
    ([1.0, 0.0], [-1.0, 0.0]),  # negative curvature
    ([1.0, 0.0], [0.0, 1.0]),  # zero curvature
    ([1.0, 0.0], [1e-9, 1.0]),  # s'y = 1e-9 < eps |s| |y| in float32
    ([1.0, 0.0], [np.nan, 1.0]),  # non-finite
    ([np.inf, 0.0], [1.0, 1.0]),  # non-finite
    ([0.0, 0.0], [0.0, 0.0]),  # nothing at all
]


@pytest.mark.parametrize("s,y", BAD_PAIRS)
@pytest.mark.parametrize("after_good_pair", [False, True])
def test_bfgs_guard_skips_bad_pairs(s, y, after_good_pair):
    direction = BFGS()
    state = direction.init(jnp.zeros(2), jnp.float32)
    if after_good_pair:
        state = direction.update(state, jnp.array([0.5, 0.2]), jnp.array([1.0, 0.3]), jnp.float32)
        assert int(state.count) == 1
    new = direction.update(state, jnp.array(s), jnp.array(y), jnp.float32)
    for a, b in zip(jax.tree.leaves(new), jax.tree.leaves(state), strict=True):
        np.testing.assert_array_equal(a, b)


def test_bfgs_curvature_eps():
    """Default eps is that of the least precise param leaf; curvature_eps overrides it."""
    params = {"half": jnp.zeros(1, jnp.bfloat16), "single": jnp.zeros(1, jnp.float32)}
    state = BFGS().init(params, jnp.float32)
    assert float(state.eps) == float(jnp.finfo(jnp.bfloat16).eps)
    s = {"half": jnp.array([1.0]), "single": jnp.array([0.0])}
    y = {"half": jnp.array([1e-3]), "single": jnp.array([1.0])}  # s'y / |s||y| ~ 1e-3 < 2^-7
    assert int(BFGS().update(state, s, y, jnp.float32).count) == 0
    relaxed = BFGS(curvature_eps=1e-4)
    assert int(relaxed.update(relaxed.init(params, jnp.float32), s, y, jnp.float32).count) == 1
    # A tiny but positive s'y is stored with curvature_eps=0 (and the matrix stays finite).
    s, y = jnp.array([1.0, 0.0]), jnp.array([1e-9, 1.0])
    zero = BFGS(curvature_eps=0.0)
    kept = zero.update(zero.init(jnp.zeros(2), jnp.float32), s, y, jnp.float32)
    assert int(kept.count) == 1 and bool(jnp.all(jnp.isfinite(kept.inv_hessian)))


def test_bfgs_mixed_dtypes():
    """One float32 matrix for a bfloat16/float32 pytree; d comes back in each leaf's dtype."""
    params = {"half": jnp.ones(3, jnp.bfloat16), "single": jnp.ones((2, 2), jnp.float32)}
    direction = BFGS()
    state = direction.init(params, jnp.float32)
    assert state.inv_hessian.shape == (7, 7) and state.inv_hessian.dtype == jnp.float32
    s = {"half": jnp.full(3, 0.1, jnp.float32), "single": jnp.full((2, 2), 0.1, jnp.float32)}
    y = {"half": jnp.full(3, 0.2, jnp.float32), "single": jnp.full((2, 2), 0.3, jnp.float32)}
    new = direction.update(state, s, y, jnp.float32)
    assert int(new.count) == 1
    assert avals(new) == avals(state)
    d, scaled, _ = compute(direction, new, params, jnp.float32)
    assert bool(scaled)
    assert d["half"].dtype == jnp.bfloat16 and d["half"].shape == (3,)
    assert d["single"].dtype == jnp.float32 and d["single"].shape == (2, 2)
    # The leaves are concatenated in tree order: compare with the flat product.
    flat_g = np.ones(7, np.float32)
    flat_d = -np.asarray(new.inv_hessian) @ flat_g
    np.testing.assert_allclose(np.asarray(d["half"], np.float32), flat_d[:3], rtol=1e-2)
    np.testing.assert_allclose(d["single"], flat_d[3:].reshape(2, 2), rtol=1e-6)


def test_bfgs_float64_leaf_gives_float64_matrix():
    with jax.enable_x64(True):
        params = (jnp.zeros(2, jnp.float16), jnp.zeros(3, jnp.float64))
        state = BFGS().init(params, jnp.float32)
        assert state.inv_hessian.dtype == jnp.float64
        assert float(state.eps) == float(jnp.finfo(jnp.float16).eps)


def test_bfgs_zoom_evaluations_against_scipy():
    """2-D Rosenbrock in float64 to gtol 1e-6 in at most 1.2x scipy BFGS's evaluations."""
    with jax.enable_x64(True):
        reference = scipy_minimize(rosenbrock, ROSENBROCK_START, method="BFGS", gtol=1e-6)
        assert reference.success
        result = js.Solver(BFGS(), js.Zoom(), gtol=1e-6, ftol=0.0).run(
            rosenbrock, jnp.array(ROSENBROCK_START)
        )
        assert result.status == js.Status.CONVERGED_GTOL, result.message
        assert inf_norm(result.grad) <= 1e-6
        np.testing.assert_allclose(result.params, [1.0, 1.0], atol=1e-5)
        evals = int(result.num_fun_evals)
        print(f"BFGS+Zoom: {int(result.num_steps)} steps, {evals} evaluations; ")
        print(f"scipy BFGS: {reference.nit} iterations, {reference.nfev} evaluations")
        assert evals <= 1.2 * reference.nfev, (evals, reference.nfev)


# ----------------------------------------------------------------------- nonlinear CG


def numpy_beta(method, g, gp, dp, eta=0.01):
    y = g - gp
    if method == "fletcher-reeves":
        return (g @ g) / (gp @ gp)
    if method == "polak-ribiere":
        return max(0.0, (g @ y) / (gp @ gp))
    if method == "hestenes-stiefel":
        return (g @ y) / (dp @ y)
    if method == "dai-yuan":
        return (g @ g) / (dp @ y)
    beta_n = (y - 2 * dp * (y @ y) / (dp @ y)) @ g / (dp @ y)
    eta_k = -1 / (np.linalg.norm(dp) * min(eta, np.linalg.norm(gp)))
    return max(beta_n, eta_k)


def random_case(seed, n=6):
    rng = np.random.default_rng(seed)
    gp = rng.standard_normal(n)
    dp = -gp + 0.3 * rng.standard_normal(n)
    g = 0.6 * rng.standard_normal(n)
    return g, gp, dp


CASES = {
    "random": random_case(0),
    "random2": random_case(1),
    # g'y < 0: PR is negative, PR+ clips it to 0.
    "pr-negative": (np.array([0.5, 0.01, 0.0]), np.array([1.0, 0.0, 0.0]), np.array([-1.0, 0, 0])),
    # d'y small, d'g large: HZ's beta_N = -1035 lies below eta_k = -87.7, the bound binds.
    "hz-bound": (np.array([0.5, 1.0, 0.0]), np.array([1.0, 0.0, 0.0]), np.array([1.0, 0.55, 0])),
}


def cg_after(direction, g_prev, d_prev, dtype):
    """The state after a `compute` at g_prev, with the recorded direction replaced by d_prev."""
    state = direction.init(g_prev, dtype)
    _, _, state = compute(direction, state, g_prev, dtype)
    return eqx.tree_at(lambda st: st.direction, state, d_prev)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("method", METHODS)
def test_cg_beta_matches_formula(method, case):
    g, gp, dp = CASES[case]
    expected = numpy_beta(method, g, gp, dp)
    if case == "pr-negative" and method == "polak-ribiere":
        assert expected == 0.0
    if case == "hz-bound" and method == "hager-zhang":
        assert expected == pytest.approx(-1 / (np.linalg.norm(dp) * 0.01))
    direction = NonlinearCG(method, restart_threshold=None)
    with jax.enable_x64(True):
        state = cg_after(direction, jnp.asarray(gp), jnp.asarray(dp), jnp.float64)
        d, scaled, new = compute(direction, state, jnp.asarray(g), jnp.float64)
        assert not bool(scaled)
        np.testing.assert_allclose(d, -g + expected * dp, rtol=1e-12, atol=1e-12)
        # The new state records g and d for the next step, with unchanged avals.
        np.testing.assert_array_equal(new.grad, g)
        np.testing.assert_array_equal(new.direction, d)
        assert avals(new) == avals(state)


@pytest.mark.parametrize("method", METHODS)
def test_cg_first_direction_is_steepest(method):
    direction = NonlinearCG(method)
    state = direction.init(jnp.zeros(3), jnp.float32)
    g = jnp.array([1.0, -2.0, 3.0])
    d, scaled, new = compute(direction, state, g, jnp.float32)
    np.testing.assert_array_equal(d, -g)
    assert not bool(scaled) and bool(new.has_prev)
    assert avals(new) == avals(state)


@pytest.mark.parametrize(
    "threshold,overlap,restart",
    [
        (0.25, 0.25 - 1e-9, False),
        (0.25, 0.25, True),  # |g'g_prev| >= threshold |g|^2: restart
        (0.25, 0.25 + 1e-9, True),
        (0.25, -0.25, True),  # the absolute value counts
        (0.25, -0.25 + 1e-9, False),
        (0.2, 0.19, False),  # the default threshold
        (0.2, 0.21, True),
        (None, 0.99, False),  # switched off
    ],
)
def test_cg_powell_restart(threshold, overlap, restart):
    """g = (1, 0), g_prev = (overlap, 1): |g'g_prev| / |g|^2 = |overlap|."""
    kwargs = {} if threshold == 0.2 else {"restart_threshold": threshold}
    direction = NonlinearCG("fletcher-reeves", **kwargs)
    g, gp, dp = np.array([1.0, 0.0]), np.array([overlap, 1.0]), np.array([-0.5, -1.0])
    with jax.enable_x64(True):
        state = cg_after(direction, jnp.asarray(gp), jnp.asarray(dp), jnp.float64)
        d, _, _ = compute(direction, state, jnp.asarray(g), jnp.float64)
    expected = -g if restart else -g + numpy_beta("fletcher-reeves", g, gp, dp) * dp
    np.testing.assert_allclose(d, expected, rtol=1e-12)


def test_cg_nonfinite_beta_restarts():
    """d'y = 0 makes HS's beta infinite: d = -g, not NaN."""
    direction = NonlinearCG("hestenes-stiefel", restart_threshold=None)
    g, gp, dp = np.array([1.0, 1.0]), np.array([1.0, 0.0]), np.array([1.0, 0.0])  # y = (0, 1)
    with jax.enable_x64(True):
        state = cg_after(direction, jnp.asarray(gp), jnp.asarray(dp), jnp.float64)
        d, _, _ = compute(direction, state, jnp.asarray(g), jnp.float64)
    np.testing.assert_array_equal(d, -g)


@pytest.mark.parametrize("method", METHODS)
def test_cg_reset_restarts_with_steepest_descent(method):
    """The solver replaces a non-descent d by -g and calls reset: the state then records -g as
    the direction taken, and the next beta builds on it."""
    direction = NonlinearCG(method, restart_threshold=None)
    g0, g1 = np.array([1.0, -2.0, 0.5]), np.array([0.3, 0.2, -0.4])
    with jax.enable_x64(True):
        state = direction.init(jnp.zeros(3), jnp.float64)
        # reset before any compute: still steepest descent first.
        d, _, state = compute(direction, direction.reset(state), jnp.asarray(g0), jnp.float64)
        np.testing.assert_array_equal(d, -g0)
        state = cg_after(direction, jnp.asarray(g0), jnp.asarray([5.0, 1.0, 1.0]), jnp.float64)
        reset = direction.reset(state)
        assert avals(reset) == avals(state)
        np.testing.assert_array_equal(reset.direction, -g0)
        d, _, _ = compute(direction, reset, jnp.asarray(g1), jnp.float64)
        expected = -g1 + numpy_beta(method, g1, g0, -g0) * -g0
        np.testing.assert_allclose(d, expected, rtol=1e-12)


QUADRATIC_N = 20


@pytest.mark.parametrize("method", METHODS)
def test_cg_quadratic_finite_termination(method):
    """On a 20-dim SPD quadratic (condition 100) with a near-exact line search, CG reaches
    gtol 1e-8 within 2n steps (n with exact line searches and exact arithmetic), Fletcher-Reeves
    within 3n: its beta does not restart itself after a step that rounding made poor (Powell
    1984; Nocedal & Wright section 5.2): on an AMD Zen 4 host with AVX-512, where XLA's float64
    sums round otherwise, it took 42 steps, where the suite's other machines stayed within 40.

    The minimum is at 0 with f = 0 there, so f near the minimum has full relative precision
    and the search can resolve the last steps."""
    n = QUADRATIC_N
    a, _, _ = spd_quadratic_data(n=n, cond=100.0)
    x0 = np.random.default_rng(1).standard_normal(n)
    solver = js.Solver(NonlinearCG(method), js.Zoom(c2=0.01), gtol=1e-8, ftol=0.0, max_steps=4 * n)
    with jax.enable_x64(True):
        result = solver.run(quadratic, jnp.asarray(x0), jnp.asarray(a), jnp.zeros(n))
        steps = int(result.num_steps)
        print(f"CG {method}, n={n} quadratic: {steps} steps, {int(result.num_fun_evals)} evals")
        assert result.status == js.Status.CONVERGED_GTOL, result.message
        assert inf_norm(result.grad) <= 1e-8
        assert steps <= (3 if method == "fletcher-reeves" else 2) * n, steps


@pytest.mark.parametrize("method", METHODS)
def test_cg_rosenbrock_float64(method):
    c2 = 0.1 if method in ("fletcher-reeves", "dai-yuan") else 0.9
    solver = js.Solver(NonlinearCG(method), js.Zoom(c2=c2), gtol=1e-6, ftol=0.0, max_steps=1000)
    with jax.enable_x64(True):
        result = solver.run(rosenbrock, jnp.array(ROSENBROCK_START))
        print(
            f"CG {method} + Zoom(c2={c2}) on Rosenbrock: {int(result.num_steps)} steps, "
            f"{int(result.num_fun_evals)} evals"
        )
        assert result.status == js.Status.CONVERGED_GTOL, result.message
        assert inf_norm(result.grad) <= 1e-6
        np.testing.assert_allclose(result.params, [1.0, 1.0], atol=1e-5)


# -------------------------------------------------------------------- both directions

DIRECTIONS = {
    "bfgs": BFGS(),
    "cg-hz": NonlinearCG(),
    "cg-pr": NonlinearCG("polak-ribiere"),
    "cg-fr": NonlinearCG("fletcher-reeves"),
}
SEARCHES = {"zoom": js.Zoom(), "backtracking": js.Backtracking()}


@pytest.mark.parametrize("search", SEARCHES)
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_float32_rosenbrock_is_honest(direction, search):
    gtol = 1e-3
    solver = js.Solver(DIRECTIONS[direction], SEARCHES[search], gtol=gtol, ftol=0.0, max_steps=2000)
    x0 = jnp.array(ROSENBROCK_START, jnp.float32)
    result = solver.run(rosenbrock_f32, x0)
    assert result.params.dtype == jnp.float32
    assert bool(jnp.all(jnp.isfinite(result.params))) and bool(jnp.isfinite(result.value))
    honest = {
        js.Status.CONVERGED_GTOL,
        js.Status.STALLED,
        js.Status.LINESEARCH_FAILED,
        js.Status.MAX_STEPS,
    }
    assert js.Status(int(result.status)) in honest, result.message
    print(
        f"{direction} + {search}, float32: {js.Status(int(result.status)).name}, "
        f"{int(result.num_steps)} steps, f = {float(result.value):.3g}"
    )
    # What it reports is measured at the returned point (up to the rounding differences
    # between the compiled and the eager objective: Rosenbrock's gradient cancels terms of
    # size ~400 near the minimum).
    value, grad = jax.value_and_grad(rosenbrock_f32)(result.params)
    np.testing.assert_allclose(result.value, value, rtol=1e-4, atol=1e-10)
    np.testing.assert_allclose(result.grad, grad, rtol=1e-3, atol=1e-4)
    if result.status == js.Status.CONVERGED_GTOL:
        assert inf_norm(result.grad) <= gtol
    assert float(result.value) <= float(rosenbrock_f32(x0))


# ----------------------------------------------------------------------- validation


def test_constructors_reject_bad_settings():
    with pytest.raises(ValueError, match="curvature_eps"):
        BFGS(curvature_eps=-1.0)
    with pytest.raises(ValueError, match="valid methods are 'fletcher-reeves', 'polak-ribiere'"):
        NonlinearCG("pr+")
    with pytest.raises(ValueError, match="restart_threshold"):
        NonlinearCG(restart_threshold=0.0)
    with pytest.raises(ValueError, match="eta"):
        NonlinearCG(eta=0.0)


def test_defaults_construct():
    assert NonlinearCG().method == "hager-zhang"
    assert NonlinearCG().restart_threshold == 0.2
    assert BFGS().curvature_eps is None
    assert js.Solver(BFGS(), js.Backtracking()) == js.Solver(BFGS(), js.Backtracking())
