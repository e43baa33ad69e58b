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
    np.testing.assert_array_less(np.abs(lo - minimiser[:n]), bf16_spacing(minimiser[:n]))
    # The float32 leaf's minimiser moves with the rounding of the bfloat16 leaf (coupling).
    np.testing.assert_allclose(hi, minimiser[n:], atol=0.05)
