"""`_host.host_call`: a host call from a compiled program sees each leaf in its own dtype,
bit for bit, whatever the x64 setting of the thread that runs it."""

import threading

import jax
import jax.numpy as jnp
import numpy as np

from jaxsearch._host import host_call


def _leaves():
    return {
        "f64": jnp.array([1 / 3, -2.5e-300, np.nan]),
        "i64": jnp.array(2**40 + 3, jnp.int64),
        "u64": jnp.array([2**63 + 1], jnp.uint64),
        "f32": jnp.array([1 / 3], jnp.float32),
        "bf16": jnp.array(1 / 3, jnp.bfloat16),
        "f16": jnp.zeros((2, 1), jnp.float16) + 1 / 3,
        "bool": jnp.array([True, False]),
    }


def test_leaves_arrive_in_their_dtypes_and_bits():
    """In the compiled program, under x64 scoped to this thread; once on another thread too,
    where x64 is off (its callback then runs there, or on an XLA thread)."""
    got = []

    def run():
        with jax.enable_x64(True):
            tree = _leaves()
            jax.jit(lambda t: host_call(got.append, t))(tree)
            jax.effects_barrier()
            expected = jax.tree.map(np.asarray, tree)
            received = got.pop()
            for name, want in expected.items():
                assert received[name].dtype == want.dtype, name
                assert received[name].shape == want.shape, name
                assert received[name].tobytes() == want.tobytes(), name

    run()
    thread = threading.Thread(target=run)
    errors = []
    thread.run = lambda: _catching(run, errors)
    thread.start()
    thread.join()
    assert not errors, errors


def _catching(fn, errors):
    try:
        fn()
    except Exception as error:  # noqa: BLE001 - re-raised in the main thread's assert
        errors.append(error)


def test_under_vmap():
    """However JAX batches the call (once with a batch axis, or once per element), the leaves
    that arrive are the batch's, in their dtypes."""
    got = []
    with jax.enable_x64(True):
        x = jnp.arange(6.0).reshape(3, 2) / 7
        n = jnp.arange(3, dtype=jnp.int64) * 2**40

        def send(x, n):
            host_call(lambda a, b: got.append((a, b)), x, n)
            return x

        jax.jit(jax.vmap(send))(x, n)
        jax.effects_barrier()
        x, n = np.asarray(x), np.asarray(n)
    assert all(a.dtype == np.float64 and b.dtype == np.int64 for a, b in got)

    def rows(xs, ns):  # per element, the calls may come in any order
        pairs = zip(np.reshape(xs, (-1, 2)), np.reshape(ns, -1), strict=True)
        return sorted((int(m), tuple(r)) for r, m in pairs)

    assert sorted(sum((rows(a, b) for a, b in got), [])) == rows(x, n)
