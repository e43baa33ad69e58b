"""Does `jax.jit(jax.vmap(run))` of many 2-D Rosenbrock problems end right on a TPU, and why
did it not? (issue 48, item 1) The library's runs, and the pure-JAX program that showed why.
Date: 2026-12-06, commit e24e4e7

    python -m benchmarks.studies.tpu_vmap_failures  # both parts
    python -m benchmarks.studies.tpu_vmap_failures --only xla # the pure-JAX reproduction alone

Part 1 (`library`): L-BFGS, both forms, m = 10 and 20, vmapped over B problems: how many end
other than converged, the first such index, and the wall of a second call. Before the fix
(cf80ed4) on a TPU v5e, jax 0.10.2: failures from index b with b * m >= 30920 (m = 10: from
3092, 2047 of 10^4 with the two-loop form, 1663 with the compact form), and 1.7 s (two loops)
and 5.0 s (compact) per call for 10^4 problems, against 0.41 s on two CPU cores; after it,
no failure, 0.005 s and 0.016 s.

Part 2 (`xla`): no jaxsearch. A `lax.while_loop`, vmapped, that keeps an (m, n) ring buffer
per problem and writes one row per trip where a per-problem flag holds. The writes: `drop`
(`buffer.at[where(keep, head, m)].set(new, mode="drop")`: the out-of-bounds row m is dropped,
as L-BFGS wrote its memory), `where` (`where(keep, buffer.at[head].set(new), buffer)`),
`in_bounds` (`buffer.at[head].set(where(keep, new, buffer[head]))`) and `select` (a one-hot
select, no scatter: what `jaxsearch/_direction/_slots.py` does on a TPU). Each trip also
reads the previous row, by a one-hot select or by indexing (a gather). Each result is
compared, problem by problem, with the same program on the host CPU, where all agree.
Measured on the TPU v5e, jax 0.10.2, 2026-12-06: `drop` wrong from index 3092 of B = 4000
(m = 10, n = 2), 1546 (m = 20), 10307 (m = 3), as in part 1 before the fix; at B = 4000 of
(10, 1000) buffers every scatter (`drop`, `where`, `in_bounds`) wrong, `select` right; all
right at B = 100 of (10, 10^5). The whole output: benchmarks/results/tpu_vmap_failures_tpu.md.
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxsearch as js
from jaxsearch import Status

CONVERGED = (int(Status.CONVERGED_GTOL), int(Status.CONVERGED_FTOL))
LIBRARY_CASES = ((10, 4000), (20, 3000), (10, 10000))  # (m, batch)
XLA_CASES = (
    (4000, 10, 2),
    (10000, 10, 2),
    (3000, 20, 2),
    (16000, 3, 2),
    (4000, 10, 1000),
    (100, 10, 100000),
)
# (write, read) pairs: how a row is written, and how the previous row is read.
WAYS = (
    ("drop", "select"),
    ("where", "select"),
    ("in_bounds", "select"),
    ("select", "select"),
    ("select", "gather"),
    ("in_bounds", "gather"),
)


def rosenbrock(x):
    return jnp.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def library():
    noise = jax.random.normal(jax.random.key(3), (max(b for _, b in LIBRARY_CASES), 2), jnp.float32)
    x0s = jnp.array([-1.2, 1.0], jnp.float32) + 0.5 * noise
    for form in ("two_loop", "compact"):
        for m, batch in LIBRARY_CASES:
            solver = js.Solver(js.LBFGS(memory_size=m, form=form), gtol=1e-4, max_steps=500)
            solve = jax.jit(jax.vmap(lambda x, solver=solver: solver.run(rosenbrock, x)))
            status = np.asarray(solve(x0s[:batch]).status)
            start = time.perf_counter()
            jax.block_until_ready(solve(x0s[:batch]))
            wall = time.perf_counter() - start
            bad = np.nonzero(~np.isin(status, CONVERGED))[0]
            first = int(bad[0]) if bad.size else None
            print(
                f"library {form} m={m} B={batch}: failures={bad.size} first={first} "
                f"second call {wall:.3f} s"
            )


def ring(write: str, read: str):
    """The vmapped while loop of part 2, writing and reading its buffer as named."""

    def program(b, buffer):
        m = buffer.shape[0]
        slots = jnp.arange(m)

        def body(carry):
            i, buffer, head = carry
            keep = ((b * 7 + i * 13) % 5) != 0
            last = (head + m - 1) % m
            if read == "gather":
                previous = buffer[last]
            else:
                previous = jnp.sum(jnp.where((slots == last)[:, None], buffer, 0), 0)
            new = previous * 0.5 + (i + 1).astype(buffer.dtype)
            if write == "drop":
                buffer = buffer.at[jnp.where(keep, head, m)].set(new, mode="drop")
            elif write == "where":
                buffer = jnp.where(keep, buffer.at[head].set(new), buffer)
            elif write == "in_bounds":
                buffer = buffer.at[head].set(jnp.where(keep, new, buffer[head]))
            else:
                buffer = jnp.where(((slots == head) & keep)[:, None], new, buffer)
            return i + 1, buffer, jnp.where(keep, (head + 1) % m, head)

        return jax.lax.while_loop(lambda c: c[0] < 20 + b % 7, body, (0, buffer, 0))[1]

    return jax.jit(jax.vmap(program))


def xla():
    cpu = jax.devices("cpu")[0]
    for batch, m, n in XLA_CASES:
        b = jnp.arange(batch)
        buffer = jnp.zeros((batch, m, n), jnp.float32)
        with jax.default_device(cpu):
            expected = np.asarray(
                ring("select", "select")(jax.device_put(b, cpu), jax.device_put(buffer, cpu))
            )
        for write, read in WAYS:
            got = np.asarray(ring(write, read)(b, buffer))
            wrong = np.nonzero(np.any(got != expected, axis=(1, 2)))[0]
            first = int(wrong[0]) if wrong.size else None
            print(
                f"xla B={batch} m={m} n={n} write {write} read {read}: "
                f"{wrong.size} problems wrong, first {first}"
            )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", choices=("library", "xla"))
    options = parser.parse_args()
    print(jax.devices()[0].device_kind, jax.__version__, flush=True)
    if options.only != "xla":
        library()
    if options.only != "library":
        xla()


if __name__ == "__main__":
    main()
