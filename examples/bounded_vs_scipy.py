"""Box constraints: L-BFGS-B in jaxsearch against scipy's L-BFGS-B.

A 20-dimensional Rosenbrock function with bounds that cut off its minimiser at all ones, in
float64. Both methods should reach the same point, with about the same number of evaluations.
The second run changes only the bounds' values, and it reuses the compiled program.
"""

import time

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize

import jaxsearch as js

jax.config.update("jax_enable_x64", True)


def rosenbrock(x):
    return jnp.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def scipy_lbfgsb(x0, lower, upper):
    value_and_grad = jax.jit(jax.value_and_grad(rosenbrock))

    def f(x):
        value, grad = value_and_grad(jnp.asarray(x))
        return float(value), np.asarray(grad)

    bounds = scipy.optimize.Bounds(np.asarray(lower), np.asarray(upper))
    return scipy.optimize.minimize(f, np.asarray(x0), jac=True, method="L-BFGS-B", bounds=bounds)


def main():
    n = 20
    x0 = jnp.tile(jnp.asarray([-1.2, 1.0]), n // 2)
    solver = js.Solver()  # with bounds, the default L-BFGS direction is L-BFGS-B
    for upper_value in (0.7, 0.5):
        lower = jnp.full(n, -2.0)
        upper = jnp.full(n, upper_value).at[::3].set(jnp.inf)  # some coordinates unbounded above
        start = time.perf_counter()
        result = solver.run(rosenbrock, x0, bounds=(lower, upper))
        result.params.block_until_ready()
        elapsed = time.perf_counter() - start
        reference = scipy_lbfgsb(x0, lower, upper)
        x = np.asarray(result.params)
        active = int(np.sum((x == np.asarray(lower)) | (x == np.asarray(upper))))
        print(f"upper bound {upper_value}:")
        print(
            f"  jaxsearch: f = {float(result.value):.10f}, "
            f"evaluations {int(result.num_fun_evals)}, "
            f"status {js.Status(result.status)}, {elapsed:.3f} s"
        )
        print(f"  scipy    : f = {reference.fun:.10f}, evaluations {reference.nfev}")
        print(
            f"  max |x - x_scipy| = {np.max(np.abs(x - reference.x)):.1e}, "
            f"active bounds {active}, feasible {bool(np.all(x >= lower) & np.all(x <= upper))}"
        )


if __name__ == "__main__":
    main()
