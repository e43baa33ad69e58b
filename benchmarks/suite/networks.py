"""Issue 48's accelerator rows that engine.py does not hold: networks and large L-BFGS runs,
each jaxsearch against optax.lbfgs in the same process, float32.

    python -m benchmarks.suite.networks --quick  # small sizes (CPU, a minute)
    python -m benchmarks.suite.networks --out benchmarks/results # full sizes (a GPU or a TPU)
    python -m benchmarks.suite.networks --only step,mlp
    python -m benchmarks.suite.networks --only rosen --sizes 20 --out benchmarks/results/n20

Rows (`--only`):

  step      a jitted training step, MLP 64-256-1 (4096 rows; --quick 64-32-1, 512 rows):
            `solver.step` (L-BFGS + Zoom) under `eqx.filter_jit` and under `js.jit`, optax's
            documented update (`optax.lbfgs()` with `value_and_grad_from_state`) under
            `jax.jit`: the first call (trace, compile and run) and the wall per step after it
            (the minimum over interleaved repeats of the mean over a block of steps);
            value-and-grad alone per call beside them;
  mlp       200 L-BFGS steps of MLP 64-512-512-1 (4096 rows; --quick 64-32-32-1, 50 steps),
            the whole run in `jax.jit` (gtol 0, so every run takes its budget): first call and
            wall, over optax's loop (benchmarks/peers.py) with the same budget;
  searches  the mlp row's run with Zoom, HagerZhang and Backtracking, and optax's, under
            matmul precision "default" and "highest": evaluations, final loss and wall;
  rosen     extended Rosenbrock, L-BFGS (m = 10) per step and compile at n = 2^20, 2^22 and
            2^24 (--quick 2^14, 2^16): 30 steps in `jax.jit` (gtol 0), the wall per step over
            the floor of (4m + 8) n 4-byte words at `--bandwidth` GB/s (819: a TPU v5e's HBM),
            optax's loop alongside; compile alone (lower and compile) beside the compile of
            fn's value and gradient by itself; `--sizes 20,22` picks the exponents;
  batched   `js.batched_run` of 10^4 2-D Rosenbrock problems (--quick 10^3): a call after
            the first, against optax's loop under `jax.vmap`, and how many converge.

Each row is written to networks_<backend>.json and .md in --out as it is measured, so a run
cut off by a time limit keeps its rows.
"""

import argparse
import functools
import json
import sys
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import optax

import jaxsearch as js
from benchmarks import output, peers as peers_mod, problems as problems_mod


def timed(call) -> float:
    t0 = time.perf_counter()
    jax.block_until_ready(call())
    return time.perf_counter() - t0


def min_wall(call, reps: int) -> float:
    return min(timed(call) for _ in range(reps))


def network(widths, rows: int, seed: int = 0):
    """An MLP `widths[0]`-...-`widths[-1]` (tanh), its data, and the mean squared loss."""
    k_model, k_x = jax.random.split(jax.random.key(seed))
    model = eqx.nn.MLP(
        widths[0], widths[-1], widths[1], len(widths) - 2, activation=jnp.tanh, key=k_model
    )
    x = jax.random.normal(k_x, (rows, widths[0]), jnp.float32)
    y = jnp.sin(x.sum(axis=1, keepdims=True))
    params, static = eqx.partition(model, eqx.is_array)

    def loss(p, args):  # args: (inputs, targets); peers.py passes it by name
        inputs, targets = args
        return jnp.mean((jax.vmap(eqx.combine(p, static))(inputs) - targets) ** 2)

    return params, (x, y), loss


