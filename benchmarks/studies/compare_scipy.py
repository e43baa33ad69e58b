"""How many evaluations does jaxsearch's default solver (L-BFGS + Zoom) take next to scipy's
L-BFGS-B on the test problems of tests/problems.py?
Date: 2026-11-29, commit e31768c

    python -m benchmarks.studies.compare_scipy

float64, gtol = 1e-6 and scipy's default ftol on both sides; one evaluation = value and
gradient together. A first look only: the full benchmark suite is tracked in the issues.
"""

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize

import jaxsearch as js
from tests.problems import (
    logistic,
    logistic_data,
    quadratic,
    rosenbrock,
    spd_quadratic_data,
)


def scipy_lbfgsb(fn, x0, args):
    value_and_grad = jax.jit(jax.value_and_grad(fn))

    def f(x):
        value, grad = value_and_grad(jnp.asarray(x), *args)
        return float(value), np.asarray(grad)

    options = {"gtol": 1e-6, "maxiter": 10_000}
    return scipy.optimize.minimize(f, np.asarray(x0), jac=True, method="L-BFGS-B", options=options)


def main():
    jax.config.update("jax_enable_x64", True)
    a, b, _ = spd_quadratic_data(50, 1e4)
    x, y = logistic_data(500, 50)
    problems = {
        "rosenbrock n=2": (rosenbrock, jnp.array([-1.2, 1.0]), ()),
        "rosenbrock n=10": (rosenbrock, jnp.tile(jnp.array([-1.2, 1.0]), 5), ()),
        "rosenbrock n=100": (rosenbrock, jnp.tile(jnp.array([-1.2, 1.0]), 50), ()),
        "quadratic n=50 cond 1e4": (quadratic, jnp.zeros(50), (jnp.asarray(a), jnp.asarray(b))),
        "logistic 500x50": (logistic, jnp.zeros(50), (jnp.asarray(x), jnp.asarray(y), 1e-3)),
    }
    solver = js.Solver(gtol=1e-6, max_steps=10_000)
    print(f"{'problem':26s} {'scipy nfev':>10s} {'jaxsearch':>9s}  status")
    for name, (fn, x0, args) in problems.items():
        reference = scipy_lbfgsb(fn, x0, args)
        result = solver.run(fn, x0, *args)
        status = js.Status(int(result.status)).name
        print(f"{name:26s} {reference.nfev:10d} {int(result.num_fun_evals):9d}  {status}")


if __name__ == "__main__":
    main()
