"""The first call against optax.lbfgs: trace, compile and run of a fresh process's first call.

    python -m benchmarks.suite.first_call           # full sizes, 3 repeats (meant for a TPU or GPU)
    python -m benchmarks.suite.first_call --quick   # small MLP, 1 repeat (8 processes, 2-3 min)
    python -m benchmarks.suite.first_call --only step,rosen --repeats 5 --out /tmp/first_call

What a user waits for before the first result: the first call of a jitted training step or of a
jitted run, in a process that has compiled nothing yet (issue 61). Every measurement is one
child process of this script (`python -m benchmarks.suite.first_call` with a hidden argument,
answering JSON on its last line of stdout), so no compiled program, tracing cache or warmed-up
backend of one side serves another; the sides of a row are alternated, one child each per
repeat (the order reversed every other repeat), `--repeats` times, and each figure is reported
as the minimum and the maximum over the repeats, with the ratio jaxsearch / optax of the
minima. The children inherit this process's environment (XLA_FLAGS and all) unchanged, float32
throughout (x64 off), JAX's persistent compilation cache off. The parent never starts JAX's
backend itself (on a TPU one process holds the chip): the backend and device come from the
children.

Rows (`--only`):

  step   a jitted training step, MLP 64-256-1 (tanh), 4096 rows of random normal data, mean
         squared error. jaxsearch: `solver = js.Solver(gtol=0.0, ftol=0.0, max_steps=10**6)`,
         `state = solver.init(p0, value_dtype=jnp.float32)` and `step(p, s, X, Y) =
         solver.step(f, p, s, X, Y)` under `eqx.filter_jit` and under `js.jit`; optax:
         `optax.lbfgs()` and its documented update (`optax.value_and_grad_from_state(f)`,
         `opt.update(..., value=, grad=, value_fn=)`, `optax.apply_updates`) under
         `eqx.filter_jit` and under `jax.jit`. Measured: the first call of the step (from
         calling to `block_until_ready`; `init` before it, apart), the XLA backend compiles in
         it (`/jax/core/compile/backend_compile_duration`: count, seconds), the second call
         timed alike, any compile from the second call on, the time per step (the best of 3
         blocks of 50 steps after 6 warm-up steps, the second call among them; --quick: blocks
         of 20) and the number of leaves of the state;
  rosen  a whole run, 2-D Rosenbrock from (-1.2, 1.0) in float32: `jax.jit(lambda x:
         js.Solver().run(rosen, x).params)` against optax.lbfgs in the `jax.lax.while_loop` of
         optax's documentation (to the gradient's 2-norm <= 1e-5 or 500 steps), in `jax.jit`:
         first call, its compiles, and a later call (the best of 10);
  mlp    200 L-BFGS + Zoom steps of an MLP 64-512-512-1 (tanh), 16384 rows (--quick:
         64-128-128-1, 2048 rows, 50 steps): `js.Solver(js.LBFGS(), js.Zoom(), gtol=0.0,
         ftol=0.0, max_steps=200).run(f, p, X, Y).params` in `jax.jit` against optax.lbfgs in a
         `jax.lax.fori_loop` of as many steps in `jax.jit`, the data passed as arguments: first
         call, its compiles, and a later call (the best of 3; --quick 2).

Writes first_call_<backend>.json and .md (--quick: first_call_<backend>_quick) to --out, after
each row (a run cut off keeps its rows), and prints the markdown.
"""

import argparse
import dataclasses
import json
import os
import pathlib
import platform
import subprocess
import sys
import time

from benchmarks import output

ROOT = pathlib.Path(__file__).resolve().parents[2]  # the repository: `python -m` in a child
MODULE = "benchmarks.suite.first_call"
ROWS = ("step", "rosen", "mlp")
SIDES = {  # row: its sides, each run in a child of its own
    "step": (
        "jaxsearch eqx.filter_jit",
        "jaxsearch js.jit",
        "optax eqx.filter_jit",
        "optax jax.jit",
    ),
    "rosen": ("jaxsearch jax.jit", "optax jax.jit"),
    "mlp": ("jaxsearch jax.jit", "optax jax.jit"),
}
PAIRS = {  # row: (jaxsearch side, optax side) whose ratios are reported
    "step": (
        ("jaxsearch eqx.filter_jit", "optax eqx.filter_jit"),
        ("jaxsearch js.jit", "optax jax.jit"),
    ),
    "rosen": (("jaxsearch jax.jit", "optax jax.jit"),),
    "mlp": (("jaxsearch jax.jit", "optax jax.jit"),),
}


