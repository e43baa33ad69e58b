"""The user's loop: fits of a Poisson GLM, each with a new closure, as a GLM library runs them.

    python -m benchmarks.suite.fresh_fit          # float32 and float64, both GLMs, 10 fits
    python -m benchmarks.suite.fresh_fit --quick  # float32, the small GLM, 3 fits (< 2 min, 2 CPUs)
    python -m benchmarks.suite.fresh_fit --fits 5 --dtypes float64 --out /tmp/fresh_fit
    python -m benchmarks.suite.fresh_fit --vmap  # 10 single-neuron models under jax.vmap

A downstream neural-GLM library builds, for every `fit`, the penalised loss as a new Python
closure over its regulariser and observation model, then calls the solver on it (issue 35,
item 4). Here each fit builds that closure and the solver inside the loop, with the same data
and regulariser every time; the data go through the solver's `args`.

Problems: a Poisson GLM, rate = exp(X w + b), loss = mean(rate - y log rate) + ridge/2 |w|^2
with log rate written X w + b and ridge 0.1, params an Equinox module (w, b); synthetic data
from a fixed seed with modest true weights: 10,000 samples x 40 features x 10 neurons, and
100 samples x 5 features x 1 neuron.

Solvers, one tolerance per dtype (`TOL`) for all, `MAX_STEPS` steps at most:

  jaxsearch        `js.Solver(gtol=tol)`: L-BFGS with its default line search (Zoom) and its
                   other defaults (scipy's ftol), `solver.run(fn, params, X, y)`;
  optx+optax       `optx.OptaxMinimiser(optax.lbfgs(), rtol=0, atol=tol)` through
                   `optx.minimise(fn, solver, params, (X, y), max_steps=..., throw=False)`, as
                   the GLM library (nemos) drives it by default (its rtol 0, atol = its tol);
  optx-bfgs        `optx.BFGS(rtol=0, atol=tol)`, the same way.

optimistix stops on a Cauchy criterion (|dy| and |df| at most atol + rtol |.|), not on the
gradient: the final loss and gradient inf-norm of every solver are reported, so that the
accuracy reached can be compared.

Every (dtype, problem, solver) runs in fresh processes of this script (`--child`, answering
JSON on stdout), so that no compiled program of one peer serves another:

  1. the loop: `--fits` fits with a new closure each, persistent compilation cache off: total
     wall (compiles included), first fit, mean of the later fits; XLA backend compiles in the
     loop (`/jax/core/compile/backend_compile_duration`), their number and seconds; jaxsearch's
     `RetraceWarning`s; then, untimed, the final gradient inf-norm and one more fit whose fn
     counts its evaluations on the host (`jax.debug.callback`), for the peers that report none;
  2. the same loop in a process with JAX's persistent compilation cache on in an empty folder
     (it fills the cache), and
  3. again in a second process on that filled cache: its total is the "cached" column.

Writes fresh_fit_<backend>.json and .md to --out and prints the markdown. Walls are single
measurements on whatever machine runs this: the load average is recorded before and after.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import jaxsearch as js
from benchmarks import output
from benchmarks.suite.stochastic import cpu_model

ROOT = pathlib.Path(__file__).resolve().parents[2]  # the repository: `python -m` in a child
# What `compiler_options="auto"` picks on a CPU below 1 MiB of x0 and args (the library's own
# constant is private; tests/project/test_benchmarks_layout.py checks that the two agree).
LEAN_OPTIONS = {"xla_cpu_use_fusion_emitters": False, "xla_backend_optimization_level": 1}

PROBLEMS = {  # name: (samples, features, neurons)
    "GLM 10000 x 40 x 10": (10_000, 40, 10),
    "GLM 100 x 5 x 1": (100, 5, 1),
}
QUICK_PROBLEMS = ("GLM 100 x 5 x 1",)
SOLVERS = ("jaxsearch", "optx+optax", "optx-bfgs")
EXTRA_SOLVERS = ("jaxsearch-lean",)  # by --solvers only: run with the lean compile options
TOL = {"float32": 1e-4, "float64": 1e-6}
RIDGE = 0.1
MAX_STEPS = 1000
SEED = 0
TARGET = 0.5  # jaxsearch total / optx+optax total, at most (issue 35)
VMAPPED = 10  # single-neuron models fitted at once under jax.vmap (`--vmap`)

_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"


# ------------------------------------------------------------------------------- the GLM
# What a GLM library holds: an observation model and a regulariser, each a Python object,
# and a function that builds the penalised loss from them as a new closure on every fit.


class Params(eqx.Module):
    w: jax.Array  # features x neurons
    b: jax.Array  # neurons


class PoissonObservations:
    def log_rate(self, params, X):
        return X @ params.w + params.b

    def negative_log_likelihood(self, log_rate, y):
        return jnp.mean(jnp.exp(log_rate) - y * log_rate)


class Ridge:
    def __init__(self, strength: float):
        self.strength = strength

    def penalty(self, params):
        return 0.5 * self.strength * jnp.sum(params.w**2)


def make_loss(observations, regulariser):
    """The penalised loss, a new closure on every call: fn(params, X, y)."""

    def penalised_loss(params, X, y):
        log_rate = observations.log_rate(params, X)
        return observations.negative_log_likelihood(log_rate, y) + regulariser.penalty(params)

    return penalised_loss


def glm_data(samples: int, features: int, neurons: int, dtype: str):
    """X, y and zero initial params as device arrays (built from NumPy: no compile)."""
    rng = np.random.default_rng(SEED)
    X = rng.standard_normal((samples, features))
    w = rng.normal(0.0, 0.5 / np.sqrt(features), (features, neurons))
    b = np.full(neurons, np.log(2.0))
    y = rng.poisson(np.exp(X @ w + b)).astype(np.float64)
    params = Params(
        jnp.asarray(np.zeros((features, neurons), dtype)), jnp.asarray(np.zeros(neurons, dtype))
    )
    return jnp.asarray(X.astype(dtype)), jnp.asarray(y.astype(dtype)), params


# ------------------------------------------------------------------------------- one fit


def fit_jaxsearch(fn, params, X, y, tol, compiler_options="auto"):
    solver = js.Solver(gtol=tol, max_steps=MAX_STEPS)
    result = solver.run(fn, params, X, y, compiler_options=compiler_options)
    jax.block_until_ready(result.params)
    return result.params, {
        "steps": int(result.num_steps),
        "evals": int(result.num_fun_evals),
        "status": js.Status(int(result.status)).name,
    }


def _fit_optimistix(kind, fn, params, X, y, tol):
    import optax
    import optimistix as optx

    if kind == "optx+optax":
        solver = optx.OptaxMinimiser(optax.lbfgs(), rtol=0.0, atol=tol)
    else:
        solver = optx.BFGS(rtol=0.0, atol=tol)

    def packed(p, args):  # the library's `pack_args`: fn(params, args) -> fn(params, *args)
        return fn(p, *args)

    sol = optx.minimise(packed, solver, params, (X, y), max_steps=MAX_STEPS, throw=False)
    jax.block_until_ready(sol.value)
    names = {int(item._value): name for name, item in optx.RESULTS._name_to_item.items()}
    code = int(sol.result._value)
    return sol.value, {"steps": int(sol.stats["num_steps"]), "status": names.get(code, str(code))}


def fit(solver: str, fn, params, X, y, tol):
    if solver == "jaxsearch":
        return fit_jaxsearch(fn, params, X, y, tol)
    if solver == "jaxsearch-lean":  # what "auto" picks on a CPU below 1 MiB of x0 and args
        return fit_jaxsearch(fn, params, X, y, tol, LEAN_OPTIONS)
    return _fit_optimistix(solver, fn, params, X, y, tol)


# ------------------------------------------------------------------------------- a child


def child(spec: dict) -> dict:
    """One process's measurement: `spec` names dtype, problem, solver, fits, cache (a folder
    or None) and whether to count evaluations afterwards."""
    if spec["dtype"] == "float64":
        jax.config.update("jax_enable_x64", True)
    if spec["cache"]:
        jax.config.update("jax_compilation_cache_dir", spec["cache"])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    else:
        jax.config.update("jax_enable_compilation_cache", False)

    compiles: list[float] = []
    hits: list[str] = []

    def on_duration(event, duration, **kwargs):
        if event == _COMPILE_EVENT:
            compiles.append(duration)

    def on_event(event, **kwargs):
        if event == _CACHE_HIT_EVENT:
            hits.append(event)

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    jax.monitoring.register_event_listener(on_event)

    X, y, params0 = glm_data(*PROBLEMS[spec["problem"]], spec["dtype"])
    tol = TOL[spec["dtype"]]
    observations, regulariser = PoissonObservations(), Ridge(RIDGE)

    walls, per_fit_compiles, per_fit_compile_s, infos = [], [], [], []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        before, hits_before = len(compiles), len(hits)  # staging the data compiles too
        start, cpu_start = time.perf_counter(), time.process_time()
        for _ in range(spec["fits"]):
            t0, c0 = time.perf_counter(), len(compiles)
            fn = make_loss(observations, regulariser)  # a new closure, as the library builds
            params, info = fit(spec["solver"], fn, params0, X, y, tol)
            walls.append(time.perf_counter() - t0)
            per_fit_compiles.append(len(compiles) - c0)
            per_fit_compile_s.append(sum(compiles[c0:]))
            infos.append(info)
        total, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    loop_compiles, loop_compile_s = len(compiles) - before, sum(compiles[before:])
    loop_hits = len(hits) - hits_before
    retrace = [w for w in caught if issubclass(w.category, js.RetraceWarning)]
    others = [w for w in caught if not issubclass(w.category, js.RetraceWarning)]

    # untimed: the accuracy reached (one loss defined once, compiled once)
    reference = make_loss(observations, regulariser)
    value_and_grad = jax.jit(jax.value_and_grad(reference))
    value, grad = value_and_grad(params, X, y)
    out = {
        **spec,
        "tol": tol,
        "total_s": total,
        "cpu_s": cpu,
        "first_s": walls[0],
        "later_mean_s": sum(walls[1:]) / len(walls[1:]) if len(walls) > 1 else None,
        "walls_s": walls,
        "compiles": loop_compiles,
        "compile_s": loop_compile_s,
        "compiles_per_fit": per_fit_compiles,
        "compile_s_per_fit": per_fit_compile_s,
        "cache_hits": loop_hits,
        "retrace_warnings": len(retrace),
        "retrace_messages": [str(w.message) for w in retrace],
        "other_warnings": sorted({f"{w.category.__name__}: {w.message}"[:200] for w in others}),
        "loss": float(value),
        "grad_inf": float(max(jnp.max(jnp.abs(g)) for g in jax.tree.leaves(grad))),
        **{k: v for k, v in infos[-1].items()},
        "same_each_fit": all(i == infos[0] for i in infos),
    }
    if spec["count"]:
        counter = [0]

        def bump():
            counter[0] += 1

        def counted(p, X, y):
            jax.debug.callback(bump)
            return reference(p, X, y)

        fit(spec["solver"], counted, params0, X, y, tol)
        jax.effects_barrier()
        out["counted_evals"] = counter[0]
    return out


def vmap_child(spec: dict) -> dict:
    """One process: the large GLM's neurons as `VMAPPED` single-neuron models fitted at once
    under `jax.vmap` by `spec["solver"]`: the first call (its compiles) and a second one, each
    with the loss built as a new closure, as in the plain loop."""
    if spec["dtype"] == "float64":
        jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_enable_compilation_cache", False)
    compiles: list[float] = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, duration, **kwargs: (
            compiles.append(duration) if event == _COMPILE_EVENT else None
        )
    )
    samples, features, _ = PROBLEMS["GLM 10000 x 40 x 10"]
    X, y, _ = glm_data(samples, features, VMAPPED, spec["dtype"])
    models = jnp.moveaxis(y, 1, 0)[:, :, None]  # (models, samples, 1)
    one = Params(jnp.zeros((features, 1), X.dtype), jnp.zeros((1,), X.dtype))
    tol = TOL[spec["dtype"]]

    def fit_all(models):
        fn = make_loss(PoissonObservations(), Ridge(RIDGE))
        return jax.vmap(lambda y: fit_traced(spec["solver"], fn, one, X, y, tol))(models)

    wrap = spec.get("wrap", "eager")  # the vmapped fit called eagerly, or under a jit
    if wrap == "jax.jit":
        fit_all = jax.jit(fit_all)
    elif wrap == "js.jit":
        fit_all = js.jit(fit_all)

    walls = []
    for _ in range(2):
        t0, before = time.perf_counter(), len(compiles)
        jax.block_until_ready(fit_all(models))
        walls.append((time.perf_counter() - t0, len(compiles) - before, sum(compiles[before:])))
    return {
        **spec,
        "first_s": walls[0][0],
        "compiles": walls[0][1],
        "compile_s": walls[0][2],
        "second_s": walls[1][0],
        "second_compiles": walls[1][1],
    }


def fit_traced(solver: str, fn, params, X, y, tol):
    """One fit's params, traceable (under `jax.vmap`)."""
    if solver == "jaxsearch":
        return js.Solver(gtol=tol, max_steps=MAX_STEPS).run(fn, params, X, y).params
    import optax
    import optimistix as optx

    minimiser = optx.OptaxMinimiser(optax.lbfgs(), rtol=0.0, atol=tol)
    sol = optx.minimise(
        lambda p, args: fn(p, *args), minimiser, params, (X, y), max_steps=MAX_STEPS, throw=False
    )
    return sol.value


