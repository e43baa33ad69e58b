"""What do the lean compile options save and cost? Both sides: the compile time they save and
the run time they may add, measured against what `compiler_options="auto"` chose, and the
compile of a training step under `js.jit` against `step` called directly.
Date: 2026-12-07, commit bd53de1

    python -m benchmarks.studies.compile_options  # every section (about 10 min, 2 CPUs)
    python -m benchmarks.studies.compile_options --reps 2 --only runs
    python -m benchmarks.studies.compile_options --out /tmp/compile_options

Sections (`--only`):

  runs         sum(x^2) n = 1000, a small least squares, the PINN of engine.py (MLP 1-32-32-1,
               200 steps), the Poisson GLM 10000 x 40 x 10 of fresh_fit.py and the Burgers PINN
               of examples/pinn_burgers.py (MLP 2-20-20-20-1, 2,000 collocation and 200 initial
               and boundary points, 400 L-BFGS steps): a fresh `run` with
               `compiler_options=LEAN_OPTIONS`, with None and with "auto", interleaved, `--reps`
               times: the first call, compile (first call minus a later call) and run (min of
               later calls); what "auto" chose (lean, default, or lean for some steps and then
               default) and the extra run time it estimated over max_steps. "auto" keeps its
               promise where its first call takes at most twice the better of the lean and
               the default first calls (the bound of renting before buying).
  calibration  the extra run time per evaluation that the lean options add inside a run (100
               fixed steps, lean minus default over evaluations, min of 7 interleaved calls),
               for objectives of a few sizes, against `jaxsearch._compile._cost`'s estimate: the
               estimate should be at least the measure (a ratio of at most 1).
  train_step   a 2-32-32-1 tanh MLP on 256 points, `Solver()`: the first call of the README's
               training step under `eqx.filter_jit`, under `js.jit`, and `solver.step` called
               directly (each from emptied caches, interleaved): js.jit / step within 1.1.

Walls are min over repeats on a shared machine: the load (`os.getloadavg`) is recorded with the
numbers. Writes compile_options_<backend>.json and .md to --out and prints the markdown.
"""

import argparse
import json
import os
import pathlib
import sys
import time

import equinox as eqx
import jax
import jax.numpy as jnp

import jaxsearch as js
from benchmarks import output
from benchmarks.studies.engine import MLP, pinn_loss
from benchmarks.suite import (
    fresh_fit,
    speed,  # it also switches the persistent compile cache off
)
from examples import pinn_burgers
from jaxsearch._compile import _cost, _programs
from jaxsearch._history import Report

TRAIN_STEP_TARGET = 1.1


def fresh():
    """No compiled program, kept fresh state or kept estimate survives."""
    js.clear_caches()
    speed.fresh()


def _timed(call) -> float:
    t0 = time.perf_counter()
    jax.block_until_ready(call())
    return time.perf_counter() - t0


# ------------------------------------------------------------------------------ problems


def sum_of_squares(x):
    return jnp.sum(x**2)


def least_squares(w, a, b):
    return 0.5 * jnp.mean((a @ w - b) ** 2)


def pinn_1d(model, xs):
    params, static = eqx.partition(model, eqx.is_inexact_array)
    return pinn_loss(params, static, xs)


def problems() -> dict:
    key = jax.random.key(0)
    a = jax.random.normal(key, (100, 10))
    data = pinn_burgers.collocation_points(jax.random.key(1), 2000, 100, 100)
    glm = fresh_fit.glm_data(*fresh_fit.PROBLEMS["GLM 10000 x 40 x 10"], "float32")
    return {
        "sum(x^2), n = 1000": (
            js.Solver(gtol=1e-6, ftol=0.0, max_steps=100),
            sum_of_squares,
            jnp.ones(1000),
            (),
        ),
        "least squares, 100 x 10": (js.Solver(), least_squares, jnp.zeros(10), (a, jnp.ones(100))),
        "PINN 1-32-32-1, 200 steps": (
            js.Solver(gtol=0.0, ftol=0.0, max_steps=200, stall_steps=200),
            pinn_1d,
            MLP(jax.random.key(0)),
            (jnp.linspace(0.0, 1.0, 64, dtype=jnp.float32),),
        ),
        "Poisson GLM 10000 x 40 x 10 (fresh_fit.py)": (
            js.Solver(gtol=1e-4),
            fresh_fit.make_loss(fresh_fit.PoissonObservations(), fresh_fit.Ridge(fresh_fit.RIDGE)),
            glm[2],
            glm[:2],
        ),
        "Burgers PINN 2-20-20-20-1, 400 steps": (
            js.Solver(js.LBFGS(), max_steps=400),
            pinn_burgers.loss,
            pinn_burgers.make_model(jax.random.key(2)),
            (data,),
        ),
    }