def training_steps(quick: bool):
    """(params, data, loss, {name: (jitted step, its first state)}): the step row's steps,
    jaxsearch's under `eqx.filter_jit` and `js.jit` and optax's documented update."""
    params, data, loss = network((64, 32, 1) if quick else (64, 256, 1), 512 if quick else 4096)
    solver = js.Solver(js.LBFGS(), js.Zoom(), gtol=0.0, ftol=0.0, max_steps=10**9)

    def ours(p, state):
        return solver.step(loss, p, state, data)

    opt = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(lambda p: loss(p, data))

    @jax.jit
    def theirs(p, state):
        value, grad = value_and_grad(p, state=state)
        updates, state = opt.update(
            grad, state, p, value=value, grad=grad, value_fn=lambda q: loss(q, data)
        )
        return optax.apply_updates(p, updates), state

    return (
        params,
        data,
        loss,
        {
            "jaxsearch eqx.filter_jit": (eqx.filter_jit(ours), solver.init(params, jnp.float32)),
            "jaxsearch js.jit": (js.jit(ours), solver.init(params, jnp.float32)),
            "optax jax.jit": (theirs, opt.init(params)),
        },
    )


def step_row(quick: bool, steps: int = 20, reps: int = 5) -> dict:
    params, data, loss, steps_of = training_steps(quick)

    def block(step, state):
        def run():
            p, s = params, state
            for _ in range(steps):
                p, s = step(p, s)
            return p, s

        return run

    row = {}
    for name, (step, state) in steps_of.items():  # first calls, each from cleared caches
        jax.clear_caches()
        row[name] = {"first_call_s": timed(lambda step=step, state=state: step(params, state))}
        block(step, state)()
    walls: dict = {name: [] for name in steps_of}
    for _ in range(reps):  # the blocks interleaved: a machine's drift falls on all alike
        for name, (step, state) in steps_of.items():
            walls[name].append(timed(block(step, state)))
    for name in steps_of:
        row[name]["per_step_ms"] = 1e3 * min(walls[name]) / steps
    grad_only = jax.jit(jax.value_and_grad(loss))
    grad_only(params, data)
    row["value_and_grad_ms"] = 1e3 * min_wall(lambda: grad_only(params, data), 20)
    row["parameters"] = sum(leaf.size for leaf in jax.tree.leaves(params))
    return row


def mlp_runs(quick: bool):
    """(params, steps, jaxsearch's run in `jax.jit` as a function of params, optax's loop as
    a zero-argument call): the mlp row's runs."""
    params, data, loss = network((64, 32, 32, 1) if quick else (64, 512, 512, 1), 4096)
    steps = 50 if quick else 200
    cfg = peers_mod.Config(gtol=0.0, ftol=0.0, max_steps=steps)
    solver = js.Solver(js.LBFGS(), js.Zoom(), gtol=0.0, ftol=0.0, max_steps=steps)
    ours = jax.jit(lambda p: solver.run(loss, p, data).params)
    return params, steps, ours, peers_mod.optax_lbfgs(loss, params, data, cfg)


def mlp_row(quick: bool, reps: int = 3) -> dict:
    params, steps, ours, theirs = mlp_runs(quick)
    row = {"parameters": sum(leaf.size for leaf in jax.tree.leaves(params)), "steps": steps}
    jax.clear_caches()
    row["jaxsearch_first_call_s"] = timed(lambda: ours(params))
    row["jaxsearch_s"] = min_wall(lambda: ours(params), reps)
    jax.clear_caches()
    row["optax_first_call_s"] = timed(theirs)
    row["optax_s"] = min_wall(theirs, reps)
    row["ratio"] = row["jaxsearch_s"] / row["optax_s"]
    row["first_call_ratio"] = row["jaxsearch_first_call_s"] / row["optax_first_call_s"]
    return row


def compile_seconds(jitted, *arguments) -> float:
    """Seconds to lower and compile `jitted` for `arguments` (from cleared caches)."""
    jax.clear_caches()
    t0 = time.perf_counter()
    jitted.lower(*arguments).compile()
    return time.perf_counter() - t0


def rosen_blocks(x, args):
    """Extended Rosenbrock with its variables in two blocks, x = (odd..., even...): the same
    problem as problems.py's interleaved form up to the order of the variables (L-BFGS's
    iterates are the same up to that order), written with two contiguous slices. On a TPU the
    interleaved form's strided slices and the pads of their gradient cost about 0.5 ms an
    evaluation at n = 10^6 and their compile grows with n (benchmarks/results/trace_tpu.md,
    compile_trace_tpu_20.md): fn itself, in every solver alike."""
    del args
    half = x.shape[0] // 2
    odd, even = x[:half], x[half:]
    return jnp.sum(100.0 * (even - odd**2) ** 2 + (1.0 - odd) ** 2)


