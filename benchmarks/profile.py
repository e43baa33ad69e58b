"""Dolan–Moré performance profile (Dolan & Moré, Math. Program. 91, 2002) of a cost measure."""

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def ratios(costs: dict[str, dict[str, float | None]]) -> dict[str, list[float]]:
    """costs[problem][solver] (None: unsolved) -> solver -> r_{p,s} = cost / best cost on p.

    Problems no solver solved are left out; an unsolved problem has ratio inf.
    """
    solvers = sorted({s for per in costs.values() for s in per})
    out = {s: [] for s in solvers}
    for per in costs.values():
        solved = [c for c in per.values() if c is not None]
        if not solved:
            continue
        best = max(min(solved), 1)
        for s in solvers:
            c = per.get(s)
            out[s].append(math.inf if c is None else max(c, 1) / best)
    return out


def plot(costs: dict[str, dict[str, float | None]], path: str, title: str) -> None:
    """Write the profile rho_s(tau) = share of problems with r_{p,s} <= tau, tau on log2 axis."""
    r = ratios(costs)
    finite = [x for v in r.values() for x in v if math.isfinite(x)]
    tau_max = max(finite + [2.0]) * 1.1
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for solver, values in r.items():
        n = len(values)
        if n == 0:
            continue
        xs = sorted(x for x in values if math.isfinite(x))
        steps_x, steps_y = [1.0], [0.0]
        for i, x in enumerate(xs):
            steps_x += [x, x]
            steps_y += [steps_y[-1], (i + 1) / n]
        steps_x.append(tau_max)
        steps_y.append(steps_y[-1])
        ax.plot(steps_x, steps_y, label=solver, linewidth=1.5)
    ax.set_xscale("log", base=2)
    ax.set_xlim(1, tau_max)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("tau: evaluations within a factor tau of the best solver")
    ax.set_ylabel("share of problems solved")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
