"""jaxsearch's L-BFGS-B (`Solver().run(..., bounds=...)`) against scipy's L-BFGS-B on the
bound-constrained CUTEst problems of sif2jax, in float64.

    python -m benchmarks.suite.bounded_vs_scipy  # n <= 100, all problems
    python -m benchmarks.suite.bounded_vs_scipy --max-n 10 --only HS1,PALMER1

Uses `sif2jax.bounded_minimisation_problems` (which already includes
`sif2jax.bounded_quadratic_problems`): each has `objective(y, args)`, `y0`, `args` and
`bounds = (lower, upper)`, arrays with -inf / +inf (or None) for a free side. A problem is
kept when it loads, has n <= --max-n, and f and its gradient are finite at the projection of
y0 into the box. Both methods get the same function (value and gradient from one jitted
`jax.value_and_grad`), the same x0 and the same bounds, with default settings: scipy's
(pgtol = 1e-5, factr * eps, maxiter = maxfun = 15000) and jaxsearch's (gtol = 1e-5, the same
ftol) with max_steps = 15000. A problem whose scipy run takes longer than --scipy-timeout
seconds is left out.

Per problem the table gives the active bounds at scipy's solution, both methods' evaluations,
iterations, values and statuses, max |x - x_scipy|, |f - f_scipy|, the evaluation ratio,
whether both returned points lie in the box, and where the runs part: the first iteration
whose f differs by more than 1e-6 relative (scipy's callback against `history=True`) and the
first whose evaluation count differs. With bounds the default line search is MoreThuente,
scipy's dcsrch; `--with-zoom` adds `Zoom` columns, a rerun with `js.Zoom()` (the default
without bounds), to show what the line search changes.
Writes benchmarks/results/bounded_vs_scipy_<backend>.md and .json.
"""

import argparse
import dataclasses
import time
import warnings

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.optimize  # noqa: E402

import jaxsearch as js  # noqa: E402
from benchmarks import output  # noqa: E402

X_TOL = 1e-6  # issue 9: solutions match to 1e-6
F_TOL = 1e-8  # relative: "f agrees" where x does not (non-unique minimisers)
EVAL_RATIO = 1.2
DIVERGE = 1e-6  # relative difference of f that counts as the runs having parted


class Objective:
    """f(y, args) of a sif2jax problem, traced under standard dtype promotion (sif2jax mixes
    Python scalars and arrays freely; the caller may run under strict promotion). Hashable by
    name, so running the same problem again reuses jaxsearch's compiled program."""

    def __init__(self, problem):
        self.problem = problem
        self.name = problem.name

    def __call__(self, y, args):
        with jax.numpy_dtype_promotion("standard"):
            return jnp.asarray(self.problem.objective(y, args), jnp.float64)

    def __eq__(self, other):
        return isinstance(other, Objective) and other.name == self.name

    def __hash__(self):
        return hash(("sif2jax", self.name))


def _float64(tree):
    def cast(leaf):
        if isinstance(leaf, jax.Array | np.ndarray) and jnp.issubdtype(leaf.dtype, jnp.floating):
            return jnp.asarray(leaf, jnp.float64)
        return leaf

    return jax.tree.map(cast, tree)


@dataclasses.dataclass
class Problem:
    name: str
    fn: Objective
    x0: jax.Array  # y0 projected into the box
    args: object
    lower: np.ndarray
    upper: np.ndarray

    @property
    def n(self) -> int:
        return int(self.x0.size)


def _side(bound, n, fill):
    if bound is None:
        return np.full(n, fill)
    return np.broadcast_to(np.asarray(bound, np.float64).reshape(-1), (n,)).copy()


def load(problem, max_n: int) -> Problem | str:
    """The problem ready to run, or why it is left out."""
    try:
        n = int(problem.num_variables())
        if n > max_n:
            return f"n = {n} > max-n {max_n}"
        y0 = jnp.asarray(problem.y0, jnp.float64)
        if y0.ndim != 1:
            return f"y0 is not a vector (shape {y0.shape})"
        bounds = problem.bounds
        lower, upper = (None, None) if bounds is None else bounds
        lower, upper = _side(lower, n, -np.inf), _side(upper, n, np.inf)
        if np.any(lower > upper):
            return "lower > upper"
        x0 = jnp.asarray(np.clip(np.asarray(y0), lower, upper))
        fn, args = Objective(problem), _float64(problem.args)
        value, grad = jax.jit(jax.value_and_grad(fn))(x0, args)
    except Exception as error:  # noqa: BLE001 - any failure to load leaves the problem out
        return f"{type(error).__name__}: {str(error).splitlines()[0][:120] if str(error) else ''}"
    if not np.isfinite(float(value)):
        return "f not finite at x0"
    if not np.all(np.isfinite(np.asarray(grad))):
        return "gradient not finite at x0"
    return Problem(problem.name, fn, x0, args, lower, upper)


