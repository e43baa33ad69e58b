"""Least-squares stopping defaults (issue 51, item 5): with a least-squares direction the
Solver's defaults are gtol=0 and MINPACK's relative decrease test (actual and predicted,
against f alone) at ftol=1e-10, so that `js.Solver(js.LevenbergMarquardt())` fits NIST's
certified values at least as closely as scipy's `least_squares` with its defaults; a step that
changes nothing where the direction's unit step predicted a decrease below the rounding of f
ends `CONVERGED_PRECISION`, a success, and a genuine stall stays `STALLED`. Other directions
keep their defaults (gtol=1e-5, scipy's ftol)."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize

import jaxsearch as js
from benchmarks import nist_problems as nist

# Problems and starts that are fast; MGH09 is the issue's.
CASES = [("MGH09", "start1"), ("MGH09", "start2"), ("Eckerle4", "start2"), ("Rat42", "start2")]


def lre(b, certified) -> float:
    """NIST's log relative error, min over the parameters, capped at 11 digits."""
    error = np.abs(np.asarray(b, np.float64) - certified) / np.abs(certified)
    with np.errstate(divide="ignore"):
        return float(np.min(np.minimum(-np.log10(error), 11.0)))


def scipy_lre(problem, x0) -> float:
    """The better of scipy's least_squares "lm" and "trf" with their defaults."""
    with jax.enable_x64(True):
        jac = jax.jit(jax.jacfwd(nist.residuals), static_argnums=1)
        fits = []
        for method in ("lm", "trf"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fit = scipy.optimize.least_squares(
                    lambda b: nist.residuals(b, problem, xp=np),
                    x0,
                    jac=lambda b: np.asarray(jac(jnp.asarray(b), problem)),
                    method=method,
                )
            fits.append(lre(fit.x, problem.certified))
    return max(fits)


def fit(problem, x0, **settings):
    with jax.enable_x64(True):
        solver = js.Solver(js.LevenbergMarquardt(), **settings)
        return solver.run(nist.residuals, jnp.asarray(x0, jnp.float64), problem)


@pytest.mark.parametrize("case", CASES, ids=["-".join(c) for c in CASES])
def test_default_lm_fits_as_closely_as_scipy(case):
    name, start = case
    problem = nist.PROBLEMS[name]
    x0 = problem.starts[start]
    result = fit(problem, x0)
    assert bool(result.success), result.message
    assert lre(result.params, problem.certified) >= scipy_lre(problem, x0)


def test_defaults_depend_on_the_direction():
    for direction in (js.LevenbergMarquardt(), js.GaussNewton(), js.GaussNewtonCG()):
        solver = js.Solver(direction)
        assert (solver.gtol, solver.ftol) == (0.0, 1e-10)
    for direction in (None, js.LBFGS(), js.BFGS(), js.NonlinearCG(), js.Gradient()):
        solver = js.Solver(direction)
        assert (solver.gtol, solver.ftol) == (1e-5, 2.220446049250313e-09)
    given = js.Solver(js.LevenbergMarquardt(), gtol=1e-6, ftol=0.0)
    assert (given.gtol, given.ftol) == (1e-6, 0.0)


def test_precision_reached_is_a_success():
    """With ftol=0, LM goes on until its steps round away, at 8 digits or more of MGH09: the
    run ends CONVERGED_PRECISION, a success, which `throw=True` does not raise on."""
    problem = nist.PROBLEMS["MGH09"]
    result = fit(problem, problem.start2, ftol=0.0, throw=True)
    assert js.Status(result.status) == js.Status.CONVERGED_PRECISION
    assert bool(result.success)
    assert result.message == js.Status.CONVERGED_PRECISION.message
    assert lre(result.params, problem.certified) >= 8


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64], ids=["float32", "float64"])
def test_precision_in_each_dtype(dtype):
    """An exponential fit with noise (a nonzero residual at the minimiser), ftol=0: the run
    ends CONVERGED_PRECISION near scipy's fit in float64."""
    with jax.enable_x64(dtype == jnp.float64):
        t = np.linspace(0.0, 3.0, 30)
        y = 2.0 * np.exp(-1.3 * t) + 0.5 + 0.01 * np.sin(7 * t)

        def residuals(b, t, y):
            return b[0] * jnp.exp(-b[1] * t) + b[2] - y

        x0 = jnp.asarray([1.0, 0.5, 0.0], dtype)
        result = js.Solver(js.LevenbergMarquardt(), ftol=0.0).run(
            residuals, x0, jnp.asarray(t, dtype), jnp.asarray(y, dtype)
        )
    reference = scipy.optimize.least_squares(
        lambda b: b[0] * np.exp(-b[1] * t) + b[2] - y, [1.0, 0.5, 0.0], xtol=1e-15, ftol=1e-15
    ).x
    assert js.Status(result.status) == js.Status.CONVERGED_PRECISION, result.message
    tol = 1e-3 if dtype == jnp.float32 else 1e-8
    np.testing.assert_allclose(np.asarray(result.params, np.float64), reference, rtol=tol)


@jax.custom_jvp
def wrong_slope(x):
    return x


@wrong_slope.defjvp
def _wrong_slope_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    return x, -dx  # the wrong sign: every step the model proposes raises f


@pytest.mark.parametrize(
    ("direction", "status"),
    [(js.GaussNewton, js.Status.STALLED), (js.LevenbergMarquardt, js.Status.LINESEARCH_FAILED)],
)
def test_a_genuine_stall_stays_stalled(direction, status):
    """Residuals whose Jacobian has the wrong sign: the unit step predicts a decrease of f
    as large as f itself, yet every trial raises f, far from the minimiser: Gauss-Newton's
    search (Zoom) gives up below the line's resolution, STALLED; LM's (Backtracking) spends
    its trial budget first. Neither is a success."""
    with jax.enable_x64(True):
        result = js.Solver(direction()).run(wrong_slope, jnp.asarray([1.0, -2.0]))
    assert js.Status(result.status) == status, result.message
    assert not bool(result.success)
    assert float(result.value) == pytest.approx(2.5)


def test_precision_status_is_kept():
    """CONVERGED_PRECISION says what a step did, not where it ended: a run resumed from it
    stops at once, as from CONVERGED_FTOL."""
    assert js.Status.CONVERGED_PRECISION.converged
    problem = nist.PROBLEMS["MGH09"]
    with jax.enable_x64(True):
        solver = js.Solver(js.LevenbergMarquardt(), ftol=0.0)
        first = solver.run(nist.residuals, jnp.asarray(problem.start2), problem)
        again = solver.run(nist.residuals, first.iterate, problem, state=first.state)
    assert js.Status(again.status) == js.Status.CONVERGED_PRECISION
    assert int(again.num_steps) == int(first.num_steps)
