"""Runs on the accelerator's devices: a run stopped by `max_steps` and resumed from its state
(docs/training-loops.md, "Resuming a run") ends where the uninterrupted run ends, bit for bit,
on the default device and compiling nothing more; params sharded over a mesh of the devices
(docs/scaling-up.md) converge like the unsharded run, where there are two devices or more.

tests/scale/test_sharding.py checks the sharded programs in depth on simulated CPU devices; here
the same kind of run on the real ones."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec

import jaxsearch as js

from ..helpers import DIRECTIONS, LEAN
from ..problems import logistic_data

pytestmark = pytest.mark.accelerator


def chain(x, a):
    """An extended Rosenbrock function, scaled by a (as tests/solver/test_resume.py's)."""
    return jnp.sum(a * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


@pytest.mark.parametrize("direction", ["LBFGS", "BFGS", "NonlinearCG", "NewtonCG"])
def test_resumed_run_matches_uninterrupted(direction, compiles):
    """Cut into runs of 10 steps, each resumed from the last one's `iterate` and `state`, a
    run takes the steps of one uninterrupted run and ends with its status, counters, params,
    value and gradient, bit for bit; the resumed runs compile nothing."""
    x0 = jnp.asarray(np.tile([-1.2, 1.0], 4), jnp.float32)
    a = jnp.asarray(100.0, jnp.float32)
    gtol, settings = 1e-4, dict(compiler_options=LEAN)
    whole = js.Solver(DIRECTIONS[direction](), gtol=gtol, max_steps=2000).run(
        chain, x0, a, **settings
    )
    assert js.Status(int(whole.status)).converged, whole.message
    device = jax.devices()[0]
    assert whole.params.devices() == {device}

    piece = js.Solver(DIRECTIONS[direction](), gtol=gtol, max_steps=10)
    result = piece.run(chain, x0, a, **settings)
    pieces = 1
    compiles.reset()
    while js.Status(int(result.status)) == js.Status.MAX_STEPS and pieces < 200:
        result = piece.run(chain, result.iterate, a, state=result.state, **settings)
        pieces += 1
    assert pieces > 1 and compiles.count == 0, (pieces, compiles.count)
    assert result.params.devices() == {device}
    assert js.Status(int(result.status)) == js.Status(int(whole.status)), result.message
    assert int(result.num_steps) == int(whole.num_steps)
    assert int(result.num_fun_evals) == int(whole.num_fun_evals)
    for name in ("params", "value", "grad"):
        mine, theirs = np.asarray(getattr(result, name)), np.asarray(getattr(whole, name))
        np.testing.assert_array_equal(mine, theirs, err_msg=name)


def feature_loss(w, x, y):
    """Logistic regression with the features sharded: a reduction, not a dot (no
    out_sharding to name on an explicit mesh; as tests/scale/test_sharding.py's)."""
    z = y * jnp.sum(x * w, axis=1)
    return jnp.mean(jnp.logaddexp(jnp.zeros((), z.dtype), -z)) + 5e-3 * jnp.sum(w * w)


@pytest.mark.parametrize("axis_type", [AxisType.Auto, AxisType.Explicit], ids=["auto", "explicit"])
def test_sharded_params_converge_like_unsharded(axis_type):
    devices = len(jax.devices())
    if devices < 2:
        pytest.skip(f"sharded params need two devices or more; this machine has {devices}")
    mesh = jax.make_mesh((devices,), ("x",), axis_types=(axis_type,))
    n = 16 * devices  # features, sharded
    x_np, y_np = logistic_data(n=64, d=n, dtype=np.float32)
    x_np = x_np / np.sqrt(n)
    solver = js.Solver(gtol=1e-5)

    def run(w0, x, y):
        return solver.run(feature_loss, w0, x, y)

    reference = jax.jit(run)(jnp.zeros(n, jnp.float32), jnp.asarray(x_np), jnp.asarray(y_np))
    params = NamedSharding(mesh, PartitionSpec("x"))
    w0 = jax.device_put(jnp.zeros(n, jnp.float32), params)
    x = jax.device_put(jnp.asarray(x_np), NamedSharding(mesh, PartitionSpec(None, "x")))
    y = jax.device_put(jnp.asarray(y_np), NamedSharding(mesh, PartitionSpec()))
    result = jax.jit(run)(w0, x, y)

    assert js.Status(int(reference.status)).converged, reference.message
    assert js.Status(int(result.status)).converged, result.message
    assert result.params.sharding.is_equivalent_to(params, 1), result.params.sharding
    assert result.grad.sharding.is_equivalent_to(params, 1), result.grad.sharding
    # Sums over the sharded axis are split across devices: another order of the float32 adds.
    # Each run ends with |g|_inf <= 1e-5; f is 1e-2-strongly convex, so each lies within
    # sqrt(n) 1e-5 / 1e-2 of the minimiser.
    bound = 2 * np.sqrt(n) * 1e-5 / 1e-2
    np.testing.assert_allclose(np.asarray(result.params), np.asarray(reference.params), atol=bound)