# ------------------------------------------------------------------------------ runs


def auto_choice(solver, fn, x0, args) -> str:
    """What "auto" does with a plain fresh run: "lean", "default", or "lean K steps, then
    default" (`jaxsearch._compile._programs.run_options`)."""
    chosen, rented = _programs.run_options("auto", solver, fn, x0, args, Report(), None)
    if rented:
        return f"lean {rented} steps, then default"
    return "default" if chosen is None else "lean"


def runs(reps: int) -> dict:
    out = {}
    for name, (solver, fn, x0, args) in problems().items():
        print(f"    {name}", flush=True)
        fresh()
        chosen = auto_choice(solver, fn, x0, args)
        estimate = _programs.lean_extra_seconds(solver, fn, x0, args)
        settings = (("lean", _programs.LEAN_OPTIONS), ("default", None), ("auto", "auto"))
        times: dict = {s: {"first": [], "compile": [], "run": []} for s, _ in settings}
        evals = steps = None
        for _ in range(reps):
            for setting, options in settings:
                fresh()

                def call(options=options, solver=solver, fn=fn, x0=x0, args=args):
                    return solver.run(fn, x0, *args, compiler_options=options)

                first = _timed(call)
                later = [_timed(call) for _ in range(3)]
                times[setting]["first"].append(first)
                times[setting]["compile"].append(first - min(later))
                times[setting]["run"].append(min(later))
                result = call()
                evals, steps = int(result.num_fun_evals), int(result.num_steps)
        row = {k: {m: min(v) for m, v in d.items()} for k, d in times.items()}
        saved = row["default"]["compile"] - row["lean"]["compile"]
        extra = row["lean"]["run"] - row["default"]["run"]
        hindsight = min(row["lean"]["first"], row["default"]["first"])
        out[name] = {
            **row,
            "compile_saved_s": saved,
            "run_extra_s": extra,
            "auto_choice": chosen,
            "estimated_extra_s": estimate,
            "steps": steps,
            "evals": evals,
            "auto_over_hindsight": row["auto"]["first"] / hindsight,
            # the ski rental's bound: a first call at most twice the better choice's
            "auto_keeps_its_promise": row["auto"]["first"] <= 2 * hindsight,
            "all": times,
        }
    return out


# ------------------------------------------------------------------------------ calibration


def poisson(model, xs):
    u_xx = jax.vmap(jax.grad(jax.grad(model)))(xs)
    residual = -u_xx - jnp.pi**2 * jnp.sin(jnp.pi * xs)
    return jnp.mean(residual**2) + model(jnp.zeros(())) ** 2 + model(jnp.ones(())) ** 2


def transcendental(x, c):
    return jnp.sum(jnp.tanh(x - c) ** 2 + jnp.exp(-(x**2)) + jnp.log1p(x**2) + jnp.sin(x) ** 2)


def ext_rosenbrock(x):
    return jnp.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def regression(model, x, y):
    return jnp.mean((jax.vmap(model)(x) - y) ** 2)


