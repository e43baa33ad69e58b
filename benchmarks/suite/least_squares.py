"""Least squares on the NIST StRD problems of higher difficulty (issue 36, part 1): scipy's
least_squares (trf, lm), optimistix's GaussNewton and LevenbergMarquardt, js.BFGS and
js.Newton (each with js.Zoom) on f(b) = 0.5 |r(b)|^2, and jaxsearch's least-squares
directions js.GaussNewton and js.LevenbergMarquardt with their default searches (Zoom and
Backtracking; fn returns r itself), the latter from its default first radius (MINPACK's,
factor=1.0) and from the damping tau (js.LevenbergMarquardt(factor=None), `jaxsearch-lm-tau`).

    python -m benchmarks.suite.least_squares          # all 8 problems x 2 starts
    python -m benchmarks.suite.least_squares --quick  # MGH09 and BoxBOD
    python -m benchmarks.suite.least_squares --problems Thurber,Rat43

The problems are benchmarks/nist_problems.py (NIST StRD nonlinear regression,
https://www.itl.nist.gov/div898/strd/nls/nls_main.shtml: MGH09, Thurber, BoxBOD, Rat42, MGH10,
Eckerle4, Rat43, Bennett5), r(b) = y - model(b, x), float64, from Start 1 and from Start 2.
Solved: every fitted parameter b_i agrees with NIST's certified b*_i to 6 significant digits,
judged as |b_i - b*_i| <= 5e-7 |b*_i| for every i (the table's LRE is NIST's log relative
error, min_i -log10(|b_i - b*_i| / |b*_i|), capped at 11 digits).

Counting, inside the compiled residual function with `jax.debug.callback`, in a first run:
`evals`, executions of r (also those inside a Jacobian, a linearisation or a gradient, and the
one re-run of r for the n Hessian-vector products of a js.Newton step; for js.GaussNewton and
js.LevenbergMarquardt the one execution of r inside the forward-mode Jacobian that `run`
forms at each trial point, which gives r, J, f = 0.5 |r|^2 and the gradient J'r together, and
the accepted point's r and J to the direction: one evaluation per trial, as optimistix's one
linearisation per step); `to_solved`, the evaluations of r up to
and including the first at a point that solves the problem (independent of when the stopping
rules end the run); `lins`, differentiated
executions (a Jacobian, a linearisation, a gradient, or a js.Newton step's batch of Hessian-
vector products); `jvps`, Jacobian-vector products of r, one per tangent direction pushed
forward (scipy's jax.jacfwd Jacobian: n per Jacobian; optimistix: those of its jax.linearize
operator; js.GaussNewton and js.LevenbergMarquardt: n per trial point). Reverse-mode
products do not pass that callback, so for jaxsearch's other directions the products are its
own counts: `vjps` = its reported value-and-gradient evaluations (one VJP of r each; 0 for
js.GaussNewton and js.LevenbergMarquardt, whose gradient is J'r), `hvps` = js.Newton's
Hessian-vector products (n per step, forward over reverse). `reported`:
the solver's own counts (scipy nfev/njev, optimistix num_steps, jaxsearch num_steps and
num_fun_evals). Timing, in two more runs of fresh closures without the counting callbacks
(jax.clear_caches() first): `wall_s`, the second call; `compile_s`, the first call minus the
second (for scipy: the jit of r and of jax.jacfwd(r)).

Writes benchmarks/results/least_squares_<backend>.md and .json (--out to change): per problem and
start a table, the summary (solved counts; medians over the runs that every solver solves),
the command, the machine and the versions.
"""

import argparse
import dataclasses
import functools
import json
import math
import pathlib
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxsearch as js  # noqa: E402
from benchmarks import nist_problems as nist, output  # noqa: E402

SOLVED_RTOL = 5e-7  # |b_i - b*_i| <= SOLVED_RTOL |b*_i| for every i: 6 significant digits
LRE_CAP = 11.0  # NIST certifies 11 digits
QUICK = ("MGH09", "BoxBOD")


