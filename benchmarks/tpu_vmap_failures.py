"""Issue 48, item 1 (open): `jax.jit(jax.vmap(run))` of 2-D Rosenbrock on a TPU ends
LINESEARCH_FAILED for problems whose index b satisfies b * m >= 30920, m the L-BFGS memory
size; the same problems converge in smaller batches and on the CPU.

Measured on one TPU v5e, jax 0.10.2, 2026-12-06, at 7a77565 (`python -m
benchmarks.tpu_vmap_failures`, or `python benchmarks/tpu_vmap_failures.py` from the root):

    m=20 B=3000  failures=436 first=1546  first*m=30920
    m=5  B=8000  failures=689 first=6185  first*m=30925
    m=3  B=16000 failures=397 first=10307 first*m=30921
    m=10 B=4000  failures=542 first=3092  first*m=30920
    m=1  B=20000 failures=0

Both L-BFGS forms fail alike (two-loop 578 of 4000, compact 542); BFGS and gradient descent
do not. The problems from `first` on, run as a batch of 1000, all converge. A batched
`buffer.at[where(keep, head, m)].set(new, mode="drop")` (L-BFGS's memory write) alone, at the
same sizes, matches NumPy on the TPU: the fault needs more of the loop. Prints one line per
memory size: the failures and the first failing index.
"""

import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxsearch as js
from jaxsearch import Status

CASES = ((20, 3000), (5, 8000), (3, 16000), (10, 4000), (1, 20000))  # (m, batch)
CONVERGED = (int(Status.CONVERGED_GTOL), int(Status.CONVERGED_FTOL))


def rosenbrock(x):
    return jnp.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def main():
    noise = jax.random.normal(jax.random.key(3), (max(b for _, b in CASES), 2), jnp.float32)
    x0s = jnp.array([-1.2, 1.0], jnp.float32) + 0.5 * noise
    print(jax.devices()[0].device_kind, jax.__version__)
    for m, batch in CASES:
        solver = js.Solver(js.LBFGS(memory_size=m), gtol=1e-4, max_steps=500)
        solve = jax.jit(jax.vmap(lambda x, solver=solver: solver.run(rosenbrock, x)))
        start = time.perf_counter()
        status = np.asarray(solve(x0s[:batch]).status)
        bad = np.nonzero(~np.isin(status, CONVERGED))[0]
        first = int(bad[0]) if bad.size else None
        product = None if first is None else first * m
        print(
            f"m={m} B={batch} failures={bad.size} first={first} first*m={product} "
            f"({time.perf_counter() - start:.1f} s)"
        )


if __name__ == "__main__":
    main()
