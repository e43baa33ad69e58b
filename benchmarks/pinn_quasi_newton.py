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

    python benchmarks/pinn_quasi_newton.py                     # 4000 steps per method
    python benchmarks/pinn_quasi_newton.py --quick             # fewer points and steps
    python benchmarks/pinn_quasi_newton.py --interior 10000    # the papers' number of points
    python benchmarks/pinn_quasi_newton.py --out benchmarks/results/pinn_quasi_newton_cpu
"""

import argparse
import json
import pathlib
import platform
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)


import jaxsearch as js  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "examples"))
import pinn_burgers as pinn  # noqa: E402

METHODS = {
    "L-BFGS": lambda: js.LBFGS(),
    "BFGS": lambda: js.BFGS(),
    "SSBFGS": lambda: js.SSBFGS(),
    "SSBroyden": lambda: js.SSBroyden(),
}
_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_compile_seconds = [0.0]


def _on_duration(event, duration, **kwargs):
    if event == _COMPILE_EVENT:
        _compile_seconds[0] += duration


def run_method(name, model, data, steps, chunk):
    """Checkpoints (steps, evaluations, wall, loss, relative L2 error) every `chunk` steps."""
    solver = js.Solver(METHODS[name](), js.Zoom(), max_steps=chunk, gtol=0.0, ftol=0.0)
    rows, state, params, wall = [], None, model, 0.0
    while not rows or rows[-1]["steps"] < steps:
        compiled_before = _compile_seconds[0]
        start = time.perf_counter()
        result = solver.run(pinn.loss, params, data, state=state)
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
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--out", default=None, help="write OUT.json and OUT.md")
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

    results = {}
    for name in options.methods.split(","):
        results[name] = run_method(name, model, data, steps, options.chunk)

    evals = min(rows[-1]["evaluations"] for rows in results.values())
    wall = min(rows[-1]["wall"] for rows in results.values())
    machine = f"{platform.processor() or platform.machine()}, {jax.devices()[0].platform}"
    text = "\n\n".join(
        [
            f"Burgers PINN, float64, {sizes['interior']} interior points, after {adam['steps']} "
            f"Adam steps (loss {adam['loss']:.3e}, relative L2 error {adam['error']:.3e}); "
            f"{machine}; `python benchmarks/pinn_quasi_newton.py"
            + (" --quick" if options.quick else "")
            + (f" --interior {options.interior}" if options.interior else "")
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
    if options.out:
        out = pathlib.Path(options.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".json").write_text(json.dumps(dict(adam=adam, results=results), indent=1))
        out.with_suffix(".md").write_text(text + "\n")


if __name__ == "__main__":
    main()
