"""Other libraries and data: optax, optimistix, scipy, sif2jax, NIST."""
