"""Many processes on JAX's distributed runtime: two processes with two CPU devices each form one
4-device mesh and solve as one process with four devices does.

The test launches this file as a script (`worker`), on loopback only, bounded in time: two
processes joined by `jax.distributed.initialize` (gloo collectives), and one process with four
devices as the reference. For a model-parallel problem (features sharded over the four devices)
and a data-parallel one (examples sharded, params replicated), `run` and a jitted `step` loop
end with the same status, steps and evaluations in both, params within 1e-12 relative in
float64. Every parameter-sized leaf of the model-parallel result and state stays sharded over
the four devices, each process holding only its two quarters, and the compiled run holds no
parameter-sized collective. A result's state, counts and message are read on each process with
no compile and no collective (so one process may read them alone); the params themselves are
read by their shards (NumPy and `eqx.tree_serialise_leaves` cannot read them whole). A run cut
in two, each process saving its own shards of the state, resumes in two fresh processes bit
for bit.
"""

import io
import os
import pickle
import re
import socket
import subprocess
import sys
import time

import equinox as eqx
import jax
import numpy as np

N_FEATURES, N_EXAMPLES = 64, 256  # model-parallel: features sharded; data-parallel: examples
DATA_FEATURES = 16
HALF = 4  # the steps of the first half of the run that is cut in two


# ------------------------------------------------------ each process's own shards of a tree


def own_shards(array: jax.Array) -> list:
    """This process's shards of `array`: for each, where it lies ((start, stop) per axis) and
    its data, on the host."""
    return [
        (
            tuple(index.indices(n)[:2] for index, n in zip(s.index, array.shape, strict=True)),
            np.asarray(s.data),
        )
        for s in array.addressable_shards
    ]


def tree_shards(tree) -> list:
    return [own_shards(leaf) for leaf in jax.tree.leaves(tree)]


def save_shards(path: str, tree) -> None:
    """Each process writes the data of its own shards of every leaf of `tree` to its own
    file: no process gathers an array, and no collective runs."""
    data = jax.tree.map(lambda a: [np.asarray(s.data) for s in a.addressable_shards], tree)
    eqx.tree_serialise_leaves(path, data)


def load_shards(path: str, template):
    """The tree `save_shards` wrote, as global arrays of `template`'s shapes, dtypes and
    shardings (a tree of the same structure: `solver.init`'s state, say): each process reads
    its own file and places its own shards."""

    def place(like: jax.Array, datas: list) -> jax.Array:
        shards = like.addressable_shards
        on_devices = [jax.device_put(d, s.device) for d, s in zip(datas, shards, strict=True)]
        return jax.make_array_from_single_device_arrays(like.shape, like.sharding, on_devices)

    like_data = jax.tree.map(lambda a: [s.data for s in a.addressable_shards], template)
    datas = eqx.tree_deserialise_leaves(path, like_data)
    return jax.tree.map(place, template, datas, is_leaf=lambda x: isinstance(x, jax.Array))


# ----------------------------------------------------------------------------- the worker

COLLECTIVE = re.compile(
    r"=\s*(.+?)\s+(all-gather|all-reduce|all-to-all|collective-permute|reduce-scatter)"
    r"(-start)?\("
)


def big_collectives(hlo: str, n: int) -> list:
    """The collectives of a compiled program's text whose result has an axis of length `n` (a
    parameter-sized array: params, a gradient, L-BFGS's memory); the all-reduces of inner
    products (scalars) and of the margins (one per example) are not."""
    found = []
    for line in hlo.splitlines():
        match = COLLECTIVE.search(line)
        if match:
            for dims in re.findall(r"\[([0-9,]*)\]", match.group(1)):
                if str(n) in dims.split(","):
                    found.append(line.strip()[:160])
    return found


