"""Run jaxsearch next to scipy, optax, jaxopt and optimistix; write table, summary, profile, JSON.

    python -m benchmarks.suite.cutest          # all sif2jax problems with n <= 2000, both dtypes
    python -m benchmarks.suite.cutest --quick  # a handful of small problems
    python -m benchmarks.suite.cutest --large --problems LOGREG --dtype float32

Success is judged here, the same for every solver: the infinity norm of the gradient,
re-evaluated in float64 at the returned point, is at most `--gtol`. Evaluations are counted
inside the objective (see problems.py). Each solve runs twice: the second is timed, and the
first minus the second is the compile time. Outputs go to benchmarks/results/; the results
page is docs/benchmarks.md.

JSON fields, per `results[problem][solver]`: `solved`, `iterations`, `evals` (counted),
`grad_evals` (counted, differentiated), `value_only_evals`, `reported_evals`,
`reported_grad_evals` (the solver's own, or null), `status` (the solver's own), `wall_s`,
`compile_s`, `first_call_s`, `over_time_limit`, `f` and `gnorm` (float64, at the returned
point), `value_and_grad_compile_s` (the compile of `jax.jit(jax.value_and_grad(f))` of the same
problem: the baseline of the summary's last column), `error`, or `skipped` with the reason. Top
level: `meta` (settings, versions, CPU), `summary`, `losses` (where each jaxsearch
configuration loses), `skipped_problems`.
"""

import argparse
import contextlib
import json
import math
import pathlib
import platform
import sys
import time
import warnings

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402

from benchmarks import (  # noqa: E402
    output,
    peers as peers_mod,
    problems as problems_mod,
    profile as profile_mod,
    summary as summary_mod,
)

js = peers_mod.js

DENSE_MAX_N = 5000  # dense BFGS (n x n matrix) is skipped above this size


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dtype", choices=["float64", "float32", "both"], default="both")
    p.add_argument("--max-n", type=int, default=2000, help="largest sif2jax problem size")
    p.add_argument("--problems", default=None, help="comma-separated name substrings")
    p.add_argument(
        "--solvers",
        default=None,
        help="comma-separated solver name substrings (jaxsearch-newton, -newtoncg, -bfgs and "
        "the initial-step rules' jaxsearch-lbfgs-init-*, jaxsearch-cg-init-* run only when named)",
    )
    p.add_argument("--quick", action="store_true", help="a handful of small problems")
    p.add_argument("--large", action="store_true", help="add the large synthetic problems")
    p.add_argument("--gtol", type=float, default=1e-5)
    p.add_argument("--ftol", type=float, default=0.0, help="jaxsearch and scipy ftol")
    p.add_argument("--max-steps", type=int, default=2000)
    p.add_argument(
        "--time-limit",
        type=float,
        default=120.0,
        help="seconds; a first (compiling) solve slower than this is not re-run, "
        "and the solver is skipped on that problem in the other dtype",
    )
    p.add_argument("--out", default=str(output.RESULTS))
    p.add_argument(
        "--update",
        action="store_true",
        help="re-run --solvers on the default set in one --dtype, keeping the other solvers' "
        "rows from the JSON in --out",
    )
    return p.parse_args(argv)


def _float(x):
    x = float(x)
    return x if math.isfinite(x) else None


_CHECKS = {}


def check_point(problem, x) -> tuple[float | None, float | None]:
    """f and |g|_inf at x, evaluated in float64 with the uncounted objective."""
    if problem.name not in _CHECKS:  # one compile per problem, not per solver
        _CHECKS[problem.name] = jax.jit(jax.value_and_grad(problem.fn))
    value_and_grad = _CHECKS[problem.name]
    x64 = problems_mod.cast(jnp.asarray(x), jnp.float64)
    value, grad = value_and_grad(x64, problem.args)
    return _float(value), _float(jnp.max(jnp.abs(grad)))


def value_and_grad_compile_s(problem, dtype) -> float:
    """The baseline for compile times: `jax.jit(jax.value_and_grad(f))` of the counted
    objective, first call minus second call, as the solvers' compile times are measured."""
    fn = problems_mod.counted(problem.fn, problems_mod.Counter())
    ctx = contextlib.nullcontext() if dtype == "float64" else jax.enable_x64(False)
    with ctx:
        x0 = problems_mod.cast(problem.x0, jnp.dtype(dtype))
        args = problems_mod.cast(problem.args, jnp.dtype(dtype))
        value_and_grad = jax.jit(jax.value_and_grad(fn))
        times = []
        for _ in range(2):
            t0 = time.perf_counter()
            jax.block_until_ready(value_and_grad(x0, args))
            times.append(time.perf_counter() - t0)
    return max(times[0] - times[1], 0.0)


