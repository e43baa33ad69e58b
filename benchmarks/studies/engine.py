"""What does the compiled engine around the algorithms cost, side by side with optax.lbfgs, in
one run?
Date: 2026-12-07, commit bd53de1

    python -m benchmarks.studies.engine          # CPU: n = 1e5 / 1e6 rows; GPU: 1e6 and 1e7 too
    python -m benchmarks.studies.engine --quick  # smaller sizes (a couple of minutes on 2 CPUs)
    python -m benchmarks.studies.engine --out /tmp/engine

Rows (issue 17's table), each a ratio measured in this process:

  control flow   while / cond / scan primitives in the jaxpr of `Solver(LBFGS(), Zoom()).run`
                 (a scan counted once per trip; L-BFGS in the form "auto" picks here), and
                 the round trips to the host that one evaluation costs where the step goes
                 on (the while's predicate and every `lax.cond` at the top of its body) and
                 at a step boundary (every cond);
  bytes          XLA's bytes accessed by one jitted L-BFGS `step` (one trial), n = 1e5
                 float32, over the floor (4m + 8) 4n; optax's update alongside; and both
                 again with the state donated to the jitted step;
  compile        compile of `run` on sum(x^2), n = 1000 float32, over optax.lbfgs's compile in
                 its documented `lax.while_loop`: `run` called as it is (its own programs, with
                 the options "auto" picks, the lean ones on a CPU) and inside a caller's
                 `jax.jit` (one program, XLA's defaults); and the kernels (fusions) and copies
                 in the optimised programs (`anatomy`): XLA's CPU compile time goes with the
                 kernels. A table beside it: each solver's backend compiles of a first call
                 (number and seconds, `jax.monitoring`) and its main program's kernels and
                 copies, fresh_fit.py's optimistix peers (`optx.minimise` with
                 OptaxMinimiser(optax.lbfgs()) and with BFGS, rtol 0, atol = gtol) included,
                 as fresh_fit calls them and inside a caller's `jax.jit`;
  compile_pairs  the compile row's problem under a caller's `jax.jit`, per direction x line
                 search (FixedStep and NonlinearCG give the engine's share): backend compile s;
  compile_glm    that table for fresh_fit.py's Poisson GLM (10,000 x 40 x 10 neurons, ridge
                 0.1, float32, Equinox-module params, tol 1e-4): jaxsearch as fresh_fit runs it
                 and in `jax.jit`, optax.lbfgs's loop on the module, the optimistix peers;
  small          2-D Rosenbrock `run` under `jax.jit`, wall (min over repeats), over optax's
                 jitted loop to the same gtol: the jit returning the whole `Result` (its
                 state included), and returning params and num_steps, as optax's loop does;
                 the flops XLA's cost analysis counts in both programs (jax's CPU client runs
                 one of fewer than 1000 on the calling thread, a larger one on a worker
                 thread), and the row again in a fresh process that runs every program on the
                 calling thread (`jax_cpu_enable_async_dispatch` off); and both programs'
                 kernels and copies (`anatomy`);
  large          extended Rosenbrock n = 1e6 float32 to |g|_inf <= 1e-3, wall, over optax;
  pinn           the L-BFGS phase of a PINN (Equinox MLP 1-32-32-1, loss with second
                 derivatives), 200 steps each, wall, over optax;
  heavy          speed.py's deep network: compile of `run`, and of init + a jitted step to its
                 2nd call, over the objective's own value-and-grad compile;
  memory         the L-BFGS run's peak (XLA memory analysis) in n-vectors, m = 10, against
                 2m + 6;
  variants       L-BFGS's forms inside the engine: the two-loop recursion (`fori_loop`s, the
                 CPU's default), the compact form (`LBFGS(form="compact")`, the default
                 elsewhere) and the two-loop recursion unrolled
                 (benchmarks/studies/unrolled_lbfgs.py): control flow, bytes, compile, and the
                 2-D and extended Rosenbrock walls.

Writes engine_<backend>.json and engine_<backend>.md to --out and prints the markdown.
"""

import argparse
import json
import pathlib
import platform
import re
import subprocess
import sys
import time

import equinox as eqx
import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jcore

import jaxsearch as js
from benchmarks import output, peers as peers_mod, problems as problems_mod
from benchmarks.studies.unrolled_lbfgs import UnrolledLBFGS
from benchmarks.suite import (
    fresh_fit,
    speed,  # its measuring helpers; it also switches the compile cache off
)
from jaxsearch._compile import _programs

ROOT = pathlib.Path(__file__).resolve().parents[2]  # the repository: `python -m` in a child

CONTROL_FLOW = ("while", "cond", "scan")
INLINE_FLOPS = 1000  # XLA's PjRt CPU client: a "cheap" program runs on the calling thread
TARGETS = {
    "control_flow": 12,
    "bytes": 1.3,
    "compile": 0.5,
    "small": 0.5,
    "large": 0.6,
    "pinn": 0.8,
    "heavy": 1.15,
    "memory": 2 * speed.MEMORY_SIZE + 6,
}


# ------------------------------------------------------------------------------ structure


def _subjaxprs(eqn):
    for value in eqn.params.values():
        for item in value if isinstance(value, list | tuple) else (value,):
            if isinstance(item, jcore.ClosedJaxpr):
                yield item.jaxpr
            elif isinstance(item, jcore.Jaxpr):
                yield item