@dataclasses.dataclass
class Settings:
    """Stopping settings: scipy's ftol = xtol = gtol and max_nfev; optimistix's rtol = atol and
    max_steps; jaxsearch's gtol (|g|_inf of f = 0.5 |r|^2), ftol and max_steps."""

    scipy_tol: float = 1e-15
    max_nfev: int = 10_000
    optx_tol: float = 1e-12
    max_steps: int = 5_000
    gtol: float = 1e-10
    ftol: float = 0.0


@dataclasses.dataclass
class Outcome:
    """A solver's final point and what it reports about its run."""

    x: np.ndarray
    status: str
    reported: dict[str, int]
    vjps: int | None = None
    hvps: int | None = None


# -------------------------------------------------------------------------------- counting


class Counter:
    """Host tallies incremented from compiled code: `evals`, `lins` and `jvps` (module
    docstring), and `to_solved`: the count of evaluations of r up to and including the first
    at a point that solves `problem` (None until one does)."""

    def __init__(self, problem=None):
        self.problem = problem
        self.counts: dict[str, int | None] = {"evals": 0, "lins": 0, "jvps": 0, "to_solved": None}

    def reset(self):
        jax.effects_barrier()
        self.counts = {"evals": 0, "lins": 0, "jvps": 0, "to_solved": None}

    def read(self) -> dict[str, int | None]:
        jax.effects_barrier()
        return dict(self.counts)

    def bump(self, key: str) -> Callable:
        def callback(*_):
            self.counts[key] += 1

        return callback

    def evaluated(self, b) -> None:
        """One evaluation of r at b (unbatched: r's primal runs once per Jacobian)."""
        self.counts["evals"] += 1
        if self.counts["to_solved"] is None and self.problem is not None:
            if accuracy(self.problem, np.asarray(b))[0] <= SOLVED_RTOL:
                self.counts["to_solved"] = self.counts["evals"]


def residual_function(problem, counter: Counter | None = None) -> Callable:
    """r(b, args) = y - model(b, x) with args = (x, y): a new closure on each call, counted
    in `counter` when one is given. Under `vmap`, a callback that takes a batched argument runs
    once per batch element: the tangent passed to `jvps` makes it count every direction."""
    model = problem.model
    if counter is None:

        def plain(b, args):
            x, y = args
            return y - model(b, x)

        return plain

    @jax.custom_jvp
    def tag(b):
        return b

    @tag.defjvp
    def tag_jvp(primals, tangents):
        jax.debug.callback(counter.bump("lins"))
        jax.debug.callback(counter.bump("jvps"), tangents[0])
        return primals[0], tangents[0]

    def counted(b, args):
        jax.debug.callback(counter.evaluated, b)
        x, y = args
        return y - model(tag(b), x)

    return counted


# ------------------------------------------------------------------------------------ peers
# `peer(r, b0, args, settings)` returns (solve, outcome): `solve()` runs the whole solve
# (compiling on its first call) and returns the solver's own result, once computed (what is
# timed); `outcome(result)` reads an Outcome from it (not timed: reading jaxsearch's state
# takes longer than these small solves).


def _scipy(method: str, r, b0, args, settings: Settings):
    """scipy.optimize.least_squares(method=...), the Jacobian a jitted jax.jacfwd(r)."""
    import scipy.optimize

    fun, jac = jax.jit(r), jax.jit(jax.jacfwd(r))
    b0 = np.asarray(b0, np.float64)

    def solve():
        return scipy.optimize.least_squares(
            lambda b: np.asarray(fun(jnp.asarray(b), args)),
            b0,
            jac=lambda b: np.asarray(jac(jnp.asarray(b), args)),
            method=method,
            ftol=settings.scipy_tol,
            xtol=settings.scipy_tol,
            gtol=settings.scipy_tol,
            max_nfev=settings.max_nfev,
        )

    def outcome(res):
        return Outcome(
            x=np.asarray(res.x),
            status=f"{res.status}: {res.message}",
            reported={"nfev": int(res.nfev), "njev": int(res.njev or 0)},
        )

    return solve, outcome