def solve_one(problem, peer, cfg, dtype, time_limit):
    """Run one peer on one problem twice; the row of results (fields: the module docstring)."""
    row = {"solved": False, "error": None}
    counter = problems_mod.Counter()
    fn = problems_mod.counted(problem.fn, counter)
    x64 = dtype == "float64"
    ctx = contextlib.nullcontext() if x64 else jax.enable_x64(False)
    try:
        with ctx:
            x0 = problems_mod.cast(problem.x0, jnp.dtype(dtype))
            args = problems_mod.cast(problem.args, jnp.dtype(dtype))
            call = peer(fn, x0, args, cfg)
            counter.reset()
            t0 = time.perf_counter()
            out = call()
            first = time.perf_counter() - t0
            evals, grads = counter.read()
            second = None
            if first <= time_limit:
                counter.reset()
                t0 = time.perf_counter()
                out = call()
                second = time.perf_counter() - t0
                evals, grads = counter.read()
        row.update(
            iterations=out.iterations,
            evals=evals,
            grad_evals=grads,
            value_only_evals=evals - grads,
            reported_evals=out.reported_evals,
            reported_grad_evals=out.reported_grad_evals,
            status=out.status,
            wall_s=second if second is not None else first,
            compile_s=max(first - second, 0.0) if second is not None else None,
            first_call_s=first,
            over_time_limit=second is None,
        )
        f, g = check_point(problem, out.x)
        row.update(f=f, gnorm=g, solved=g is not None and f is not None and g <= cfg.gtol)
        if second is None:
            row["error"] = f"first call took {first:.1f} s > time limit {time_limit} s"
    except Exception as e:  # noqa: BLE001 - a crash counts as unsolved
        msg = str(e).strip().splitlines()
        row["error"] = f"{type(e).__name__}: {msg[0][:300] if msg else ''}"
    return row


def _fmt(row, scipy_row=None):
    if row is None:
        return "—"
    if row.get("skipped"):
        return "skip"
    if row.get("error") and row.get("evals") is None:
        return "crash"
    mark = "" if row["solved"] else "✗ "
    return f"{mark}{row['evals']}"


def write_outputs(out_dir, dtype, meta, problems, rows_by_problem, solver_names, skipped):
    """Markdown table and summary, profile PNG, JSON for one dtype."""
    summary = summary_mod.summarise(rows_by_problem, solver_names)
    ours = [s for s in solver_names if s.startswith("jaxsearch")]
    lose = {s: summary_mod.losses(rows_by_problem, solver_names, s) for s in ours}
    lines = [
        f"# Benchmark, {dtype}",
        "",
        f"gtol = {meta['gtol']} (|g|_inf in float64), "
        f"evaluations counted inside the objective; ✗ = not solved.",
        "",
    ]
    lines.append("| problem | n | " + " | ".join(solver_names) + " |")
    lines.append("| --- | ---: | " + " | ".join("---:" for _ in solver_names) + " |")
    for p in problems:
        per = rows_by_problem.get(p.name)
        if per is None:
            continue
        cells = [_fmt(per.get(s)) for s in solver_names]
        lines.append(f"| {p.name} | {p.n} | " + " | ".join(cells) + " |")
    lines += ["", "## Summary", ""]
    lines += summary_mod.summary_table(summary)
    for s, lo in lose.items():
        lines += ["", f"## Where {s} loses", ""]
        for item in lo["unsolved_solved_by_others"]:
            lowest = ", ".join(item["solved_at_lowest_f_by"]) or "none"
            lines.append(
                f"- unsolved {item['problem']} (solved by {', '.join(item['solved_by'])}; "
                f"at the lowest f by {lowest}): |g| = {item['gnorm']}, "
                f"{item['status'] or item['error']}"
            )
        for item in lo["more_evals_than_scipy"]:
            lines.append(
                f"- {item['problem']}: {item['evals']} evaluations vs scipy {item['scipy_evals']}"
            )
    text = "\n".join(lines) + "\n"
    costs = {
        name: {
            s: (r["evals"] if r.get("solved") else None)
            for s, r in per.items()
            if not r.get("skipped")
        }
        for name, per in rows_by_problem.items()
    }
    if rows_by_problem:
        profile_mod.plot(
            costs,
            str(out_dir / f"{output.stem('cutest', tag=dtype)}_profile.png"),
            f"Performance profile on evaluations, {dtype}, {len(costs)} problems",
        )
    data = {
        "meta": meta,
        "summary": summary,
        "losses": lose,
        "skipped_problems": skipped,
        "results": rows_by_problem,
    }
    output.write(out_dir, output.stem("cutest", tag=dtype), text, data)
    return text, summary