@dataclasses.dataclass(frozen=True)
class Sizes:
    """The sizes of one run of the script."""

    step_widths: tuple[int, ...]
    step_rows: int
    step_warmup: int
    step_block: int
    step_blocks: int
    rosen_later: int  # later calls of the rosen row (the best is reported)
    mlp_widths: tuple[int, ...]
    mlp_rows: int
    mlp_steps: int
    mlp_later: int
    repeats: int


FULL = Sizes((64, 256, 1), 4096, 6, 50, 3, 10, (64, 512, 512, 1), 16384, 200, 3, 3)
QUICK = Sizes((64, 256, 1), 4096, 6, 20, 3, 10, (64, 128, 128, 1), 2048, 50, 2, 1)


# ------------------------------------------------------------------------------- the child


def child(spec: dict) -> dict:
    """One side of one row in this fresh process: JAX starts here."""
    import jax

    try:  # a persistent compilation cache would hide compiles
        jax.config.update("jax_enable_compilation_cache", False)
    except AttributeError:  # an option this jax does not know: then it has no such cache
        pass
    compiles: list[float] = []

    def listen(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(duration)

    jax.monitoring.register_event_duration_secs_listener(listen)
    sizes = Sizes(**{k: tuple(v) if isinstance(v, list) else v for k, v in spec["sizes"].items()})
    measure = {"step": child_step, "rosen": child_rosen, "mlp": child_mlp}[spec["row"]]
    result = measure(spec["side"], sizes, compiles)
    return {
        **result,
        "backend": jax.default_backend(),
        "device_kind": jax.devices()[0].device_kind,
    }


def timed_first(call, compiles: list) -> dict:
    """Wall seconds from calling `call()` to its result's `block_until_ready`, and the XLA
    backend compiles (count, seconds) on the way; the result."""
    import jax

    before = len(compiles)
    t0 = time.perf_counter()
    out = jax.block_until_ready(call())
    wall = time.perf_counter() - t0
    return {
        "first_call_s": wall,
        "compiles": len(compiles) - before,
        "backend_compile_s": sum(compiles[before:]),
    }, out


def best_of(call, reps: int) -> float:
    """The least wall seconds of `reps` calls of `call()`, each blocked until ready."""
    import jax

    walls = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(call())
        walls.append(time.perf_counter() - t0)
    return min(walls)


def mlp_problem(widths, rows: int, seed: int = 0):
    """An MLP `widths` (tanh between layers, linear output) as a list of (W, b), float32, random
    normal inputs X (rows x widths[0]) from a fixed key, targets Y = sin(sum of X's row), and
    f(params, X, Y), the mean squared error."""
    import jax
    import jax.numpy as jnp

    keys = jax.random.split(jax.random.key(seed), len(widths))
    params = [
        (
            jax.random.normal(k, (m, n), jnp.float32) / jnp.sqrt(jnp.float32(m)),
            jnp.zeros(n, jnp.float32),
        )
        for k, m, n in zip(keys[1:], widths[:-1], widths[1:], strict=True)
    ]
    X = jax.random.normal(keys[0], (rows, widths[0]), jnp.float32)
    Y = jnp.sin(X.sum(axis=1, keepdims=True))

    def f(params, X, Y):
        h = X
        for i, (W, b) in enumerate(params):
            h = h @ W + b
            if i < len(params) - 1:
                h = jnp.tanh(h)
        return jnp.mean((h - Y) ** 2)

    return jax.block_until_ready((params, X, Y)), f


def optax_update(f):
    """optax.lbfgs() and its documented step as `step(p, s, X, Y)`, not jitted."""
    import optax

    opt = optax.lbfgs()

    def step(p, s, X, Y):
        def fun(q):
            return f(q, X, Y)

        value, grad = optax.value_and_grad_from_state(fun)(p, state=s)
        updates, s = opt.update(grad, s, p, value=value, grad=grad, value_fn=fun)
        return optax.apply_updates(p, updates), s

    return opt, step


def child_step(side: str, sizes: Sizes, compiles: list) -> dict:
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    import jaxsearch as js

    (p, X, Y), f = mlp_problem(sizes.step_widths, sizes.step_rows)
    t0 = time.perf_counter()
    if side.startswith("jaxsearch"):
        solver = js.Solver(gtol=0.0, ftol=0.0, max_steps=10**6)
        state = jax.block_until_ready(solver.init(p, value_dtype=jnp.float32))

        def plain(p, s, X, Y):
            return solver.step(f, p, s, X, Y)

        step = js.jit(plain) if side.endswith("js.jit") else eqx.filter_jit(plain)
    else:
        opt, plain = optax_update(f)
        state = jax.block_until_ready(opt.init(p))
        step = jax.jit(plain) if side.endswith("jax.jit") else eqx.filter_jit(plain)
    init_s = time.perf_counter() - t0
    leaves = len(jax.tree.leaves(state))
    row, (p, state) = timed_first(lambda: step(p, state, X, Y), compiles)
    before = len(compiles)
    second, (p, state) = timed_first(lambda: step(p, state, X, Y), compiles)
    row.update(
        second_call_s=second["first_call_s"],
        second_compiles=second["compiles"],
        first_two_s=row["first_call_s"] + second["first_call_s"],
    )
    for _ in range(sizes.step_warmup - 1):
        p, state = step(p, state, X, Y)
    jax.block_until_ready((p, state))
    blocks = []
    for _ in range(sizes.step_blocks):
        t0 = time.perf_counter()
        for _ in range(sizes.step_block):
            p, state = step(p, state, X, Y)
        jax.block_until_ready((p, state))
        blocks.append(time.perf_counter() - t0)
    row.update(
        init_s=init_s,
        later_compiles=len(compiles) - before,
        later_compile_s=sum(compiles[before:]),
        per_step_ms=1e3 * min(blocks) / sizes.step_block,
        state_leaves=leaves,
        state_scalars=sum(1 for leaf in jax.tree.leaves(state) if jnp.ndim(leaf) == 0),
        parameters=sum(leaf.size for leaf in jax.tree.leaves(p)),
        loss=float(f(p, X, Y)),
    )
    if side.startswith("jaxsearch"):
        row["status"] = js.Status(int(state.status)).name
    return row


def rosen(x):
    return 100.0 * (x[1] - x[0] ** 2) ** 2 + (1.0 - x[0]) ** 2


def optax_while(fun, max_steps: int, tol: float):
    """optax.lbfgs() in the `jax.lax.while_loop` of optax's documentation: to the gradient's
    2-norm <= tol or `max_steps` steps; `solve(x0)` returns the params."""
    import jax
    import optax
    import optax.tree_utils as otu

    opt = optax.lbfgs()
    norm = getattr(otu, "tree_norm", None) or otu.tree_l2_norm  # tree_norm: optax >= 0.2.5
    value_and_grad = optax.value_and_grad_from_state(fun)

    def step(carry):
        params, state = carry
        value, grad = value_and_grad(params, state=state)
        updates, state = opt.update(grad, state, params, value=value, grad=grad, value_fn=fun)
        return optax.apply_updates(params, updates), state

    def keep_going(carry):
        _, state = carry
        count = otu.tree_get(state, "count")
        err = norm(otu.tree_get(state, "grad"))
        return (count == 0) | ((count < max_steps) & (err >= tol))

    def solve(x0):
        return jax.lax.while_loop(keep_going, step, (x0, opt.init(x0)))[0]

    return solve


def child_rosen(side: str, sizes: Sizes, compiles: list) -> dict:
    import jax
    import jax.numpy as jnp

    import jaxsearch as js

    x0 = jax.block_until_ready(jnp.asarray([-1.2, 1.0], jnp.float32))
    if side.startswith("jaxsearch"):
        call = jax.jit(lambda x: js.Solver().run(rosen, x).params)
    else:
        call = jax.jit(optax_while(rosen, 500, 1e-5))
    row, x = timed_first(lambda: call(x0), compiles)
    row["later_call_s"] = best_of(lambda: call(x0), sizes.rosen_later)
    row["x"] = [float(v) for v in x]
    row["f"] = float(rosen(x))
    return row


def child_mlp(side: str, sizes: Sizes, compiles: list) -> dict:
    import jax

    import jaxsearch as js

    (p0, X, Y), f = mlp_problem(sizes.mlp_widths, sizes.mlp_rows)
    steps = sizes.mlp_steps
    if side.startswith("jaxsearch"):
        solver = js.Solver(js.LBFGS(), js.Zoom(), gtol=0.0, ftol=0.0, max_steps=steps)
        call = jax.jit(lambda p, X, Y: solver.run(f, p, X, Y).params)
    else:
        opt, step = optax_update(f)

        def loop(p, X, Y):
            body = lambda _, carry: step(*carry, X, Y)
            return jax.lax.fori_loop(0, steps, body, (p, opt.init(p)))[0]

        call = jax.jit(loop)
    row, p = timed_first(lambda: call(p0, X, Y), compiles)
    row["later_call_s"] = best_of(lambda: call(p0, X, Y), sizes.mlp_later)
    row["loss"] = float(f(p, X, Y))
    row["parameters"] = sum(leaf.size for leaf in jax.tree.leaves(p0))
    row["steps"] = steps
    return row


# ------------------------------------------------------------------------------ the parent


def run_child(row: str, side: str, sizes: Sizes) -> dict:
    spec = {"row": row, "side": side, "sizes": dataclasses.asdict(sizes)}
    command = [sys.executable, "-m", MODULE, "--child", json.dumps(spec)]
    t0 = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    process_s = time.perf_counter() - t0
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-20:], "process_s": process_s}
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "process_s": process_s}


