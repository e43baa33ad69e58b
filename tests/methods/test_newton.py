"""Newton's direction with a modified Hessian (Nocedal & Wright, algorithm 3.3): the pure
Newton step where H is positive definite, quadratic convergence near a minimiser, and the
shift of algorithm 3.3 where H is not."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize

import jaxsearch as js

from ..helpers import compute


def rosenbrock(x):
    return jnp.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


@pytest.fixture(scope="module")
def rosenbrock_runs():
    with jax.enable_x64(True):
        runs = {}
        for name, search in [("Zoom", js.Zoom()), ("Backtracking", js.Backtracking())]:
            solver = js.Solver(js.Newton(), search, gtol=1e-10, ftol=0.0, max_steps=100)
            runs[name] = solver.run(rosenbrock, jnp.array([-1.2, 1.0]), history=True)
        return runs


@pytest.mark.parametrize("search", ["Zoom", "Backtracking"])
def test_rosenbrock_converges_quadratically(rosenbrock_runs, search):
    """From (-1.2, 1) in float64 to |g|_inf <= 1e-10: at (1, 1), in no more steps than scipy's
    trust-exact with the exact Hessian (26 iterations), and quadratically at the end: once
    |g| < 1e-2, |g_k+1| <= |g_k|^2 (times a modest constant)."""
    result = rosenbrock_runs[search]
    assert result.status == js.Status.CONVERGED_GTOL, result.message
    np.testing.assert_allclose(result.params, [1.0, 1.0], rtol=1e-12)
    with jax.enable_x64(True):
        reference = scipy.optimize.minimize(
            lambda x: float(rosenbrock(jnp.asarray(x))),
            np.array([-1.2, 1.0]),
            jac=lambda x: np.asarray(jax.grad(rosenbrock)(jnp.asarray(x))),
            hess=lambda x: np.asarray(jax.hessian(rosenbrock)(jnp.asarray(x))),
            method="trust-exact",
            options={"gtol": 1e-10},
        )
    assert reference.success
    assert int(result.num_steps) <= reference.nit
    norms = result.history.to_numpy()["grad_norm"]
    near = [k for k in range(len(norms) - 1) if 0 < norms[k] < 1e-2 and norms[k + 1] > 0]
    assert len(near) >= 2
    for k in near:
        assert norms[k + 1] <= 100 * norms[k] ** 2, (k, norms[k], norms[k + 1])


def test_a_convex_quadratic_takes_one_step():
    """On 0.5 x'Ax - b'x with A positive definite, the unit Newton step is exact: one step
    to A^-1 b, in float64 to rounding."""
    rng = np.random.default_rng(0)
    q = rng.normal(size=(6, 6))
    a = q @ q.T + 6 * np.eye(6)
    b = rng.normal(size=6)
    with jax.enable_x64(True):
        aj, bj = jnp.asarray(a), jnp.asarray(b)
        result = js.Solver(js.Newton(), gtol=1e-9, ftol=0.0).run(
            lambda x: 0.5 * x @ aj @ x - bj @ x, jnp.zeros(6)
        )
        assert int(result.num_steps) == 1
        assert float(result.state.direction.shift) == 0.0
    np.testing.assert_allclose(result.params, np.linalg.solve(a, b), rtol=1e-10)


def test_an_indefinite_hessian_is_shifted_as_algorithm_3_3_says():
    """H = diag(2, -1): its smallest diagonal entry is -1, so tau_0 = beta + 1 with
    beta = 1e-3 * 2 (scaled by the largest |H_ii|), and H + tau_0 I = diag(3.002, 0.002) is
    positive definite: d = -(H + tau_0 I)^-1 g, a descent direction where the pure Newton
    step -H^-1 g ascends."""
    with jax.enable_x64(True):
        h = jnp.diag(jnp.array([2.0, -1.0]))
        grad = jnp.array([1.0, 1.0])
        direction = js.Newton()
        state = direction.init(grad, jnp.float64)
        d, scaled, state = compute(direction, state, grad, jnp.float64, hvp=lambda v: h @ v)
        tau = 1e-3 * 2 + 1
        np.testing.assert_allclose(float(state.shift), tau, rtol=1e-14)
        np.testing.assert_allclose(d, -grad / (jnp.diagonal(h) + tau), rtol=1e-14)
        assert bool(scaled)
        assert float(grad @ d) < 0 < float(grad @ -jnp.linalg.solve(h, grad))
        assert int(state.num_hvp) == 2


def test_a_hessian_whose_diagonal_is_positive_but_not_definite_doubles_the_shift():
    """H = [[1, 2], [2, 1]] (eigenvalues 3 and -1), diagonal positive: tau_0 = 0 fails, then
    tau = max(2 tau, beta) = beta = 1e-3, 2e-3, ... doubles until H + tau I is positive
    definite, the first tau > 1: 1e-3 * 2^10 = 1.024."""
    with jax.enable_x64(True):
        h = jnp.array([[1.0, 2.0], [2.0, 1.0]])
        grad = jnp.array([1.0, -0.5])
        direction = js.Newton()
        state = direction.init(grad, jnp.float64)
        d, _, state = compute(direction, state, grad, jnp.float64, hvp=lambda v: h @ v)
        np.testing.assert_allclose(float(state.shift), 1.024, rtol=1e-14)
        np.testing.assert_allclose(d, -jnp.linalg.solve(h + 1.024 * jnp.eye(2), grad), rtol=1e-12)
        assert float(grad @ d) < 0


def test_pytree_params_in_low_precision_reach_the_minimiser():
    """A mixed pytree (bfloat16 and float32 leaves): H is formed and factored in float32, d
    comes back in each leaf's dtype, and the run reaches the minimiser of a separable
    quartic-plus-quadratic bowl to its dtypes' resolution."""

    def fn(p):
        w, b = p["w"].astype(jnp.float32), p["b"]
        return jnp.sum((w - 1.0) ** 4 + (w - 1.0) ** 2) + jnp.sum((b + 2.0) ** 2)

    params = {"w": jnp.zeros(3, jnp.bfloat16), "b": jnp.zeros(2, jnp.float32)}
    result = js.Solver(js.Newton(), gtol=1e-2).run(fn, params)
    assert result.success, result.message
    assert result.params["w"].dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(result.params["w"], np.float32), 1.0, atol=2e-2)
    np.testing.assert_allclose(result.params["b"], -2.0, atol=1e-3)


