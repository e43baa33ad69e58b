"""The library's caches are bounded and `js.clear_caches` empties them (issue 49); the names
taken from JAX's private modules fail loudly when a JAX release moves one."""

import warnings

import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js
from jaxsearch import _pipeline, _private_jax, _setup
from jaxsearch._compile import _caches, _computation, _programs, _retrace

from ..problems import rosenbrock


def test_kept_drops_the_oldest_entry_beyond_its_size():
    kept = _caches.Kept(3)
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
        with _retrace.watching(True):
            _retrace.note_trace("run", solver, rosenbrock, (x0,))
    assert len(_setup.fresh_states) > 0  # a small run keeps its fresh state
    assert len(_retrace._seen) > 0
    assert _programs._compiled.cache_info().currsize > 0

    js.clear_caches()
    for cache in (_setup.fresh_states, _programs._extra_kept, _computation._kept):
        assert len(cache) == 0
    assert len(_retrace._seen) == 0
    assert _programs._compiled.cache_info().currsize == 0
    assert _pipeline._kept_report.cache_info().currsize == 0

    again = solver.run(rosenbrock, x0)
    np.testing.assert_array_equal(np.asarray(again.params), np.asarray(first.params))
    assert int(again.num_steps) == int(first.num_steps)


def test_a_moved_private_jax_name_fails_loudly():
    with pytest.raises(ImportError, match=r"jax\._src\.core\.no_such_name.*private name of JAX"):
        _private_jax._take("jax._src.core", "no_such_name", "for this test")
    with pytest.raises(ImportError, match=r"jax\._src\.no_such_module\.BatchTracer"):
        _private_jax._take("jax._src.no_such_module", "BatchTracer", "for this test")