FIGURES = {  # row: the figures summarised over repeats (min, max)
    "step": (
        "first_call_s",
        "backend_compile_s",
        "compiles",
        "second_call_s",
        "first_two_s",
        "later_compiles",
        "per_step_ms",
        "init_s",
    ),
    "rosen": ("first_call_s", "backend_compile_s", "compiles", "later_call_s"),
    "mlp": ("first_call_s", "backend_compile_s", "compiles", "later_call_s"),
}
RATIOS = {  # row: the figures whose minima are compared, jaxsearch / optax
    "step": ("first_call_s", "backend_compile_s", "second_call_s", "first_two_s", "per_step_ms"),
    "rosen": ("first_call_s", "backend_compile_s", "later_call_s"),
    "mlp": ("first_call_s", "backend_compile_s", "later_call_s"),
}


def summarise(row: str, runs: dict) -> dict:
    """Per side, each figure's min and max over the repeats that ended; per pair, the ratio
    jaxsearch / optax of the minima."""
    summary: dict = {"sides": {}, "ratios": {}}
    for side, results in runs.items():
        good = [r for r in results if "error" not in r]
        summary["sides"][side] = {
            figure: [min(r[figure] for r in good), max(r[figure] for r in good)]
            for figure in FIGURES[row]
            if good
        } | {"ended": len(good), "repeats": len(results)}
    for ours, theirs in PAIRS[row]:
        a, b = summary["sides"][ours], summary["sides"][theirs]
        summary["ratios"][f"{ours} / {theirs}"] = {
            figure: (a[figure][0] / b[figure][0]) if b.get(figure, [0])[0] and figure in a else None
            for figure in RATIOS[row]
        }
    return summary


