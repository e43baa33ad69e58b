"""Logistic regression on a device mesh: data-parallel and model-parallel.

Runs on 8 simulated CPU devices (XLA_FLAGS is set below unless already set). Each run is
compared with the same run on unsharded single-device arrays.
"""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

import jaxsearch as js  # noqa: E402

jax.config.update("jax_enable_x64", True)


def loss(w, X, y):
    """Mean logistic loss with labels y in {-1, 1}, plus a small ridge term."""
    z = y * jnp.sum(X * w, axis=1)  # a reduction over features: fine for either sharding
    return jnp.mean(jnp.logaddexp(0.0, -z)) + 1e-3 * jnp.sum(w * w)


def problem(num_examples, num_features, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((num_examples, num_features)) / np.sqrt(num_features)
    noise = 0.5 * rng.standard_normal(num_examples)
    y = np.where(X @ rng.standard_normal(num_features) + noise > 0, 1.0, -1.0)
    return X, y


def report(label, solver, w0, X, y, shardings):
    w0_s, X_s, y_s = (jax.device_put(a, s) for a, s in zip((w0, X, y), shardings, strict=True))
    result = solver.run(loss, w0_s, X_s, y_s)
    single = solver.run(loss, jnp.asarray(w0), jnp.asarray(X), jnp.asarray(y))
    diff = float(jnp.max(jnp.abs(np.asarray(result.params) - np.asarray(single.params))))
    print(f"{label}: status {js.Status(result.status)}")
    print(f"{label}: value {float(result.value):.10f}, num_fun_evals {int(result.num_fun_evals)}")
    print(f"{label}: params sharding {result.params.sharding.spec}, data {X_s.sharding.spec}")
    print(f"{label}: max |w - w_single| = {diff:.1e}")


def main():
    devices = jax.devices()
    print(f"{len(devices)} devices: {devices[0].platform}")
    mesh = jax.make_mesh((len(devices),), ("x",))
    solver = js.Solver()

    # (i) Data parallel: examples split across devices, the 16 weights replicated. The loss
    # is a mean over examples: XLA sums per-device partial sums (an all-reduce of a scalar
    # and of the gradient).
    X, y = problem(num_examples=8 * 256, num_features=16, seed=0)
    shardings = (
        NamedSharding(mesh, P()),
        NamedSharding(mesh, P("x", None)),
        NamedSharding(mesh, P("x")),
    )
    report("data-parallel", solver, np.zeros(16), X, y, shardings)

    # (ii) Model parallel: a wide model, its 8 * 128 weights split across devices and the data
    # split along the feature axis. Every parameter-sized array (params, gradient, L-BFGS
    # memory) stays split; only inner products and the per-example margins are all-reduced.
    X, y = problem(num_examples=64, num_features=8 * 128, seed=1)
    shardings = (
        NamedSharding(mesh, P("x")),
        NamedSharding(mesh, P(None, "x")),
        NamedSharding(mesh, P()),
    )
    report("model-parallel", solver, np.zeros(8 * 128), X, y, shardings)


if __name__ == "__main__":
    main()
