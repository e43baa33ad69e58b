"""L-BFGS's initial matrix: gamma I with gamma = s'y / y'y of the newest pair (the default,
Nocedal & Wright eq. 7.20), or the identity with `LBFGS(scale_initial=False)` (jaxopt's
`use_gamma=False`), in the two-loop form, the compact form and L-BFGS-B."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js
import jaxsearch.internal as jsi
from jaxsearch._box import Box

from ..helpers import compute
from ..problems import rosenbrock


def two_loop(pairs, g, gamma):
    """Nocedal & Wright's algorithm 7.4 with H0 = gamma I, in NumPy: -H g."""
    q, alphas = g.copy(), []
    for s, y in reversed(pairs):
        alpha = (s @ q) / (s @ y)
        q = q - alpha * y
        alphas.append(alpha)
    r = gamma * q
    for (s, y), alpha in zip(pairs, reversed(alphas), strict=True):
        beta = (y @ r) / (s @ y)
        r = r + (alpha - beta) * s
    return -r


def one_pair(n=5, seed=0):
    rng = np.random.default_rng(seed)
    s = rng.standard_normal(n)
    y = 3.0 * s + 0.5 * rng.standard_normal(n)  # s'y > 0, y'y / s'y far from 1
    return s, y, rng.standard_normal(n)


def first_direction(direction, s, y, g, box=None):
    """d after one pair, with the box or without."""
    dtype = jnp.float64
    s, y, g = (jnp.asarray(v, dtype) for v in (s, y, g))
    state = direction.update(direction.init(g, dtype), s, y, dtype)
    if box is None:
        return np.asarray(compute(direction, state, g, dtype)[0])
    info = jsi.DirectionInfo(jnp.zeros_like(g), g, dtype, box=box)
    return np.asarray(direction.compute(state, info)[0])


@pytest.mark.parametrize("form", ["two_loop", "compact", "bounded"])
def test_without_scaling_the_first_direction_is_the_recursion_from_the_identity(form):
    s, y, g = one_pair()
    gamma = (s @ y) / (y @ y)
    assert abs(gamma - 1) > 0.5  # the two initial matrices differ
    with jax.enable_x64(True):
        # Bounds far from x = 0 and x + d: L-BFGS-B's step is then -H g.
        box = Box(jnp.full(5, -1e3), jnp.full(5, 1e3)) if form == "bounded" else None
        kind = "two_loop" if form == "bounded" else form
        plain = first_direction(js.LBFGS(form=kind, scale_initial=False), s, y, g, box)
        scaled = first_direction(js.LBFGS(form=kind), s, y, g, box)
    np.testing.assert_allclose(plain, two_loop([(s, y)], g, 1.0), rtol=1e-10)
    np.testing.assert_allclose(scaled, two_loop([(s, y)], g, gamma), rtol=1e-10)


def test_without_scaling_several_pairs_match_the_recursion():
    rng = np.random.default_rng(3)
    pairs = [one_pair(seed=k)[:2] for k in range(4)]
    g = rng.standard_normal(5)
    with jax.enable_x64(True):
        for form in ("two_loop", "compact"):
            direction = js.LBFGS(memory_size=6, form=form, scale_initial=False)
            state = direction.init(jnp.zeros(5), jnp.float64)
            for s, y in pairs:
                state = direction.update(state, jnp.asarray(s), jnp.asarray(y), jnp.float64)
            d = compute(direction, state, jnp.asarray(g), jnp.float64)[0]
            np.testing.assert_allclose(d, two_loop(pairs, g, 1.0), rtol=1e-10)


@pytest.mark.parametrize("form", ["two_loop", "compact"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_run_without_scaling_converges(form, dtype):
    with jax.enable_x64(dtype == "float64"):
        x0 = jnp.asarray([-1.2, 1.0, -1.2, 1.0], dtype)
        solver = js.Solver(js.LBFGS(form=form, scale_initial=False), gtol=1e-4, max_steps=500)
        result = solver.run(rosenbrock, x0)
        assert bool(result.success), result.message
        np.testing.assert_allclose(result.params, np.ones(4), atol=1e-3)
        bounded = solver.run(rosenbrock, x0, bounds=(-2.0, 0.8))
        assert bool(bounded.success), bounded.message


def test_scale_initial_is_a_bool():
    with pytest.raises(TypeError, match="scale_initial"):
        js.LBFGS(scale_initial="no")


def test_without_scaling_a_preconditioner_is_the_initial_matrix():
    """H0 = P (a diagonal), not gamma P: the recursion with r = P q between the loops."""
    s, y, g = one_pair()
    diagonal = np.linspace(0.5, 2.0, 5)
    with jax.enable_x64(True):
        direction = js.LBFGS(
            form="two_loop", preconditioner=jnp.asarray(diagonal), scale_initial=False
        )
        d = first_direction(direction, s, y, g)
    rho = 1 / (s @ y)
    alpha = rho * (s @ g)
    r = diagonal * (g - alpha * y)
    r = r + (alpha - rho * (y @ r)) * s
    np.testing.assert_allclose(d, -r, rtol=1e-10)