def rosen_row(quick: bool, bandwidth_gbs: float, sizes=(), steps: int = 30, m: int = 10) -> dict:
    cfg = peers_mod.Config(gtol=0.0, ftol=0.0, max_steps=steps)
    solver = js.Solver(js.LBFGS(memory_size=m), gtol=0.0, ftol=0.0, max_steps=steps)
    rows = {}
    for n in [1 << e for e in sizes or ((14, 16) if quick else (20, 22, 24))]:
        x0 = jnp.concatenate([jnp.full(n // 2, -1.2, jnp.float32), jnp.ones(n // 2, jnp.float32)])
        row = rows[n] = {"floor_ms": 1e3 * (4 * m + 8) * n * 4 / (bandwidth_gbs * 1e9)}
        # fn's value and gradient by itself: its compile, and its wall per evaluation (in a
        # loop of 20 in one program, so without a call's dispatch), which each evaluation of
        # a solver costs.
        jax.clear_caches()
        fn_started = time.perf_counter()
        jax.jit(jax.value_and_grad(rosen_blocks)).lower(x0, None).compile()
        row["fn_compile_s"] = time.perf_counter() - fn_started
        fn_loop = jax.jit(
            lambda x: jax.lax.fori_loop(
                0, 20, lambda _, x: x - 1e-9 * jax.grad(rosen_blocks)(x, None), x
            )
        )
        fn_loop(x0)
        row["fn_ms"] = 1e3 * min_wall(functools.partial(fn_loop, x0), 5) / 20
        theirs = peers_mod.optax_lbfgs(rosen_blocks, x0, None, cfg)
        solve, arguments = theirs.program
        for name, jitted, args in (
            ("jaxsearch", jax.jit(lambda x: solver.run(rosen_blocks, x, None)), (x0,)),
            ("optax", solve, arguments),
        ):
            jax.clear_caches()
            started = time.perf_counter()
            compiled = jitted.lower(*args).compile()
            row[f"{name}_compile_s"] = time.perf_counter() - started
            out = jax.block_until_ready(compiled(*args))
            taken, evals = (
                (int(out.num_steps), int(out.num_fun_evals))
                if name == "jaxsearch"
                else (int(out[1]),) * 2
            )
            wall = min_wall(lambda compiled=compiled, args=args: compiled(*args), 3)
            row[f"{name}_ms_per_step"] = 1e3 * wall / taken
            row[f"{name}_evals_per_step"] = evals / taken
        # What the solver adds per step beyond its evaluations (optax's count of evaluations
        # is not reported: its loop's steps are the lower bound), over the floor.
        own = row["jaxsearch_ms_per_step"] - row["jaxsearch_evals_per_step"] * row["fn_ms"]
        row["jaxsearch_own_ms_per_step"] = own
        row["own_over_floor"] = own / row["floor_ms"]
        row["over_floor"] = row["jaxsearch_ms_per_step"] / row["floor_ms"]
    return rows


def batched_row(quick: bool, reps: int = 3) -> dict:
    fn = problems_mod._ext_rosenbrock
    count = 1000 if quick else 10_000
    x0s = jnp.asarray([-1.2, 1.0], jnp.float32) + 0.5 * jax.random.normal(
        jax.random.key(3), (count, 2), jnp.float32
    )
    solver = js.Solver(gtol=1e-4, max_steps=500)
    cfg = peers_mod.Config(gtol=1e-4, ftol=0.0, max_steps=500)
    result = js.batched_run(solver, fn, x0s, None)
    theirs = jax.jit(
        jax.vmap(lambda x: peers_mod.optax_lbfgs(fn, x, None, cfg).program[0](x, None))
    )
    theirs(x0s)
    return {
        "problems": count,
        "jaxsearch_s": min_wall(lambda: js.batched_run(solver, fn, x0s, None).params, reps),
        "converged": int(jnp.sum(jnp.asarray(result.success))),
        "optax_vmap_s": min_wall(lambda: theirs(x0s), reps),
    }


def optax_counted_run(loss, params, data, steps: int):
    """optax.lbfgs's loop (as peers.py's) for `steps` steps, in `jax.jit`, returning (params,
    the evaluations its zoom searches used: the sum of `num_linesearch_steps`)."""
    import optax.tree_utils as otu

    opt = optax.lbfgs()
    fun = functools.partial(loss, args=data)
    value_and_grad = optax.value_and_grad_from_state(fun)

    def step(carry):
        p, state, evals = carry
        value, grad = value_and_grad(p, state=state)
        updates, state = opt.update(grad, state, p, value=value, grad=grad, value_fn=fun)
        return (
            optax.apply_updates(p, updates),
            state,
            evals + otu.tree_get(state, "num_linesearch_steps"),
        )

    def run(p):
        init = (p, opt.init(p), jnp.zeros((), jnp.int32))
        p, state, evals = jax.lax.while_loop(
            lambda c: otu.tree_get(c[1], "count") < steps, step, init
        )
        return p, evals

    return jax.jit(run)


def searches_row(quick: bool, reps: int = 3) -> dict:
    """The mlp row's run by line search and by matmul precision: evaluations, final loss and
    wall. On a TPU, float32 matmuls at default precision round their inputs to bfloat16, so
    f is constant over steps that move the weights below bfloat16's resolution, and a search
    that narrows its bracket there evaluates the same numbers again until its trial cap."""
    params, data, loss = network((64, 32, 32, 1) if quick else (64, 512, 512, 1), 4096)
    steps = 50 if quick else 200
    row: dict = {"steps": steps}
    for precision in ("default", "highest"):
        with jax.default_matmul_precision(precision):
            for name, search in (
                ("Zoom", js.Zoom()),
                ("HagerZhang", js.HagerZhang()),
                ("Backtracking", js.Backtracking()),
            ):
                solver = js.Solver(js.LBFGS(), search, gtol=0.0, ftol=0.0, max_steps=steps)
                run = jax.jit(lambda p, solver=solver: solver.run(loss, p, data))
                result = jax.block_until_ready(run(params))
                row[f"jaxsearch {name} {precision}"] = {
                    "evals": int(result.num_fun_evals),
                    "loss": float(result.value),
                    "s": min_wall(lambda run=run: run(params).params, reps),
                }
            theirs = optax_counted_run(loss, params, data, steps)
            found, evals = jax.block_until_ready(theirs(params))
            row[f"optax {precision}"] = {
                "evals": int(evals),
                "loss": float(loss(found, data)),
                "s": min_wall(lambda theirs=theirs: theirs(params), reps),
            }
    return row


ROWS = {
    "step": step_row,
    "mlp": mlp_row,
    "searches": searches_row,
    "rosen": rosen_row,
    "batched": batched_row,
}


def markdown(data: dict, meta: str) -> str:
    lines = [f"# Networks and large runs ({jax.default_backend()})", "", meta, ""]
    step = data.get("step")
    if isinstance(step, dict) and "optax jax.jit" in step:
        lines += [
            f"## Training step ({step['parameters']} parameters); value-and-grad "
            f"{step['value_and_grad_ms']:.3f} ms",
            "",
            "| step | first call s | ms per step |",
            "| --- | ---: | ---: |",
        ]
        for name in ("jaxsearch eqx.filter_jit", "jaxsearch js.jit", "optax jax.jit"):
            lines.append(
                f"| {name} | {step[name]['first_call_s']:.2f} | {step[name]['per_step_ms']:.3f} |"
            )
        lines.append("")
    mlp = data.get("mlp")
    if isinstance(mlp, dict) and "ratio" in mlp:
        lines += [
            f"## MLP L-BFGS run ({mlp['parameters']} parameters, {mlp['steps']} steps, in jit)",
            "",
            "| | jaxsearch | optax | ratio |",
            "| --- | ---: | ---: | ---: |",
            f"| first call s | {mlp['jaxsearch_first_call_s']:.2f} "
            f"| {mlp['optax_first_call_s']:.2f} | {mlp['first_call_ratio']:.2f} |",
            f"| run s | {mlp['jaxsearch_s']:.3f} | {mlp['optax_s']:.3f} | {mlp['ratio']:.2f} |",
            "",
        ]
    searches = data.get("searches")
    if isinstance(searches, dict) and "error" not in searches:
        lines += [
            f"## The MLP run by line search and matmul precision ({searches['steps']} steps)",
            "",
            "| run | evaluations | final loss | run s |",
            "| --- | ---: | ---: | ---: |",
        ]
        for name, r in searches.items():
            if isinstance(r, dict):
                lines.append(f"| {name} | {r['evals']} | {r['loss']:.3g} | {r['s']:.3f} |")
        lines.append("")
    rosen = data.get("rosen")
    if isinstance(rosen, dict) and "error" not in rosen:
        lines += [
            "## Extended Rosenbrock (two blocks), L-BFGS m = 10, 30 steps",
            "",
            "| n | fn compile s | fn ms | compile s | ms per step | evals per step "
            "| own ms per step | floor ms | / floor | own / floor | optax compile s "
            "| optax ms per step |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for n, r in rosen.items():
            lines.append(
                f"| {n} | {r['fn_compile_s']:.2f} | {r['fn_ms']:.3f} "
                f"| {r['jaxsearch_compile_s']:.2f} | {r['jaxsearch_ms_per_step']:.3f} "
                f"| {r['jaxsearch_evals_per_step']:.2f} | {r['jaxsearch_own_ms_per_step']:.3f} "
                f"| {r['floor_ms']:.3f} | {r['over_floor']:.1f} | {r['own_over_floor']:.1f} "
                f"| {r['optax_compile_s']:.2f} | {r['optax_ms_per_step']:.3f} |"
            )
        lines.append("")
    batched = data.get("batched")
    if isinstance(batched, dict) and "jaxsearch_s" in batched:
        lines += [
            f"## js.batched_run, {batched['problems']} 2-D Rosenbrock problems",
            "",
            f"jaxsearch {batched['jaxsearch_s']:.3f} s ({batched['converged']} converge), optax's "
            f"loop under jax.vmap {batched['optax_vmap_s']:.3f} s.",
            "",
        ]
    errors = {k: v["error"] for k, v in data.items() if isinstance(v, dict) and "error" in v}
    if errors:
        lines += [f"Errors: {json.dumps(errors)}", ""]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=str(output.RESULTS))
    parser.add_argument("--only", default="", help="comma list of rows (default: all)")
    parser.add_argument("--bandwidth", type=float, default=819.0, help="GB/s for the floor")
    parser.add_argument(
        "--sizes", default="", help="rosen row: comma list of exponents e, n = 2^e (20,22,24)"
    )
    options = parser.parse_args(argv)
    backend = jax.default_backend()
    given = sys.argv[1:] if argv is None else argv
    command = " ".join(["python -m benchmarks.suite.networks", *given])
    meta = (
        f"jax {jax.__version__}, optax {optax.__version__}, {jax.devices()[0].device_kind}; "
        f"`{command}`"
    )
    data: dict = {}
    for name, row in ROWS.items():
        if options.only and name not in options.only.split(","):
            continue
        print(f"  {name} ...", flush=True)
        try:
            if name == "rosen":
                sizes = tuple(int(e) for e in options.sizes.split(",") if e)
                data[name] = row(options.quick, options.bandwidth, sizes)
            else:
                data[name] = row(options.quick)
        except Exception as error:  # a row that fails is reported; the others still run
            data[name] = {"error": f"{type(error).__name__}: {error}"}
        output.write(options.out, output.stem("networks", backend), markdown(data, meta), data)
    print(markdown(data, meta))


if __name__ == "__main__":
    main()
