"""The gradient norms gtol may test (`gradient_norm`): the infinity norm (scipy's measure, the
default) and the Euclidean norm, of the gradient or, with bounds, of the projected gradient
P(x - g) - x; over every leaf of a pytree, accumulated in at least float32."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js
from jaxsearch._box import GRADIENT_NORMS, Box, gradient_norm


def numpy_norm(parts, norm):
    flat = np.concatenate([np.ravel(np.asarray(p, np.float64)) for p in parts])
    return np.max(np.abs(flat)) if norm == "inf" else np.linalg.norm(flat)


@pytest.mark.parametrize("norm", GRADIENT_NORMS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "float64"])
def test_the_norm_of_a_pytree_gradient(norm, dtype):
    rng = np.random.default_rng(0)
    grad_np = {"a": rng.standard_normal(100), "b": (rng.standard_normal((3, 4)),)}
    with jax.enable_x64(dtype == "float64"):
        grad = jax.tree.map(lambda v: jnp.asarray(v, dtype), grad_np)
        scalar = jnp.float64 if dtype == "float64" else jnp.float32
        got = gradient_norm(grad, grad, None, scalar, norm)
        assert got.dtype == scalar
        rounded = [np.asarray(leaf, np.float64) for leaf in jax.tree.leaves(grad)]
        rtol = 1e-6 if dtype != "float64" else 1e-14
        np.testing.assert_allclose(float(got), numpy_norm(rounded, norm), rtol=rtol)


def test_the_two_norms_differ_by_the_known_factor():
    """A gradient of n equal entries c: |g|_inf = c, |g|_2 = c sqrt(n)."""
    grad = jnp.full(100, 0.5, jnp.float32)
    assert float(gradient_norm(grad, grad, None, jnp.float32, "inf")) == 0.5
    assert float(gradient_norm(grad, grad, None, jnp.float32, "2")) == pytest.approx(5.0)


@pytest.mark.parametrize("norm", GRADIENT_NORMS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_with_bounds_the_projected_gradient(norm, dtype):
    rng = np.random.default_rng(1)
    x_np = np.clip(rng.standard_normal(50), -0.5, 0.5)
    g_np = rng.standard_normal(50)
    lower, upper = np.full(50, -0.5), np.full(50, 0.5)
    step = np.clip(x_np - g_np, lower, upper) - x_np
    assert np.sum(step == 0) > 5 and np.sum(step != -g_np) > 10  # active bounds cut g
    with jax.enable_x64(dtype == "float64"):
        x, g, lo, up = (jnp.asarray(v, dtype) for v in (x_np, g_np, lower, upper))
        got = gradient_norm(x, g, Box(lo, up), jnp.dtype(dtype), norm)
    rtol = 1e-6 if dtype == "float32" else 1e-14
    np.testing.assert_allclose(float(got), numpy_norm([step], norm), rtol=rtol)


# `Solver(gtol_norm="2")`: gtol on the Euclidean norm, everywhere a run compares or reports it.


def bowl(x):
    """0.5 |x - 1|^2: with steepest descent and a fixed step 0.1, g_{k+1} = 0.9 g_k, so from
    x0 = c (1, ..., 1) every gradient has equal entries and |g|_2 = sqrt(n) |g|_inf (10 |g|_inf
    for n = 100), and both norms fall by 0.9 a step."""
    return 0.5 * jnp.sum((x - 1) ** 2)


def steps_to(gtol, start):
    """The first k with start 0.9^k <= gtol, in NumPy."""
    k, norm = 0, start
    while norm > gtol:
        k, norm = k + 1, norm * 0.9
    return k


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_run_stops_exactly_where_the_two_norm_falls_to_gtol(dtype):
    gtol = 1e-3
    settings = dict(gtol=gtol, ftol=0.0, max_steps=500)
    direction, search = js.Gradient(), js.FixedStep(0.1)
    with jax.enable_x64(dtype == "float64"):
        x0 = jnp.full(100, 3.0, dtype)  # g0 = -2 in every entry
        euclid = js.Solver(direction, search, gtol_norm="2", **settings)
        euclid = euclid.run(bowl, x0, history=True)
        infinity = js.Solver(direction, search, **settings).run(bowl, x0, history=True)
    for result in (euclid, infinity):
        assert js.Status(result.status) == js.Status.CONVERGED_GTOL, result.message
        grad = np.asarray(result.grad, np.float64)
        np.testing.assert_allclose(grad, grad[0], rtol=1e-5)  # equal entries
    assert int(euclid.num_steps) == steps_to(gtol, 20.0)  # |g0|_2 = 2 sqrt(100)
    assert int(infinity.num_steps) == steps_to(gtol, 2.0)  # |g0|_inf = 2
    assert int(euclid.num_steps) > int(infinity.num_steps) + 20
    # history's grad_norm is the norm gtol tests: above gtol until the last step
    rows = euclid.history.to_numpy()["grad_norm"]
    assert np.all(rows[:-1] > gtol) and rows[-1] <= gtol
    np.testing.assert_allclose(rows[-1], np.linalg.norm(euclid.grad), rtol=1e-5)
    inf_rows = infinity.history.to_numpy()["grad_norm"]
    assert np.all(inf_rows[:-1] > gtol) and inf_rows[-1] <= gtol
    np.testing.assert_allclose(inf_rows[-1], np.max(np.abs(infinity.grad)), rtol=1e-6)
    assert float(np.linalg.norm(infinity.grad)) > 5 * gtol


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_with_bounds_gtol_is_on_the_projected_gradients_two_norm(dtype):
    def fn(x):
        return jnp.sum((x - jnp.linspace(-2.0, 2.0, x.size, dtype=x.dtype)) ** 2)

    gtol = 1e-4
    with jax.enable_x64(dtype == "float64"):
        x0 = jnp.zeros(40, dtype)
        bounds = (-1.0, 1.0)  # 20 of the 40 minimisers lie outside: active bounds
        result = js.Solver(gtol=gtol, gtol_norm="2", ftol=0.0).run(fn, x0, bounds=bounds)
    assert js.Status(result.status) == js.Status.CONVERGED_GTOL, result.message
    x, g = np.asarray(result.params, np.float64), np.asarray(result.grad, np.float64)
    assert np.linalg.norm(g) > 1  # the gradient itself is large at the active bounds
    assert np.linalg.norm(np.clip(x - g, -1, 1) - x) <= gtol


def test_the_default_is_the_infinity_norm_and_others_are_refused():
    assert js.Solver().gtol_norm == "inf"
    for bad in ("l2", "fro", "INF"):
        with pytest.raises(ValueError, match="gtol_norm must be one of 'inf', '2'"):
            js.Solver(gtol_norm=bad)


def test_stop_when_sees_the_chosen_norm():
    """The record `stop_when` reads has the norm gtol tests."""
    seen = []

    def stop(record):
        jax.debug.callback(lambda v: seen.append(float(v)), record["grad_norm"])
        return jnp.array(False)

    x0 = jnp.full(100, 3.0)
    solver = js.Solver(js.Gradient(), js.FixedStep(0.1), gtol_norm="2", stop_when=stop)
    result = solver.run(bowl, x0)
    assert len(seen) == int(result.num_steps)
    np.testing.assert_allclose(seen[-1], np.linalg.norm(result.grad), rtol=1e-5)


def test_optimistix_takes_the_chosen_norm():
    optx = pytest.importorskip("optimistix")
    assert js.Solver().as_optimistix().norm is optx.max_norm
    assert js.Solver(gtol_norm="2").as_optimistix().norm is optx.two_norm
