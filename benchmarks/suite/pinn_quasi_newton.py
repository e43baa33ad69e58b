"""Dense quasi-Newton methods on the Burgers PINN in float64: L-BFGS, BFGS, self-scaled BFGS
and self-scaled Broyden after the same Adam warm start, compared at equal evaluations and at
equal wall.

The problem, network, points and Adam phase are those of `examples/pinn_burgers.py` (an MLP
2 -> 20 -> 20 -> 20 -> 1, 921 params; 2000 interior points, 100 on the initial line, 100 on the
boundaries; 2000 Adam steps at 1e-3), all in float64. Each method then runs with `Zoom` (c1 =
1e-4, c2 = 0.9, as the self-scaled papers use) in chunks of `--chunk` steps, resumed from its
state (bit for bit the run it would have been), and after each chunk the loss, the relative L2
error against the exact (Cole-Hopf) solution, the evaluations and the wall (compile excluded:
the first chunk's compile seconds, from `jax.monitoring`, are subtracted) are recorded.

    python -m benchmarks.suite.pinn_quasi_newton                   # 4000 steps per method
    python -m benchmarks.suite.pinn_quasi_newton --quick           # fewer points and steps
    python -m benchmarks.suite.pinn_quasi_newton --interior 10000  # the papers' number of points
    python -m benchmarks.suite.pinn_quasi_newton --out /tmp/pinn --tag 10k --interior 10000

GN-CG is `js.GaussNewtonCG` (matrix-free Gauss-Newton) with `Zoom` on the same loss written
as residuals (`residuals`: 0.5 |r|^2 = loss / 2), `--gn-steps` steps (default 200) in chunks
of `--gn-chunk` (10): a step costs a linearisation and up to 50 CG iterations, so its steps
are fewer. Its `evaluations` count the line search's evaluations of fn only, not the JVP and
VJP pairs of CG. GN is dense `js.GaussNewton` (J from n JVPs, an SVD: the exact step), run
the same way. Neither runs by default (`--methods`). For a comparison at equal wall, give
L-BFGS as many steps as fill GN-CG's wall:

    python -m benchmarks.suite.pinn_quasi_newton --methods GN-CG,L-BFGS --steps 20000 --chunk 500
"""

import argparse
import platform
import time

import jax

jax.config.update("jax_enable_x64", True)

import jaxsearch as js  # noqa: E402
from benchmarks import output  # noqa: E402
from examples import pinn_burgers as pinn  # noqa: E402

METHODS = {
    "L-BFGS": lambda: js.LBFGS(),
    "BFGS": lambda: js.BFGS(),
    "SSBFGS": lambda: js.SSBFGS(),
    "SSBroyden": lambda: js.SSBroyden(),
    # Matrix-free Gauss-Newton on the residuals (`residuals` below): 0.5 |r|^2 = loss / 2.
    "GN-CG": lambda: js.GaussNewtonCG(),
    # Dense Gauss-Newton (J from n JVPs, an SVD): the exact step, for comparison.
    "GN": lambda: js.GaussNewton(),
}


def residuals(model, data):
    """The PINN's loss as a residual problem, one pytree: the PDE residuals at the interior
    points and the misfits on the initial line and the boundaries, each divided by the root of
    its number of points, so that 0.5 |r|^2 = 0.5 `pinn.loss` (the same minimisers); with a
    Gauss-Newton direction this is the energy natural gradient of Mueller & Zeinhofer (ICML
    2023) for this loss."""
    points = data["interior"]
    pde = jax.vmap(pinn.pde_residual, in_axes=(None, 0, 0))(model, points[:, 0], points[:, 1])
    u = jax.vmap(model)
    initial = u(data["initial"])[:, 0] - data["initial_u"]
    boundary = u(data["boundary"])[:, 0]
    return dict(
        interior=pde / len(pde) ** 0.5,
        initial=initial / len(initial) ** 0.5,
        boundary=boundary / len(boundary) ** 0.5,
    )


_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_compile_seconds = [0.0]


def _on_duration(event, duration, **kwargs):
    if event == _COMPILE_EVENT:
        _compile_seconds[0] += duration


def run_method(name, model, data, steps, chunk):
    """Checkpoints (steps, evaluations, wall, loss, relative L2 error) every `chunk` steps."""
    direction = METHODS[name]()
    fn = residuals if isinstance(direction, js.AbstractLeastSquares) else pinn.loss
    solver = js.Solver(direction, js.Zoom(), max_steps=chunk, gtol=0.0, ftol=0.0)
    rows, state, params, wall = [], None, model, 0.0
    while not rows or rows[-1]["steps"] < steps:
        compiled_before = _compile_seconds[0]
        start = time.perf_counter()
        result = solver.run(fn, params, data, state=state)
        jax.block_until_ready(result.value)
        wall += time.perf_counter() - start - (_compile_seconds[0] - compiled_before)
        params, state = result.iterate, result.state
        status = js.Status(int(result.status))
        rows.append(
            dict(
                steps=int(result.num_steps),
                evaluations=int(result.num_fun_evals),
                wall=wall,
                loss=float(pinn.loss(result.params, data)),
                error=float(pinn.relative_l2_error(result.params)),
                status=status.name,
            )
        )
        print(
            f"  {name:<9s} "
            + "  ".join(
                f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in rows[-1].items()
            ),
            flush=True,
        )
        if status not in (js.Status.MAX_STEPS, js.Status.RUNNING):
            break  # the run ended on its own (a failed search, a stall)
    return rows


