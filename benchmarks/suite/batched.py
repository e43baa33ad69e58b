"""Many small problems at once: problems solved per second, plain `vmap(run)` against its peers.

    python -m benchmarks.suite.batched                             # 10,000 problems, every row
    python -m benchmarks.suite.batched --quick --out /tmp/batched  # 1,000 problems, a few minutes

The batch: 2-D Rosenbrock-like problems f(x; a, b) = (a - x_1)^2 + b (x_2 - x_1^2)^2 with
a ~ U[0.5, 1.5], b = 10^U[0, 3] and x0 ~ U[-2, 2]^2 (seeded), float64, to |g|_inf <= gtol: their
step counts vary about tenfold, which is what a `lax.while_loop` under `jax.vmap` pays for (every
problem runs until the slowest has finished). Rows:

  jaxsearch vmap     `jax.jit(jax.vmap(solver.run))` over the whole batch;
  jaxsearch batched_run  `js.batched_run(solver, objective, x0s, ab, lanes=w)` for each w of
                     `--lanes`: a pool of w lanes in one compiled loop, each lane taking the
                     next problem at the iteration its problem ends; each problem's result is
                     compared with plain vmap's, bit for bit;
  optax vmap         optax.lbfgs in its documented while loop (benchmarks/peers.py), vmapped;
  optimistix vmap    optx.minimise with optx.LBFGS, vmapped;
  scipy loop         scipy L-BFGS-B on a jitted value_and_grad, a Python loop over `--scipy`
                     problems (rate extrapolated).

Walls are the minimum over `--reps` calls after a compile call; compile is reported apart.
Writes batched_<backend>.json and .md to --out and prints the markdown.
"""

import argparse
import platform
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxsearch as js  # noqa: E402
from benchmarks import output  # noqa: E402

GTOL = 1e-6
MAX_STEPS = 1000


def objective(x, ab):
    """Rosenbrock-like: (a - x_1)^2 + b (x_2 - x_1^2)^2."""
    a, b = ab[0], ab[1]
    return (a - x[0]) ** 2 + b * (x[1] - x[0] ** 2) ** 2


def batch(size: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.5, 1.5, size)
    b = 10.0 ** rng.uniform(0.0, 3.0, size)
    x0 = rng.uniform(-2.0, 2.0, (size, 2))
    return jnp.asarray(x0), jnp.asarray(np.stack([a, b], axis=1))


TIMES = np.linspace(0.0, 5.0, 20)


def decay(x, y):
    """Least squares of an exponential decay x_1 exp(-x_2 t) through 20 points y."""
    return jnp.sum((x[0] * jnp.exp(-x[1] * jnp.asarray(TIMES)) - y) ** 2)


def decay_batch(size: int, seed: int = 0):
    """Random amplitudes in [0.5, 2], rates in [0.1, 3], noise 0.01; every fit from (1, 1)."""
    rng = np.random.default_rng(seed)
    amplitude, rate = rng.uniform(0.5, 2.0, size), rng.uniform(0.1, 3.0, size)
    y = amplitude[:, None] * np.exp(-rate[:, None] * TIMES) + 0.01 * rng.normal(size=(size, 20))
    return jnp.ones((size, 2)), jnp.asarray(y)


PROBLEMS = {"rosenbrock": (objective, batch), "decay": (decay, decay_batch)}
PROBLEM_TEXT = {
    "rosenbrock": "2-D Rosenbrock-like, a ~ U[0.5, 1.5], b = 10^U[0, 3], x0 ~ U[-2, 2]^2",
    "decay": "exponential-decay fits to 20 noisy points, amplitude ~ U[0.5, 2], rate ~ "
    "U[0.1, 3], from (1, 1)",
}


def interleaved(measures, reps: int) -> list[dict]:
    """Each measure is (name, call, finish): a first call each (the compile), then `reps`
    rounds calling each in turn (a loaded machine slows them alike); finish(first, min wall,
    last output) makes its row, with the least CPU time of a call (this process's, all its
    threads) as `cpu_s`. A measure whose call raises is reported, not fatal."""
    firsts, outs, walls = {}, {}, {}
    for name, call, _ in measures:
        try:
            start = time.perf_counter()
            outs[name] = jax.block_until_ready(call())
            firsts[name], walls[name] = time.perf_counter() - start, []
        except Exception as error:  # a peer that fails
            outs[name] = dict(name=name, error=f"{type(error).__name__}: {error}"[:300])
        print(name, "first call", round(firsts.get(name, -1.0), 2), flush=True)
    cpus: dict = {name: [] for name in walls}
    for _ in range(reps):
        for name, call, _ in measures:
            if name in walls:
                start, cpu = time.perf_counter(), time.process_time()
                outs[name] = jax.block_until_ready(call())
                walls[name].append(time.perf_counter() - start)
                cpus[name].append(time.process_time() - cpu)
    rows = []
    for name, _, finish in measures:
        if name in walls:
            rows.append(finish(firsts[name], min(walls[name]), outs[name]))
            rows[-1]["cpu_s"] = min(cpus[name])
        else:
            rows.append(outs[name])
        print(rows[-1], flush=True)
    return rows


