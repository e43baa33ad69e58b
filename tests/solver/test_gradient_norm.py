"""The gradient norms gtol may test (`gradient_norm`): the infinity norm (scipy's measure, the
default) and the Euclidean norm, of the gradient or, with bounds, of the projected gradient
P(x - g) - x; over every leaf of a pytree, accumulated in at least float32."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

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