def at_most(rows, key, limit):
    """The last checkpoint whose `key` is at most `limit` (the first if none is)."""
    within = [r for r in rows if r[key] <= limit * (1 + 1e-9)]
    return within[-1] if within else rows[0]


def table(results, key, limit):
    lines = [
        "| method | steps | evaluations | wall (s) | loss | relative L2 error |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, rows in results.items():
        r = at_most(rows, key, limit)
        lines.append(
            f"| {name} | {r['steps']} | {r['evaluations']} | {r['wall']:.1f} | "
            f"{r['loss']:.3e} | {r['error']:.3e} |"
        )
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer points and steps")
    parser.add_argument("--steps", type=int, default=None, help="steps per method")
    parser.add_argument("--chunk", type=int, default=250, help="steps between checkpoints")
    parser.add_argument("--interior", type=int, default=None, help="interior points")
    parser.add_argument("--methods", default="L-BFGS,BFGS,SSBFGS,SSBroyden")
    parser.add_argument("--gn-steps", type=int, default=200, help="GN(-CG)'s steps")
    parser.add_argument("--gn-chunk", type=int, default=10, help="GN(-CG)'s steps per chunk")
    parser.add_argument("--out", default=str(output.RESULTS), help="output directory")
    parser.add_argument(
        "--tag", default=None, help="pinn_quasi_newton_<backend>_<tag>.md (default: quick or none)"
    )
    options = parser.parse_args()
    sizes = dict(pinn.QUICK if options.quick else pinn.FULL)
    sizes["interior"] = options.interior or sizes["interior"]
    steps = options.steps or sizes["lbfgs_steps"]
    jax.monitoring.register_event_duration_secs_listener(_on_duration)

    key_data, key_model = jax.random.split(jax.random.key(0))
    data = pinn.collocation_points(key_data, sizes["interior"], sizes["initial"], sizes["boundary"])
    model = pinn.make_model(key_model)
    start = time.perf_counter()
    model, _ = pinn.train_adam(model, data, sizes["adam_steps"])
    adam = dict(
        steps=sizes["adam_steps"],
        wall=time.perf_counter() - start,
        loss=float(pinn.loss(model, data)),
        error=float(pinn.relative_l2_error(model)),
    )
    print(f"Adam: {adam}", flush=True)
    squares = sum(float(jax.numpy.sum(r * r)) for r in jax.tree.leaves(residuals(model, data)))
    assert abs(squares - adam["loss"]) <= 1e-12 * adam["loss"], (squares, adam["loss"])

    results = {}
    for name in options.methods.split(","):
        if name.startswith("GN"):  # a step costs n JVPs or 50 CG iterations: fewer steps
            results[name] = run_method(name, model, data, options.gn_steps, options.gn_chunk)
        else:
            results[name] = run_method(name, model, data, steps, options.chunk)

    evals = min(rows[-1]["evaluations"] for rows in results.values())
    wall = min(rows[-1]["wall"] for rows in results.values())
    machine = f"{platform.processor() or platform.machine()}, {jax.devices()[0].platform}"
    text = "\n\n".join(
        [
            f"Burgers PINN, float64, {sizes['interior']} interior points, after {adam['steps']} "
            f"Adam steps (loss {adam['loss']:.3e}, relative L2 error {adam['error']:.3e}); "
            f"{machine}; `python -m benchmarks.suite.pinn_quasi_newton"
            + (" --quick" if options.quick else "")
            + (f" --interior {options.interior}" if options.interior else "")
            + (
                f" --methods {options.methods}"
                if options.methods != "L-BFGS,BFGS,SSBFGS,SSBroyden"
                else ""
            )
            + (f" --steps {options.steps}" if options.steps else "")
            + (f" --chunk {options.chunk}" if options.chunk != 250 else "")
            + (f" --gn-steps {options.gn_steps}" if options.gn_steps != 200 else "")
            + "`",
            f"At equal evaluations (the last checkpoint within {evals}):",
            table(results, "evaluations", evals),
            f"At equal wall (the last checkpoint within {wall:.1f} s, compile excluded):",
            table(results, "wall", wall),
            "At the end of each run:",
            table(results, "steps", steps),
        ]
    )
    print(text)
    tag = options.tag or ("quick" if options.quick else None)
    stem = output.stem("pinn_quasi_newton", tag=tag)
    md, _ = output.write(options.out, stem, text + "\n", dict(adam=adam, results=results))
    print(f"wrote {md} and .json")


if __name__ == "__main__":
    main()