def solved(objective, x, ab) -> np.ndarray:
    """Per problem: |g|_inf <= 10 gtol at x (the peers' own reports differ; this is one test)."""
    grads = jax.vmap(jax.grad(objective))(x, ab)
    return np.asarray(jnp.max(jnp.abs(grads), axis=1) <= 10 * GTOL)


def row(objective, name, first, wall, x, ab, size, **extra) -> dict:
    ok = solved(objective, x, ab)
    return dict(
        name=name,
        problems=size,
        first_call_s=first,
        wall_s=wall,
        solved=int(ok.sum()),
        solved_per_s=float(ok.sum()) / wall,
        **extra,
    )


def jaxsearch_vmap(objective, x0, ab, keep: dict):
    """Plain `jax.jit(jax.vmap(run))`; its last result is kept in `keep["reference"]`."""
    solver = js.Solver(gtol=GTOL, ftol=0.0, max_steps=MAX_STEPS)
    solve = jax.jit(jax.vmap(lambda x, p: solver.run(objective, x, p)))

    def finish(first, wall, result):
        keep["reference"] = result
        steps = np.asarray(result.num_steps)
        evals = np.asarray(result.num_fun_evals)
        return row(
            objective,
            "jaxsearch vmap",
            first,
            wall,
            result.params,
            ab,
            len(x0),
            steps_min=int(steps.min()),
            steps_median=float(np.median(steps)),
            steps_max=int(steps.max()),
            evals_mean=float(evals.mean()),
            evals_max=int(evals.max()),
        )

    return "jaxsearch vmap", lambda: solve(x0, ab), finish


def same_bits(got, want, size: int) -> np.ndarray:
    """Per problem: every leaf of the two results (params, value, grad, aux, status, state,
    iterate) equal bit for bit."""
    same = np.ones(size, bool)
    for name in ("params", "value", "grad", "aux", "status", "state", "iterate"):
        for a, b in zip(
            jax.tree.leaves(getattr(got, name)), jax.tree.leaves(getattr(want, name)), strict=True
        ):
            a, b = np.asarray(a).reshape(size, -1), np.asarray(b).reshape(size, -1)
            if a.dtype.kind == "f":
                a, b = a.view(f"u{a.dtype.itemsize}"), b.view(f"u{b.dtype.itemsize}")
            same &= (a == b).all(axis=1)
    return same


def jaxsearch_batched(objective, x0, ab, lanes: int, keep: dict):
    """`js.batched_run`: a pool of `lanes` lanes."""
    solver = js.Solver(gtol=GTOL, ftol=0.0, max_steps=MAX_STEPS)
    name = f"jaxsearch batched_run (lanes={lanes})"

    def finish(first, wall, result):
        same = same_bits(result, keep["reference"], len(x0))
        return row(
            objective, name, first, wall, result.params, ab, len(x0), bit_for_bit=int(same.sum())
        )

    call = lambda: js.batched_run(solver, objective, x0, ab, lanes=lanes)
    return name, call, finish


def optax_vmap(objective, x0, ab):
    import optax
    import optax.tree_utils as otu

    opt = optax.lbfgs()

    def one(x, p):
        fun = lambda x: objective(x, p)
        value_and_grad = optax.value_and_grad_from_state(fun)

        def step(carry):
            params, state = carry
            value, grad = value_and_grad(params, state=state)
            updates, state = opt.update(grad, state, params, value=value, grad=grad, value_fn=fun)
            return optax.apply_updates(params, updates), state

        def keep_going(carry):
            _, state = carry
            count = otu.tree_get(state, "count")
            err = jnp.max(jnp.abs(otu.tree_get(state, "grad")))
            return (count == 0) | ((count < MAX_STEPS) & (err > GTOL))

        params, state = jax.lax.while_loop(keep_going, step, (x, opt.init(x)))
        return params, otu.tree_get(state, "count")

    def finish(first, wall, out):
        params, count = out
        steps = int(np.max(count))
        return row(objective, "optax vmap", first, wall, params, ab, len(x0), steps_max=steps)

    solve = jax.jit(jax.vmap(one))
    return "optax vmap", lambda: solve(x0, ab), finish


def optimistix_vmap(objective, x0, ab):
    import optimistix as optx

    solver = optx.LBFGS(rtol=1e-10, atol=1e-10)

    def one(x, p):
        sol = optx.minimise(objective, solver, x, p, max_steps=MAX_STEPS, throw=False)
        return sol.value, sol.stats["num_steps"]

    def finish(first, wall, out):
        params, steps = out
        name, steps = "optimistix vmap", int(np.max(steps))
        return row(objective, name, first, wall, params, ab, len(x0), steps_max=steps)

    solve = jax.jit(jax.vmap(one))
    return "optimistix vmap", lambda: solve(x0, ab), finish