def _optimistix(kind: str, r, b0, args, settings: Settings):
    """optx.least_squares(r, optx.<kind>(rtol, atol), ...) in one jitted call, throw=False."""
    import optimistix as optx

    solver = getattr(optx, kind)(rtol=settings.optx_tol, atol=settings.optx_tol)

    @jax.jit
    def jitted(b0, args):
        sol = optx.least_squares(r, solver, b0, args, max_steps=settings.max_steps, throw=False)
        return sol.value, sol.stats["num_steps"], sol.result._value

    names = {int(item._value): name for name, item in optx.RESULTS._name_to_item.items()}
    b0 = jnp.asarray(b0)

    def solve():
        return jax.block_until_ready(jitted(b0, args))

    def outcome(result):
        x, steps, code = result
        return Outcome(
            x=np.asarray(x),
            status=names.get(int(code), str(int(code))),
            reported={"num_steps": int(steps)},
        )

    return solve, outcome


def _jaxsearch(direction: Callable, r, b0, args, settings: Settings):
    """js.Solver(direction(), gtol, ftol, max_steps).run, with the direction's default search
    (`Zoom`; `Backtracking` for js.LevenbergMarquardt), on f = 0.5 |r|^2: fn is r itself for a
    least-squares direction (js.GaussNewton, js.LevenbergMarquardt), which forms f = 0.5 |r|^2
    inside the solver."""
    made = direction()
    solver = js.Solver(made, gtol=settings.gtol, ftol=settings.ftol, max_steps=settings.max_steps)

    def f(b, args):
        residual = r(b, args)
        if isinstance(made, js.AbstractLeastSquares):
            return residual
        return 0.5 * jnp.sum(residual * residual)

    b0 = jnp.asarray(b0)

    def solve():
        return jax.block_until_ready(solver.run(f, b0, args))

    def outcome(result):
        evals = int(result.num_fun_evals)
        hvps = getattr(result.state.direction, "num_hvp", None)
        # js.GaussNewton and js.LevenbergMarquardt: forward mode only (the callback counts
        # their JVPs); the others: one VJP per evaluation
        dense = isinstance(made, js.GaussNewton | js.LevenbergMarquardt)
        return Outcome(
            x=np.asarray(result.params),
            status=f"{js.Status(int(result.status)).name}: {result.message}",
            reported={"num_steps": int(result.num_steps), "num_fun_evals": evals},
            vjps=0 if dense else evals,
            hvps=None if hvps is None else int(hvps),
        )

    return solve, outcome


PEERS: dict[str, Callable] = {
    "scipy-trf": functools.partial(_scipy, "trf"),
    "scipy-lm": functools.partial(_scipy, "lm"),
    "optx-gn": functools.partial(_optimistix, "GaussNewton"),
    "optx-lm": functools.partial(_optimistix, "LevenbergMarquardt"),
    "jaxsearch-bfgs": functools.partial(_jaxsearch, js.BFGS),
    "jaxsearch-newton": functools.partial(_jaxsearch, js.Newton),
    "jaxsearch-gn": functools.partial(_jaxsearch, js.GaussNewton),
    "jaxsearch-lm": functools.partial(_jaxsearch, js.LevenbergMarquardt),
    "jaxsearch-lm-tau": functools.partial(
        _jaxsearch, functools.partial(js.LevenbergMarquardt, factor=None)
    ),
}


# ---------------------------------------------------------------------------------- running