def test_a_nonfinite_hessian_gives_a_nonfinite_d_and_the_run_steps_along_minus_g():
    """A Hessian that is not finite: no shift is tried (the loop of algorithm 3.3 does not
    run), d is not finite, and a run whose Hessian is NaN at x0 still descends, along -g."""
    with jax.enable_x64(True):
        grad = jnp.array([1.0, -2.0])
        direction = js.Newton()
        state = direction.init(grad, jnp.float64)
        d, _, state = compute(
            direction, state, grad, jnp.float64, hvp=lambda v: jnp.full_like(v, jnp.nan)
        )
        assert not bool(jnp.all(jnp.isfinite(d)))

        @jax.custom_jvp
        def bowl(x):
            return jnp.sum((x - 3.0) ** 2)

        @bowl.defjvp
        def _(primals, tangents):  # a gradient whose own derivative is NaN: H = NaN
            (x,), (t,) = primals, tangents
            slope = 2 * (x - 3.0) + jnp.sqrt(0.0 * jnp.abs(x))  # 0, of derivative NaN
            return bowl(x), jnp.sum(slope * t)

        result = js.Solver(js.Newton(), max_steps=3, gtol=0.0, ftol=0.0).run(bowl, jnp.zeros(2))
        assert float(result.value) < float(bowl(jnp.zeros(2)))
