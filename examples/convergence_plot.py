"""Convergence of six solvers on the extended Rosenbrock function (n = 100, float64).

Each solver runs once with `history=True`; the recorded per-step values and cumulative
evaluation counts give a plot of f(x_k) - f* (f* = 0) against the number of evaluations of fn,
which is what a line-search method actually pays for. One line per solver is printed: its
name, status, steps, evaluations of fn and final f, then where the figure was written.

    python examples/convergence_plot.py                  # convergence.png in a new temporary folder
    python examples/convergence_plot.py --out docs/images        # the figure in the README
"""

import argparse
import pathlib
import tempfile

import jax
import jax.numpy as jnp
import numpy as np

import jaxsearch as js

FLOOR = 1e-20  # f - f* below this is drawn at the floor (the log scale has no zero)


def rosenbrock(x):
    """The extended Rosenbrock function (Moré, Garbow and Hillstrom): n / 2 independent
    two-dimensional Rosenbrock valleys in the pairs (x[2i], x[2i + 1]); minimum 0 at (1, ..., 1).
    """
    odd, even = x[0::2], x[1::2]
    return jnp.sum(100.0 * (even - odd**2) ** 2 + (1.0 - odd) ** 2)


def solvers():
    return {
        "L-BFGS + Zoom": js.Solver(js.LBFGS(), js.Zoom()),
        "L-BFGS + MoreThuente": js.Solver(js.LBFGS(), js.MoreThuente()),
        "BFGS + Zoom": js.Solver(js.BFGS(), js.Zoom()),
        # its default search: MoreThuente(gtol=0.1), the strong Wolfe curvature CG needs
        "NonlinearCG + MoreThuente": js.Solver(js.NonlinearCG()),
        "NewtonCG + Zoom": js.Solver(js.NewtonCG(), js.Zoom()),
        "Gradient + Backtracking": js.Solver(js.Gradient(), js.Backtracking(), max_steps=2000),
    }


def main():
    jax.config.update("jax_enable_x64", True)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", help="folder to write convergence.png to (default: a new temporary folder)"
    )
    folder = parser.parse_args().out or tempfile.mkdtemp(prefix="jaxsearch-convergence-")
    out = pathlib.Path(folder) / "convergence.png"

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = 100
    x0 = jnp.tile(jnp.array([-1.2, 1.0]), n // 2)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, solver in solvers().items():
        result = solver.run(rosenbrock, x0, history=True)
        rows = result.history.to_numpy()
        # Row 0 is x0 (step 0: f(x0), one evaluation of fn), then one row per step.
        evals = rows["num_fun_evals"]
        gap = np.maximum(rows["value"], FLOOR)
        ax.semilogy(evals, gap, label=name, linewidth=1.4)
        status = js.Status(result.status)
        print(
            f"{name:<26s} status {status:<20s} steps {int(result.num_steps):5d}  "
            f"evals {int(result.num_fun_evals):5d}  f {float(result.value):.3e}"
        )

    ax.set_xlabel("evaluations of f (cumulative)")
    ax.set_ylabel("f(x) - f*")
    ax.set_title(f"Extended Rosenbrock, n = {n}, float64")
    ax.set_xscale("log")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    print(f"saved {out}")


if __name__ == "__main__":
    main()
