"""Where does a compiled run's time go? A `jax.profiler` trace of one call, summed by event
name.
Date: 2026-12-07, commit 2848ffe

    python -m benchmarks.studies.trace_summary --out /tmp/trace  # 2-D Rosenbrock and n = 1e6

For each program (the default jaxsearch `run` on extended Rosenbrock, float32, at n = 2 to
|g|_inf <= 1e-5 and at n = 1e6 to 1e-3, each under `jax.jit`, against optax.lbfgs's jitted loop
to the same gtol: engine.py's `small` and `large` rows), one warm call is traced
(`create_perfetto_trace=True`) and its events summed by name per lane: device kernels and
copies (on a GPU: the stream lanes) and host threads (XLA's thunk executor, the while loop's
predicate round trips). A device event named after an HLO instruction is given the file and
function that traced it (from the compiled program's stack frames). Prints, per program: the
call's wall, each lane's busy time (union of its events), and the top events by total time, so
that the launch and synchronisation overhead (wall minus device busy) is visible. Writes
trace_<backend>.md.

    python -m benchmarks.studies.trace_summary --compile-of 20 --out /tmp/trace

instead traces the compile (XLA's passes, as the compiler's own trace events) of the default
`run` in jit at n = 2^20 and of optax's loop at that n, and lists the events by total time:
which pass a compile's seconds go to, and whether that grows with n. Writes
compile_trace_<backend>_<e>.md.

    python -m benchmarks.studies.trace_summary --networks [--quick] --out /tmp/trace

traces networks.py's training steps (a block of 5 steps of each) and its MLP runs instead
(trace_networks_<backend>.md).
"""

import argparse
import collections
import gzip
import json
import pathlib
import re
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxsearch as js
from benchmarks import output, peers as peers_mod, problems as problems_mod


