"""JAX's persistent compilation cache across processes: a second process that runs the same
solves finds their programs in the cache and compiles none of them, except a run with a
`callback` or `verbose=True` (JAX writes no program that calls back to the host to the cache);
and importing jaxsearch sets no JAX option.

`python tests/compile/test_compile_cache.py` prints the figures of docs/recompiles.md: the first
`run` of a fresh process with an empty cache, then with the cache the first process filled.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"  # a compile, or a cache read
HIT_EVENT = "/jax/compilation_cache/cache_hits"  # a program read from the cache
SOLVES = ("run", "history", "bounds", "callback", "verbose")


def record(info):
    """The callback of the `callback` solve: module level, so the same function in every
    process."""


def worker() -> dict:
    """The solves of a fresh process: for each, the seconds its first call took, the backend
    compile events and the programs read from the cache among them."""
    import jax

    counts = {COMPILE_EVENT: 0, HIT_EVENT: 0}

    def on_duration(event, duration, **kwargs):
        if event in counts:
            counts[event] += 1

    def on_event(event, **kwargs):
        if event in counts:
            counts[event] += 1

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    jax.monitoring.register_event_listener(on_event)

    import jax.numpy as jnp

    import jaxsearch as js

    def least_squares(w, A, b):
        return 0.5 * jnp.sum((A @ w - b) ** 2)

    rng = np.random.default_rng(0)
    A, b = rng.standard_normal((50, 5)), rng.standard_normal(50)
    A, b = jnp.asarray(A, jnp.float32), jnp.asarray(b, jnp.float32)
    solver = js.Solver()
    options = {
        "run": {},
        "history": {"history": True},
        "bounds": {"bounds": (jnp.full(5, -0.1, jnp.float32), jnp.full(5, 0.1, jnp.float32))},
        "callback": {"callback": record},
        "verbose": {"verbose": True},
    }
    found = {}
    for name in SOLVES:
        before = dict(counts)
        start = time.perf_counter()
        result = solver.run(least_squares, jnp.zeros(5, jnp.float32), A, b, **options[name])
        jax.block_until_ready(result.params)
        found[name] = {
            "seconds": time.perf_counter() - start,
            "compiles": counts[COMPILE_EVENT] - before[COMPILE_EVENT],
            "cache hits": counts[HIT_EVENT] - before[HIT_EVENT],
            "status": js.Status(int(result.status)).name,
        }
    return found


def fresh_process(cache_dir: str) -> dict:
    """`worker` in a new Python process, with the recipe of docs/recompiles.md: the cache's
    folder, and every program written to it however quick its compile."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["JAX_COMPILATION_CACHE_DIR"] = cache_dir
    env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    completed = subprocess.run(
        [sys.executable, __file__, "--worker"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    return json.loads(completed.stdout.splitlines()[-1])


def test_a_second_process_compiles_nothing_but_callbacks(tmp_path):
    first = fresh_process(str(tmp_path))
    second = fresh_process(str(tmp_path))
    for name in SOLVES:
        assert first[name]["status"] == second[name]["status"], name
        seconds = first[name]["seconds"], second[name]["seconds"]
        print(f"{name}: first call {seconds[0]:.2f} s, with the cache {seconds[1]:.2f} s")
        # The first process compiles each solve's run (a program of the same text compiled
        # earlier in the process, an eager operation's, may be read from the cache).
        assert first[name]["compiles"] > first[name]["cache hits"], (name, first)
    # Every program of a solve without a callback is read from the cache: as many cache reads
    # as compile events, and as many programs as in the first process.
    for name in ("run", "history", "bounds"):
        assert second[name]["cache hits"] == second[name]["compiles"], (name, second)
        assert second[name]["compiles"] == first[name]["compiles"], (name, first, second)
    # A run with a callback or verbose=True compiles its run again (JAX writes no program that
    # calls back to the host to the cache).
    for name in ("callback", "verbose"):
        assert second[name]["compiles"] - second[name]["cache hits"] == 1, (name, second)


def test_importing_jaxsearch_sets_no_jax_option():
    script = (
        "import jax; before = dict(jax.config.values); import jaxsearch; "
        "after = dict(jax.config.values); "
        "print(sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k)))"
    )
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "[]", completed.stdout


def main() -> None:
    """Prints, for each solve, its first call in a fresh process with an empty cache, then in
    one with the cache the first filled."""
    with tempfile.TemporaryDirectory() as cache_dir:
        first, second = fresh_process(cache_dir), fresh_process(cache_dir)
    print(f"{'first run':10} {'empty cache':>22} {'filled cache':>30}")
    for name in SOLVES:
        a, b = first[name], second[name]
        print(
            f"{name:10} {a['seconds']:6.2f} s, {a['compiles']} compiles   "
            f"{b['seconds']:6.2f} s, {b['compiles'] - b['cache hits']} compiles, "
            f"{b['cache hits']} read"
        )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        print(json.dumps(worker()))
    else:
        main()
