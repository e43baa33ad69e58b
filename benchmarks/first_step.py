"""Experiment: the first line search's initial trial for L-BFGS + Zoom.

The first step has no curvature information. jaxsearch, like L-BFGS-B, tries a step of unit
length, t0 = 1 / |d|. Fletcher's rule t0 = 2 df / -phi'(0) needs an estimate df of the first
decrease; here df = |f0| ("f0") or |f0| / 2 ("half-f0", t0 = |f0| / |g0|^2 along -g0, the
Polyak step for f* = 0). The estimate is planted as the state's previous decrease, which the
solver's N&W (3.60) initial step then uses. Prints evaluations per problem and the summary:

    python benchmarks/first_step.py --max-n 12
"""

import argparse

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import jaxsearch as js

RULES = {"unit": None, "f0": 1.0, "half-f0": 0.5}


def solve(solver, problem, x0, state):
    x = x0
    for _ in range(solver.max_steps):
        x, state = solver.step(problem.objective, x, state, problem.args)
        if int(state.status) != js.Status.RUNNING:
            break
    return int(state.num_fun_evals), bool(js.Status(int(state.status)).converged)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-n", type=int, default=12)
    parser.add_argument("--gtol", type=float, default=1e-5)
    options = parser.parse_args()
    jax.config.update("jax_enable_x64", True)
    import sif2jax

    solver = js.Solver(js.LBFGS(), js.Zoom(), gtol=options.gtol, ftol=0.0, max_steps=3000)
    rows = []
    for problem in sif2jax.unconstrained_minimisation_problems:
        if int(problem.num_variables()) > options.max_n:
            continue
        x0 = jnp.asarray(problem.y0, jnp.float64)
        value, grad = jax.value_and_grad(problem.objective)(x0, problem.args)
        if not (np.isfinite(float(value)) and np.all(np.isfinite(np.asarray(grad)))):
            continue
        state = solver.init(x0, fn=problem.objective, args=(problem.args,))
        row = {}
        for rule, fraction in RULES.items():
            planted = state
            if fraction is not None and float(value) != 0:
                decrease = jnp.asarray(fraction * abs(float(value)), state.prev_decrease.dtype)
                planted = eqx.tree_at(lambda s: s.prev_decrease, state, decrease)
            row[rule] = solve(solver, problem, x0, planted)
        rows.append(row)
        print(problem.name, row, flush=True)
    both = [r for r in rows if all(ok for _, ok in r.values())]
    for rule in RULES:
        ratios = [r[rule][0] / r["unit"][0] for r in both]
        print(
            f"{rule:8s} solved {sum(r[rule][1] for r in rows)}/{len(rows)}  "
            f"median evaluations / unit {np.median(ratios):.3f}  "
            f"total (all solved by every rule) {sum(r[rule][0] for r in both)}"
        )


if __name__ == "__main__":
    main()