def versions():
    import importlib.metadata as md

    out = {"python": platform.python_version(), "machine": platform.machine()}
    for pkg in (
        "jax",
        "jaxlib",
        "equinox",
        "scipy",
        "optax",
        "jaxopt",
        "optimistix",
        "sif2jax",
        "numpy",
        "matplotlib",
    ):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    return out


def main(argv=None):
    a = parse_args(argv)
    # Every problem wraps its objective in a new counting closure of the same code, and problems
    # of equal size share shapes: that is no user's retrace, so the warning would mislead here.
    warnings.filterwarnings("ignore", category=js.RetraceWarning)
    cfg = peers_mod.Config(gtol=a.gtol, ftol=a.ftol, max_steps=a.max_steps)
    all_peers = peers_mod.peers(cfg, second_order=bool(a.solvers))
    if a.solvers:
        all_peers = {
            k: v
            for k, v in all_peers.items()
            if any(part.strip() in k for part in a.solvers.split(","))
        }
    solver_names = list(all_peers)
    if a.update and (a.dtype == "both" or a.problems or a.quick or a.large):
        raise SystemExit("--update re-runs the whole default problem set in one --dtype")
    name_filter = a.problems
    only = problems_mod.QUICK if a.quick else None
    problems, skipped = problems_mod.cutest(a.max_n, name_filter, only)
    if a.large:
        problems += problems_mod.large(name_filter)
    dtypes = ["float64", "float32"] if a.dtype == "both" else [a.dtype]
    out_dir = pathlib.Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"{len(problems)} problems, {len(skipped)} skipped, solvers: {solver_names}", flush=True)
    too_slow = set()  # (problem, solver) over the time limit: not retried in the next dtype
    texts = {}
    for dtype in dtypes:
        meta = {
            "dtype": dtype,
            "gtol": a.gtol,
            "ftol": a.ftol,
            "max_steps": a.max_steps,
            "optimistix_rtol_atol": cfg.optx_tol,
            "time_limit_s": a.time_limit,
            "argv": sys.argv,
            "versions": versions(),
            "cpu": _cpu(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        }
        rows_by_problem, names = {}, solver_names
        if a.update:  # the other solvers' rows come from the last full run
            kept_path = out_dir / f"{output.stem('cutest', tag=dtype)}.json"
            if not kept_path.exists():  # a run from before the suite's names: <dtype>.json
                kept_path = out_dir / f"{dtype}.json"
            kept = json.loads(kept_path.read_text())
            meta["updated"] = {"solvers": solver_names, "kept_meta": kept["meta"]}
            old = kept["results"]
            names = list(kept["summary"]) + [s for s in solver_names if s not in kept["summary"]]
        for p in problems:
            per = dict(old.get(p.name, {})) if a.update else {}
            try:
                baseline = value_and_grad_compile_s(p, dtype)
            except Exception as e:  # noqa: BLE001 - the solvers report the same failure
                baseline = None
                print(f"[{dtype}] {p.name}: value_and_grad failed: {e}", flush=True)
            for s, peer in all_peers.items():
                if s == "optx-bfgs" and p.n > DENSE_MAX_N:
                    per[s] = {"solved": False, "skipped": f"dense BFGS, n = {p.n}"}
                    continue
                if (p.name, s) in too_slow:
                    per[s] = {"solved": False, "skipped": "over time limit in another dtype"}
                    continue
                per[s] = row = solve_one(p, peer, cfg, dtype, a.time_limit)
                row["value_and_grad_compile_s"] = baseline  # the same run's compile baseline
                if row.get("over_time_limit"):
                    too_slow.add((p.name, s))
            rows_by_problem[p.name] = per
            _CHECKS.clear()
            jax.clear_caches()  # no compiled program is reused by the next problem
            cells = "  ".join(f"{s}={_fmt(per[s])}" for s in solver_names)
            print(f"[{dtype}] {p.name:14s} n={p.n:<6d} {cells}", flush=True)
            write_outputs(out_dir, dtype, meta, problems, rows_by_problem, names, skipped)
        meta["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        texts[dtype], summary = write_outputs(
            out_dir, dtype, meta, problems, rows_by_problem, names, skipped
        )
        print(f"\n## {dtype}\n" + "\n".join(summary_mod.summary_table(summary)), flush=True)
    for dtype in dtypes:
        stem = output.stem("cutest", tag=dtype)
        print(f"\nwrote {out_dir}/{stem}.md, {stem}.json, {stem}_profile.png")
    return 0


def _cpu():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    sys.exit(main())
