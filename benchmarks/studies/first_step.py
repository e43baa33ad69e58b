"""Which initial trial should the first line search of L-BFGS + Zoom take?
Date: 2026-11-30, commit 57ac30f

The first step has no curvature information. jaxsearch, like L-BFGS-B, tries a step of unit
length, t0 = 1 / |g0| along d = -g0 ("unit"). The alternatives, each as a first trial t0:

- "f0": Fletcher's rule t0 = 2 df / -phi'(0) with the first decrease df estimated as |f0|,
  t0 = 2 |f0| / |g0|^2;
- "half-f0": df = |f0| / 2, t0 = |f0| / |g0|^2 (the Polyak step for f* = 0);
- "hz-I0": Hager & Zhang's (2006) rule I0, t0 = psi0 |x0|_inf / |g0|_inf with psi0 = 0.01
  where x0 != 0, else psi0 |f0| / |g0|^2 where f0 != 0, else unit length.

Each t0 is planted as the state's previous decrease t0 |g0|^2 / 2, which the solver's N&W
(3.60) initial step turns into t0. Prints evaluations (in all, and in the first step) per
problem, then the summary:

    python -m benchmarks.studies.first_step --max-n 12
    python -m benchmarks.studies.first_step --max-n 1000 --problems FLETCHCR
"""

import argparse

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import jaxsearch as js


def _hz_i0(x0, f0, g0):
    x_inf, g_inf = float(jnp.max(jnp.abs(x0))), float(jnp.max(jnp.abs(g0)))
    if x_inf > 0:
        return 0.01 * x_inf / g_inf
    return 0.01 * abs(f0) / float(jnp.sum(g0**2)) if f0 != 0 else None


RULES = {  # rule -> t0(x0, f0, g0) along -g0, or None for the solver's unit length
    "unit": lambda x0, f0, g0: None,
    "f0": lambda x0, f0, g0: 2 * abs(f0) / float(jnp.sum(g0**2)) if f0 != 0 else None,
    "half-f0": lambda x0, f0, g0: abs(f0) / float(jnp.sum(g0**2)) if f0 != 0 else None,
    "hz-I0": _hz_i0,
}


def solve(solver, problem, x0, state):
    """(evaluations, converged, evaluations of the first step)."""
    x, first = x0, None
    for _ in range(solver.max_steps):
        x, state = solver.step(problem.objective, x, state, problem.args)
        first = int(state.num_fun_evals) if first is None else first
        if int(state.status) != js.Status.RUNNING:
            break
    return int(state.num_fun_evals), bool(js.Status(int(state.status)).converged), first


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-n", type=int, default=12)
    parser.add_argument("--gtol", type=float, default=1e-5)
    parser.add_argument("--problems", default=None, help="comma-separated names (default: all)")
    options = parser.parse_args()
    jax.config.update("jax_enable_x64", True)
    import sif2jax

    solver = js.Solver(js.LBFGS(), js.Zoom(), gtol=options.gtol, ftol=0.0, max_steps=3000)
    rows = []
    for problem in sif2jax.unconstrained_minimisation_problems:
        if int(problem.num_variables()) > options.max_n:
            continue
        if options.problems and problem.name not in options.problems.split(","):
            continue
        x0 = jnp.asarray(problem.y0, jnp.float64)
        value, grad = jax.value_and_grad(problem.objective)(x0, problem.args)
        if not (np.isfinite(float(value)) and np.all(np.isfinite(np.asarray(grad)))):
            continue
        state = solver.init(x0, fn=problem.objective, args=(problem.args,))
        row = {}
        for rule, first_trial in RULES.items():
            planted, t0 = state, first_trial(x0, float(value), grad)
            if t0 is not None:
                decrease = jnp.asarray(t0 * float(jnp.sum(grad**2)) / 2, state.prev_decrease.dtype)
                planted = eqx.tree_at(lambda s: s.prev_decrease, state, decrease)
            row[rule] = solve(solver, problem, x0, planted)
        rows.append(row)
        print(problem.name, row, flush=True)
    both = [r for r in rows if all(ok for _, ok, _ in r.values())]
    for rule in RULES:
        ratios = [r[rule][0] / r["unit"][0] for r in both]
        median = f"{np.median(ratios):.3f}" if ratios else "—"
        print(
            f"{rule:8s} solved {sum(r[rule][1] for r in rows)}/{len(rows)}  "
            f"median evaluations / unit {median}  "
            f"total (all solved by every rule) {sum(r[rule][0] for r in both)}  "
            f"first step: mean {np.mean([r[rule][2] for r in rows]):.2f} evaluations"
        )


if __name__ == "__main__":
    main()