def measure_row(row: str, sizes: Sizes) -> dict:
    """Every side of `row`, `sizes.repeats` times, alternated: the children's answers."""
    runs: dict = {side: [] for side in SIDES[row]}
    for repeat in range(sizes.repeats):
        order = SIDES[row] if repeat % 2 == 0 else SIDES[row][::-1]
        for side in order:
            result = run_child(row, side, sizes)
            runs[side].append(result)
            shown = (
                f"error: {result['error'][-1][:120]}"
                if "error" in result
                else f"first call {result['first_call_s']:.2f} s"
            )
            print(f"  {row} | {side} | repeat {repeat + 1}: {shown}", flush=True)
    return runs


# ------------------------------------------------------------------------------ the report


def _span(pair, spec=".3g") -> str:
    """'a' where min = max to the digits shown, else 'a – b'."""
    if pair is None:
        return "—"
    low, high = (format(v, spec) for v in pair)
    return low if low == high else f"{low} – {high}"


def _int_span(pair) -> str:
    return "—" if pair is None else _span([int(v) for v in pair], "d")


def _ratio(x) -> str:
    return "—" if x is None else f"{x:.3g}"


def markdown(data: dict, meta: dict) -> str:
    lines = [
        f"# First call against optax.lbfgs ({meta.get('backend', '?')}, "
        f"{meta.get('device_kind', '?')})",
        "",
        f"{meta['cpu']}, {meta['cpu_count']} CPUs; jax {meta['versions'].get('jax')}, "
        f"optax {meta['versions'].get('optax')}, equinox {meta['versions'].get('equinox')}; "
        f"XLA_FLAGS {meta['xla_flags']!r}; {meta['size_set']} sizes, "
        f"{meta['sizes']['repeats']} repeat(s); {meta['started']} to {meta.get('finished')}, "
        f"load average {meta['load_before']} before, {meta.get('load_average')} after; "
        f"`{meta['command']}`",
        "",
        "Each side in a fresh process of its own, the sides alternated; each figure is the "
        "minimum – maximum over the repeats (one number where they agree to 3 digits). first "
        "call: from calling to `block_until_ready`, tracing and compiling included; compile: "
        "XLA backend compiles in the first call (count, seconds). Ratios: jaxsearch / optax of "
        "the minima.",
        "",
    ]
    sizes = meta["sizes"]
    for row, runs in data.items():
        if "error" in runs:
            lines += [f"## {row}", "", f"error: {runs['error']}", ""]
            continue
        summary = summarise(row, runs)
        sides = summary["sides"]
        if row == "step":
            widths = "-".join(map(str, sizes["step_widths"]))
            lines += [
                f"## Training step: MLP {widths} (tanh), {sizes['step_rows']} rows",
                "",
                "second call: the next step, timed as the first (three scalars of "
                "`opt.init`'s state are weakly typed and those of the updated state not, so "
                "optax's step compiles again; first two calls: their sum); ms per step: the "
                f"best of {sizes['step_blocks']} blocks of {sizes['step_block']} steps after "
                f"{sizes['step_warmup']} warm-up steps (the "
                "second call the first of them); later compiles: from the second call on; "
                "init: `solver.init` / `opt.init`, before the first call and not in it.",
                "",
                "| step | first call s | compiles | compile s | second call s | later compiles "
                "| ms per step | init s | state leaves (scalars) |",
                "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
            ]
            for side, s in sides.items():
                if not s.get("ended"):
                    lines.append(f"| {side} | error | | | | | | | |")
                    continue
                first = next(r for r in runs[side] if "error" not in r)
                lines.append(
                    f"| {side} | {_span(s['first_call_s'])} | {_int_span(s['compiles'])} | "
                    f"{_span(s['backend_compile_s'])} | {_span(s['second_call_s'])} | "
                    f"{_int_span(s['later_compiles'])} | {_span(s['per_step_ms'])} | "
                    f"{_span(s['init_s'])} | "
                    f"{first['state_leaves']} ({first['state_scalars']}) |"
                )
            lines += [
                "",
                "| jaxsearch / optax | first call | compile s | second call | first two calls "
                "| ms per step |",
                "| --- | ---: | ---: | ---: | ---: | ---: |",
            ]
            for pair, r in summary["ratios"].items():
                lines.append(
                    f"| {pair} | {_ratio(r['first_call_s'])} | {_ratio(r['backend_compile_s'])} "
                    f"| {_ratio(r['second_call_s'])} | {_ratio(r['first_two_s'])} "
                    f"| {_ratio(r['per_step_ms'])} |"
                )
        else:
            if row == "rosen":
                title = "## A whole run: 2-D Rosenbrock from (-1.2, 1.0), float32, in `jax.jit`"
                note = (
                    f"later call: the best of {sizes['rosen_later']}. jaxsearch: `js.Solver()`'s "
                    "defaults (|g|_inf <= 1e-5, scipy's ftol); optax: optax's documented "
                    "while loop to |g|_2 <= 1e-5 or 500 steps. f: at the params returned."
                )
            else:
                widths = "-".join(map(str, sizes["mlp_widths"]))
                title = (
                    f"## {sizes['mlp_steps']} L-BFGS + Zoom steps: MLP {widths} (tanh), "
                    f"{sizes['mlp_rows']} rows, in `jax.jit`"
                )
                note = (
                    f"later call: the best of {sizes['mlp_later']}; gtol = ftol = 0, so each "
                    "run takes its budget; optax: a `jax.lax.fori_loop` of as many documented "
                    "updates. loss: at the params returned."
                )
            value = "f" if row == "rosen" else "loss"
            lines += [
                title,
                "",
                note,
                "",
                f"| run | first call s | compiles | compile s | later call s | {value} |",
                "| --- | ---: | ---: | ---: | ---: | ---: |",
            ]
            for side, s in sides.items():
                if not s.get("ended"):
                    lines.append(f"| {side} | error | | | | |")
                    continue
                first = next(r for r in runs[side] if "error" not in r)
                lines.append(
                    f"| {side} | {_span(s['first_call_s'])} | {_int_span(s['compiles'])} | "
                    f"{_span(s['backend_compile_s'])} | {_span(s['later_call_s'])} | "
                    f"{first[value]:.4g} |"
                )
            r = next(iter(summary["ratios"].values()))
            lines += [
                "",
                f"jaxsearch / optax: first call {_ratio(r['first_call_s'])}, compile "
                f"{_ratio(r['backend_compile_s'])}, later call {_ratio(r['later_call_s'])}.",
            ]
        errors = [
            f"{side}, repeat {i + 1}: {' / '.join(r['error'][-3:])}"
            for side, results in runs.items()
            for i, r in enumerate(results)
            if "error" in r
        ]
        if errors:
            lines += ["", "Errors:", *[f"- {e}" for e in errors]]
        lines.append("")
    return "\n".join(lines)


