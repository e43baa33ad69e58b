"""Do jaxsearch's least-squares defaults fit NIST's certified values as closely as scipy's?
Date: 2026-12-07, commit COMMIT

On the NIST StRD problems of higher difficulty (benchmarks/nist_problems.py), float64, from
NIST's start 1 and start 2: the certified digits (LRE, NIST's log relative error, min over the
parameters of -log10(|b - b*| / |b*|), capped at 11) and the status of
`js.Solver(js.LevenbergMarquardt())` and `js.Solver(js.GaussNewton())` with default settings,
and of `scipy.optimize.least_squares(method="lm")` and `(method="trf")` with theirs (ftol =
xtol = gtol = 1e-8; the Jacobian is jax.jacfwd's, compiled):

    python -m benchmarks.studies.least_squares_defaults

"LM before", "GN before": the same runs at commit cf367f7, before this change (gtol=1e-5 on
|J'r|_inf, ftol=2.2e-9 on the relative decrease floored at 1).

Why the former defaults stopped early: gtol=1e-5 bounds J'r absolutely, so it depends on the
scales of r and b (MGH09, f* = 1.5e-4, met it at 1.8-2.0 digits; Eckerle4 at 4.3-4.8), and
ftol's scale max(|f|, 1) makes the test absolute for f < 1 (MGH09, Eckerle4, Bennett5).
scipy's tests (scipy 1.17.1 `optimize/_lsq`; MINPACK's lmder): "lm" stops where the actual
and the predicted relative reductions of |r|^2 are both at most ftol, where the trust radius
is at most xtol |D x|, or where the largest cosine between r and a column of J is at most
gtol; "trf" where dF < ftol F with a gain ratio above 1/4, |dx| < xtol (xtol + |x|), or
|g_scaled|_inf < gtol. The new least-squares defaults (`jaxsearch/_pairing.py`): gtol=0 and
MINPACK's ftol test against f alone at 1e-10; a step that rounds away where the unit step
predicted a decrease of f below eps |f| ends CONVERGED_PRECISION (a success).

Results (LRE status steps-or-nfev; "prec" CONVERGED_PRECISION, "ftol" CONVERGED_FTOL, "gtol"
CONVERGED_GTOL, "max" MAX_STEPS; scipy's status codes as its own):

RESULTS
"""

import argparse
import warnings

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.optimize  # noqa: E402

import jaxsearch as js  # noqa: E402
from benchmarks import nist_problems as nist  # noqa: E402

SHORT = {"CONVERGED_PRECISION": "prec", "CONVERGED_FTOL": "ftol", "CONVERGED_GTOL": "gtol"}
SHORT |= {"MAX_STEPS": "max", "STALLED": "stall", "LINESEARCH_FAILED": "lsf"}


def lre(b, certified) -> float:
    """NIST's log relative error, capped at 11 digits."""
    error = np.abs(np.asarray(b, np.float64) - certified) / np.abs(certified)
    with np.errstate(divide="ignore"):
        return float(np.min(np.minimum(-np.log10(error), 11.0)))


def jaxsearch_fit(direction, problem, x0, **settings) -> str:
    result = js.Solver(direction, **settings).run(
        nist.residuals, jnp.asarray(x0, jnp.float64), problem
    )
    name = str(js.Status(result.status))
    fit = lre(result.params, problem.certified)
    return f"{fit:5.1f} {SHORT.get(name, name):5s} {int(result.num_steps):4d}"


def scipy_fit(method, problem, x0) -> str:
    r = jax.jit(lambda b: nist.residuals(b, problem))
    jac = jax.jit(jax.jacfwd(lambda b: nist.residuals(b, problem)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = scipy.optimize.least_squares(
            lambda b: np.asarray(r(b)), x0, jac=lambda b: np.asarray(jac(b)), method=method
        )
    return f"{lre(fit.x, problem.certified):5.1f} st{fit.status:<3d} {fit.nfev:4d}"


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    columns = ["js LM", "js GN", "scipy lm", "scipy trf"]
    print("| problem | start | " + " | ".join(columns) + " |")
    print("| --- | --- |" + " --- |" * len(columns))
    for name, problem in nist.PROBLEMS.items():
        for start, x0 in problem.starts.items():
            cells = [
                jaxsearch_fit(js.LevenbergMarquardt(), problem, x0),
                jaxsearch_fit(js.GaussNewton(), problem, x0),
                scipy_fit("lm", problem, x0),
                scipy_fit("trf", problem, x0),
            ]
            print(f"| {name} | {start[-1]} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