def count_control_flow(jaxpr, trips: int = 1) -> dict[str, int]:
    """while / cond / scan equations in `jaxpr` and all it nests; a scan's body is counted once
    per trip of the scan (its length), as is the scan itself."""
    counts = dict.fromkeys(CONTROL_FLOW, 0)
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        inner = trips * (eqn.params.get("length", 1) if name == "scan" else 1)
        if name in counts:
            counts[name] += inner
        for sub in _subjaxprs(eqn):
            for key, value in count_control_flow(sub, inner).items():
                counts[key] += value
    return counts


def _top_level_conds(jaxpr) -> int:
    return sum(eqn.primitive.name == "cond" for eqn in jaxpr.eqns)


def _outermost_while(jaxpr):
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "while":
            return eqn
        for sub in _subjaxprs(eqn):
            found = _outermost_while(sub)
            if found is not None:
                return found
    return None


def round_trips(jaxpr) -> dict:
    """The host round trips of one iteration of the outermost while loop in `jaxpr` (inside
    jit and custom_jvp calls): on the way (its predicate and the conds at the top of its
    body) and at most (every control-flow primitive its body nests, a scan once per trip)."""
    loop = _outermost_while(jaxpr)
    if loop is None:
        return {"per_evaluation": None, "at_boundary": None}
    body = loop.params["body_jaxpr"].jaxpr
    nested = count_control_flow(body)
    return {"per_evaluation": 1 + _top_level_conds(body), "at_boundary": 1 + sum(nested.values())}


def structure(solver: js.Solver) -> dict:
    jaxpr = jax.make_jaxpr(lambda x: solver.run(problems_mod._ext_rosenbrock, x, None).params)(
        jnp.zeros(2, jnp.float32)
    ).jaxpr
    counts = count_control_flow(jaxpr)
    return {**counts, "total": sum(counts.values()), **round_trips(jaxpr)}


# ------------------------------------------------------------------------------ timing


def min_wall(call, reps: int) -> float:
    return min(speed.wall_times(call, reps))