def accuracy(problem, x) -> tuple[float, float]:
    """(max_i |x_i - b*_i| / |b*_i|, NIST's LRE min_i -log10 of that, capped at LRE_CAP)."""
    x = np.asarray(x, np.float64)
    if not np.all(np.isfinite(x)):
        return math.inf, 0.0
    rel = float(np.max(np.abs(x - problem.certified) / np.abs(problem.certified)))
    lre = LRE_CAP if rel == 0 else min(LRE_CAP, max(0.0, -math.log10(rel)))
    return rel, lre


def run_one(problem, start: str, peer_name: str, settings: Settings) -> dict[str, Any]:
    """One solver from one start: a counted run, then two timed runs (module docstring)."""
    peer = PEERS[peer_name]
    b0 = problem.starts[start]
    args = (jnp.asarray(problem.x), jnp.asarray(problem.y))
    row: dict[str, Any] = {"solved": False, "error": None}
    try:
        counter = Counter(problem)
        jax.clear_caches()
        solve, outcome = peer(residual_function(problem, counter), b0, args, settings)
        counter.reset()
        out = outcome(solve())
        counts = counter.read()
        if out.vjps:  # reverse mode: its products do not pass the jvps callback
            counts["jvps"] = None
        rel, lre = accuracy(problem, out.x)
        with np.errstate(all="ignore"):
            rss = float(nist.rss(out.x, problem, np))
        row.update(
            solved=rel <= SOLVED_RTOL,
            max_rel_err=rel,
            lre=lre,
            rss_over_certified=rss / problem.certified_rss if math.isfinite(rss) else None,
            x=[float(v) for v in out.x],
            **counts,
            vjps=out.vjps,
            hvps=out.hvps,
            reported=out.reported,
            status=out.status,
        )
        jax.clear_caches()
        solve, outcome = peer(residual_function(problem), b0, args, settings)
        times = []
        for _ in range(2):
            t0 = time.perf_counter()
            timed = solve()
            times.append(time.perf_counter() - t0)
        timed = outcome(timed)
        row.update(
            wall_s=times[1],
            compile_s=max(times[0] - times[1], 0.0),
            first_call_s=times[0],
            timed_run_same_x=bool(np.array_equal(timed.x, out.x, equal_nan=True)),
        )
    except Exception as e:  # noqa: BLE001 - a crash counts as unsolved
        lines = str(e).strip().splitlines()
        row["error"] = f"{type(e).__name__}: {lines[0][:300] if lines else ''}"
    return row


# ---------------------------------------------------------------------------------- output


def _products(row) -> str:
    parts = []
    if row.get("jvps"):
        parts.append(f"{row['jvps']} JVP")
    if row.get("vjps") is not None:
        parts.append(f"{row['vjps']} VJP")
    if row.get("hvps") is not None:
        parts.append(f"{row['hvps']} HVP")
    return " + ".join(parts) or "0"


def _reported(row) -> str:
    return ", ".join(f"{k} {v}" for k, v in row["reported"].items())


def _short(status: str, width: int = 60) -> str:
    status = " ".join(status.split()).replace("|", "/")
    return status if len(status) <= width else status[: width - 1] + "…"


def run_table(rows: dict[str, dict]) -> list[str]:
    """The markdown table of one problem and start: one line per solver."""
    lines = [
        "| solver | solved | LRE | RSS / certified | evals | to 6 digits | lins | products "
        "| reported | wall (ms) | compile (s) | status |",
        "| --- | :---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |",
    ]
    for name, row in rows.items():
        if row.get("error") and "evals" not in row:
            lines.append(f"| {name} | ✗ | | | | | | | | | | crash: {_short(row['error'])} |")
            continue
        ratio = row["rss_over_certified"]
        ratio = "nan" if ratio is None else f"{ratio:.6g}"
        wall = f"{1e3 * row['wall_s']:.2f}" if "wall_s" in row else "—"
        compile_s = f"{row['compile_s']:.2f}" if "compile_s" in row else "—"
        note = "" if row.get("timed_run_same_x", True) else " (timed run: other x)"
        lines.append(
            f"| {name} | {'✓' if row['solved'] else '✗'} | {row['lre']:.1f} | {ratio} "
            f"| {row['evals']} | {row.get('to_solved') or '—'} | {row['lins']} | {_products(row)} "
            f"| {_reported(row)} "
            f"| {wall} | {compile_s} | {_short(row['status'])}{note} |"
        )
    return lines


