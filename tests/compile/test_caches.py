"""The library's caches are bounded and `js.clear_caches` empties them (issue 49); the names
taken from JAX's private modules fail loudly when a JAX release moves one."""

import warnings

import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js
from jaxsearch import _private_jax
from jaxsearch._compile import seam

from ..problems import rosenbrock


def test_kept_drops_the_oldest_entry_beyond_its_size():
    kept = seam.Kept(3, "a test's")
    for key in "abcd":
        kept.put(key, key.upper())
    assert len(kept) == 3
    assert kept.get("a") is None
    assert [kept.get(key) for key in "bcd"] == ["B", "C", "D"]
    kept.put("b", "again")  # a key already kept is replaced, nothing dropped
    assert len(kept) == 3 and kept.get("b") == "again" and kept.get("c") == "C"


def test_clear_caches_empties_every_cache_and_runs_still_work():
    solver = js.Solver(max_steps=50)
    x0 = jnp.array([-1.2, 1.0], jnp.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", js.RetraceWarning)
        first = solver.run(rosenbrock, x0)
        with seam.watching(True):
            seam.note_trace("run", solver, rosenbrock, (x0,))
    cached = seam.cached()
    for name in ("fresh states", "retraces", "programs", "reports"):
        assert cached[name] > 0, name  # a small run keeps its fresh state, ...
    assert {"prices", "computations"} <= set(cached)

    js.clear_caches()
    assert seam.cached() == dict.fromkeys(cached, 0)

    again = solver.run(rosenbrock, x0)
    np.testing.assert_array_equal(np.asarray(again.params), np.asarray(first.params))
    assert int(again.num_steps) == int(first.num_steps)


def test_a_moved_private_jax_name_fails_loudly():
    with pytest.raises(ImportError, match=r"jax\._src\.core\.no_such_name.*private name of JAX"):
        _private_jax._take("jax._src.core", "no_such_name", "for this test")
    with pytest.raises(ImportError, match=r"jax\._src\.no_such_module\.BatchTracer"):
        _private_jax._take("jax._src.no_such_module", "BatchTracer", "for this test")
