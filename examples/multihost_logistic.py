"""Logistic regression on one mesh that spans several processes (JAX's distributed runtime).

`python examples/multihost_logistic.py` starts two processes on this machine, each with two
simulated CPU devices, joined by `jax.distributed.initialize` into one mesh of four devices.
The weights and the data's feature axis are split over the four devices: each device holds a
quarter of them, each process two quarters, and no process ever holds the whole weight vector.
The run is cut in two: each process saves its own shards of the state, reads them back and
resumes, and the resumed run ends where an uninterrupted one does, bit for bit. The
checkpoints go to a new temporary folder, or to the folder --out names; each process prints
where it wrote its own.

On a cluster, start one process per host (or per GPU) with the same script, e.g.

    python examples/multihost_logistic.py --process-id 0 --num-processes 2 \
        --coordinator 10.0.0.1:1234

and, on a GPU cluster or a TPU pod, without `--cpu-devices`: there each process sees its own
accelerators (see docs/scaling-up.md, "Many processes").
"""

import argparse
import os
import socket
import subprocess
import sys
import tempfile

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

import jaxsearch as js

NUM_FEATURES, NUM_EXAMPLES = 256, 512


def loss(w, X, y):
    """Mean logistic loss with labels y in {-1, 1}, plus a small ridge term."""
    z = y * jnp.sum(X * w, axis=1)  # a reduction over the (sharded) features
    return jnp.mean(jnp.logaddexp(0.0, -z)) + 1e-3 * jnp.sum(w * w)


def own_shards(tree):
    """The data of this process's shards of every leaf, on the host."""
    return jax.tree.map(lambda a: [np.asarray(s.data) for s in a.addressable_shards], tree)


def save_shards(path, tree):
    """Each process writes the data of its own shards of every leaf to its own file."""
    eqx.tree_serialise_leaves(path, own_shards(tree))


def load_shards(path, template):
    """What `save_shards` wrote, as global arrays shaped and sharded like `template`'s."""

    def place(like, datas):
        shards = like.addressable_shards
        on_devices = [jax.device_put(d, s.device) for d, s in zip(datas, shards, strict=True)]
        return jax.make_array_from_single_device_arrays(like.shape, like.sharding, on_devices)

    like = jax.tree.map(lambda a: [s.data for s in a.addressable_shards], template)
    return jax.tree.map(
        place, template, eqx.tree_deserialise_leaves(path, like), is_leaf=eqx.is_array
    )


def solve(args):
    """One process's part of the run."""
    if args.cpu_devices:  # simulated CPU devices, set before jax starts its backend
        os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.cpu_devices}"
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.config.update("jax_enable_x64", True)
    # The one call that joins the processes, before any other use of jax. On a TPU pod, or a
    # GPU cluster under SLURM or Open MPI, `jax.distributed.initialize()` finds all three.
    jax.distributed.initialize(
        coordinator_address=args.coordinator,
        num_processes=args.num_processes,
        process_id=args.process_id,
    )

    # One mesh over every device of every process.
    mesh = jax.make_mesh((jax.device_count(),), ("x",))

    # Each process places only its own shards: the callback is asked for the slices that this
    # process's devices hold (here cut from data every process can make; with real data,
    # read just those slices).
    rng = np.random.default_rng(0)
    X = rng.standard_normal((NUM_EXAMPLES, NUM_FEATURES)) / np.sqrt(NUM_FEATURES)
    y = np.where(X @ rng.standard_normal(NUM_FEATURES) > 0, 1.0, -1.0)

    def put(array, spec):
        sharding = NamedSharding(mesh, spec)
        return jax.make_array_from_callback(array.shape, sharding, lambda index: array[index])

    w0, X, y = put(np.zeros(NUM_FEATURES), P("x")), put(X, P(None, "x")), put(y, P())

    solver = js.Solver(gtol=1e-9, ftol=0.0)
    result = solver.run(loss, w0, X, y)  # every process runs the same program

    # The run cut in two: the first half's state, saved by each process on its own.
    first = js.Solver(gtol=1e-9, ftol=0.0, max_steps=5).run(loss, w0, X, y)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"process-{jax.process_index()}.eqx")
    save_shards(path, (first.iterate, first.state))
    template = (w0, solver.init(w0, fn=loss, args=(X, y)))
    iterate, state = load_shards(path, template)
    resumed = solver.run(loss, iterate, X, y, state=state)
    same = eqx.tree_equal(
        own_shards((resumed.params, resumed.state)), own_shards((result.params, result.state))
    )

    me = f"process {jax.process_index()}"
    if jax.process_index() == 0:  # scalars are replicated: any process may read them
        platform = jax.devices()[0].platform
        print(f"{jax.process_count()} processes, {jax.device_count()} devices: {platform}")
        print(
            f"{me}: status {js.Status(int(result.status)).name}, value {float(result.value):.12f}"
        )
        print(f"{me}: steps {int(result.num_steps)}, evaluations {int(result.num_fun_evals)}")
    shards = [s.data.shape for s in result.params.addressable_shards]
    print(f"{me}: params {result.params.shape} {result.params.sharding.spec}, holds {shards}")
    print(f"{me}: resumed == uninterrupted, bit for bit: {bool(same)}")
    print(f"{me}: saved {path}")


def launch_local(num_processes: int, cpu_devices: int, out: str) -> None:
    """Starts `num_processes` copies of this script on this machine (loopback only) and
    prints their output, process 0 first."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                f"--process-id={i}",
                f"--num-processes={num_processes}",
                f"--coordinator=127.0.0.1:{port}",
                f"--cpu-devices={cpu_devices}",
                f"--out={out}",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(num_processes)
    ]
    try:
        outputs = [p.communicate(timeout=300) for p in processes]
    finally:
        for p in processes:
            p.kill()
    for p, (out, err) in zip(processes, outputs, strict=True):
        if p.returncode != 0:
            sys.exit(f"a process failed:\n{err[-3000:]}")
        # gloo, the CPU collectives, says on stdout how its processes connected
        print(
            "".join(line for line in out.splitlines(True) if not line.startswith("[Gloo]")), end=""
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--process-id", type=int, help="this process (0 to num-processes - 1)")
    parser.add_argument("--num-processes", type=int, default=2)
    parser.add_argument("--coordinator", help="host:port of process 0, the same for every one")
    parser.add_argument(
        "--cpu-devices", type=int, default=0, help="simulated CPU devices per process (0: none)"
    )
    parser.add_argument(
        "--out", help="folder for the checkpoints (default: a new temporary folder)"
    )
    args = parser.parse_args()
    if args.out is None:
        args.out = tempfile.mkdtemp(prefix="jaxsearch-multihost-")
    if args.process_id is None:  # no process given: start two on this machine
        launch_local(args.num_processes, cpu_devices=2, out=args.out)
    else:
        solve(args)


if __name__ == "__main__":
    main()