def problems(max_n: int, only=None):
    import sif2jax

    kept, skipped, seen = [], {}, set()
    for problem in sif2jax.bounded_minimisation_problems:  # includes the bounded QPs
        name = problem.name
        if name in seen or (only is not None and name not in only):
            continue
        seen.add(name)
        loaded = load(problem, max_n)
        if isinstance(loaded, str):
            skipped[name] = loaded
        else:
            kept.append(loaded)
    return kept, skipped


class _TooSlow(Exception):
    pass


def scipy_lbfgsb(problem: Problem, timeout: float):
    """scipy's L-BFGS-B with default options; also f and the evaluation count after each
    iteration (its callback)."""
    value_and_grad = jax.jit(jax.value_and_grad(problem.fn))
    start = time.perf_counter()

    def f(x):
        if time.perf_counter() - start > timeout:
            raise _TooSlow
        value, grad = value_and_grad(jnp.asarray(x), problem.args)
        f.count += 1
        return float(value), np.asarray(grad, np.float64)

    f.count = 0
    values, evals = [], []

    def callback(intermediate_result):
        values.append(float(intermediate_result.fun))
        evals.append(f.count)

    bounds = scipy.optimize.Bounds(problem.lower, problem.upper)
    result = scipy.optimize.minimize(
        f,
        np.asarray(problem.x0),
        jac=True,
        method="L-BFGS-B",
        bounds=bounds,
        callback=callback,
    )
    return result, np.asarray(values), np.asarray(evals), time.perf_counter() - start


def feasible(x, problem: Problem) -> bool:
    return bool(np.all(x >= problem.lower) and np.all(x <= problem.upper))


def active_bounds(x, problem: Problem) -> int:
    scale = np.maximum(1.0, np.abs(x))
    near = lambda b: np.isfinite(b) & (np.abs(x - b) <= 1e-10 * scale)
    return int(np.sum(near(problem.lower) | near(problem.upper)))


def first_difference(a, b, close) -> int | None:
    """The first iteration (from 1) where the sequences a and b differ by `close`, or where
    one ends before the other; None if neither."""
    for k in range(min(len(a), len(b))):
        if not close(a[k], b[k]):
            return k + 1
    return None if len(a) == len(b) else min(len(a), len(b)) + 1


def compare(problem: Problem, solver: js.Solver, timeout: float, also=None) -> dict:
    row = {"name": problem.name, "n": problem.n}
    try:
        ref, ref_values, ref_evals, row["scipy_s"] = scipy_lbfgsb(problem, timeout)
    except _TooSlow:
        return row | {"skip": f"scipy took longer than {timeout:g} s"}
    start = time.perf_counter()
    result = solver.run(problem.fn, problem.x0, problem.args, bounds=(problem.lower, problem.upper),
                        history=True)  # fmt: skip
    x = np.asarray(result.params)
    row["js_s"] = time.perf_counter() - start
    history = {k: v[1:] for k, v in result.history.to_numpy().items()}  # the steps (row 0: x0)
    f, f_ref = float(result.value), float(ref.fun)
    row |= {
        "active": active_bounds(ref.x, problem),
        "sp_nfev": int(ref.nfev),
        "sp_nit": int(ref.nit),
        "sp_f": f_ref,
        "sp_status": int(ref.status),
        "js_nfev": int(result.num_fun_evals),
        "js_nit": int(result.num_steps),
        "js_f": f,
        "js_status": js.Status(int(result.status)).name,
        "dx": float(np.max(np.abs(x - ref.x))),
        "df": abs(f - f_ref),
        "ratio": int(result.num_fun_evals) / max(int(ref.nfev), 1),
        "feasible": feasible(x, problem) and feasible(ref.x, problem),
    }
    rel = lambda a, b: abs(a - b) <= DIVERGE * max(1.0, abs(a), abs(b))
    row["f_parts"] = first_difference(history["value"], ref_values, rel)
    # evaluations per iteration (the first counts f at x0 too, as scipy's)
    row["evals_part"] = first_difference(
        np.diff(history["num_fun_evals"], prepend=0),
        np.diff(ref_evals, prepend=0),
        lambda a, b: int(a) == int(b),
    )
    row["x_match"] = row["dx"] <= X_TOL
    row["f_match"] = row["df"] <= F_TOL * max(1.0, abs(f_ref))
    row["evals_ok"] = row["js_nfev"] <= EVAL_RATIO * row["sp_nfev"]
    if also is not None:  # the same direction with scipy's line search (More-Thuente)
        other = also.run(
            problem.fn, problem.x0, problem.args, bounds=(problem.lower, problem.upper)
        )
        row["alt_nfev"] = int(other.num_fun_evals)
        row["alt_dx"] = float(np.max(np.abs(np.asarray(other.params) - ref.x)))
        row["alt_converged"] = js.Status(int(other.status)).converged
        row["alt_feasible"] = feasible(np.asarray(other.params), problem)
    return row


