"""The compact-representation L-BFGS of benchmarks/compact_lbfgs.py computes the two-loop
recursion's direction, so that lbfgs_forms.py --in-solver times the same algorithm."""

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js

from .test_directions import explicit_lbfgs_direction, random_pair

sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))
from compact_lbfgs import CompactLBFGS  # noqa: E402


@pytest.mark.parametrize("interleave", [True, False])
@pytest.mark.parametrize("num_pairs", [1, 3, 8])
def test_compact_matches_explicit_recursion(num_pairs, interleave):
    """`interleave`: a `compute` after each `update`, as in a solver, each bringing S'Y and Y'Y
    up to date with one new pair; otherwise the last `compute` rebuilds them from all pairs.
    A pair with negative curvature in the middle is skipped by both."""
    rng = np.random.default_rng(num_pairs)
    n, m = 6, 5
    direction = CompactLBFGS(memory_size=m)
    with jax.enable_x64(True):
        state = direction.init(jnp.zeros(n), jnp.float64)
        pairs = [random_pair(rng, n) for _ in range(num_pairs)]
        pairs.insert(num_pairs // 2, (np.ones(n), -np.ones(n)))
        for s, y in pairs:
            state = direction.update(state, jnp.asarray(s), jnp.asarray(y), jnp.float64)
            if interleave:
                _, _, state = direction.compute(state, jnp.asarray(s), jnp.float64)
        kept = [pair for pair in pairs if pair[0] @ pair[1] > 0][-m:]
        g = rng.standard_normal(n)
        d, scaled, _ = direction.compute(state, jnp.asarray(g), jnp.float64)
        assert bool(scaled)
        np.testing.assert_allclose(d, explicit_lbfgs_direction(kept, g), rtol=1e-10)


def test_compact_solver_takes_the_two_loop_steps():
    """In float64 the solver with either form takes the same steps on Rosenbrock."""
    with jax.enable_x64(True):
        x0 = jnp.array([-1.2, 1.0, -1.2, 1.0])

        def f(x):
            return jnp.sum(100 * (x[1::2] - x[::2] ** 2) ** 2 + (1 - x[::2]) ** 2)

        two_loop = js.Solver(js.LBFGS(), js.Zoom()).run(f, x0)
        compact = js.Solver(CompactLBFGS(), js.Zoom()).run(f, x0)
        assert int(compact.num_steps) == int(two_loop.num_steps)
        assert int(compact.num_fun_evals) == int(two_loop.num_fun_evals)
        np.testing.assert_allclose(compact.params, two_loop.params, rtol=1e-8)
