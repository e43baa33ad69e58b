"""float32 on the accelerator: every direction with every line search it pairs with reaches the
known minimiser of a few standard problems, and a pytree mixing bfloat16 and float32 leaves
converges as docs/mixed-precision.md promises."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js

from ..helpers import LEAN, LEAST_SQUARES
from ..problems import inf_norm, rosenbrock
from .kit import crawls, matrix_pairs, matrix_problems, matrix_solver

pytestmark = pytest.mark.accelerator

HONEST_ENDS = {js.Status.CONVERGED_GTOL, js.Status.CONVERGED_FTOL, js.Status.STALLED}


@pytest.mark.parametrize("direction,search", matrix_pairs())
def test_pair_converges_in_float32(direction, search):
    """Status CONVERGED_* (ftol 0: by gtol) and params within `Problem.bound` of the minimiser
    (tests/accelerator/kit.py's problems: on the CPU, one per pair);
    the pairs that docs/methods.md says crawl may end STALLED instead, within 4 bounds. Every
    run: finite params, f no higher than at x0."""
    least_squares = direction in LEAST_SQUARES
    failures = []
    for problem in matrix_problems(direction, search):
        x0, args = problem.arrays()
        method = matrix_solver(
            direction, search, problem, gtol=problem.gtol, ftol=0.0, max_steps=50_000
        )
        result = method.run(problem.fn, x0, *args, compiler_options=LEAN)
        status = js.Status(int(result.status))
        params = np.asarray(result.params, np.float64)
        error = float(np.max(np.abs(params - problem.minimiser)))
        slack = 4.0 if crawls(direction, search) else 1.0
        allowed = HONEST_ENDS if slack > 1 else {s for s in HONEST_ENDS if s.converged}
        start = problem.fn(x0, *args)
        value = result.value
        if least_squares:  # fn returns the residuals; the solver minimises 0.5 |r|^2
            start = 0.5 * jnp.sum(start**2)
        ok = (
            status in allowed
            and error <= slack * problem.bound()
            and bool(np.all(np.isfinite(params)))
            and float(value) <= float(start)
        )
        if not ok:
            failures.append(
                f"{problem.name}: {status.name} after {int(result.num_steps)} steps, "
                f"|x - x*|_inf = {error:.2e} (allowed {slack * problem.bound():.2e}), "
                f"f = {float(value):.3e} (f(x0) = {float(start):.3e})"
            )
    assert not failures, f"{direction} + {search}: " + "; ".join(failures)


def chain(params, shift):
    """Rosenbrock of the bfloat16 leaf then the float32 leaf, in float32, plus a convex
    quadratic; minimum 0 at all ones (a bfloat16 number) when shift is 0."""
    x = jnp.concatenate([params["lo"].astype(jnp.float32), params["hi"]]) - shift
    weights = jnp.linspace(0.5, 2.0, x.shape[0], dtype=jnp.float32)
    return rosenbrock(x) + 0.5 * jnp.sum(weights * (x - 1) ** 2)


BF16_CENTRE = np.array([1 / 3, -0.7, 2.1])  # between bfloat16 numbers
F32_CENTRE = np.array([0.4, 1.7, -1.3])


def bowl(params, centre):
    """A convex quadratic with a coupling term; its minimiser `centre` is no bfloat16 number
    in the bfloat16 leaf."""
    x = jnp.concatenate([params["lo"].astype(jnp.float32), params["hi"]]) - centre
    weights = jnp.linspace(0.5, 2.0, x.shape[0], dtype=jnp.float32)
    return 0.5 * jnp.sum(weights * x**2) + 0.25 * jnp.sum(x) ** 2


def bf16_spacing(x):
    """The spacing of bfloat16 numbers at |x| (8 significant bits)."""
    return 2.0 ** (np.floor(np.log2(np.abs(x))) - 7)


@pytest.mark.parametrize("memory_dtype", [None, jnp.float32], ids=["memory-as-params", "f32"])
@pytest.mark.parametrize("case", ["bf16-minimiser", "between-bf16"])
def test_mixed_bfloat16_float32_pytree(case, memory_dtype):
    """docs/mixed-precision.md: each leaf keeps its dtype (params and grad), f is in the value
    dtype (float32), and the run ends honestly: converged where the minimiser is a bfloat16
    number, and otherwise converged or STALLED, never claiming a gradient it does not have, with
    the bfloat16 leaf within a bfloat16 spacing of the minimiser and f no higher than at x0."""
    n = 3
    params = {"lo": jnp.full(n, -1.2, jnp.bfloat16), "hi": jnp.full(n, 1.0, jnp.float32)}
    if case == "bf16-minimiser":
        fn, args, minimiser = chain, (jnp.zeros((), jnp.float32),), np.ones(2 * n)
    else:
        minimiser = np.concatenate([BF16_CENTRE, F32_CENTRE])
        fn, args = bowl, (jnp.asarray(minimiser, jnp.float32),)
    gtol = 1e-3
    solver = js.Solver(js.LBFGS(memory_dtype=memory_dtype), gtol=gtol, max_steps=500)
    result = solver.run(fn, params, *args, value_dtype=jnp.float32)

    assert result.params["lo"].dtype == jnp.bfloat16 and result.grad["lo"].dtype == jnp.bfloat16
    assert result.params["hi"].dtype == jnp.float32 and result.grad["hi"].dtype == jnp.float32
    assert result.value.dtype == jnp.float32
    status = js.Status(int(result.status))
    if case == "bf16-minimiser":
        assert status.converged, result.message
    else:
        assert status in HONEST_ENDS, result.message
    if status == js.Status.CONVERGED_GTOL:  # the gradient it claims, measured anew
        assert inf_norm(jax.grad(fn)(result.params, *args)) <= gtol, result.message
    assert float(result.value) <= float(fn(params, *args))
    lo = np.asarray(result.params["lo"], np.float64)
    hi = np.asarray(result.params["hi"], np.float64)
    if case == "bf16-minimiser":
        np.testing.assert_array_less(np.abs(lo - minimiser[:n]), bf16_spacing(minimiser[:n]))
    else:
        # The best the bfloat16 leaf can do is the best point of its lattice, which (the
        # coupling term) need not be the nearest one to the minimiser in each coordinate:
        # f, in float64, within one lattice cell's rise of that best point.
        best, cell = bowl_lattice_bound(minimiser, n)
        assert bowl_float64(np.concatenate([lo, hi]), minimiser) <= best + cell
    # The float32 leaf's minimiser moves with the rounding of the bfloat16 leaf (coupling).
    np.testing.assert_allclose(hi, minimiser[n:], atol=0.05)


def bowl_float64(x, centre):
    """`bowl` in float64 NumPy: 0.5 x'Hx with H = diag(w) + 0.5 11', x = params - centre."""
    hessian = bowl_hessian(x.shape[0])
    z = x - centre
    return 0.5 * z @ hessian @ z


def bowl_hessian(size):
    return np.diag(np.linspace(0.5, 2.0, size)) + 0.5 * np.ones((size, size))


def bowl_lattice_bound(centre, n):
    """(f*, rise): the least float64 `bowl` over bfloat16 values of the first n coordinates
    within 3 spacings of the centre (the others at their exact minimiser given those), and
    the most f rises from there by a move of one spacing in each of the n coordinates."""
    hessian = bowl_hessian(centre.shape[0])
    low, high = hessian[:n, :n], hessian[n:, n:]
    reduced = low - hessian[:n, n:] @ np.linalg.solve(high, hessian[n:, :n])  # Schur complement
    grids = []
    for c in centre[:n]:
        near = np.asarray(jnp.asarray(c, jnp.bfloat16), np.float64)
        grids.append(near + bf16_spacing(c) * np.arange(-3, 4))
    points = np.stack(np.meshgrid(*grids, indexing="ij"), -1).reshape(-1, n) - centre[:n]
    best = float(np.min(0.5 * np.einsum("ki,ij,kj->k", points, reduced, points)))
    spacing = bf16_spacing(centre[:n])
    rise = 0.5 * float(np.max(np.linalg.eigvalsh(reduced))) * float(spacing @ spacing)
    return best, rise
