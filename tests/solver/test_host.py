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
    """One call for the whole batch (not one per element), each leaf in its dtype with the
    batch's axis first; a leaf the vmap does not batch is broadcast along it."""
    got = []
    with jax.enable_x64(True):
        x = jnp.arange(6.0).reshape(3, 2) / 7
        n = jnp.arange(3, dtype=jnp.int64) * 2**40
        flag = jnp.array(True)

        def send(x, n):
            host_call(lambda *leaves: got.append(leaves), x, n, flag)
            return x

        jax.jit(jax.vmap(send))(x, n)
        jax.effects_barrier()
        expected = [np.asarray(x), np.asarray(n), np.full(3, True)]
    assert len(got) == 1
    for leaf, want in zip(got[0], expected, strict=True):
        assert leaf.dtype == want.dtype and leaf.tobytes() == want.tobytes()


def test_under_nested_vmap():
    """Under vmap of vmap the leaves have both axes, the outer one first, whether the inner or
    the outer vmap batches a leaf."""
    got = []
    inner = jnp.arange(3.0)
    outer = jnp.arange(2, dtype=jnp.int32) * 10

    def send(a, b):
        host_call(lambda *leaves: got.append(leaves), a, b)
        return a

    jax.vmap(jax.vmap(send, in_axes=(0, None)), in_axes=(None, 0))(inner, outer)
    jax.effects_barrier()
    assert len(got) == 1
    a, b = got[0]
    np.testing.assert_array_equal(a, np.broadcast_to(np.arange(3.0, dtype=np.float32), (2, 3)))
    np.testing.assert_array_equal(b, np.broadcast_to(np.array([[0], [10]], np.int32), (2, 3)))
    assert a.dtype == np.float32 and b.dtype == np.int32
