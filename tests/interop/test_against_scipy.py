"""Evaluation counts against scipy's minimisers, computed live (issue 3, item 3): BFGS against
`method="BFGS"`, PR+ nonlinear CG and the default nonlinear CG against `method="CG"` (NewtonCG
is in tests/methods/test_newton_cg.py). Both sides stop at gtol = 1e-6 on the infinity norm of the
gradient."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js

from ..problems import logistic, logistic_data, rosenbrock, scipy_minimize

SOLVERS = {
    "BFGS": js.Solver(js.BFGS(), js.Zoom(), gtol=1e-6, ftol=0.0, max_steps=5000),
    # CG needs a fairly exact search (N&W: c2 = 0.1); see docs/methods.md.
    "CG": js.Solver(
        js.NonlinearCG("polak-ribiere"), js.Zoom(c2=0.1), gtol=1e-6, ftol=0.0, max_steps=5000
    ),
    # NonlinearCG() alone: Hager-Zhang beta with its default search, MoreThuente(gtol=0.1).
    "CG-default": js.Solver(js.NonlinearCG(), gtol=1e-6, ftol=0.0, max_steps=5000),
}
SCIPY_METHOD = {"BFGS": "BFGS", "CG": "CG", "CG-default": "CG"}


def problems():
    x, y = logistic_data()
    return {
        "rosenbrock-2": (rosenbrock, np.array([-1.2, 1.0]), ()),
        "rosenbrock-10": (rosenbrock, np.tile([-1.2, 1.0], 5), ()),
        "logistic": (logistic, np.zeros(10), (jnp.asarray(x), jnp.asarray(y), 1e-2)),
    }


@pytest.mark.parametrize("problem", ["rosenbrock-2", "rosenbrock-10", "logistic"])
@pytest.mark.parametrize("method", list(SOLVERS))
def test_evaluations_within_1_5x_of_scipy(method, problem):
    with jax.enable_x64(True):
        fn, x0, args = problems()[problem]
        reference = scipy_minimize(
            fn, x0, args, method=SCIPY_METHOD[method], gtol=1e-6, maxiter=10_000
        )
        assert reference.success, reference.message
        result = SOLVERS[method].run(fn, jnp.asarray(x0), *args)
        assert result.status == js.Status.CONVERGED_GTOL, result.message
        evaluations = int(result.num_fun_evals)
        print(f"{method} {problem}: jaxsearch {evaluations}, scipy nfev {reference.nfev}")
        assert evaluations <= 1.5 * reference.nfev, (evaluations, reference.nfev)


def test_nonlinear_cg_default_search():
    assert js.Solver(js.NonlinearCG()).linesearch == js.MoreThuente(gtol=0.1)
    assert js.Solver(js.LBFGS()).linesearch == js.Zoom()
    assert js.Solver(js.NonlinearCG(), js.Zoom()).linesearch == js.Zoom()


@pytest.mark.parametrize("problem", ["rosenbrock-2", "rosenbrock-10", "logistic"])
def test_nonlinear_cg_default_search_against_zoom(problem):
    """The claim in NonlinearCG's docstring: on Rosenbrock, fewer than half the evaluations
    that Zoom() needs; on the logistic regression, within 25% of them."""
    with jax.enable_x64(True):
        fn, x0, args = problems()[problem]
        default = SOLVERS["CG-default"].run(fn, jnp.asarray(x0), *args)
        zoom = js.Solver(js.NonlinearCG(), js.Zoom(), gtol=1e-6, ftol=0.0, max_steps=5000)
        with_zoom = zoom.run(fn, jnp.asarray(x0), *args)
        assert default.success and with_zoom.success
        ratio = int(default.num_fun_evals) / int(with_zoom.num_fun_evals)
        limit = 0.5 if problem.startswith("rosenbrock") else 1.25
        assert ratio <= limit, ratio
