"""Quick start: minimise the Rosenbrock function and an L2-regularised logistic regression.

python examples/quickstart.py
"""

import jax
import jax.numpy as jnp

import jaxsearch as js


def rosenbrock(x):
    return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def logistic_loss(w, features, labels, lam):
    margins = labels * (features @ w)
    return jnp.mean(jnp.logaddexp(0.0, -margins)) + 0.5 * lam * jnp.sum(w**2)


def report(name, result):
    print(f"{name}")
    print(f"  status     : {js.Status(result.status)} ({result.message})")
    print(f"  f          : {float(result.value):.6e}")
    print(f"  |grad|_inf : {float(jnp.max(jnp.abs(result.grad))):.3e}")
    print(f"  steps      : {int(result.num_steps)}, evaluations of f: {int(result.num_fun_evals)}")


def main():
    solver = js.Solver()  # L-BFGS with a strong Wolfe (zoom) line search
    result = solver.run(rosenbrock, jnp.array([-1.2, 1.0]))
    report("Rosenbrock from (-1.2, 1), L-BFGS + Zoom, float32", result)
    print(f"  x          : {result.params}")

    key_x, key_w = jax.random.split(jax.random.key(0))
    features = jax.random.normal(key_x, (500, 20))
    labels = jnp.sign(features @ jax.random.normal(key_w, (20,)))
    # Data goes through *args: new data of the same shape reuses the compiled program.
    result = js.Solver().run(logistic_loss, jnp.zeros(20), features, labels, 1e-2)
    report("Logistic regression (500 x 20, lam = 1e-2), L-BFGS + Zoom, float32", result)

    result = js.Solver(js.Gradient(), js.Backtracking(), max_steps=5000).run(
        rosenbrock, jnp.array([-1.2, 1.0])
    )
    report("Rosenbrock, gradient descent + Armijo backtracking", result)


if __name__ == "__main__":
    main()
