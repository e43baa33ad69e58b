"""bfloat16 params, float32 values and L-BFGS memory: no retrace, no silent loss.

python examples/mixed_precision.py
"""

import jax
import jax.numpy as jnp

import jaxsearch as js


def least_squares(w, a, b):
    # The objective computes in float32 whatever the params' dtype.
    return 0.5 * jnp.mean((a @ w.astype(jnp.float32) - b) ** 2)


def main():
    key_a, key_w = jax.random.split(jax.random.key(0))
    a = jax.random.normal(key_a, (200, 16))
    b = a @ jax.random.normal(key_w, (16,))
    w0 = jnp.zeros(16, jnp.bfloat16)

    for memory_dtype in (None, jnp.float32):
        solver = js.Solver(js.LBFGS(memory_dtype=memory_dtype), js.Zoom(), gtol=1e-4)
        result = solver.run(least_squares, w0, a, b)
        name = "leaf dtype (bfloat16)" if memory_dtype is None else "float32"
        print(f"L-BFGS memory in {name}")
        print(f"  params dtype : {result.params.dtype}, value dtype: {result.value.dtype}")
        print(f"  status       : {js.Status(result.status)}")
        evals = int(result.num_fun_evals)
        print(f"  f            : {float(result.value):.3e} after {evals} evaluations")


if __name__ == "__main__":
    main()