def summarise(results: dict, solvers: list[str]) -> dict[str, Any]:
    """Solved counts, and medians over the runs (problem, start) that every solver solves."""
    runs = [(p, s) for p, per in results.items() for s in per]
    common = [(p, s) for p, s in runs if all(results[p][s][n]["solved"] for n in solvers)]
    out = {"runs": len(runs), "solved_by_all": [f"{p}/{s}" for p, s in common], "solvers": {}}
    for n in solvers:
        rows = [results[p][s][n] for p, s in runs]
        on_common = [results[p][s][n] for p, s in common]

        def median(key, rows=on_common):
            values = [r[key] for r in rows if r.get(key) is not None]
            return statistics.median(values) if values else None

        out["solvers"][n] = {
            "solved": sum(r["solved"] for r in rows),
            "solved_start1": sum(results[p]["start1"][n]["solved"] for p in results),
            "solved_start2": sum(results[p]["start2"][n]["solved"] for p in results),
            "crashed": sum(1 for r in rows if r.get("error")),
            "median_evals_common": median("evals"),
            "median_to_solved_common": median("to_solved"),
            "median_lins_common": median("lins"),
            "median_jvps_common": median("jvps"),
            "median_vjps_common": median("vjps"),
            "median_hvps_common": median("hvps"),
            "median_wall_ms_common": (None if median("wall_s") is None else 1e3 * median("wall_s")),
            "median_compile_s_all": median("compile_s", rows),
        }
    return out