def worker(num_processes: int, process_id: int, port: int, out: str, mode: str) -> None:
    """One process of a run: `mode` "solve" (every solve, and the first half of the cut run,
    saved) or "resume" (the cut run resumed from the saved shards); what it found is pickled
    to `out/{mode}-{num_processes}-{process_id}.pkl`."""
    start = time.perf_counter()
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_numpy_dtype_promotion", "strict")
    if num_processes > 1:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            coordinator_address=f"127.0.0.1:{port}",
            num_processes=num_processes,
            process_id=process_id,
            initialization_timeout=60,
        )
    import jaxsearch as js

    print(f"started in {time.perf_counter() - start:.1f} s", flush=True)
    assert jax.device_count() == 4 and jax.process_count() == num_processes
    mesh = jax.make_mesh((4,), ("x",))

    compiles = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, duration, **kw: (
            compiles.append(duration)
            if event == "/jax/core/compile/backend_compile_duration"
            else None
        )
    )

    def put(array, spec):
        """A global array from the same host array on every process: each process places
        only its addressable shards (no collective)."""
        array = np.asarray(array)
        sharding = NamedSharding(mesh, spec)
        return jax.make_array_from_callback(array.shape, sharding, lambda index: array[index])

    def layout(tree):
        """For every leaf: its path, shape, the devices its sharding spans, whether it is
        replicated, and the sizes of this process's shards."""
        return [
            (
                jax.tree_util.keystr(path),
                leaf.shape,
                len(leaf.sharding.device_set),
                leaf.sharding.is_fully_replicated,
                [int(s.data.size) for s in leaf.addressable_shards],
            )
            for path, leaf in jax.tree_util.tree_leaves_with_path(tree)
            if isinstance(leaf, jax.Array)
        ]

    def loss(w, X, y):
        """L2-regularised logistic regression, labels in {-1, 1}."""
        z = y * jnp.sum(X * w, axis=1)  # a reduction over features, sharded or not
        return jnp.mean(jnp.logaddexp(0.0, -z)) + 1e-3 * jnp.sum(w * w)

    def problem(name):
        """x0, X and y of the model-parallel or the data-parallel problem, on the mesh."""
        num_features, specs = {
            "model": (N_FEATURES, (P("x"), P(None, "x"), P())),
            "data": (DATA_FEATURES, (P(), P("x", None), P("x"))),
        }[name]
        rng = np.random.default_rng(0)
        X = rng.standard_normal((N_EXAMPLES, num_features)) / np.sqrt(num_features)
        y = np.where(X @ rng.standard_normal(num_features) > 0, 1.0, -1.0)
        return tuple(put(a, s) for a, s in zip((np.zeros(num_features), X, y), specs, strict=True))

    solver = js.Solver(gtol=1e-9, ftol=0.0)
    half = js.Solver(gtol=1e-9, ftol=0.0, max_steps=HALF)
    found: dict = {}
    checkpoint = f"{out}/checkpoint-{process_id}.eqx"  # each process its own file

    for name in ("model", "data") if mode == "solve" else ():
        w0, X, y = problem(name)
        result = solver.run(loss, w0, X, y)
        before = len(compiles)
        state = result.state
        found[name, "state read compiles"] = len(compiles) - before
        found[name, "run"] = (
            int(result.status),
            int(result.num_steps),
            int(result.num_fun_evals),
            own_shards(result.params),
        )
        found[name, "run layout"] = layout((result.params, result.grad, state))
        found[name, "message"] = result.message

        step = js.jit(lambda w, s, X, y: solver.step(loss, w, s, X, y))
        w, state = w0, solver.init(w0, fn=loss, args=(X, y))
        for _ in range(12):
            w, state = step(w, state, X, y)
        found[name, "step"] = (
            int(state.status),
            int(state.num_steps),
            int(state.num_fun_evals),
            own_shards(w),
        )
        found[name, "step layout"] = layout((w, state))
        if name == "data":
            continue
        # The compiled run (the loop, its steps and searches) gathers no parameter-sized array.
        run = jax.jit(lambda w, X, y: solver.run(loss, w, X, y)).lower(w0, X, y).compile()
        found["collectives"] = big_collectives(run.as_text(), N_FEATURES)

        # Neither NumPy nor eqx.tree_serialise_leaves reads an array that spans other
        # processes' devices: each process reads (and saves) its own shards.
        for what, read in (("numpy", np.asarray), ("serialise", eqx.tree_serialise_leaves)):
            try:
                read(io.BytesIO(), result.params) if what == "serialise" else read(result.params)
                found[what] = None
            except RuntimeError as error:
                while error.__cause__ is not None:  # equinox's errors name the leaf: JAX's
                    error = error.__cause__  # is the first cause
                found[what] = str(error)

        # One process alone reads a result: no collective, so nothing waits for the other.
        again = solver.run(loss, w0, X, y)
        if process_id == 0:
            found["read alone"] = (again.message, int(again.num_steps))

        # The run cut in two: the first half's iterate and state, each process its own shards.
        found["uninterrupted"] = tree_shards((result.params, result.state))
        first = half.run(loss, w0, X, y)
        assert int(first.num_steps) == HALF
        save_shards(checkpoint, (first.iterate, first.state))

    if mode == "resume":  # the run cut in two, resumed from each process's own file
        w0, X, y = problem("model")
        template = (w0, solver.init(w0, fn=loss, args=(X, y)))
        iterate, state = load_shards(checkpoint, template)
        resumed = solver.run(loss, iterate, X, y, state=state)
        found["resumed"] = tree_shards((resumed.params, resumed.state))

    print(f"done in {time.perf_counter() - start:.1f} s, {len(compiles)} compiles", flush=True)
    with open(f"{out}/{mode}-{num_processes}-{process_id}.pkl", "wb") as file:
        pickle.dump(found, file)