def run_child(spec: dict, flag: str = "--child") -> dict:
    command = [sys.executable, "-m", "benchmarks.suite.fresh_fit", flag, json.dumps(spec)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        return {**spec, "error": done.stderr.strip().splitlines()[-20:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(dtype: str, problem: str, solver: str, fits: int) -> dict:
    """The three processes of one (dtype, problem, solver)."""
    spec = {"dtype": dtype, "problem": problem, "solver": solver, "fits": fits}
    row = {"plain": run_child({**spec, "cache": None, "count": True})}
    with tempfile.TemporaryDirectory(prefix="fresh_fit_cache_") as folder:
        row["cache_fill"] = run_child({**spec, "cache": folder, "count": False})
        row["cached"] = run_child({**spec, "cache": folder, "count": False})
        row["cache_files"] = len(os.listdir(folder))
    return row


# ------------------------------------------------------------------------------ report


def markdown(data: dict, meta: dict) -> str:
    def f(x, digits=3):
        return "—" if x is None else f"{x:.{digits}g}"

    lines = [
        f"# Fresh fits: the user's loop ({meta['backend']}, {meta['cpu_count']} CPUs)",
        "",
        f"{meta['cpu']}; {meta['cpu_count']} CPUs; jax {meta['jax']}, optax {meta['optax']}, "
        f"optimistix {meta['optimistix']}, equinox {meta['equinox']}; load average "
        f"{meta['load_before']} before, {meta['load_after']} after; `{meta['command']}`",
        "",
        f"{meta['fits']} fits per loop, each building the penalised loss as a new closure; "
        f"tolerance {', '.join(f'{k} {v:g}' for k, v in meta['tol'].items())} (jaxsearch's "
        "gtol on |g|_inf, optimistix's atol with rtol 0 on its Cauchy criterion); walls in "
        "seconds, single measurements; compiles: XLA backend compiles in the loop (count, "
        "seconds); CPU s: the process's CPU time over the loop (all its threads; less sensitive "
        "than walls to other processes on the machine); cached: the loop's total in a second "
        "process on a persistent compilation cache that a first process filled; ratios: "
        "jaxsearch / optx+optax (total, CPU s, cached total).",
        "",
        "| dtype | problem | solver | total | CPU s | first fit | later fits (mean) | compiles | "
        "compile s | cached total | steps | evals | loss | |g|_inf | status | ratio | CPU ratio "
        "| cached ratio |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
        "---: | ---: | --- | ---: | ---: | ---: |",
    ]
    for key, rows in data.items():
        dtype, problem = key.split(" | ")
        base = rows.get("optx+optax", {})
        base_total = base.get("plain", {}).get("total_s")
        base_cached = base.get("cached", {}).get("total_s")
        base_cpu = base.get("plain", {}).get("cpu_s")
        for solver, row in rows.items():
            p, c = row["plain"], row["cached"]
            if "error" in p:
                lines.append(
                    f"| {dtype} | {problem} | {solver} | error | | | | | | | | | | | "
                    f"{p['error'][-1][:80]} | | | |"
                )
                continue
            evals = p.get("evals", p.get("counted_evals"))
            counted = p.get("counted_evals")
            ours = solver.startswith("jaxsearch")
            evals_text = f"{evals} ({counted})" if ours else f"{evals}"
            ratio = cratio = cpu_ratio = None
            if ours and base_total:
                ratio = p["total_s"] / base_total
                cpu_ratio = p["cpu_s"] / base_cpu
                cratio = c.get("total_s") / base_cached if base_cached and "total_s" in c else None
            lines.append(
                f"| {dtype} | {problem} | {solver} | {f(p['total_s'])} | {f(p['cpu_s'])} | "
                f"{f(p['first_s'])} | "
                f"{f(p['later_mean_s'])} | {p['compiles']} | {f(p['compile_s'])} | "
                f"{f(c.get('total_s'))} | {p['steps']} | {evals_text} | {p['loss']:.10g} | "
                f"{f(p['grad_inf'], 2)} | {p['status']} | {f(ratio)} | {f(cpu_ratio)} | "
                f"{f(cratio)} |"
            )
    lines += [
        "",
        "evals: jaxsearch's `num_fun_evals` (in brackets: counted on the host in one extra, "
        "untimed fit whose fn calls `jax.debug.callback`); for optimistix, which reports steps "
        "only, that count. jaxsearch keeps its other defaults, scipy's ftol among them "
        "(status CONVERGED_FTOL: stopped on the relative decrease of f before gtol).",
        "",
        "Second table: the XLA backend compiles of each fit in the plain loop; the cache-filling "
        "process's loop total and its own hits on the cache it was filling (fits 2 onwards "
        "hit it where a new closure lowers to the same program); the cached process's "
        "total, its hits and its compile events (a program loaded from the cache is reported "
        "as a backend compile too, of a fraction of the time).",
        "",
        "| dtype | problem | solver | compiles per fit | compile s per fit | RetraceWarnings | "
        "cache: fill total (hits) | cached (hits, compile events) | cache files |",
        "| --- | --- | --- | --- | --- | ---: | --- | --- | ---: |",
    ]
    for key, rows in data.items():
        dtype, problem = key.split(" | ")
        for solver, row in rows.items():
            p, fl, c = row["plain"], row["cache_fill"], row["cached"]
            if "error" in p:
                continue
            per_fit = ", ".join(str(n) for n in p["compiles_per_fit"])
            per_fit_s = ", ".join(f"{s:.2f}" for s in p["compile_s_per_fit"])
            lines.append(
                f"| {dtype} | {problem} | {solver} | {per_fit} | {per_fit_s} | "
                f"{p['retrace_warnings']} | {f(fl.get('total_s'))} ({fl.get('cache_hits')}) | "
                f"{f(c.get('total_s'))} ({c.get('cache_hits')}, {c.get('compiles')}) | "
                f"{row.get('cache_files')} |"
            )
    messages = {
        m
        for rows in data.values()
        for row in rows.values()
        for m in row["plain"].get("retrace_messages", [])
    }
    if messages:
        lines += ["", "RetraceWarning: " + "; ".join(sorted(messages))]
    errors = [
        f"{key} {solver} {which}: {' / '.join(row[which]['error'][-3:])}"
        for key, rows in data.items()
        for solver, row in rows.items()
        for which in ("plain", "cache_fill", "cached")
        if isinstance(row.get(which), dict) and "error" in row[which]
    ]
    if errors:
        lines += ["", "Errors:", *[f"- {e}" for e in errors]]
    return "\n".join(lines) + "\n"


def vmapped_table(dtypes, wraps=("eager",)) -> str:
    """The large GLM's neurons as single-neuron models fitted at once under `jax.vmap`, each
    solver in a fresh process: the first call (compiles included) and the second, each with
    the loss built as a new closure; the vmapped fit called as `wraps` say ("eager",
    "jax.jit", "js.jit": jaxsearch's own jit, for jaxsearch only)."""
    lines = [
        f"{VMAPPED} single-neuron Poisson GLMs (10000 x 40) fitted at once under jax.vmap, "
        "each call with the loss built as a new closure; first call (backend compiles: count, "
        "seconds) and second call, in seconds.",
        "",
        "| dtype | solver | first call | compiles | compile s | second call | compiles |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    runs = [("jaxsearch", w) for w in wraps] + [("optx+optax", w) for w in wraps if w != "js.jit"]
    for dtype in dtypes:
        for solver, wrap in runs:
            r = run_child({"dtype": dtype, "solver": solver, "wrap": wrap}, "--vmap-child")
            name = f"{solver} ({wrap})"
            if "error" in r:
                lines.append(f"| {dtype} | {name} | error: {r['error'][-1][:80]} | | | | |")
                continue
            lines.append(
                f"| {dtype} | {name} | {r['first_s']:.3g} | {r['compiles']} | "
                f"{r['compile_s']:.3g} | {r['second_s']:.3g} | {r['second_compiles']} |"
            )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="float32, the small GLM, 3 fits")
    parser.add_argument("--fits", type=int, default=None, help="fits per loop (default 10)")
    parser.add_argument("--dtypes", default=None, help="comma list (default float32,float64)")
    parser.add_argument("--solvers", default=",".join(SOLVERS), help="comma list")
    parser.add_argument("--out", default=str(output.RESULTS))
    parser.add_argument(
        "--vmap", action="store_true", help="only the vmapped fit: its first call's compile"
    )
    parser.add_argument(
        "--wrap", default="eager", help="with --vmap: comma list of eager, jax.jit, js.jit"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--vmap-child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    if args.vmap_child:
        print(json.dumps(vmap_child(json.loads(args.vmap_child))))
        return
    if args.vmap:
        dtypes = (args.dtypes or "float32,float64").split(",")
        print(vmapped_table(dtypes, tuple(args.wrap.split(","))))
        return

    import optax
    import optimistix

    fits = args.fits or (3 if args.quick else 10)
    dtypes = (args.dtypes or ("float32" if args.quick else "float32,float64")).split(",")
    problems = QUICK_PROBLEMS if args.quick else tuple(PROBLEMS)
    solvers = [s for s in args.solvers.split(",") if s]
    meta = {
        "backend": jax.default_backend(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "jax": jax.__version__,
        "optax": optax.__version__,
        "optimistix": optimistix.__version__,
        "equinox": eqx.__version__,
        "fits": fits,
        "tol": {d: TOL[d] for d in dtypes},
        "max_steps": MAX_STEPS,
        "load_before": " ".join(f"{x:.1f}" for x in os.getloadavg()),
        "command": " ".join(
            ["python", "-m", "benchmarks.suite.fresh_fit", *(argv or sys.argv[1:])]
        ),
    }
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = output.stem("fresh_fit", meta["backend"], "quick" if args.quick else None)
    data: dict = {}
    for dtype in dtypes:
        for problem in problems:
            key = f"{dtype} | {problem}"
            data[key] = {}
            for solver in solvers:
                t0 = time.perf_counter()
                data[key][solver] = measure(dtype, problem, solver, fits)
                print(f"  {key} | {solver}: {time.perf_counter() - t0:.1f} s", flush=True)
                meta["load_after"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
                output.write_json(out, stem, {"meta": meta, "data": data})
    text = markdown(data, meta)
    output.write(out, stem, text, {"meta": meta, "data": data})
    print(text)


if __name__ == "__main__":
    main()