def scipy_loop(objective, x0, ab, count: int):
    import scipy.optimize

    value_and_grad = jax.jit(jax.value_and_grad(objective))
    x0_np, ab_np = np.asarray(x0[:count]), np.asarray(ab[:count])

    def solve():
        out = []
        for x, p in zip(x0_np, ab_np, strict=True):

            def f(x, p=p):
                v, g = value_and_grad(jnp.asarray(x), jnp.asarray(p))
                return float(v), np.asarray(g)

            options = {"gtol": GTOL, "ftol": 0.0, "maxiter": MAX_STEPS, "maxfun": 10**9}
            res = scipy.optimize.minimize(f, x, jac=True, method="L-BFGS-B", options=options)
            out.append(res.x)
        return jnp.asarray(np.stack(out))

    def finish(first, wall, x):
        return row(objective, "scipy loop", first, wall, x, ab[:count], count)

    return "scipy loop", solve, finish


def cpu_rate(r) -> float:
    return r["solved"] / r["cpu_s"]


def markdown(meta, rows) -> str:
    lines = [
        f"# Batched small problems, {meta['backend']} ({meta['device']})",
        "",
        f"{meta['date']}; jax {meta['jax']}; command: `{meta['command']}`",
        "",
        f"{meta['batch']} problems ({meta['problem']}; float64, gtol {GTOL:g}); jaxsearch "
        f"vmap's steps per problem: min {meta['steps_min']}, median {meta['steps_median']:g}, "
        f"max {meta['steps_max']}; evaluations of fn: mean {meta['evals_mean']:.3g}, max "
        f"{meta['evals_max']}.",
        "",
        "| solver | problems | solved | first call s | wall s | solved / s | vs jaxsearch vmap "
        "| cpu s | vs jaxsearch vmap, cpu | notes |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    base = rows[0]["solved_per_s"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['name']} | | | | | | | | | {r['error']} |")
            continue
        notes = []
        if "bit_for_bit" in r:
            notes.append(f"bit for bit as jaxsearch vmap: {r['bit_for_bit']} of {r['problems']}")
        if "steps_max" in r and "steps_min" not in r:
            notes.append(f"max steps {r['steps_max']}")
        lines.append(
            f"| {r['name']} | {r['problems']} | {r['solved']} | {r['first_call_s']:.3g} "
            f"| {r['wall_s']:.3g} | {r['solved_per_s']:.4g} | {r['solved_per_s'] / base:.3g} "
            f"| {r['cpu_s']:.3g} | {cpu_rate(r) / cpu_rate(rows[0]):.3g} | {'; '.join(notes)} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--batch", type=int, default=10_000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--problem", default="rosenbrock", choices=sorted(PROBLEMS))
    p.add_argument("--lanes", default="1024", help="comma list of batched_run's lanes")
    p.add_argument("--scipy", type=int, default=200, help="problems in scipy's loop (0: none)")
    p.add_argument("--skip", default="", help="comma list of: batched,optax,optimistix")
    p.add_argument("--quick", action="store_true", help="--batch 1000 --reps 1 --scipy 20")
    p.add_argument("--out", default=str(output.RESULTS))
    args = p.parse_args(argv)
    if args.quick:
        args.batch, args.reps, args.scipy = 1000, 1, min(args.scipy, 20)
    skip = set(filter(None, args.skip.split(",")))
    objective, make = PROBLEMS[args.problem]
    x0, ab = make(args.batch)
    keep: dict = {}
    measures = [jaxsearch_vmap(objective, x0, ab, keep)]
    if "batched" not in skip:
        measures += [
            jaxsearch_batched(objective, x0, ab, int(w), keep) for w in args.lanes.split(",")
        ]
    if "optax" not in skip:
        measures.append(optax_vmap(objective, x0, ab))
    if "optimistix" not in skip:
        measures.append(optimistix_vmap(objective, x0, ab))
    rows = interleaved(measures, args.reps)
    if args.scipy:  # seconds a call: once, after the others
        rows += interleaved([scipy_loop(objective, x0, ab, args.scipy)], 1)
    base = rows[0]
    device = jax.devices()[0]
    meta = dict(
        date=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        backend=jax.default_backend(),
        device=getattr(device, "device_kind", str(device)),
        jax=jax.__version__,
        machine=platform.processor() or platform.machine(),
        command="python -m benchmarks.suite.batched "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        batch=args.batch,
        problem=PROBLEM_TEXT[args.problem],
        evals_mean=base["evals_mean"],
        evals_max=base["evals_max"],
        steps_min=base["steps_min"],
        steps_median=base["steps_median"],
        steps_max=base["steps_max"],
    )
    text = markdown(meta, rows)
    tag = None if args.problem == "rosenbrock" else args.problem
    stem = output.stem("batched", meta["backend"], tag)
    output.write(args.out, stem, text, dict(meta=meta, rows=rows))
    print(text)


if __name__ == "__main__":
    main()
