"""Matrix-free Gauss-Newton (`js.GaussNewtonCG`): its direction is the dense Gauss-Newton one
to CG tolerance (full rank, rank deficient, damped), it descends when CG is cut short, it
solves a least-squares problem with 10,000 unknowns without an m x n array, under vmap, and a
second problem of the same shapes compiles nothing. (Dtypes, resume, the step loop, the
implicit adjoint and the conformance kit: the LEAST_SQUARES registry's tests.)"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js
import jaxsearch.internal as jsi

N = 10_000  # unknowns of the large problem; its residuals: 2 N - 1


def chain(x, a):
    """Residuals coupling neighbours, zero at x = a: x_i - a_i (n of them) and
    3 (x_{i+1} - x_i^2 - a_{i+1} + a_i^2) (n - 1)."""
    return x - a, 3.0 * ((x[1:] - x[:-1] ** 2) - (a[1:] - a[:-1] ** 2))


def exponential(p, t, y):
    return p["a"] * jnp.exp(-p["k"] * t) + p["c"] - y


def _direction(direction, fn, x, state=None):
    """`direction.compute` at x as the solver calls it: g = J'r and fn's residuals."""
    grad = jax.grad(lambda p: 0.5 * sum(jnp.sum(r * r) for r in jax.tree.leaves(fn(p))))(x)
    info = jsi.DirectionInfo(x, grad, jnp.float64, residuals=fn)
    state = direction.init(x, jnp.float64) if state is None else state
    d, scaled, state, _ = direction.compute(state, info)
    return d, scaled, state, grad


def _flat(tree):
    return np.concatenate([np.ravel(a) for a in jax.tree.leaves(tree)])


def test_equals_the_dense_gauss_newton_direction():
    """Full rank (the exponential fit, a dict of params): d = GaussNewton's d to CG
    tolerance, in at most n = 3 CG steps."""
    with jax.enable_x64(True):
        t = jnp.linspace(0.0, 3.0, 20)
        y = 2.0 * jnp.exp(-1.3 * t) + 0.5
        x = {"a": jnp.asarray(1.0), "k": jnp.asarray(0.5), "c": jnp.asarray(0.0)}

        def fn(p):
            return exponential(p, t, y)

        dense, *_ = _direction(js.GaussNewton(), fn, x)
        cg, scaled, state, _ = _direction(js.GaussNewtonCG(forcing=1e-12), fn, x)
        np.testing.assert_allclose(_flat(cg), _flat(dense), rtol=1e-8)
        assert bool(scaled)
        assert int(state.cg_steps) <= 3
        assert int(state.exit) == 0  # CGExit.CONVERGED
        assert int(state.num_products) == int(state.cg_steps)  # one J'(J v) per CG step


def test_rank_deficient_gives_the_least_norm_step():
    """J with two equal columns (J'J singular) and damping 0: CG from 0 stays in the range of
    J' and ends at the least-norm Gauss-Newton step, `GaussNewton`'s (lstsq)."""
    with jax.enable_x64(True):
        rng = np.random.default_rng(0)
        a = rng.normal(size=(10, 4))
        a = jnp.asarray(np.concatenate([a, a[:, :1]], axis=1))  # column 5 = column 1
        b = jnp.asarray(rng.normal(size=10))

        def fn(x):
            return a @ x - b

        x = jnp.zeros(5)
        dense, *_ = _direction(js.GaussNewton(), fn, x)
        cg, *_ = _direction(js.GaussNewtonCG(forcing=1e-12), fn, x)
        np.testing.assert_allclose(cg, dense, rtol=1e-8, atol=1e-12)
        np.testing.assert_allclose(cg, -np.linalg.pinv(a) @ fn(x), rtol=1e-8, atol=1e-12)


def test_damping_solves_the_damped_system():
    """damping mu > 0: d = -(J'J + mu I)^-1 J'r."""
    with jax.enable_x64(True):
        rng = np.random.default_rng(1)
        a = jnp.asarray(rng.normal(size=(8, 3)))
        b = jnp.asarray(rng.normal(size=8))
        x = jnp.asarray([0.3, -0.2, 0.1])

        def fn(x):
            return jnp.tanh(a @ x) - b

        jac = jax.jacfwd(fn)(x)
        mu = 0.7
        want = -np.linalg.solve(jac.T @ jac + mu * np.eye(3), jac.T @ fn(x))
        d, *_ = _direction(js.GaussNewtonCG(damping=mu, forcing=1e-12), fn, x)
        np.testing.assert_allclose(d, want, rtol=1e-9)


def test_descent_when_cg_is_cut_short():
    """One CG step (max_cg_steps=1, exit MAX_STEPS): d = z_1, a positive multiple of -g,
    with g'd < 0 and `scaled` True."""
    with jax.enable_x64(True):
        a = jnp.linspace(0.0, 1.0, 50)
        x = jnp.full(50, 0.5)

        def fn(x):
            return chain(x, a)

        d, scaled, state, g = _direction(js.GaussNewtonCG(max_cg_steps=1), fn, x)
        assert int(state.exit) == 2  # CGExit.MAX_STEPS
        assert int(state.cg_steps) == 1
        assert float(jnp.dot(g, d)) < 0
        ratio = d / -g
        np.testing.assert_allclose(ratio, ratio[0], rtol=1e-12)
        assert float(ratio[0]) > 0 and bool(scaled)


def test_arguments_checked():
    with pytest.raises(ValueError, match="damping must be >= 0"):
        js.GaussNewtonCG(damping=-1.0)
    with pytest.raises(ValueError, match="max_cg_steps"):
        js.GaussNewtonCG(max_cg_steps=0)


def _shapes(jaxpr) -> list[tuple[int, ...]]:
    """Every array shape printed in a jaxpr, sub-jaxprs (the CG while loop) included."""
    return [
        tuple(int(n) for n in dims.split(","))
        for dims in re.findall(r"\[(\d+(?:,\d+)*)\]", str(jaxpr))
    ]


def _largest_array(direction, n):
    """The most elements of any array in the jaxpr of one `compute` on the chain problem."""
    a = jnp.linspace(0.0, 1.0, n, dtype=jnp.float32)
    x = jnp.full(n, 0.5, jnp.float32)

    def fn(x):
        return chain(x, a)

    def compute(x):
        grad = jax.grad(lambda p: 0.5 * sum(jnp.sum(r * r) for r in fn(p)))(x)
        info = jsi.DirectionInfo(x, grad, jnp.float32, residuals=fn)
        return direction.compute(direction.init(x, jnp.float32), info)[0]

    return max(int(np.prod(s)) for s in _shapes(jax.make_jaxpr(compute)(x)))


def test_no_jacobian_is_formed_for_ten_thousand_unknowns():
    """One `compute` on the chain problem (n = 10,000, m = 19,999): no array in its jaxpr has
    more than 2 m elements (J has m n = 2e8); the same check finds GaussNewton's J at n = 50."""
    assert _largest_array(js.GaussNewtonCG(), N) <= 2 * (2 * N - 1)
    assert _largest_array(js.GaussNewton(), 50) >= 50 * 99


@pytest.fixture(scope="module")
def large_solver():
    return js.Solver(js.GaussNewtonCG(), gtol=1e-5, max_steps=30)


def test_solves_ten_thousand_unknowns(large_solver):
    """The chain problem with n = 10,000 in float32 converges (by gtol) to its solution x = a
    in a few steps, without J (m n = 2e8 numbers, 0.8 GB in float32)."""
    a = jnp.linspace(0.0, 1.0, N, dtype=jnp.float32)
    result = large_solver.run(chain, jnp.full(N, 0.5, jnp.float32), a)
    assert result.status == js.Status.CONVERGED_GTOL, result.message
    assert int(result.num_steps) <= 10
    np.testing.assert_allclose(result.params, a, atol=1e-5)


def test_second_problem_compiles_nothing(large_solver, compiles):
    """A second run with new data and a new start (same shapes) compiles nothing."""
    a = jnp.linspace(0.0, 1.0, N, dtype=jnp.float32)
    x0 = jnp.full(N, 0.5, jnp.float32)
    large_solver.run(chain, x0, a).value.block_until_ready()
    a2, x2 = a * 0.5, x0 * 0.9
    compiles.reset()
    result = large_solver.run(chain, x2, a2)
    result.value.block_until_ready()
    assert compiles.count == 0
    assert result.status == js.Status.CONVERGED_GTOL, result.message


def test_vmap_over_data():
    """`jax.vmap` over three data sets fits each one's rate (float64)."""
    with jax.enable_x64(True):
        t = jnp.linspace(0.0, 3.0, 20)
        x0 = {"a": jnp.asarray(1.0), "k": jnp.asarray(0.5), "c": jnp.asarray(0.0)}
        rates = jnp.asarray([0.8, 1.3, 2.0])
        ys = jnp.stack([2.0 * jnp.exp(-k * t) + 0.5 for k in rates])
        solver = js.Solver(js.GaussNewtonCG(), gtol=1e-12, ftol=0.0, max_steps=100)
        batched = jax.vmap(lambda y: solver.run(exponential, x0, t, y).params)(ys)
        np.testing.assert_allclose(batched["k"], rates, rtol=1e-9)