def summary_table(summary: dict) -> list[str]:
    n = summary["runs"]
    k = len(summary["solved_by_all"])
    lines = [
        f"Medians over the {k} runs that every solver solves "
        f"({', '.join(summary['solved_by_all']) or 'none'}); compile: median over all {n} runs.",
        "",
        f"| solver | solved (of {n}) | start 1 | start 2 | evals | to 6 digits | lins | JVPs "
        "| VJPs | HVPs | wall (ms) | compile (s) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]

    def fmt(v, spec="g"):
        return "—" if v is None else format(v, spec)

    for name, s in summary["solvers"].items():
        lines.append(
            f"| {name} | {s['solved']} | {s['solved_start1']} | {s['solved_start2']} "
            f"| {fmt(s['median_evals_common'])} | {fmt(s['median_to_solved_common'])} "
            f"| {fmt(s['median_lins_common'])} "
            f"| {fmt(s['median_jvps_common'])} | {fmt(s['median_vjps_common'])} "
            f"| {fmt(s['median_hvps_common'])} "
            f"| {fmt(s['median_wall_ms_common'], '.2f')} "
            f"| {fmt(s['median_compile_s_all'], '.2f')} |"
        )
    return lines


def _cpu() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def versions() -> dict[str, str | None]:
    import importlib.metadata as md

    out = {"python": platform.python_version(), "jaxsearch": js.__version__}
    for pkg in ("jax", "jaxlib", "equinox", "lineax", "optimistix", "scipy", "numpy"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    return out


def write_outputs(out_dir: pathlib.Path, meta, problems, results, solvers) -> str:
    summary = summarise(results, solvers)
    lines = [
        "# NIST StRD least squares (higher difficulty), float64, CPU",
        "",
        f"`{meta['command']}`, {meta['cpu']} ({meta['machine']}), {meta['started']}; "
        + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()),
        "",
        f"Solved: every parameter within {SOLVED_RTOL:g} relative of NIST's certified value "
        "(6 significant digits). LRE: NIST's log relative error, the fewest correct digits "
        f"over the parameters (capped at {LRE_CAP:g}). evals / lins / JVPs: counted inside r "
        "in a first run (evaluations of r, every one: for js.GaussNewton and "
        "js.LevenbergMarquardt the one inside the forward-mode Jacobian formed at each trial "
        "point, which gives r, J, f and J'r together, one per trial; differentiated ones; "
        "forward products). to 6 digits: the evaluations of r up to the "
        "first at a point that solves the problem (what the stopping rules add after it is "
        "evals minus this). VJPs and "
        "HVPs: jaxsearch's own counts (value-and-gradient evaluations, 0 for js.GaussNewton "
        "and js.LevenbergMarquardt, whose gradient is J'r; js.Newton's "
        "Hessian-vector products). wall: a second call of a fresh, uncounted program; compile: "
        "its first call minus the second. Settings: " + json.dumps(meta["settings"]) + ".",
        "",
        "## Summary",
        "",
        *summary_table(summary),
    ]
    for p in problems:
        if p.name not in results:
            continue
        for start, rows in results[p.name].items():
            b0 = ", ".join(f"{v:g}" for v in p.starts[start])
            lines += [
                "",
                f"## {p.name}, {start} ({b0}); n = {p.num_params}, m = {p.num_observations}",
                "",
            ]
            lines += run_table(rows)
    text = "\n".join(lines) + "\n"
    data = {"meta": meta, "summary": summary, "results": results}
    output.write(out_dir, output.stem("least_squares"), text, data)
    return "\n".join(summary_table(summary))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    p.add_argument("--problems", default=None, help="comma-separated name substrings")
    p.add_argument("--solvers", default=None, help="comma-separated solver name substrings")
    p.add_argument("--max-steps", type=int, default=Settings.max_steps)
    p.add_argument("--max-nfev", type=int, default=Settings.max_nfev)
    p.add_argument("--out", default=str(output.RESULTS))
    return p.parse_args(argv)


def main(argv=None):
    a = parse_args(argv)
    warnings.filterwarnings("ignore", category=js.RetraceWarning)  # new closures per run
    warnings.filterwarnings("ignore", category=RuntimeWarning)  # overflow in scipy's steps
    settings = Settings(max_steps=a.max_steps, max_nfev=a.max_nfev)
    problems = list(nist.PROBLEMS.values())
    if a.quick:
        problems = [p for p in problems if p.name in QUICK]
    if a.problems:
        parts = [s.strip().lower() for s in a.problems.split(",")]
        problems = [p for p in problems if any(s in p.name.lower() for s in parts)]
    solvers = list(PEERS)
    if a.solvers:
        solvers = [n for n in solvers if any(s.strip() in n for s in a.solvers.split(","))]
    out_dir = pathlib.Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    meta = {
        "command": "python -m benchmarks.suite.least_squares " + " ".join(sys.argv[1:] or []),
        "cpu": _cpu(),
        "processor": platform.processor(),
        "machine": platform.machine(),
        "platform": platform.platform(),
        "device": str(jax.devices()[0]),
        "versions": versions(),
        "settings": dataclasses.asdict(settings),
        "solved_rtol": SOLVED_RTOL,
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    meta["command"] = meta["command"].strip()
    print(f"{len(problems)} problems x 2 starts, solvers: {solvers}", flush=True)
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for p in problems:
        results[p.name] = {}
        for start in ("start1", "start2"):
            rows = {n: run_one(p, start, n, settings) for n in solvers}
            results[p.name][start] = rows
            print(f"\n## {p.name}, {start}\n" + "\n".join(run_table(rows)), flush=True)
    meta["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    text = write_outputs(out_dir, meta, problems, results, solvers)
    print("\n## Summary\n\n" + text)
    print(f"\nwrote {out_dir}/{output.stem('least_squares')}.md and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