def _fmt(value, spec=""):
    return "-" if value is None else format(value, spec)


def markdown(rows, skipped, settings: str, elapsed: float) -> str:
    done = [r for r in rows if "skip" not in r]
    alt = bool(done) and "alt_nfev" in done[0]
    alt_head, alt_rule = (" Zoom evals | Zoom max dx |", "---:|---:|") if alt else ("", "")
    lines = [
        "# jaxsearch L-BFGS-B against scipy L-BFGS-B: sif2jax bounded problems, float64",
        "",
        f"Generated by `python -m benchmarks.suite.bounded_vs_scipy {settings}`".rstrip() + ".",
        "Both with default stopping rules (projected-gradient inf-norm <= 1e-5, "
        "factr * eps = 2.2e-9 relative decrease); jaxsearch max_steps = 15000.",
        "`active`: bounds active at scipy's solution; `ratio`: jaxsearch evals / scipy nfev; "
        "`f parts` / `evals part`: first iteration where f differs by more than "
        f"{DIVERGE:g} relative / where the evaluations in the iteration differ "
        "(- = never). scipy status 0 = converged, 1 = max iterations/evaluations, "
        "2 = abnormal (line search).",
        "",
        "| problem | n | active | scipy nfev | nit | f | st | jaxsearch evals | steps | f | "
        "status | max dx | df | ratio | feasible | f parts | evals part |" + alt_head,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---|---:|---:|"
        + alt_rule,
    ]
    for r in done:
        flag = "" if r["x_match"] else (" (f agrees)" if r["f_match"] else " **differs**")
        ratio = f"{r['ratio']:.2f}" + ("" if r["evals_ok"] else " **>1.2**")
        lines.append(
            f"| {r['name']} | {r['n']} | {r['active']} | {r['sp_nfev']} | {r['sp_nit']} | "
            f"{r['sp_f']:.10g} | {r['sp_status']} | {r['js_nfev']} | {r['js_nit']} | "
            f"{r['js_f']:.10g} | {r['js_status']} | {r['dx']:.1e}{flag} | {r['df']:.1e} | "
            f"{ratio} | {'yes' if r['feasible'] else '**no**'} | {_fmt(r['f_parts'])} | "
            f"{_fmt(r['evals_part'])} |"
            + (f" {r['alt_nfev']} | {r['alt_dx']:.1e} |" if alt else "")
        )
    n = len(done)
    x_match = [r for r in done if r["x_match"]]
    f_only = [r for r in done if not r["x_match"] and r["f_match"]]
    differ = [r for r in done if not r["f_match"]]
    evals_ok = [r for r in done if r["evals_ok"]]
    both = [r for r in done if r["x_match"] and r["evals_ok"]]
    not_converged = [r for r in done if r["js_status"] not in ("CONVERGED_GTOL", "CONVERGED_FTOL")]
    names = lambda rs: ", ".join(r["name"] for r in rs) or "none"
    lines += [
        "",
        "## Summary",
        "",
        f"- {n} problems compared (of {len(rows) + len(skipped)} considered).",
        f"- x within {X_TOL:g} of scipy's: {len(x_match)} / {n}.",
        f"- x differs but f agrees to {F_TOL:g} relative (non-unique or flat minimisers, or "
        f"both stopped on a flat stretch): {len(f_only)}: {names(f_only)}.",
        f"- f differs (different local minimiser or stopping point): {len(differ)}: "
        f"{names(differ)}.",
        f"- evaluations within {EVAL_RATIO}x of scipy's: {len(evals_ok)} / {n}; over: "
        f"{names([r for r in done if not r['evals_ok']])}.",
        f"- both (x match and evaluations within {EVAL_RATIO}x): {len(both)} / {n}.",
        f"- total evaluations: jaxsearch {sum(r['js_nfev'] for r in done)}, "
        f"scipy {sum(r['sp_nfev'] for r in done)}.",
        f"- jaxsearch not converged: {names(not_converged)}.",
        f"- every returned point feasible: {all(r['feasible'] for r in done)}.",
    ]
    if alt:
        alt_match = [r for r in done if r["alt_dx"] <= X_TOL]
        alt_evals = [r for r in done if r["alt_nfev"] <= EVAL_RATIO * r["sp_nfev"]]
        alt_same = [r for r in done if r["alt_nfev"] == r["sp_nfev"]]
        lines += [
            "- with `linesearch=js.Zoom()` (the line search without bounds; `Zoom` columns): "
            f"x within {X_TOL:g}: {len(alt_match)} / {n} (not: "
            f"{names([r for r in done if r['alt_dx'] > X_TOL])}); evaluations within "
            f"{EVAL_RATIO}x: {len(alt_evals)} / {n}; exactly scipy's count: {len(alt_same)} / {n}; "
            f"not converged: {names([r for r in done if not r['alt_converged']])}; all "
            f"feasible: {all(r['alt_feasible'] for r in done)}.",
        ]
    lines += [
        f"- wall time {elapsed:.0f} s (scipy {sum(r['scipy_s'] for r in done):.0f} s, "
        f"jaxsearch with compile {sum(r['js_s'] for r in done):.0f} s).",
        "",
        "## Left out",
        "",
    ]
    lines += [f"- {r['name']}: {r['skip']}" for r in rows if "skip" in r]
    lines += [f"- {name}: {why}" for name, why in sorted(skipped.items())]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-n", type=int, default=100, help="largest problem size")
    parser.add_argument("--only", help="comma-separated problem names")
    parser.add_argument("--max-steps", type=int, default=15000)
    parser.add_argument("--scipy-timeout", type=float, default=10.0, help="seconds")
    parser.add_argument("--out", default=str(output.RESULTS), help="output directory")
    parser.add_argument(
        "--with-zoom",
        action="store_true",
        help="also run jaxsearch with linesearch=js.Zoom() (Zoom columns)",
    )
    ns = parser.parse_args()
    only = None if ns.only is None else {s.strip() for s in ns.only.split(",")}
    settings = " ".join(
        part
        for part in (
            f"--max-n {ns.max_n}" if ns.max_n != 100 else "",
            f"--only {ns.only}" if ns.only else "",
            f"--max-steps {ns.max_steps}" if ns.max_steps != 15000 else "",
            "--with-zoom" if ns.with_zoom else "",
        )
        if part
    )
    start = time.perf_counter()
    kept, skipped = problems(ns.max_n, only)
    solver = js.Solver(max_steps=ns.max_steps)
    also = js.Solver(js.LBFGS(), js.Zoom(), max_steps=ns.max_steps) if ns.with_zoom else None
    rows = []
    warnings.simplefilter("ignore", js.RetraceWarning)
    for problem in kept:
        row = compare(problem, solver, ns.scipy_timeout, also)
        rows.append(row)
        if "skip" in row:
            print(f"{row['name']:12s} skipped: {row['skip']}", flush=True)
            continue
        print(
            f"{row['name']:12s} n={row['n']:<4d} active={row['active']:<3d} "
            f"scipy {row['sp_nfev']:5d} js {row['js_nfev']:5d} ratio {row['ratio']:.2f} "
            f"dx {row['dx']:.1e} df {row['df']:.1e} {row['js_status']} "
            f"f parts {row['f_parts']} evals part {row['evals_part']} "
            + (f"Zoom {row['alt_nfev']} dx {row['alt_dx']:.1e} " if also is not None else "")
            + f"({row['scipy_s']:.1f} s + {row['js_s']:.1f} s)",
            flush=True,
        )
        jax.clear_caches()  # one compiled program per problem: keep the memory maps bounded
    text = markdown(rows, skipped, settings, time.perf_counter() - start)
    data = {"settings": settings, "rows": rows, "skipped": skipped}
    output.write(ns.out, output.stem("bounded_vs_scipy"), text, data)
    print(text[text.index("## Summary") :])


if __name__ == "__main__":
    main()
