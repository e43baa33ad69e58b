"""What does one slot of an L-BFGS memory cost on an accelerator, by the buffer's shape? A
circular buffer of m = 10 slots of n = 2^20 float32 elements, as (m, n) (jaxsearch's and
optax's layout) and as (m, n / 128, 128), each slot a whole (8, 128)-tiled array on a TPU.
Date: 2026-12-07, commit d6dd97a

    python -m benchmarks.studies.tpu_memory_layout

Per slot access, in a `lax.fori_loop` of 50 in one program (no dispatch): a row written in
place (`dynamic_update_index_in_dim`), a row read into a dot product, a row read into an axpy;
beside the time to move 4 MB once at 819 GB/s (a TPU v5e's HBM). On a TPU the (m, n) buffer
is tiled (8, 128) over its two axes (the HLO's layout `{1,0:T(8,128)}`), so one row is a
strided eighth of each tile.
"""

import time

import jax
import jax.numpy as jnp
from jax import lax


def best_of(call, *arguments, reps: int = 5) -> float:
    jax.block_until_ready(call(*arguments))
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        jax.block_until_ready(call(*arguments))
        best = min(best, time.perf_counter() - start)
    return best


def main(m: int = 10, n: int = 1 << 20, trips: int = 50) -> None:
    print(f"{jax.devices()[0].device_kind}; jax {jax.__version__}")
    for shape in ((m, n), (m, n // 128, 128)):

        @jax.jit
        def writes(buffer, row):
            def body(i, b):
                return lax.dynamic_update_index_in_dim(b, row * i.astype(row.dtype), i % m, 0)

            return lax.fori_loop(0, trips, body, buffer)

        @jax.jit
        def dots(buffer, row):
            def body(i, total):
                return total + jnp.sum(lax.dynamic_index_in_dim(buffer, i % m, 0, False) * row)

            return lax.fori_loop(0, trips, body, jnp.float32(0))

        @jax.jit
        def axpys(buffer, row):
            def body(i, q):
                return q - 1e-3 * lax.dynamic_index_in_dim(buffer, i % m, 0, False)

            return lax.fori_loop(0, trips, body, row)

        buffer, row = jnp.ones(shape, jnp.float32), jnp.ones(shape[1:], jnp.float32)
        print(
            f"{shape}: write a row {1e6 * best_of(writes, buffer, row) / trips:.1f} us, "
            f"read it into a dot {1e6 * best_of(dots, buffer, row) / trips:.1f} us, "
            f"into an axpy {1e6 * best_of(axpys, buffer, row) / trips:.1f} us "
            f"(4 MB once at 819 GB/s: {4 * n / 819e3:.1f} us)"
        )


if __name__ == "__main__":
    main()
