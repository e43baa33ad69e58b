"""How do L-BFGS's forms fare on an accelerator? The compact form and the two-loop recursion,
against optax.
Date: 2026-12-05, commit 4b46a57

    python -m benchmarks.studies.lbfgs_products --out /tmp/products  # meant for a GPU
    python -m benchmarks.studies.lbfgs_products --quick              # n = 1e5 only (a CPU check)
    python -m benchmarks.studies.lbfgs_products --xla-flags "" " --xla_gpu_enable_command_buffer="

For the default `Solver()` on extended Rosenbrock (float32, |g|_inf <= 1e-3):

  compact   `LBFGS(form="compact")` (the default off a CPU, and on a CPU from n = 5000): its
            memory multiplied by each vector apart, one matrix-vector product each
            (`_lbfgs_compact._memory_times`);
  two-loop  `LBFGS(form="two_loop")`;
  optax     optax.lbfgs in its documented loop, for scale.

Per variant: the run's wall (min over repeats), steps and evaluations at each n; at the first
n, XLA's bytes accessed by one step (one trial) over the floor (4m + 8) 4n, and the run's
memory (temp + argument + output) in n-vectors; and the 2-D Rosenbrock run's wall per
evaluation. With --xla-flags, the 2-D run again in subprocesses under each XLA_FLAGS setting
(a setting that starts with "--" needs a leading space, for argparse). Until the commit that
added this paragraph the compact form stacked its vectors into one product off a CPU:
benchmarks/results/lbfgs_products_gpu_before.json holds that variant's H200 figures ("compact,
stacked") beside the per-vector products ("compact, per vector") that replaced it;
lbfgs_products_gpu.json is this script's run after that change and after the rebuild of S'Y and
Y'Y became a reduction (`_lbfgs_compact._memory_products`, see benchmarks/studies/hlo_anatomy.py).
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxsearch as js
from benchmarks import output, peers as peers_mod, problems as problems_mod
from benchmarks.suite import speed

FN = problems_mod._ext_rosenbrock


def x0_of(n: int):
    return jnp.asarray(np.tile(np.float32([-1.2, 1.0]), n // 2))


def min_wall(call, reps: int) -> float:
    jax.block_until_ready(call())
    walls = []
    for _ in range(reps):
        start = time.perf_counter()
        jax.block_until_ready(call())
        walls.append(time.perf_counter() - start)
    return min(walls)


def measure(direction, sizes, reps: int) -> dict:
    solver = js.Solver(direction, gtol=1e-3, ftol=0.0, max_steps=300)
    out: dict = {}
    for k, n in enumerate(sizes):
        x0 = x0_of(n)
        run = jax.jit(lambda x: solver.run(FN, x, None))
        result = jax.block_until_ready(run(x0))
        row = {
            "wall_s": min_wall(lambda run=run, x0=x0: run(x0).params, reps),
            "steps": int(result.num_steps),
            "evals": int(result.num_fun_evals),
            "status": js.Status(int(result.status)).name,
        }
        if k == 0:
            stats = run.lower(x0).compile().memory_analysis()
            total = stats.temp_size_in_bytes + stats.argument_size_in_bytes
            row["run_memory_vectors"] = (total + stats.output_size_in_bytes) / (4 * n)
            start, step = speed.jaxsearch_step_fns(solver, FN)
            state = start(x0, None)
            one_step = jax.jit(lambda p, s, step=step: step(p, s, None))
            compiled = one_step.lower(x0, state).compile()
            cost = compiled.cost_analysis()
            cost = cost[0] if isinstance(cost, list | tuple) else cost
            row["step_bytes_vs_floor"] = float(cost["bytes accessed"]) / speed.bytes_floor(n)
        out[str(n)] = row
        del result
        speed.fresh()
    return out


def measure_optax(sizes, reps: int) -> dict:
    out = {}
    for n in sizes:
        cfg = peers_mod.Config(gtol=1e-3, ftol=0.0, max_steps=300)
        call = peers_mod.optax_lbfgs(FN, x0_of(n), None, cfg)
        out[str(n)] = {"wall_s": min_wall(call, reps), "steps": call().iterations}
        speed.fresh()
    return out


def small_wall(reps: int) -> dict:
    """The 2-D Rosenbrock run (default solver, float32, gtol 1e-5) under jax.jit: min wall."""
    solver = js.Solver(gtol=1e-5, ftol=0.0)
    run = jax.jit(lambda x: solver.run(FN, x, None))
    x0 = x0_of(2)
    result = run(x0)
    wall = min_wall(lambda: run(x0).params, reps)
    evals = int(result.num_fun_evals)
    return {"wall_s": wall, "evals": evals, "per_evaluation_us": 1e6 * wall / evals}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--xla-flags", nargs="*", default=None, help="XLA_FLAGS settings to compare")
    p.add_argument("--small-only", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", default=str(output.RESULTS))
    args = p.parse_args(argv)
    if args.small_only:  # a subprocess of --xla-flags
        print(json.dumps(small_wall(200)))
        return
    sizes = (100_000,) if args.quick else (1_000_000, 10_000_000)
    results: dict = {}
    variants = {"compact": js.LBFGS(form="compact"), "two-loop": js.LBFGS(form="two_loop")}
    for name, direction in variants.items():
        results[name] = measure(direction, sizes, args.reps)
        results[name]["small"] = small_wall(50)
        print(name, json.dumps(results[name]), flush=True)
    results["optax"] = measure_optax(sizes, args.reps)
    print("optax", json.dumps(results["optax"]), flush=True)
    for flags in args.xla_flags or ():
        env = dict(os.environ, XLA_FLAGS=flags)
        command = [sys.executable, __file__, "--small-only"]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        line = (done.stdout.strip().splitlines() or ["{}"])[-1]
        results[f"small, XLA_FLAGS={flags!r}"] = (
            json.loads(line) if done.returncode == 0 else {"error": done.stderr[-500:]}
        )
        print(flags, line, flush=True)
    device = jax.devices()[0]
    meta = {
        "backend": jax.default_backend(),
        "device": getattr(device, "device_kind", str(device)),
        "jax": jax.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "command": "benchmarks/studies/lbfgs_products.py " + " ".join(sys.argv[1:]),
    }
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"lbfgs_products_{meta['backend']}.json"
    path.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