def calibration_objectives() -> dict:
    key = jax.random.key(0)
    out = {}
    for width, n in [(8, 64), (32, 64), (32, 512), (64, 512)]:
        model = eqx.nn.MLP("scalar", "scalar", width, 2, activation=jnp.tanh, key=key)
        out[f"Poisson PINN 1-{width}-{width}-1, {n} points"] = (
            poisson,
            model,
            (jnp.linspace(0, 1, n),),
        )
    for n in [200, 2000]:
        data = pinn_burgers.collocation_points(jax.random.key(1), n, n // 20, n // 20)
        out[f"Burgers PINN, {n} points"] = (
            pinn_burgers.loss,
            pinn_burgers.make_model(key),
            (data,),
        )
    for n in [1000, 100_000]:
        out[f"tanh, exp, log1p, sin, n = {n}"] = (transcendental, jnp.zeros(n), (jnp.ones(n),))
        out[f"ext. Rosenbrock, n = {n}"] = (ext_rosenbrock, jnp.zeros(n), ())
    for m, n in [(100, 10), (2000, 200)]:
        a = jax.random.normal(key, (m, n))
        out[f"least squares {m} x {n}"] = (least_squares, jnp.zeros(n), (a, jnp.ones(m)))
    for width, n, activation in [
        (32, 256, jnp.tanh),
        (128, 1024, jnp.tanh),
        (128, 1024, jax.nn.relu),
    ]:
        x = jax.random.normal(key, (n, 2))
        model = eqx.nn.MLP(2, 1, width, 2, activation=activation, key=key)
        name = f"regression MLP 2-{width}-{width}-1 {activation.__name__}, {n} points"
        out[name] = (regression, model, (x, jnp.sin(x[:, :1])))
    return out


def calibration(steps: int = 100) -> dict:
    solver = js.Solver(gtol=0.0, ftol=0.0, max_steps=steps, stall_steps=steps)
    out = {}
    for name, (fn, x0, args) in calibration_objectives().items():
        fresh()
        dynamic, static = eqx.partition(x0, eqx.is_array)

        def whole(d, a, fn=fn, static=static):
            result = solver.run(fn, eqx.combine(d, static), *a)
            return result.value, result.num_fun_evals

        jitted = jax.jit(whole)
        compiled = {}
        for setting, options in (("lean", _programs.LEAN_OPTIONS), ("default", None)):
            jax.clear_caches()
            compiled[setting] = jitted.lower(dynamic, args).compile(compiler_options=options)
        evals = int(compiled["default"](dynamic, args)[1])
        walls: dict = {"lean": [], "default": []}
        for program in compiled.values():
            jax.block_until_ready(program(dynamic, args))
        for _ in range(7):
            for setting, program in compiled.items():
                walls[setting].append(
                    _timed(lambda program=program, d=dynamic, a=args: program(d, a))
                )
        measured = (min(walls["lean"]) - min(walls["default"])) / evals
        jaxpr = jax.make_jaxpr(lambda d, a, fn=fn, static=static: fn(eqx.combine(d, static), *a))
        counted = _cost.work(jaxpr(dynamic, args).jaxpr)
        parameters = sum(x.size for x in jax.tree.leaves(eqx.filter(x0, eqx.is_inexact_array)))
        estimate = _cost.lean_extra_seconds(counted, parameters)
        out[name] = {
            "evals": evals,
            "default_per_eval_s": min(walls["default"]) / evals,
            "lean_over_default": min(walls["lean"]) / min(walls["default"]),
            "measured_extra_per_eval_s": measured,
            "estimated_extra_per_eval_s": estimate,
            "measured_over_estimate": measured / estimate if estimate else None,
            "work": counted._asdict(),
        }
        print(f"    {name}: {out[name]['measured_over_estimate']}", flush=True)
    return out


# ------------------------------------------------------------------------------ train step


def regression_setup():
    key_model, key_data = jax.random.split(jax.random.key(0))
    model = eqx.nn.MLP(2, 1, 32, 2, activation=jnp.tanh, key=key_model)
    x = jax.random.normal(key_data, (256, 2))
    return model, x, jnp.sin(x[:, :1])


def train_step(reps: int) -> dict:
    solver = js.Solver()
    model, x, y = regression_setup()
    state = solver.init(model, value_dtype=jnp.float32)

    def step(model, state, x, y):
        return solver.step(regression, model, state, x, y)

    ways = {
        "step called directly": lambda: step,
        "eqx.filter_jit(train_step)": lambda: eqx.filter_jit(step),
        "js.jit(train_step)": lambda: js.jit(step),
    }
    times: dict = {name: [] for name in ways}
    for _ in range(reps):
        for name, make in ways.items():
            fresh()
            jitted = make()
            first = _timed(lambda jitted=jitted: jitted(model, state, x, y)[1])
            later = min(
                _timed(lambda jitted=jitted: jitted(model, state, x, y)[1]) for _ in range(3)
            )
            times[name].append(first - later)
    row = {name: min(t) for name, t in times.items()}
    chosen = _programs.options("auto", solver, regression, model, (x, y))
    return {
        "compile_s": row,
        "all": times,
        "auto": "lean" if chosen is not None else "default",
        "estimated_extra_s": _programs.lean_extra_seconds(solver, regression, model, (x, y)),
        "js_jit_over_step": row["js.jit(train_step)"] / row["step called directly"],
        "filter_jit_over_step": row["eqx.filter_jit(train_step)"] / row["step called directly"],
    }


# ------------------------------------------------------------------------------ report


def markdown(data: dict, meta: dict) -> str:
    def f(x, digits=3):
        return "—" if x is None else f"{x:.{digits}g}"

    lines = [
        f"# Compile options ({meta['backend']}, {meta['cpu_count']} CPUs)",
        "",
        f"jax {meta['jax']}; load average {meta['load_before']} before, {meta['load_after']} "
        f"after; `{meta['command']}`",
    ]
    if "runs" in data:
        lines += [
            "",
            "| problem | steps (evals) | compile lean / default (s) | saved | run lean / default "
            "(s) | extra | auto | estimated extra at max_steps (s) | first call lean / default "
            "/ auto (s) | auto / better | promise kept |",
            "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- |",
        ]
        for name, r in data["runs"].items():
            lines.append(
                f"| {name} | {r['steps']} ({r['evals']}) | {f(r['lean']['compile'])} / "
                f"{f(r['default']['compile'])} | {f(r['compile_saved_s'])} | "
                f"{f(r['lean']['run'])} / {f(r['default']['run'])} | {f(r['run_extra_s'])} | "
                f"{r['auto_choice']} | {f(r['estimated_extra_s'])} | {f(r['lean']['first'])} / "
                f"{f(r['default']['first'])} / {f(r['auto']['first'])} | "
                f"{f(r['auto_over_hindsight'])} | {r['auto_keeps_its_promise']} |"
            )
    if "calibration" in data:
        lines += [
            "",
            "| objective (100 steps) | default per eval (µs) | lean / default | extra per eval "
            "(µs) | estimate (µs) | measured / estimate |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for name, r in data["calibration"].items():
            lines.append(
                f"| {name} | {f(1e6 * r['default_per_eval_s'])} | {f(r['lean_over_default'])} | "
                f"{f(1e6 * r['measured_extra_per_eval_s'])} | "
                f"{f(1e6 * r['estimated_extra_per_eval_s'])} | {f(r['measured_over_estimate'])} |"
            )
    if "train_step" in data:
        t = data["train_step"]
        lines += ["", "| 2-32-32-1 MLP, 256 points, Solver(): first call | compile (s) |"]
        lines += ["| --- | ---: |"]
        lines += [f"| {name} | {f(s)} |" for name, s in t["compile_s"].items()]
        lines += [
            "",
            f"js.jit / step: {f(t['js_jit_over_step'])} (target ≤ {TRAIN_STEP_TARGET}); "
            f"eqx.filter_jit / step: {f(t['filter_jit_over_step'])}; auto chose {t['auto']} "
            f"(estimated extra {f(t['estimated_extra_s'])} s over max_steps).",
        ]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--only", default="", help="runs,calibration,train_step (default: all)")
    parser.add_argument("--out", default=str(output.RESULTS))
    args = parser.parse_args(argv)
    only = set(filter(None, args.only.split(","))) or {"runs", "calibration", "train_step"}
    meta = {
        "backend": jax.default_backend(),
        "cpu_count": os.cpu_count(),
        "jax": jax.__version__,
        "load_before": " ".join(f"{x:.1f}" for x in os.getloadavg()),
        "command": " ".join(
            ["python", "-m", "benchmarks.studies.compile_options", *(argv or sys.argv[1:])]
        ),
    }
    data: dict = {}
    for name, section in (
        ("runs", lambda: runs(args.reps)),
        ("calibration", calibration),
        ("train_step", lambda: train_step(args.reps)),
    ):
        if name in only:
            print(f"  {name} ...", flush=True)
            data[name] = section()
    meta["load_after"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"compile_options_{meta['backend']}"
    (out / f"{stem}.json").write_text(json.dumps({"meta": meta, "data": data}, indent=1))
    text = markdown(data, meta)
    (out / f"{stem}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
