"""The benchmark's summary: per solver, problems solved (by the gradient and at the lowest f),
evaluations against scipy's, evaluations per iteration, times; where jaxsearch loses."""

import math
import statistics

LOWEST_F_RTOL = 1e-4


def at_lowest_f(per: dict, solver: str) -> bool:
    """Solved, and f within 1e-4 max(1, |f_low|) of the lowest f any solver returned on the
    problem (all in float64): a stationary point no worse than the best one found. A point
    where the gradient vanishes on a plateau (an exponential underflowed, say) passes the
    gradient test but not this one."""
    r = per.get(solver) or {}
    values = [v["f"] for v in per.values() if v.get("f") is not None and math.isfinite(v["f"])]
    if not r.get("solved") or not values or r.get("f") is None:
        return False
    low = min(values)
    return r["f"] <= low + LOWEST_F_RTOL * max(1.0, abs(low))


def summarise(rows_by_problem, solver_names, reference="scipy"):
    """Per solver: solved count (and at the lowest f), median evaluation ratio vs reference on
    both-solved, evaluations per iteration averaged over the problems it ran, times, and its
    compile time over the value-and-grad compile time measured in the same run (summed over
    the rows that have both)."""
    out = {}
    for s in solver_names:
        solved = lowest = wall = comp = paired = own = 0
        ratios, per_iteration = [], []
        for per in rows_by_problem.values():
            r = per.get(s)
            if not r or r.get("skipped"):
                continue
            solved += bool(r["solved"])
            lowest += at_lowest_f(per, s)
            if r.get("evals") and r.get("iterations"):
                per_iteration.append(r["evals"] / r["iterations"])
            wall += r.get("wall_s") or 0.0
            comp += r.get("compile_s") or 0.0
            if r.get("compile_s") is not None and r.get("value_and_grad_compile_s"):
                paired += r["compile_s"]
                own += r["value_and_grad_compile_s"]
            ref = per.get(reference)
            if r["solved"] and ref and ref.get("solved") and ref["evals"] and r["evals"]:
                ratios.append(r["evals"] / ref["evals"])
        out[s] = {
            "solved": solved,
            "solved_at_lowest_f": lowest,
            "problems": len(rows_by_problem),
            "mean_evals_per_iteration": statistics.mean(per_iteration) if per_iteration else None,
            "median_evals_vs_scipy": statistics.median(ratios) if ratios else None,
            "both_solved_with_scipy": len(ratios),
            "total_wall_s": wall,
            "total_compile_s": comp,
            "compile_vs_value_and_grad": paired / own if own > 0 else None,
        }
    return out


def losses(rows_by_problem, solver_names, ours, reference="scipy", factor=1.5):
    """Where `ours` loses: unsolved while another solved; or > factor x reference's evals."""
    unsolved, costly = [], []
    for name, per in rows_by_problem.items():
        r = per.get(ours)
        if not r or r.get("skipped"):
            continue
        others = [s for s in solver_names if s != ours and per.get(s, {}).get("solved")]
        if not r["solved"] and others:
            unsolved.append(
                {
                    "problem": name,
                    "solved_by": others,
                    "solved_at_lowest_f_by": [o for o in others if at_lowest_f(per, o)],
                    "status": r.get("status"),
                    "error": r.get("error"),
                    "gnorm": r.get("gnorm"),
                    "evals": r.get("evals"),
                }
            )
        ref = per.get(reference)
        if r["solved"] and ref and ref.get("solved") and r["evals"] > factor * ref["evals"]:
            costly.append(
                {
                    "problem": name,
                    "evals": r["evals"],
                    "scipy_evals": ref["evals"],
                    "status": r.get("status"),
                }
            )
    return {"unsolved_solved_by_others": unsolved, "more_evals_than_scipy": costly}


def summary_table(summary):
    lines = [
        "| solver | solved | solved at lowest f | median evals / scipy (both solved) "
        "| evals / iteration | wall s | compile s | compile / own value_and_grad compile |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for s, v in summary.items():
        med = v["median_evals_vs_scipy"]
        med = f"{med:.2f} ({v['both_solved_with_scipy']})" if med is not None else "—"
        per_it = v.get("mean_evals_per_iteration")
        per_it = f"{per_it:.2f}" if per_it is not None else "—"
        ratio = v.get("compile_vs_value_and_grad")
        ratio = f"{ratio:.2f}" if ratio is not None else "—"
        lines.append(
            f"| {s} | {v['solved']}/{v['problems']} | {v.get('solved_at_lowest_f', '—')} "
            f"| {med} | {per_it} | {v['total_wall_s']:.1f} | {v['total_compile_s']:.1f} "
            f"| {ratio} |"
        )
    return lines
