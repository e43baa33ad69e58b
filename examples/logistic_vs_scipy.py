"""jaxsearch against SciPy's L-BFGS-B on an L2-regularised logistic regression (float64).

Both solvers minimise the same function from the same start: jaxsearch's `js.Solver()`
(L-BFGS with a strong Wolfe zoom line search, one compiled loop on the device) and
`scipy.optimize.minimize(method="L-BFGS-B", jac=True)` driving a jitted `value_and_grad`
from Python, one call per evaluation. The example prints how far apart the two solutions
are, both final values and both evaluation counts.

    python examples/logistic_vs_scipy.py
"""

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize

import jaxsearch as js


def logistic_loss(w, features, labels, lam):
    margins = labels * (features @ w)
    return jnp.mean(jnp.logaddexp(0.0, -margins)) + 0.5 * lam * jnp.sum(w**2)


def main():
    jax.config.update("jax_enable_x64", True)
    n, d, lam = 1000, 30, 1e-2
    key_x, key_w, key_noise = jax.random.split(jax.random.key(1), 3)
    features = jax.random.normal(key_x, (n, d), dtype=jnp.float64)
    scores = features @ jax.random.normal(key_w, (d,), dtype=jnp.float64)
    labels = jnp.sign(scores + 0.5 * jax.random.normal(key_noise, (n,), dtype=jnp.float64))
    lam = jnp.asarray(lam, dtype=jnp.float64)
    w0 = jnp.zeros(d, dtype=jnp.float64)

    # jaxsearch: tight tolerances, so that both solvers stop near the exact minimiser.
    result = js.Solver(gtol=1e-9, ftol=0.0).run(logistic_loss, w0, features, labels, lam)
    w_js = np.asarray(result.params)

    # SciPy: a jitted value and gradient, converted to NumPy float64 at each call.
    value_and_grad = jax.jit(jax.value_and_grad(logistic_loss))

    def fun(w):
        value, grad = value_and_grad(jnp.asarray(w), features, labels, lam)
        return float(value), np.asarray(grad, dtype=np.float64)

    scipy_result = scipy.optimize.minimize(
        fun,
        np.zeros(d),
        jac=True,
        method="L-BFGS-B",
        options=dict(gtol=1e-10, ftol=1e-15, maxiter=1000),
    )
    w_sp = scipy_result.x

    print(f"L2-regularised logistic regression, {n} x {d}, lam = {float(lam):g}, float64")
    print(
        f"jaxsearch  : status {js.Status(result.status)}, "
        f"f {float(result.value):.12e}, evaluations {int(result.num_fun_evals)}"
    )
    print(
        f"scipy      : success {scipy_result.success}, "
        f"f {float(scipy_result.fun):.12e}, evaluations (nfev) {scipy_result.nfev}"
    )
    print(f"max |w_jaxsearch - w_scipy| = {np.max(np.abs(w_js - w_sp)):.3e}")
    print(f"f_jaxsearch - f_scipy = {float(result.value) - float(scipy_result.fun):.3e}")


if __name__ == "__main__":
    main()