# ------------------------------------------------------------------------------- the test

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT = 120  # seconds for each launch of processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(num_processes: int, out: str, mode: str) -> list:
    """Starts the worker's processes, `4 // num_processes` CPU devices each."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={4 // num_processes}"
    env["PYTHONPATH"] = os.pathsep.join([ROOT, *filter(None, [env.get("PYTHONPATH")])])
    port = str(free_port())
    return [
        subprocess.Popen(
            [sys.executable, __file__, str(num_processes), str(i), port, out, mode],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for i in range(num_processes)
    ]


def finish(processes: list) -> list:
    """Waits for every process (at most TIMEOUT seconds in all); kills them all if one fails
    or time runs out, and fails with their output."""
    deadline = time.monotonic() + TIMEOUT
    outputs: list = []
    try:
        for process in processes:
            outputs.append(process.communicate(timeout=max(deadline - time.monotonic(), 1))[0])
    except subprocess.TimeoutExpired:
        pass
    if len(outputs) == len(processes) and all(p.returncode == 0 for p in processes):
        return outputs
    for process in processes:
        process.kill()
    outputs += [process.communicate()[0] for process in processes[len(outputs) :]]
    text = "\n".join(
        f"--- process {i} (exit {process.returncode}):\n{output[-4000:]}"
        for i, (process, output) in enumerate(zip(processes, outputs, strict=True))
    )
    raise AssertionError(f"a worker failed or ran past {TIMEOUT} s:\n{text}")


def read(out: str, mode: str, num_processes: int) -> list:
    found = []
    for i in range(num_processes):
        with open(f"{out}/{mode}-{num_processes}-{i}.pkl", "rb") as file:
            found.append(pickle.load(file))
    return found


def assemble(shards_per_process: list, n: int) -> np.ndarray:
    """The global vector from every process's shards (each index covered at least once)."""
    full, seen = np.full(n, np.nan), np.zeros(n, bool)
    for shards in shards_per_process:
        for ((start, stop),), data in shards:
            full[start:stop], seen[start:stop] = data, True
    assert seen.all()
    return full


def test_two_processes_solve_as_one(tmp_path):
    out = str(tmp_path)
    two, one = launch(2, out, "solve"), launch(1, out, "solve")
    finish(two + one)
    resume = finish(launch(2, out, "resume"))
    (a, b), (ref,) = read(out, "solve", 2), read(out, "solve", 1)

    for name, n in (("model", N_FEATURES), ("data", DATA_FEATURES)):
        for how in ("run", "step"):
            status, steps, evals, _ = ref[name, how]
            for found in (a, b):  # the same status, steps and evaluations on each process
                assert found[name, how][:3] == (status, steps, evals), (name, how)
            got = assemble([a[name, how][3], b[name, how][3]], n)
            want = assemble([ref[name, how][3]], n)
            error = np.max(np.abs(got - want)) / np.max(np.abs(want))
            assert error <= 1e-12, (name, how, error)
            print(f"{name}-parallel {how}: steps {steps}, relative difference {error:.1e}")
        assert a[name, "message"] == b[name, "message"] == ref[name, "message"]
        assert a[name, "message"].startswith("Converged"), a[name, "message"]
        for found in (a, b):  # reading result.state compiles and waits for nothing
            assert found[name, "state read compiles"] == 0, found[name, "state read compiles"]

    # Model-parallel: every parameter-sized leaf (params, gradient, L-BFGS memory, ...) spans
    # the four devices, not replicated, and each process holds two quarters of it.
    for found in (a, b):
        for what in ("run layout", "step layout"):
            sized = [leaf for leaf in found["model", what] if N_FEATURES in leaf[1]]
            assert len(sized) >= 5, sized
            for path, shape, devices, replicated, local_sizes in sized:
                quarter = int(np.prod(shape)) // 4
                assert (devices, replicated, local_sizes) == (4, False, [quarter] * 2), path
        assert found["collectives"] == [], found["collectives"]
    assert a["read alone"] == (a["model", "message"], a["model", "run"][1])
    for found in (a, b):
        for what in ("numpy", "serialise"):
            assert "spans non-addressable" in found[what], (what, found[what])

    # Cut in two, saved by each process and resumed in two fresh ones: bit for bit.
    resumed = read(out, "resume", 2)
    for found, first in zip(resumed, (a, b), strict=True):
        assert len(found["resumed"]) == len(first["uninterrupted"]) > 10
        for leaf, want in zip(found["resumed"], first["uninterrupted"], strict=True):
            assert [w for w, _ in leaf] == [w for w, _ in want]
            for (_, x), (_, y) in zip(leaf, want, strict=True):
                assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), resume


if __name__ == "__main__":
    worker(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