def versions() -> dict:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for pkg in ("jax", "jaxlib", "equinox", "optax", "numpy"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def cpu_model() -> str:
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small MLP, 1 repeat")
    parser.add_argument("--repeats", type=int, default=None, help="children per side (3; quick 1)")
    parser.add_argument("--only", default=",".join(ROWS), help="comma list of " + ",".join(ROWS))
    parser.add_argument("--out", default=str(output.RESULTS), help="output directory")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    rows = [r.strip() for r in args.only.split(",") if r.strip()]
    unknown = sorted(set(rows) - set(ROWS))
    if unknown:
        parser.error(f"unknown rows {unknown}; choose from {', '.join(ROWS)}")
    sizes = QUICK if args.quick else FULL
    if args.repeats:
        sizes = dataclasses.replace(sizes, repeats=args.repeats)
    given = sys.argv[1:] if argv is None else argv
    meta = {
        "size_set": "quick" if args.quick else "full",
        "sizes": dataclasses.asdict(sizes),
        "command": " ".join(["python -m", MODULE, *given]),
        "versions": versions(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "jax_platforms": os.environ.get("JAX_PLATFORMS", ""),
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_before": " ".join(f"{x:.1f}" for x in os.getloadavg()),
    }
    data: dict = {}
    text = ""
    for row in rows:
        print(f"[{row}]", flush=True)
        data[row] = measure_row(row, sizes)
        for result in (r for results in data[row].values() for r in results):
            if "backend" in result and "backend" not in meta:
                meta["backend"], meta["device_kind"] = result["backend"], result["device_kind"]
        meta["finished"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        meta["load_average"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
        text = markdown(data, meta)
        summaries = {r: summarise(r, data[r]) for r in data}
        stem = output.stem(
            "first_call", meta.get("backend", "unknown"), "quick" if args.quick else None
        )
        output.write(args.out, stem, text, {"meta": meta, "summary": summaries, "runs": data})
    print("\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