def ext_rosenbrock_x0(n: int):
    return jnp.asarray(np.tile(np.float32([-1.2, 1.0]), n // 2))


def small(reps: int, direction=None) -> dict:
    """2-D Rosenbrock in float32 under jax.jit, min wall: jaxsearch against optax's loop."""
    fn, x0 = problems_mod._ext_rosenbrock, ext_rosenbrock_x0(2)
    cfg = peers_mod.Config(gtol=1e-5, ftol=0.0, max_steps=1000)
    direction = js.LBFGS() if direction is None else direction
    solver = js.Solver(direction, js.Zoom(), gtol=cfg.gtol, ftol=0.0, max_steps=cfg.max_steps)
    ours = jax.jit(lambda x: solver.run(fn, x, None))

    @jax.jit
    def ours_like_optax(x):  # the two outputs optax's loop returns: params and a count
        result = solver.run(fn, x, None)
        return result.params, result.num_steps

    optax_call = peers_mod.optax_lbfgs(fn, x0, None, cfg)
    result = ours(x0)
    optax_solve, optax_arguments = optax_call.program
    row = {
        "jaxsearch_s": min_wall(lambda: ours(x0), reps),
        "jaxsearch_params_s": min_wall(lambda: ours_like_optax(x0), reps),
        "optax_s": min_wall(optax_call, reps),
        "evals": int(result.num_fun_evals),
        "steps": int(result.num_steps),
        "outputs": len(jax.tree.leaves(result)),
        "jaxsearch_flops": xla_flops(ours_like_optax, x0),
        "optax_flops": xla_flops(optax_solve, *optax_arguments),
        "jaxsearch_anatomy": anatomy(ours_like_optax, x0),
        "optax_anatomy": anatomy(optax_solve, *optax_arguments),
    }
    row["ratio"] = row["jaxsearch_s"] / row["optax_s"]
    row["ratio_params_only"] = row["jaxsearch_params_s"] / row["optax_s"]
    row["per_evaluation_us"] = 1e6 * row["jaxsearch_s"] / row["evals"]
    return row


def anatomy(jitted, *arguments) -> dict:
    """The kernels (fusion instructions) and copies in the optimised HLO of `jitted` on
    `arguments`, outside the fused computations: each is a thunk XLA runs where its
    computation runs (a loop's body at every trip), and XLA's CPU compile time goes with the
    kernels, each compiled through its own MLIR and LLVM pipelines (docs/benchmarks.md,
    "What bounds the rows that miss"). "by_source" counts the kernels by the source file
    that made each (`kernel_source`)."""
    text = jitted.lower(*arguments).compile().as_text()
    fused = set(re.findall(r"(?:calls|to_apply)=(%[\w.\-]+)", text))
    frames = _frame_files(text)
    counts = {"kernels": 0, "copies": 0}
    by_source: dict[str, int] = {}
    inside = False
    for line in text.splitlines():
        header = re.match(r"^(?:ENTRY )?(%[\w.\-]+) ", line)
        if header and line.rstrip().endswith("{"):
            inside = header.group(1) in fused
        elif not inside:
            counts["copies"] += " copy(" in line
            if " fusion(" in line:
                counts["kernels"] += 1
                source = kernel_source(line, frames)
                by_source[source] = by_source.get(source, 0) + 1
    return {**counts, "by_source": dict(sorted(by_source.items(), key=lambda kv: -kv[1]))}


def _frame_files(text: str) -> dict[int, tuple[str, str]]:
    """Stack frame id -> (file, function) of its location, from the tables XLA prints at the
    end of an HLO module (FileNames, FunctionNames, FileLocations, StackFrames)."""

    def table(name):
        found = re.search(rf"^{name}\n((?:\d+ .*\n?)*)", text, re.M)
        rows = found.group(1).splitlines() if found else []
        return dict((int(k), v) for k, v in (row.split(" ", 1) for row in rows))

    files, functions = table("FileNames"), table("FunctionNames")
    locations = table("FileLocations")
    frames = {}
    for frame, row in table("StackFrames").items():
        location = locations[int(re.search(r"file_location_id=(\d+)", row).group(1))]
        file_id = int(re.search(r"file_name_id=(\d+)", location).group(1))
        function_id = int(re.search(r"function_name_id=(\d+)", location).group(1))
        frames[frame] = (files[file_id].strip('"'), functions[function_id].strip('"'))
    return frames


def kernel_source(line: str, frames: dict[int, tuple[str, str]]) -> str:
    """Where a kernel's instruction was traced, as "file:function" of its innermost frame
    (jax keeps the user's frames, not its own): a file under `jaxsearch/` by its module
    path (e.g. "_linesearch/_zoom.py:Zoom.step"), another by its name; "none" for a kernel
    with no frame (made by XLA, e.g. a loop's carry)."""
    found = re.search(r"stack_frame_id=(\d+)", line)
    path, function = frames.get(int(found.group(1)), ("", "")) if found else ("", "")
    if not path:
        return "none"
    module = path.rsplit("/jaxsearch/", 1)[1] if "/jaxsearch/" in path else path.split("/")[-1]
    return f"{module}:{function}"


def xla_flops(jitted, *arguments) -> float | None:
    """The flops XLA's cost analysis counts in the compiled program (a loop's body once, a
    conditional's costliest branch). jax's CPU client runs a program of fewer than
    `INLINE_FLOPS` on the calling thread and a larger one on a worker thread."""
    return jitted.lower(*arguments).compile().cost_analysis().get("flops")


def small_synchronous(reps: int) -> dict | None:
    """`small` in a fresh process whose CPU client runs every program on the calling thread
    (`jax_cpu_enable_async_dispatch` off): what the hand-off to a worker thread costs the 2-D
    row. None off a CPU."""
    if jax.default_backend() != "cpu":
        return None
    command = [sys.executable, "-m", "benchmarks.studies.engine", "--small-synchronous"]
    done = subprocess.run(
        [*command, str(reps)], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def large(n: int, reps: int, direction=None) -> dict:
    """Extended Rosenbrock to |g|_inf <= 1e-3 in float32, wall: jaxsearch against optax."""
    fn, x0 = problems_mod._ext_rosenbrock, ext_rosenbrock_x0(n)
    cfg = peers_mod.Config(gtol=1e-3, ftol=0.0, max_steps=300)
    solver = js.Solver(direction, gtol=cfg.gtol, ftol=0.0, max_steps=cfg.max_steps)
    ours = jax.jit(lambda x: solver.run(fn, x, None))
    result = jax.block_until_ready(ours(x0))
    row = {
        "n": n,
        "jaxsearch_s": min_wall(lambda: ours(x0), reps),
        "evals": int(result.num_fun_evals),
        "steps": int(result.num_steps),
        "status": js.Status(int(result.status)).name,
    }
    if direction is None:
        optax_call = peers_mod.optax_lbfgs(fn, x0, None, cfg)
        row["optax_s"] = min_wall(optax_call, reps)
        row["optax_steps"] = optax_call().iterations
        row["ratio"] = row["jaxsearch_s"] / row["optax_s"]
    row["per_step_us"] = 1e6 * row["jaxsearch_s"] / max(row["steps"], 1)
    return row


def first_call(call, program=None) -> dict:
    """The compile of a whole minimisation `call()` (`speed.compile_whole_run`): the XLA
    backend compiles of its first call (`jax.monitoring`'s
    `/jax/core/compile/backend_compile_duration`: their number and seconds), its wall less the
    second call's, the second call's compiles (0 where the first compiled everything); and
    `anatomy(*program)` of `program`, a (jitted, arguments) pair, where given."""
    whole = speed.compile_whole_run(call)
    row = {
        "compiles": whole["first_call"]["compiles"],
        "backend_compile_s": whole["first_call"]["backend_compile_s"],
        "compile_s": whole["compile_s"],
        "second_call_compiles": whole["second_call"]["compiles"],
    }
    if program is not None:
        jitted, arguments = program
        row["anatomy"] = anatomy(jitted, *arguments)
    return row


RUN_PROGRAMS = ("compiled_run",)  # `run`'s own program (the loop), by function


def _abstract(tree):
    return jax.tree.map(
        lambda x: (
            jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
            if isinstance(x, jax.Array)
            else x
        ),
        tree,
    )


def first_call_as_called(call) -> dict:
    """`first_call` of a jaxsearch `run` called as it is, outside any trace: its own programs,
    compiled as `compiler_options="auto"` chooses (`jaxsearch._compile._programs`), each
    recorded where `_programs.call` compiles it (the function `_programs._compiled` jits, with
    its options, and the arguments) and its `anatomy` taken after the timed calls; "anatomy"
    is the run's program's (the loop), "programs" every program's by function."""
    recorded = []
    compiled = _programs._compiled

    def recording(fun, filtered, donated, options, static_argnums):
        jitted = compiled(fun, filtered, donated, options, static_argnums)

        def called(*arguments):
            kept = arguments
            if not filtered:  # avals only: a donated buffer is gone once the call returns
                kept = tuple(
                    a if i in static_argnums else _abstract(a) for i, a in enumerate(arguments)
                )
            recorded.append((fun.__name__, options == _programs.LEAN_ITEMS, jitted, kept))
            return jitted(*arguments)

        return called

    _programs._compiled = recording
    try:
        row = first_call(call)
    finally:
        _programs._compiled = compiled
    programs = {}
    for name, lean, jitted, arguments in recorded:
        if name not in programs:
            programs[name] = {**anatomy(jitted, *arguments), "lean_options": lean}
    row["programs"] = programs
    row["anatomy"] = next((programs[n] for n in RUN_PROGRAMS if n in programs), None)
    return row


def optimistix_in_jit(kind: str, fn, tol: float):
    """`optx.minimise` as fresh_fit.py calls it for `kind` ("optx+optax" or "optx-bfgs",
    rtol 0, atol `tol`, fn(params, *args)), inside a caller's `jax.jit`, returning the params:
    fresh_fit's `fit_traced` for "optx+optax", the same call with `optx.BFGS` for the other."""
    if kind == "optx+optax":
        return jax.jit(lambda p, X, y: fresh_fit.fit_traced(kind, fn, p, X, y, tol))
    import optimistix as optx

    minimiser = optx.BFGS(rtol=0.0, atol=tol)

    @jax.jit
    def solve(p, X, y):
        return optx.minimise(
            lambda q, args: fn(q, *args),
            minimiser,
            p,
            (X, y),
            max_steps=fresh_fit.MAX_STEPS,
            throw=False,
        ).value

    return solve


def optimistix_peers(fn, params, X, y, tol: float) -> dict:
    """fresh_fit.py's optimistix peers on fn(params, X, y): each as fresh_fit calls it
    (`fresh_fit.fit`: `optx.minimise` under its own `eqx.filter_jit`), compiles only, and
    inside a caller's `jax.jit` (`optimistix_in_jit`), compiles and `anatomy`."""
    rows = {}
    for kind in ("optx+optax", "optx-bfgs"):
        rows[kind] = first_call(lambda kind=kind: fresh_fit.fit(kind, fn, params, X, y, tol))
        solve = optimistix_in_jit(kind, fn, tol)
        rows[f"{kind} in jax.jit"] = first_call(
            lambda solve=solve: jax.block_until_ready(solve(params, X, y)), (solve, (params, X, y))
        )
    return rows


def _ratios(solvers: dict, base: str = "optax.lbfgs loop") -> dict:
    """Each solver's backend compile seconds and kernels over `base`'s."""
    theirs = solvers.get(base, {})
    for row in solvers.values():
        if "backend_compile_s" in row and theirs.get("backend_compile_s"):
            row["compile_vs_optax"] = row["backend_compile_s"] / theirs["backend_compile_s"]
        ours, base_counts = row.get("anatomy"), theirs.get("anatomy")
        if ours and base_counts and base_counts["kernels"]:
            row["kernels_vs_optax"] = ours["kernels"] / base_counts["kernels"]
    return solvers


def compile_small(direction=None, optimistix: bool = True) -> dict:
    """Compile of `run` on sum(x^2), n = 1000 float32, against optax's documented loop: `run`
    called as it is (its own programs, compiled with
    `jaxsearch._compile._programs.LEAN_OPTIONS` on a CPU) and inside a caller's `jax.jit`
    (one program, XLA's default options); with `optimistix`, fresh_fit.py's optimistix peers
    too (`optimistix_peers`, atol = gtol).
    "solvers" holds each one's `first_call`."""
    x0 = jnp.ones(1000, jnp.float32)
    cfg = peers_mod.Config(gtol=1e-6, ftol=0.0, max_steps=100)
    solver = js.Solver(direction, gtol=cfg.gtol, ftol=0.0, max_steps=cfg.max_steps)
    fn = speed.sum_of_squares
    in_jit = jax.jit(lambda x: solver.run(fn, x, None).params)
    optax_call = peers_mod.optax_lbfgs(fn, x0, None, cfg)
    solvers = {
        "jaxsearch run": first_call_as_called(peers_mod._jaxsearch(solver, fn, x0, None, cfg)),
        "jaxsearch run in jax.jit": first_call(
            lambda: jax.block_until_ready(in_jit(x0)), (in_jit, (x0,))
        ),
        "optax.lbfgs loop": first_call(optax_call, optax_call.program),
    }
    if optimistix:

        def unpacked(x, X, y):  # fresh_fit's fn(params, X, y); no data here
            return fn(x, None)

        solvers.update(optimistix_peers(unpacked, x0, None, None, cfg.gtol))
    ours, ours_in_jit = solvers["jaxsearch run"], solvers["jaxsearch run in jax.jit"]
    theirs = solvers["optax.lbfgs loop"]
    return {
        "jaxsearch_s": ours["compile_s"],
        "jaxsearch_in_jit_s": ours_in_jit["compile_s"],
        "optax_s": theirs["compile_s"],
        "ratio": ours["compile_s"] / theirs["compile_s"],
        "ratio_in_jit": ours_in_jit["compile_s"] / theirs["compile_s"],
        "jaxsearch_in_jit_anatomy": ours_in_jit["anatomy"],
        "optax_anatomy": theirs["anatomy"],
        "solvers": _ratios(solvers),
    }


PAIR_DIRECTIONS = ("LBFGS", "BFGS", "NonlinearCG", "Gradient")
PAIR_SEARCHES = ("Zoom", "HagerZhang", "Backtracking", "FixedStep")


def compile_pairs() -> dict:
    """What each part of the program costs to compile: the compile row's problem (sum(x^2),
    n = 1000 float32) under a caller's `jax.jit`, per direction x line search, as XLA backend
    compile seconds (`first_call`); `FixedStep` (no search) and `NonlinearCG` (no memory) give
    the engine's own share. optax.lbfgs's loop first (its number includes the process's
    first compile)."""
    x0 = jnp.ones(1000, jnp.float32)
    fn = speed.sum_of_squares
    cfg = peers_mod.Config(gtol=1e-6, ftol=0.0, max_steps=100)
    optax_call = peers_mod.optax_lbfgs(fn, x0, None, cfg)
    out = {"optax.lbfgs loop": first_call(optax_call)["backend_compile_s"]}
    for direction in PAIR_DIRECTIONS:
        for search in PAIR_SEARCHES:
            parts = getattr(js, direction)(), getattr(js, search)()
            solver = js.Solver(*parts, gtol=cfg.gtol, ftol=0.0, max_steps=cfg.max_steps)
            in_jit = jax.jit(lambda x, solver=solver: solver.run(fn, x, None).params)
            out[f"{direction} + {search}"] = first_call(
                lambda in_jit=in_jit: jax.block_until_ready(in_jit(x0))
            )["backend_compile_s"]
    return out


def compile_glm() -> dict:
    """`compile_small`'s measurements on fresh_fit.py's Poisson GLM (10,000 samples x 40
    features x 10 neurons, ridge 0.1, float32, Equinox-module params, the data in args):
    jaxsearch as fresh_fit runs it (`js.Solver(gtol=tol)`, "auto" compile options) and inside
    a caller's `jax.jit` (`fresh_fit.fit_traced`), optax.lbfgs in its documented loop on the
    module (peers.py, |g|_inf <= tol), and fresh_fit's optimistix peers; tol
    `fresh_fit.TOL["float32"]`, at most `fresh_fit.MAX_STEPS` steps."""
    problem = "GLM 10000 x 40 x 10"
    X, y, params = fresh_fit.glm_data(*fresh_fit.PROBLEMS[problem], "float32")
    fn = fresh_fit.make_loss(fresh_fit.PoissonObservations(), fresh_fit.Ridge(fresh_fit.RIDGE))
    tol = fresh_fit.TOL["float32"]
    in_jit = jax.jit(lambda p, X, y: fresh_fit.fit_traced("jaxsearch", fn, p, X, y, tol))

    def objective(p, args):  # peers.py's optax loop passes the data as `args=`
        return fn(p, *args)

    cfg = peers_mod.Config(gtol=tol, ftol=0.0, max_steps=fresh_fit.MAX_STEPS)
    optax_call = peers_mod.optax_lbfgs(objective, params, (X, y), cfg)
    solvers = {
        "jaxsearch run": first_call_as_called(
            lambda: fresh_fit.fit("jaxsearch", fn, params, X, y, tol)
        ),
        "jaxsearch run in jax.jit": first_call(
            lambda: jax.block_until_ready(in_jit(params, X, y)), (in_jit, (params, X, y))
        ),
        "optax.lbfgs loop": first_call(optax_call, optax_call.program),
        **optimistix_peers(fn, params, X, y, tol),
    }
    return {
        "problem": problem,
        "dtype": "float32",
        "tol": tol,
        "parameters": sum(x.size for x in jax.tree.leaves(params)),
        "data_bytes": X.nbytes + y.nbytes,
        "solvers": _ratios(solvers),
    }


class MLP(eqx.Module):
    layers: list

    def __init__(self, key):
        keys = jax.random.split(key, 3)
        self.layers = [
            eqx.nn.Linear(1, 32, key=keys[0]),
            eqx.nn.Linear(32, 32, key=keys[1]),
            eqx.nn.Linear(32, 1, key=keys[2]),
        ]

    def __call__(self, x):
        h = x[None]
        for layer in self.layers[:-1]:
            h = jnp.tanh(layer(h))
        return self.layers[-1](h)[0]


def pinn_loss(params, static, xs):
    """-u'' = pi^2 sin(pi x) on (0, 1), u(0) = u(1) = 0, by collocation at xs."""
    model = eqx.combine(params, static)
    u_xx = jax.vmap(jax.grad(jax.grad(model)))(xs)
    residual = -u_xx - jnp.pi**2 * jnp.sin(jnp.pi * xs)
    boundary = model(jnp.zeros(())) ** 2 + model(jnp.ones(())) ** 2
    return jnp.mean(residual**2) + boundary


def pinn(steps: int, reps: int) -> dict:
    """The L-BFGS phase of a PINN, `steps` steps each (gtol 0), wall: jaxsearch against optax,
    on the network's parameters as one flat vector (peers.py's optax loop takes an array)."""
    params, static = eqx.partition(MLP(jax.random.key(0)), eqx.is_inexact_array)
    flat, unravel = jax.flatten_util.ravel_pytree(params)
    xs = jnp.linspace(0.0, 1.0, 64, dtype=jnp.float32)

    def objective(p, args):  # peers.py's optax loop passes the data as `args=`
        return pinn_loss(unravel(p), static, args)

    params = flat

    cfg = peers_mod.Config(gtol=0.0, ftol=0.0, max_steps=steps)
    solver = js.Solver(gtol=0.0, ftol=0.0, max_steps=steps, stall_steps=steps)
    ours = jax.jit(lambda p, xs: solver.run(objective, p, xs))
    result = ours(params, xs)
    optax_call = peers_mod.optax_lbfgs(objective, params, xs, cfg)
    row = {
        "parameters": sum(x.size for x in jax.tree.leaves(params)),
        "steps": int(result.num_steps),
        "jaxsearch_s": min_wall(lambda: ours(params, xs), reps),
        "optax_s": min_wall(optax_call, reps),
        "optax_steps": optax_call().iterations,
        "jaxsearch_value": float(result.value),
    }
    row["ratio"] = row["jaxsearch_s"] / row["optax_s"]
    return row


def variant(direction, n: int, n_large: int, reps: int) -> dict:
    solver = js.Solver(direction, gtol=1e-3, max_steps=300)
    fn, x0 = problems_mod._ext_rosenbrock, ext_rosenbrock_x0(n)
    start, step = speed.jaxsearch_step_fns(solver, fn)
    state = start(x0, None)
    cost = jax.jit(lambda p, s: step(p, s, None)).lower(x0, state).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list | tuple) else cost
    return {
        **structure(js.Solver(direction, js.Zoom())),
        "bytes_vs_floor": float(cost["bytes accessed"]) / speed.bytes_floor(n),
        "compile_vs_optax": compile_small(direction, optimistix=False)["ratio"],
        "small_vs_optax": small(reps, direction)["ratio"],
        **{f"large_{k}": v for k, v in large(n_large, 3, direction).items()},
    }


# ------------------------------------------------------------------------------ report


def measure(quick: bool, only=None, save=lambda data: None) -> dict:
    """Every row (or those named in `only`), `save(data)` after each, so that a run cut off by a
    time limit keeps the rows it measured."""
    gpu = jax.default_backend() == "gpu"
    n_bytes = 100_000
    n_large = 100_000 if quick else 1_000_000
    reps = 5 if quick else 20
    out: dict = {}
    steps = [
        ("control_flow", lambda: structure(js.Solver(js.LBFGS(), js.Zoom()))),
        ("bytes", lambda: speed.step_bytes(n_bytes)),
        ("compile", compile_small),
        ("compile_pairs", compile_pairs),
        ("compile_glm", compile_glm),
        ("small", lambda: small(reps * 10)),
        ("small_synchronous", lambda: small_synchronous(reps * 10)),
        ("large", lambda: large(n_large, 3)),
        ("large_1e7", lambda: large(10_000_000, 3) if gpu else None),
        ("pinn", lambda: pinn(50 if quick else 200, 3)),
        ("heavy", lambda: speed.section_compile(speed.QUICK if quick else speed.FULL)),
        ("memory", lambda: speed.section_memory(n_bytes)),
        (
            "variants",
            lambda: {
                "two-loop": variant(js.LBFGS(form="two_loop"), n_bytes, n_large, reps * 10),
                "compact": variant(js.LBFGS(form="compact"), n_bytes, n_large, reps * 10),
                "two-loop unrolled": variant(UnrolledLBFGS(), n_bytes, n_large, reps * 10),
            },
        ),
    ]
    for name, run in steps:
        if only and name not in only:
            continue
        print(f"  {name} ...", flush=True)
        t0 = time.perf_counter()
        out[name] = speed.guarded(name, run)
        speed.fresh()
        print(f"  {name}: {time.perf_counter() - t0:.1f} s", flush=True)
        save(out)
    return out


def _get(d, *keys):
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def _anatomy(data: dict, row: str, who: str) -> str:
    counts = _get(data, row, f"{who}_anatomy")
    return "—" if counts is None else f"{counts['kernels']} and {counts['copies']}"


def _by_source_lines(data: dict) -> list[str]:
    """The compile row's kernels by source file (`kernel_source`), jaxsearch's program in
    a caller's jit against optax's, as markdown lines."""
    ours = _get(data, "compile", "jaxsearch_in_jit_anatomy", "by_source")
    theirs = _get(data, "compile", "optax_anatomy", "by_source")
    if not ours:
        return []

    def listed(counts, most=12):
        top = list(counts.items())[:most]
        rest = sum(counts.values()) - sum(n for _, n in top)
        listed = ", ".join(f"{source} {n}" for source, n in top)
        return listed + (f", others {rest}" if rest else "")

    return [
        "",
        "Kernels of the compile row's programs by the file and function that traced them "
        "(`kernel_source`): "
        f"jaxsearch in jax.jit: {listed(ours)}; optax: {listed(theirs or {})}.",
    ]


def compile_table(row) -> list[str]:
    """A `compile_small` or `compile_glm` row's solvers as markdown lines."""
    if not isinstance(row, dict) or "solvers" not in row:
        return [f"error: {row.get('error') if isinstance(row, dict) else row}"]

    def fmt(x, digits=3):
        return "—" if x is None else f"{x:.{digits}g}"

    lines = [
        "| solver | compiles | compile s | first − second call s | kernels | copies | "
        "compile / optax | kernels / optax |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, r in row["solvers"].items():
        if "error" in r:
            lines.append(f"| {name} | error: {r['error'][:80]} | | | | | | |")
            continue
        counts = r.get("anatomy") or {}
        second = r["second_call_compiles"]
        compiles = f"{r['compiles']}" + (f" (+{second} on the 2nd call)" if second else "")
        wall = None if second else r["compile_s"]  # a 2nd call that compiles: no baseline
        lines.append(
            f"| {name} | {compiles} | {fmt(r['backend_compile_s'])} | {fmt(wall)} | "
            f"{counts.get('kernels', '—')} | {counts.get('copies', '—')} | "
            f"{fmt(r.get('compile_vs_optax'))} | {fmt(r.get('kernels_vs_optax'))} |"
        )
    again = [name for name, r in row["solvers"].items() if r.get("second_call_compiles")]
    if again:
        lines += [
            "",
            f"Compiled again on the second call: {', '.join(again)} (fresh_fit's optimistix "
            "call builds its fn wrapper, and optx+optax its optax.lbfgs(), anew on every call): "
            "first − second call left out.",
        ]
    programs = _get(row, "solvers", "jaxsearch run", "programs") or {}
    if programs:
        lines += [
            "",
            "jaxsearch run's own programs: "
            + "; ".join(
                f"{name} {p['kernels']} kernels, {p['copies']} copies"
                f"{' (lean options)' if p['lean_options'] else ' (XLA defaults)'}"
                for name, p in programs.items()
            )
            + ".",
        ]
    return lines


COMPILE_NOTE = (
    "compiles: XLA backend compiles of a first call (jax.monitoring), compile s their seconds; "
    "first − second call: the wall of the first call less the second's; kernels and copies "
    "(`anatomy`): fusions and copies outside fused computations in the optimised HLO of the "
    "solver's main program (jaxsearch run: its loop program, compiled with the options "
    '"auto" picks; in jax.jit: one program, XLA\'s default options; optimistix as called: '
    "compiles only, its program is the one in jax.jit); ratios over optax.lbfgs's loop."
)


def markdown(data: dict, meta: dict) -> str:
    def verdict(value, target):
        return "—" if value is None else ("PASS" if value <= target else "MISS")

    def fmt(x):
        return "—" if x is None else f"{x:.3g}"

    heavy = data.get("heavy", {}).get("rows", {})
    base = _get(heavy, "value_and_grad (baseline)", "compile_s")
    heavy_run = _get(heavy, "jaxsearch run", "compile_s")
    heavy_step = _get(heavy, "jaxsearch init + 2 steps", "compile_s")
    bytes_row = data.get("bytes", {})
    floor = bytes_row.get("floor_bytes")
    js_bytes = _get(bytes_row, "jaxsearch", "bytes_accessed")
    ox_bytes = _get(bytes_row, "optax", "bytes_accessed")
    js_donated = _get(bytes_row, "jaxsearch_donated", "bytes_accessed")
    ox_donated = _get(bytes_row, "optax_donated", "bytes_accessed")
    rows = [
        ("control flow in run's jaxpr", None, _get(data, "control_flow", "total"), "control_flow"),
        (
            "bytes per L-BFGS step / floor, n = 1e5",
            ox_bytes / floor if ox_bytes and floor else None,
            js_bytes / floor if js_bytes and floor else None,
            "bytes",
        ),
        (
            "the same, the state donated to the jitted step",
            ox_donated / floor if ox_donated and floor else None,
            js_donated / floor if js_donated and floor else None,
            "bytes",
        ),
        ("compile of run, sum(x^2) n = 1000 / optax", 1, _get(data, "compile", "ratio"), "compile"),
        (
            "the same, inside a caller's jax.jit (XLA's default options)",
            1,
            _get(data, "compile", "ratio_in_jit"),
            "compile",
        ),
        ("2-D Rosenbrock run in jit, wall / optax", 1, _get(data, "small", "ratio"), "small"),
        (
            "the same, returning params and num_steps (optax's outputs)",
            1,
            _get(data, "small", "ratio_params_only"),
            "small",
        ),
        (
            f"ext. Rosenbrock n = {_get(data, 'large', 'n')}, wall / optax",
            1,
            _get(data, "large", "ratio"),
            "large",
        ),
        ("PINN L-BFGS phase, equal steps, wall / optax", 1, _get(data, "pinn", "ratio"), "pinn"),
        (
            "heavy objective: compile of run / value-and-grad",
            None,
            heavy_run / base if heavy_run and base else None,
            "heavy",
        ),
        (
            "heavy objective: init + 2 steps / value-and-grad",
            None,
            heavy_step / base if heavy_step and base else None,
            "heavy",
        ),
        ("L-BFGS peak memory, n-vectors", None, _get(data, "memory", "vectors"), "memory"),
    ]
    lines = [
        f"# Engine benchmark ({meta['backend']}, {meta['device']})",
        "",
        f"jax {meta['jax']}, optax {meta['optax']}, {meta['cpu']}; `{meta['command']}`",
        "",
        "| measure | optax | jaxsearch | target | |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for label, theirs, ours, key in rows:
        target = TARGETS[key]
        lines.append(
            f"| {label} | {fmt(theirs)} | {fmt(ours)} | ≤ {target} | {verdict(ours, target)} |"
        )
    cf = data.get("control_flow", {})
    lines += [
        "",
        f"Control flow: {cf.get('while')} while, {cf.get('cond')} cond, {cf.get('scan')} scan "
        f"trips; round trips per evaluation {cf.get('per_evaluation')}, at a step boundary "
        f"at most {cf.get('at_boundary')}.",
        "",
        f"2-D Rosenbrock: {fmt(_get(data, 'small', 'jaxsearch_s'))} s, "
        f"{fmt(_get(data, 'small', 'per_evaluation_us'))} µs per evaluation "
        f"({_get(data, 'small', 'evals')} evaluations).",
        "",
        f"XLA's cost analysis counts {fmt(_get(data, 'small', 'jaxsearch_flops'))} flops in "
        f"that program (params and num_steps) and {fmt(_get(data, 'small', 'optax_flops'))} "
        f"in optax's; jax's CPU client runs a program of fewer than {INLINE_FLOPS} on the "
        f"calling thread, a larger one on a worker thread. With every program run on the "
        f"calling thread (`jax_cpu_enable_async_dispatch` off, a fresh process): jaxsearch "
        f"{fmt(_get(data, 'small_synchronous', 'jaxsearch_params_s'))} s, optax "
        f"{fmt(_get(data, 'small_synchronous', 'optax_s'))} s, ratio "
        f"{fmt(_get(data, 'small_synchronous', 'ratio_params_only'))}.",
        "",
        f"Kernels (fusions) and copies in the optimised programs, jaxsearch against optax: "
        f"the compile row inside a caller's jit {_anatomy(data, 'compile', 'jaxsearch_in_jit')}"
        f" against {_anatomy(data, 'compile', 'optax')}; the 2-D row "
        f"{_anatomy(data, 'small', 'jaxsearch')} against {_anatomy(data, 'small', 'optax')}.",
        *_by_source_lines(data),
        "",
        "| L-BFGS form | control flow | round trips / evaluation | bytes / floor | "
        "compile / optax | 2-D Rosenbrock / optax | ext. Rosenbrock wall (s) | steps |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, row in (data.get("variants") or {}).items():
        if not isinstance(row, dict) or "total" not in row:
            lines.append(f"| {name} | error | | | | | | |")
            continue
        lines.append(
            f"| {name} | {row['total']} | {row['per_evaluation']} | "
            f"{fmt(row['bytes_vs_floor'])} | {fmt(row.get('compile_vs_optax'))} | "
            f"{fmt(row.get('small_vs_optax'))} | {fmt(row.get('large_jaxsearch_s'))} | "
            f"{row.get('large_steps')} |"
        )
    if "compile" in data:
        lines += ["", "## Compile, sum(x^2), n = 1000 float32, gtol 1e-6", "", COMPILE_NOTE, ""]
        lines += compile_table(data["compile"])
    if isinstance(data.get("compile_pairs"), dict) and "optax.lbfgs loop" in data["compile_pairs"]:
        pairs = data["compile_pairs"]
        lines += [
            "",
            "## Compile by direction and line search (the compile row's problem in jax.jit)",
            "",
            "XLA backend compile seconds; optax.lbfgs's loop "
            f"{fmt(pairs['optax.lbfgs loop'])} s (the process's first compile).",
            "",
            "| direction | " + " | ".join(PAIR_SEARCHES) + " |",
            "| --- |" + " ---: |" * len(PAIR_SEARCHES),
        ]
        for direction in PAIR_DIRECTIONS:
            cells = [fmt(pairs.get(f"{direction} + {search}")) for search in PAIR_SEARCHES]
            lines.append(f"| {direction} | " + " | ".join(cells) + " |")
    if "compile_glm" in data:
        glm = data["compile_glm"]
        lines += [
            "",
            f"## Compile, Poisson {glm.get('problem', 'GLM')} (fresh_fit.py), float32, "
            f"tol {glm.get('tol')}",
            "",
            f"{glm.get('parameters')} parameters (an Equinox module), {glm.get('data_bytes')} "
            "bytes of data in args. " + COMPILE_NOTE,
            "",
        ]
        lines += compile_table(glm)
    if data.get("large_1e7"):
        lines += ["", f"n = 1e7: {json.dumps(data['large_1e7'])}"]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=str(output.RESULTS))
    parser.add_argument("--only", default="", help="comma list of rows (default: all)")
    parser.add_argument("--small-synchronous", type=int, metavar="REPS", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.small_synchronous:  # `small_synchronous`'s process: the 2-D row alone, as JSON
        jax.config.update("jax_cpu_enable_async_dispatch", False)
        print(json.dumps(small(args.small_synchronous)))
        return
    import optax

    meta = {
        "backend": jax.default_backend(),
        "device": str(jax.devices()[0]),
        "jax": jax.__version__,
        "optax": optax.__version__,
        "cpu": platform.processor() or platform.machine(),
        "command": " ".join(["python", "benchmarks/studies/engine.py", *(argv or sys.argv[1:])]),
    }
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def save(data):
        (out / f"engine_{meta['backend']}.json").write_text(
            json.dumps({"meta": meta, "data": data}, indent=1, default=str)
        )
        text = markdown(data, meta)
        (out / f"engine_{meta['backend']}.md").write_text(text)
        return text

    only = set(filter(None, args.only.split(",")))
    text = save(measure(args.quick, only, save))
    print(text)


if __name__ == "__main__":
    main()