def programs():
    """name -> zero-argument call."""
    out = {}
    fn = problems_mod._ext_rosenbrock
    for n, gtol in ((2, 1e-5), (1_000_000, 1e-3)):
        x0 = jnp.asarray(np.tile(np.float32([-1.2, 1.0]), n // 2))
        solver = js.Solver(gtol=gtol, ftol=0.0, max_steps=1000)
        run = jax.jit(lambda x, solver=solver: solver.run(fn, x, None).params)
        out[f"jaxsearch n={n}"] = with_hlo(lambda run=run, x0=x0: run(x0), run, x0)
        cfg = peers_mod.Config(gtol=gtol, ftol=0.0, max_steps=1000)
        solve, arguments = peers_mod.optax_lbfgs(fn, x0, None, cfg).program
        out[f"optax n={n}"] = with_hlo(
            lambda solve=solve, arguments=arguments: solve(*arguments), solve, *arguments
        )
    return out


def with_hlo(call, jitted, *arguments):
    """`call`, with `call.hlo()` the optimised HLO text of `jitted` on `arguments`, so that
    the device events (named after the HLO's instructions) can be traced to their source."""
    call.hlo = lambda: jitted.lower(*arguments).compile().as_text()
    return call


def instruction_sources(text: str) -> dict[str, str]:
    """HLO instruction name -> "file:function" where it was traced (engine.py's
    `kernel_source`: a jaxsearch file by its module path, "none" where XLA made it)."""
    import engine

    frames = engine._frame_files(text)
    found = {}
    for line in text.splitlines():
        named = re.match(r"\s*(?:ROOT )?%([\w.\-]+) = ", line)
        if named:
            found[named.group(1)] = engine.kernel_source(line, frames)
    return found


def network_programs(quick: bool):
    """name -> zero-argument call: networks.py's training steps (a block of 5 steps, each
    dispatched) and its MLP runs (the whole run in `jax.jit`)."""
    import networks

    params, _, _, steps_of = networks.training_steps(quick)
    out = {}
    for name, (step, state) in steps_of.items():

        def block(step=step, state=state):
            p, s = params, state
            for _ in range(5):
                p, s = step(p, s)
            return p, s

        out[f"training step, {name} (5 steps)"] = block
    mlp_params, steps, ours, theirs = networks.mlp_runs(quick)
    out[f"MLP run, jaxsearch ({steps} steps)"] = lambda: ours(mlp_params)
    solve, arguments = theirs.program
    out[f"MLP run, optax ({steps} steps)"] = lambda: solve(*arguments)
    return out


def load_events(directory: pathlib.Path):
    path = next(directory.rglob("*.trace.json.gz"))
    with gzip.open(path) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    names = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            names[e["pid"]] = e.get("args", {}).get("name", str(e["pid"]))
    # Python frames of the profiler's own call ("$file.py:line name") are not the program's.
    keep = [e for e in events if e.get("ph") == "X" and not e.get("name", "").startswith("$")]
    return keep, names


def busy_us(intervals) -> float:
    total, end = 0.0, -np.inf
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def compile_programs(exponent: int):
    """name -> the lowered program, not compiled: the default run and optax's at n = 2^e."""
    fn = problems_mod._ext_rosenbrock
    n = 1 << exponent
    x0 = jnp.asarray(np.tile(np.float32([-1.2, 1.0]), n // 2))
    solver = js.Solver(js.LBFGS(memory_size=10), gtol=0.0, ftol=0.0, max_steps=30)
    cfg = peers_mod.Config(gtol=0.0, ftol=0.0, max_steps=30)
    solve, arguments = peers_mod.optax_lbfgs(fn, x0, None, cfg).program
    return {
        f"jaxsearch n=2^{exponent}": jax.jit(lambda x: solver.run(fn, x, None)).lower(x0),
        f"optax n=2^{exponent}": solve.lower(*arguments),
    }


def summarise_compile(name, lowered, top: int) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        directory = pathlib.Path(tmp)
        with jax.profiler.trace(str(directory), create_perfetto_trace=True):
            start = time.perf_counter()
            lowered.compile()
            wall = time.perf_counter() - start
        events, _ = load_events(directory)
    totals = collections.Counter()
    counts = collections.Counter()
    for e in events:
        totals[e["name"]] += e.get("dur", 0)
        counts[e["name"]] += 1
    lines = [
        f"## {name}",
        "",
        f"compile wall: {wall:.2f} s; {len(events)} events",
        "",
        "| event (nested: a pass's time includes its sub-passes') | count | total s |",
        "| --- | ---: | ---: |",
    ]
    for ev, total in totals.most_common(top):
        lines.append(f"| `{ev[:90]}` | {counts[ev]} | {total / 1e6:.3f} |")
    return lines + [""]


def summarise(name, call, top: int) -> list[str]:
    jax.block_until_ready(call())  # compiled and warm
    jax.block_until_ready(call())
    sources = instruction_sources(call.hlo()) if hasattr(call, "hlo") else {}
    with tempfile.TemporaryDirectory() as tmp:
        directory = pathlib.Path(tmp)
        with jax.profiler.trace(str(directory), create_perfetto_trace=True):
            start = time.perf_counter()
            jax.block_until_ready(call())
            wall = time.perf_counter() - start
        events, names = load_events(directory)
    lanes = collections.defaultdict(list)
    for e in events:
        lanes[names.get(e["pid"], str(e["pid"]))].append(e)
    lines = [f"## {name}", "", f"traced call wall: {wall * 1e3:.3f} ms", ""]
    for lane, evs in sorted(lanes.items(), key=lambda kv: -sum(e.get("dur", 0) for e in kv[1])):
        device = "/device:" in lane or "GPU" in lane or "Stream" in lane
        totals = collections.Counter()
        counts = collections.Counter()
        for e in evs:
            totals[e["name"]] += e.get("dur", 0)
            counts[e["name"]] += 1
        span = busy_us((e["ts"], e["ts"] + e.get("dur", 0)) for e in evs)
        lines += [
            f"### {lane}{' (device)' if device else ''}: {len(evs)} events, busy "
            f"{span / 1e3:.3f} ms",
            "",
            "| event | count | total ms | mean us | traced at |",
            "| --- | ---: | ---: | ---: | --- |",
        ]
        for ev, total in totals.most_common(top):
            source = sources.get(ev, "") if device else ""
            lines.append(
                f"| `{ev[:80]}` | {counts[ev]} | {total / 1e3:.3f} | {total / counts[ev]:.2f} "
                f"| {source} |"
            )
        lines.append("")
    return lines


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--out", default=str(output.RESULTS))
    p.add_argument("--compile-of", type=int, default=None, metavar="E", help="n = 2^E")
    p.add_argument("--networks", action="store_true", help="networks.py's steps and MLP runs")
    p.add_argument("--quick", action="store_true", help="with --networks: their small sizes")
    args = p.parse_args(argv)
    device = jax.devices()[0]
    shown = " ".join(sys.argv[1:] if argv is None else argv)
    lines = [
        f"# Where the time goes, {jax.default_backend()} "
        f"({getattr(device, 'device_kind', device)})",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; jax {jax.__version__}; "
        f"command: `python -m benchmarks.studies.trace_summary {shown}`",
        "",
    ]
    compiling = args.compile_of is not None
    if compiling:
        found = compile_programs(args.compile_of)
    else:
        found = network_programs(args.quick) if args.networks else programs()
    for name, call in found.items():
        try:
            if compiling:
                lines += summarise_compile(name, call, max(args.top, 30))
            else:
                lines += summarise(name, call, args.top)
        except Exception as error:
            lines += [f"## {name}", "", f"failed: {type(error).__name__}: {error}"[:300], ""]
        print("\n".join(lines[-3:]), flush=True)
    text = "\n".join(lines) + "\n"
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    backend = jax.default_backend()
    name = f"compile_trace_{backend}_{args.compile_of}" if compiling else f"trace_{backend}"
    if args.networks:
        name = f"trace_networks_{backend}"
    (out / f"{name}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
