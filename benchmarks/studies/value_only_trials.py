"""What do value-only trials (`Backtracking(slopes="first")`) save on an expensive fn?
Date: 2026-12-07, commit 28688b7

f is a logistic regression's summed loss over m samples of n features plus a small ridge term:
one evaluation is two matrix-vector products with the m x n data (the gradient adds a
third), so a trial of f alone costs about two thirds of one with its gradient. Gradient
descent with the unit first trial (`InitialStatic(1)`) backtracks at every step (the summed
loss's curvature is about m / 4 times its mean's), which is
where value-only trials save; L-BFGS, whose unit step is mostly accepted at once, is the
case where they should change little. Each run is compiled first, then timed: the minimum
over interleaved repeats. Prints, per direction, evaluations of fn, of its gradient, the
steps and the wall time of `slopes="every"` (the default) and `"first"`:

    python -m benchmarks.studies.value_only_trials
    python -m benchmarks.studies.value_only_trials --m 200000 --n 400 --repeats 7
"""

import argparse
import time

import jax
import jax.numpy as jnp

import jaxsearch as js


def logistic(w, data, labels):
    margins = labels * (data @ w)
    return jnp.sum(jnp.logaddexp(0.0, -margins)) + 1e-3 * jnp.sum(w**2)


def problem(m: int, n: int):
    key_a, key_w = jax.random.split(jax.random.key(0))
    data = jax.random.normal(key_a, (m, n), jnp.float32)
    truth = jax.random.normal(key_w, (n,), jnp.float32)
    labels = jnp.sign(data @ truth + 0.5 * jax.random.normal(key_w, (m,), jnp.float32))
    return data, labels


def solvers(max_steps: int):
    def solver(direction, slopes, initial):
        search = js.Backtracking(slopes=slopes)
        return js.Solver(direction, search, initial_step=initial, max_steps=max_steps)

    unit = js.InitialStatic(1.0)
    return {
        ("Gradient", slopes): solver(js.Gradient(), slopes, unit) for slopes in ("every", "first")
    } | {
        ("LBFGS", slopes): solver(js.LBFGS(), slopes, js.InitialQuadratic())
        for slopes in ("every", "first")
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--m", type=int, default=50_000)
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--max-steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    options = parser.parse_args()
    data, labels = problem(options.m, options.n)
    x0 = jnp.zeros(options.n, jnp.float32)
    cases = solvers(options.max_steps)
    results, best = {}, {key: float("inf") for key in cases}
    for key, solver in cases.items():  # compiled before any timing
        results[key] = jax.block_until_ready(solver.run(logistic, x0, data, labels))
    for _ in range(options.repeats):  # interleaved
        for key, solver in cases.items():
            start = time.perf_counter()
            jax.block_until_ready(solver.run(logistic, x0, data, labels))
            best[key] = min(best[key], time.perf_counter() - start)
    print(f"backend {jax.default_backend()}, m = {options.m}, n = {options.n}")
    head = ("direction", "slopes", "f evals", "grads", "steps", "f", "wall s")
    print("{:10} {:6} {:>8} {:>6} {:>6} {:>12} {:>8}".format(*head))
    for (direction, slopes), result in results.items():
        print(
            f"{direction:10} {slopes:6} {int(result.num_fun_evals):8d} "
            f"{int(result.num_grad_evals):6d} {int(result.num_steps):6d} "
            f"{float(result.value):12.6e} {best[(direction, slopes)]:8.4f}"
        )
    for direction in ("Gradient", "LBFGS"):
        ratio = best[(direction, "first")] / best[(direction, "every")]
        print(f"{direction}: wall first / every = {ratio:.3f}")


if __name__ == "__main__":
    main()
