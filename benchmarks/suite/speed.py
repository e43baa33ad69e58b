"""Compile cost, run cost, memory and small-problem latency of jaxsearch next to its peers.

    python -m benchmarks.suite.speed          # GPU: full sizes; CPU: quick sizes
    python -m benchmarks.suite.speed --quick  # quick sizes everywhere (a few minutes on 2 CPUs)
    python -m benchmarks.suite.speed --full   # full sizes on CPU too
    python -m benchmarks.suite.speed --only compile,small --out /tmp/speed

Sections (`--only`), each a table of measured ratios against their targets:

  compile  an unrolled deep tanh network: compile of jaxsearch's `run`, and of a user's jitted
           `init` + `step` up to the second step, against the objective's own value-and-grad
           compile; optax.lbfgs (documented jitted update step, and the while loop of peers.py)
           and optimistix LBFGS alongside.
  run      (a) L2 logistic regression: `run` wall time against evaluations x one jitted
           value-and-grad; (b) extended Rosenbrock at two sizes: wall time of every peer to the
           same |g|_inf, and bytes accessed per L-BFGS step against a floor.
  memory   peak memory of the compiled L-BFGS `run` (XLA memory analysis) in parameter-sized
           vectors, against 2m + 6; process peak RSS.
  small    2-D Rosenbrock end to end: jaxsearch `run` against scipy L-BFGS-B on a jitted
           value_and_grad.

Float32 throughout, except the small section (float64, scipy's own precision). Every compiled
program is dropped between measurements (`jax.clear_caches()`), so no cache hides a compile;
backend compiles are counted with `jax.monitoring`. Writes speed_<backend>.json (all numbers
and meta) and speed_<backend>.md to --out, and prints the markdown.
"""

import argparse
import dataclasses
import functools
import gc
import math
import pathlib
import platform
import resource
import statistics
import sys
import time
import traceback

import jax

try:  # a persistent compilation cache would hide compiles
    jax.config.update("jax_enable_compilation_cache", False)
except AttributeError:  # an option this jax does not know: then it has no such cache either
    pass

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxsearch as js  # noqa: E402
from benchmarks import output, peers as peers_mod, problems as problems_mod  # noqa: E402

SECTIONS = ("compile", "run", "memory", "small")  # the order of the report
# Memory runs first: the process's peak RSS and the device's peak are process-lifetime peaks.
EXECUTION_ORDER = ("memory", "compile", "run", "small")
MEMORY_SIZE = 10  # L-BFGS m, jaxsearch's default and optax's


@dataclasses.dataclass(frozen=True)
class Sizes:
    """Problem sizes of one run of the script."""

    layers: int  # deep network: dense tanh layers of `width`
    width: int
    batch: int
    logreg: tuple[int, int]  # samples, features
    rosenbrock: tuple[int, ...]  # n of extended Rosenbrock
    memory_n: int


FULL = Sizes(60, 64, 32, (20_000, 1_000), (1_000_000, 10_000_000), 10_000_000)
QUICK = Sizes(16, 64, 32, (2_000, 200), (10_000, 100_000), 100_000)

TARGETS = {
    "compile": 1.15,  # jaxsearch compile / the objective's value-and-grad compile, at most
    "logreg": 1.1,  # run wall / (evaluations x one value-and-grad), at most
    "rosenbrock": 0.7,  # jaxsearch wall / optax wall, at most
    "memory": 2 * MEMORY_SIZE + 6,  # parameter-sized vectors, at most
    "small": 20.0,  # scipy wall / jaxsearch wall, at least
}


# ------------------------------------------------------------------------------- measuring

_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_COMPILES: list[float] = []


def _on_duration_event(event, duration, **kwargs):
    if event == _COMPILE_EVENT:
        _COMPILES.append(duration)


_listening = False


def _listen_for_compiles():
    """Count XLA backend compiles from now on; a second call adds nothing."""
    global _listening
    if not _listening:
        jax.monitoring.register_event_duration_secs_listener(_on_duration_event)
        _listening = True


class Phase:
    """`with Phase() as p:` measures wall seconds and XLA backend compiles (count, seconds);
    the first `Phase` starts the count of compiles, so that no script that uses it can
    report none for want of a listener."""

    def __enter__(self):
        _listen_for_compiles()
        self._first = len(_COMPILES)
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.wall_s = time.perf_counter() - self._t0
        new = _COMPILES[self._first :]
        self.compiles = len(new)
        self.compile_s = sum(new)
        return False

    def as_dict(self):
        return {
            "wall_s": self.wall_s,
            "compiles": self.compiles,
            "backend_compile_s": self.compile_s,
        }


def fresh():
    """Drop every compiled program and free what Python still holds on the device."""
    gc.collect()
    jax.clear_caches()


def wall_times(call, reps: int) -> list[float]:
    """Wall seconds of `reps` calls of `call()`, each blocked until ready, after one warm-up."""
    jax.block_until_ready(call())
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(call())
        times.append(time.perf_counter() - t0)
    return times


def median_time(call, reps: int) -> float:
    """Median of `wall_times(call, reps)`."""
    return statistics.median(wall_times(call, reps))


def guarded(name, measure, *args, **kwargs) -> dict:
    """`measure(*args, **kwargs)`, or {"error": ...} if it raised: one peer never stops the rest."""
    try:
        return measure(*args, **kwargs)
    except ModuleNotFoundError as e:  # a peer's library (jaxopt) missing
        print(f"  ! {name}: not installed ({e})", flush=True)
        return {"error": f"not installed ({e})"}
    except Exception as e:  # noqa: BLE001 - recorded, and the script goes on
        msg = str(e).strip().splitlines()
        print(f"  ! {name}: {type(e).__name__}: {msg[0][:200] if msg else ''}", flush=True)
        traceback.print_exc(limit=2)
        return {"error": f"{type(e).__name__}: {msg[0][:300] if msg else ''}"}
    finally:
        fresh()


def inf_norm_grad(fn, x, args) -> float:
    """|grad fn(x, args)|_inf."""
    return float(jnp.max(jnp.abs(jax.jit(jax.grad(fn))(x, args))))


def _ratio(num, den):
    if num is None or den is None or not den or not math.isfinite(num) or not math.isfinite(den):
        return None
    return num / den


# ---------------------------------------------------------------------------------- compile


def deep_network(sizes: Sizes):
    """The heavy objective: `layers` dense tanh layers of `width` on a fixed batch.

    Returns fn(flat, (x, y)) (problems.py's unrolled MLP, params one flat vector), x0, args.
    """
    widths = (sizes.width,) * (sizes.layers + 1) + (1,)
    rng = np.random.default_rng(0)
    params = []
    for fan_in, fan_out in zip(widths[:-1], widths[1:], strict=True):
        params.append(rng.standard_normal(fan_in * fan_out) / math.sqrt(fan_in))
        params.append(np.zeros(fan_out))
    x0 = jnp.asarray(np.concatenate(params), jnp.float32)
    x = jnp.asarray(rng.standard_normal((sizes.batch, sizes.width)), jnp.float32)
    y = jnp.asarray(np.sin(rng.standard_normal(sizes.batch)), jnp.float32)
    return problems_mod._make_mlp(widths), x0, (x, y)


def sum_of_squares(x, args):
    """A trivial objective: compiling `run` on it measures the solver's own compile cost."""
    del args
    return jnp.sum(x**2)


def compile_value_and_grad(fn, x0, args) -> dict:
    """Baseline: trace, lower and compile `jax.jit(jax.value_and_grad(fn))`."""
    fresh()
    with Phase() as p:
        jax.jit(jax.value_and_grad(fn)).lower(x0, args).compile()
    return {**p.as_dict(), "compile_s": p.wall_s}


def compile_whole_run(call) -> dict:
    """A whole minimisation `call()`: compile = first call minus second call (same shapes)."""
    fresh()
    with Phase() as first:
        call()
    with Phase() as second:
        call()
    return {
        "compile_s": first.wall_s - second.wall_s,
        "first_call": first.as_dict(),
        "second_call": second.as_dict(),
        "compiles": first.compiles + second.compiles,
        "backend_compile_s": first.compile_s + second.compile_s,
    }


def compile_to_second_step(start, step, params, args, warm_reps: int = 3) -> dict:
    """A user's jitted step loop: wall of `start(params, args)` and two steps, less 2 warm steps.

    Counts every compile on the way, per phase (init, step 1, step 2), including a second
    compile of the step (optax's state after its first update differs from its init state).
    """
    fresh()
    phases = {}
    with Phase() as phases["init"]:
        state = jax.block_until_ready(start(params, args))
    for name in ("step 1", "step 2"):
        with Phase() as phases[name]:
            params, state = jax.block_until_ready(step(params, state, args))
    carry = [params, state]

    def one_step():
        carry[:] = step(*carry, args)
        return carry

    warm = median_time(one_step, warm_reps)
    wall = sum(p.wall_s for p in phases.values())
    return {
        "wall_s": wall,
        "compiles": sum(p.compiles for p in phases.values()),
        "backend_compile_s": sum(p.compile_s for p in phases.values()),
        "phases": {name: p.as_dict() for name, p in phases.items()},
        "warm_step_s": warm,
        "compile_s": wall - 2 * warm,
    }


def jaxsearch_step_fns(solver, fn):
    """init and a user's `eqx.filter_jit` step around `solver.step`, as the README shows."""

    @eqx.filter_jit
    def train_step(params, state, args):
        return solver.step(fn, params, state, args)

    def start(params, args):
        return solver.init(params, fn=fn, args=(args,))

    return start, train_step


def optax_step_fns(fn):
    """optax.lbfgs() init and its documented jitted update step (value_and_grad_from_state)."""
    import optax

    opt = optax.lbfgs()

    def start(params, args):
        del args
        return opt.init(params)

    @jax.jit
    def update(params, state, args):
        fun = functools.partial(fn, args=args)
        value, grad = optax.value_and_grad_from_state(fun)(params, state=state)
        updates, state = opt.update(grad, state, params, value=value, grad=grad, value_fn=fun)
        return optax.apply_updates(params, updates), state

    return start, update


COMPILE_TARGETED = ("jaxsearch run", "jaxsearch init + 2 steps")


def section_compile(sizes: Sizes) -> dict:
    """Compile cost on the deep network: every measurement divided by the baseline."""
    fn, x0, args = deep_network(sizes)
    cfg = peers_mod.Config(gtol=0.0, ftol=0.0, max_steps=3)  # few steps: the run is not timed
    solver = js.Solver(gtol=cfg.gtol, ftol=cfg.ftol, max_steps=cfg.max_steps)
    js_start, js_step = jaxsearch_step_fns(solver, fn)
    rows = {"value_and_grad (baseline)": guarded("baseline", compile_value_and_grad, fn, x0, args)}
    measures = {
        "jaxsearch run": lambda: compile_whole_run(peers_mod._jaxsearch(solver, fn, x0, args, cfg)),
        "jaxsearch init + 2 steps": lambda: compile_to_second_step(js_start, js_step, x0, args),
        "jaxsearch run on sum(x²): the solver alone": lambda: compile_whole_run(
            peers_mod._jaxsearch(solver, sum_of_squares, x0, None, cfg)
        ),
        "optax.lbfgs update, 2 steps": lambda: compile_to_second_step(
            *optax_step_fns(fn), x0, args
        ),
        "optax.lbfgs while loop": lambda: compile_whole_run(
            peers_mod.optax_lbfgs(fn, x0, args, cfg)
        ),
        "optimistix LBFGS minimise": lambda: compile_whole_run(
            peers_mod._optimistix("LBFGS", fn, x0, args, cfg)
        ),
    }
    for name, measure in measures.items():
        print(f"  compile: {name}", flush=True)
        rows[name] = guarded(name, measure)
    base = rows["value_and_grad (baseline)"]
    for row in rows.values():
        row["ratio"] = _ratio(row.get("compile_s"), base.get("compile_s"))
        row["backend_ratio"] = _ratio(row.get("backend_compile_s"), base.get("backend_compile_s"))
    return {"n": int(x0.size), "layers": sizes.layers, "width": sizes.width, "rows": rows}


# -------------------------------------------------------------------------------------- run


def logreg_problem(samples: int, features: int):
    """L2-regularised logistic regression (problems.py's), float32 data, w0 = 0."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((samples, features), dtype=np.float32)
    w_true = rng.standard_normal(features) / math.sqrt(features)
    y = (a @ w_true + 0.5 * rng.standard_normal(samples) > 0).astype(np.float32)
    args = (jnp.asarray(a), jnp.asarray(y), jnp.asarray(1e-3, jnp.float32))
    return problems_mod._logistic, jnp.zeros(features, jnp.float32), args


def run_logreg(samples: int, features: int, reps: int = 3) -> dict:
    """`run` wall after compile against num_fun_evals x median time of one jitted value_and_grad."""
    fn, w0, args = logreg_problem(samples, features)
    solver = js.Solver(gtol=1e-4, max_steps=200)

    def call():
        return solver.run(fn, w0, args)

    wall = median_time(call, reps)
    result = jax.block_until_ready(call())
    value_and_grad = jax.jit(jax.value_and_grad(fn))
    one_eval = median_time(lambda: value_and_grad(w0, args), 20)
    in_loop = value_and_grad_in_loop_s(fn, w0, args)
    evals = int(result.num_fun_evals)
    return {
        "samples": samples,
        "features": features,
        "wall_s": wall,
        "value_and_grad_s": one_eval,
        "value_and_grad_in_loop_s": in_loop,
        "num_steps": int(result.num_steps),
        "num_fun_evals": evals,
        "status": js.Status(int(result.status)).name,
        "ratio": _ratio(wall, evals * one_eval),
        "ratio_in_loop": _ratio(wall, evals * in_loop),
    }


def value_and_grad_in_loop_s(fn, w0, args, k: int = 20) -> float:
    """Seconds per value_and_grad when `k` of them run in one compiled loop: no dispatch cost."""
    value_and_grad = jax.value_and_grad(fn)

    @jax.jit
    def loop(w, args):
        def body(_, w):
            _, grad = value_and_grad(w, args)
            return w - 1e-6 * grad  # each evaluation depends on the last

        return jax.lax.fori_loop(0, k, body, w)

    return median_time(lambda: loop(w0, args), 3) / k


def rosenbrock_peers(n: int, gtol: float) -> dict:
    """Each peer's `call` on extended Rosenbrock, with tolerances that all mean |g|_inf <= gtol.

    jaxopt's tol bounds |g|_2: from the tiled start every (odd, even) pair stays identical, so
    |g|_2 <= gtol sqrt(n / 2) implies |g|_inf <= gtol. optimistix stops on a Cauchy criterion on
    steps and values (rtol = atol = 1e-6 here); whether it met gtol is checked afterwards.
    """
    cfg = peers_mod.Config(gtol=gtol, ftol=0.0, max_steps=300, optx_tol=1e-6)
    jaxopt_cfg = dataclasses.replace(cfg, gtol=gtol * math.sqrt(n / 2))
    solver = js.Solver(gtol=cfg.gtol, ftol=cfg.ftol, max_steps=cfg.max_steps)
    return {
        "jaxsearch": (functools.partial(peers_mod._jaxsearch, solver), cfg),
        "optax": (peers_mod.optax_lbfgs, cfg),
        "jaxopt": (peers_mod.jaxopt_lbfgs, jaxopt_cfg),
        "optimistix": (functools.partial(peers_mod._optimistix, "LBFGS"), cfg),
    }


def run_rosenbrock_peer(peer, cfg, n: int, gtol: float, reps: int = 3) -> dict:
    """Wall time after compile (median), iterations, counted evaluations, |g|_inf reached."""
    fn = problems_mod._ext_rosenbrock
    x0 = jnp.asarray(np.tile(np.float32([-1.2, 1.0]), n // 2))
    call = peer(fn, x0, None, cfg)
    with Phase() as first:
        out = call()
    wall = median_time(call, reps)
    gnorm = inf_norm_grad(fn, out.x, None)
    del out
    fresh()
    counter = problems_mod.Counter()  # a separate, untimed run: the callbacks cost time
    counted_out = peer(problems_mod.counted(fn, counter), x0, None, cfg)()
    evals, _ = counter.read()
    return {
        "wall_s": wall,
        "first_call_s": first.wall_s,
        "iterations": counted_out.iterations,
        "evals": evals,
        "reported_evals": counted_out.reported_evals,
        "status": counted_out.status,
        "hit_max_steps": counted_out.iterations >= cfg.max_steps,
        "gnorm_inf": gnorm,
        "reached_gtol": gnorm <= gtol,
    }


def bytes_floor(n: int, m: int = MEMORY_SIZE) -> float:
    """Bytes an L-BFGS iteration with one trial point must move: (4m + 8) float32 n-vectors.

    4m: s_i and y_i read in both loops of the two-loop recursion; 1: the direction written;
    3: x and the direction read, the trial point written; 2: f reads the trial point and
    writes its gradient; 2: the new pair (s, y) written.
    """
    return (4 * m + 8) * 4.0 * n


def step_bytes(n: int) -> dict:
    """XLA's 'bytes accessed' of one compiled L-BFGS step (jaxsearch `step`, optax update).

    XLA counts a while loop's body once, so a step with one line-search trial is measured:
    the usual L-BFGS step. The floor is `bytes_floor`. Each also with the state donated to
    the jitted step (`donate_argnums`), as a training loop that replaces its state may do:
    XLA then need not copy the memory it writes in place.
    """
    fn = problems_mod._ext_rosenbrock
    x0 = jnp.asarray(np.tile(np.float32([-1.2, 1.0]), n // 2))
    solver = js.Solver(gtol=1e-3, max_steps=300)
    out = {"floor_bytes": bytes_floor(n)}
    makers = {
        "jaxsearch": lambda: jaxsearch_step_fns(solver, fn),
        "optax": lambda: optax_step_fns(fn),
    }
    for name, make in makers.items():
        for donated in (False, True):
            key = f"{name}_donated" if donated else name
            out[key] = guarded(
                f"bytes {key}", _one_step_bytes, make, x0, out["floor_bytes"], donated
            )
    return out


def _one_step_bytes(make, x0, floor, donated: bool = False) -> dict:
    start, step = make()
    state = start(x0, None)
    donate = (1,) if donated else ()
    jitted = jax.jit(lambda p, s: step(p, s, None), donate_argnums=donate)
    compiled = jitted.lower(x0, state).compile()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list | tuple) else cost
    accessed = float(cost["bytes accessed"]) if cost and "bytes accessed" in cost else None
    return {"bytes_accessed": accessed, "vs_floor": _ratio(accessed, floor)}


def section_run(sizes: Sizes, gtol: float = 1e-3) -> dict:
    """Run cost: logistic regression against its evaluations; Rosenbrock against the peers."""
    print(f"  run: logistic regression {sizes.logreg}", flush=True)
    out = {"logreg": guarded("logreg", run_logreg, *sizes.logreg), "rosenbrock": {}, "gtol": gtol}
    for n in sizes.rosenbrock:
        rows = {}
        for name, (peer, cfg) in rosenbrock_peers(n, gtol).items():
            print(f"  run: Rosenbrock n={n:.0e} {name}", flush=True)
            rows[name] = guarded(name, run_rosenbrock_peer, peer, cfg, n, gtol)
        rows["ratio_jaxsearch_optax"] = _ratio(
            rows["jaxsearch"].get("wall_s"), rows["optax"].get("wall_s")
        )
        rows["bytes"] = step_bytes(n)
        out["rosenbrock"][str(n)] = rows
    return out


# ----------------------------------------------------------------------------------- memory


def peak_rss_bytes() -> int:
    """The process's peak resident set size so far (ru_maxrss: KiB on Linux, bytes on macOS)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


def device_peak_bytes() -> int | None:
    """The device allocator's peak bytes in use over the process (None where not reported)."""
    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use")


def section_memory(n: int) -> dict:
    """Peak memory of the compiled L-BFGS `run` on extended Rosenbrock, in n-vectors.

    XLA's memory analysis of the whole run program: temp + argument + output bytes (alias
    bytes, shared by argument and output, reported apart), divided by 4n. The run is then
    executed once, to read the process peak RSS (and the device peak, where reported).
    """
    fn = problems_mod._ext_rosenbrock
    x0 = jnp.asarray(np.tile(np.float32([-1.2, 1.0]), n // 2))
    solver = js.Solver(js.LBFGS(memory_size=MEMORY_SIZE), gtol=1e-3, max_steps=300)
    rss_before, device_before = peak_rss_bytes(), device_peak_bytes()
    compiled = jax.jit(lambda x: solver.run(fn, x, None)).lower(x0).compile()
    stats = compiled.memory_analysis()
    result = jax.block_until_ready(compiled(x0))
    steps = int(result.num_steps)
    del result
    total = stats.temp_size_in_bytes + stats.argument_size_in_bytes + stats.output_size_in_bytes
    return {
        "n": n,
        "memory_size": MEMORY_SIZE,
        "temp_bytes": stats.temp_size_in_bytes,
        "argument_bytes": stats.argument_size_in_bytes,
        "output_bytes": stats.output_size_in_bytes,
        "alias_bytes": stats.alias_size_in_bytes,
        "total_bytes": total,
        "vectors": total / (4 * n),
        "num_steps": steps,
        "peak_rss_before_bytes": rss_before,
        "peak_rss_after_bytes": peak_rss_bytes(),
        "device_peak_before_bytes": device_before,
        "device_peak_after_bytes": device_peak_bytes(),
    }


# ------------------------------------------------------------------------------------ small


def section_small(reps: int = 200, scipy_reps: int = 20) -> dict:
    """2-D Rosenbrock from (-1.2, 1) in float64, end to end after compile (median wall).

    jaxsearch: `solver.run(...)` as a user calls it, and inside a user's `jax.jit`; scipy:
    L-BFGS-B with jac=True on a jitted value_and_grad (peers.py), the same gtol and ftol.
    """
    fn = problems_mod._ext_rosenbrock
    cfg = peers_mod.Config(gtol=1e-5, ftol=js.Solver().ftol, max_steps=1000)
    solver = js.Solver(gtol=cfg.gtol, ftol=cfg.ftol, max_steps=cfg.max_steps)
    jax.config.update("jax_enable_x64", True)
    try:
        x0 = jnp.asarray([-1.2, 1.0], jnp.float64)
        jitted = jax.jit(lambda x: solver.run(fn, x, None))
        scipy_call = peers_mod.scipy_lbfgsb(fn, x0, None, cfg)
        rows = {
            "jaxsearch run": guarded("js", _small_js, lambda: solver.run(fn, x0, None), reps),
            "jaxsearch run in jax.jit": guarded("js jit", _small_js, lambda: jitted(x0), reps),
            "scipy L-BFGS-B": guarded("scipy", _small_scipy, scipy_call, scipy_reps),
        }
    finally:
        jax.config.update("jax_enable_x64", False)
        fresh()
    scipy_row = rows["scipy L-BFGS-B"]
    for row in rows.values():
        row["speedup_vs_scipy"] = _ratio(scipy_row.get("wall_s"), row.get("wall_s"))
        row["speedup_vs_scipy_min"] = _ratio(scipy_row.get("min_s"), row.get("min_s"))
    return {"gtol": cfg.gtol, "ftol": cfg.ftol, "dtype": "float64", "rows": rows}


def _small_js(call, reps: int) -> dict:
    times = wall_times(call, reps)
    result = call()
    return {
        "wall_s": statistics.median(times),
        "min_s": min(times),
        "iterations": int(result.num_steps),
        "evals": int(result.num_fun_evals),
        "value": float(result.value),
        "status": js.Status(int(result.status)).name,
    }


def _small_scipy(call, reps: int) -> dict:
    times = wall_times(call, reps)
    out = call()
    value = float(problems_mod._ext_rosenbrock(out.x, None))
    return {
        "wall_s": statistics.median(times),
        "min_s": min(times),
        "iterations": out.iterations,
        "evals": out.reported_evals,
        "value": value,
        "status": out.status,
    }


# ----------------------------------------------------------------------------------- report


def _verdict(value, target, at_most: bool = True) -> str:
    if value is None:
        return "—"
    return "PASS" if (value <= target if at_most else value >= target) else "MISS"


def _f(x, spec=".3g"):
    return "—" if x is None else format(x, spec)


def _err(row) -> str:
    return f"error: {row['error']}" if "error" in row else ""


def report_compile(data) -> list[str]:
    lines = [
        f"## Compile: deep tanh network, {data['layers']} layers of {data['width']}, "
        f"n = {data['n']}",
        "",
        "compile s: wall (first call minus second; to the second step minus two warm steps; "
        "for the baseline, lower + compile). Ratios divide by the baseline.",
        "",
        "| measure | compile s | backend compiles (by phase) | backend compile s | ratio "
        "| backend ratio | target | result |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, row in data["rows"].items():
        target = TARGETS["compile"] if name in COMPILE_TARGETED else None
        verdict = _verdict(row.get("ratio"), target) if target else ""
        lines.append(
            f"| {name} | {_f(row.get('compile_s'))} | {_compile_counts(row)} | "
            f"{_f(row.get('backend_compile_s'))} | {_f(row.get('ratio'))} | "
            f"{_f(row.get('backend_ratio'))} | {f'≤ {target}' if target else ''} | "
            f"{verdict or _err(row)} |"
        )
    return lines


def _compile_counts(row) -> str:
    """Backend compiles, with their split over phases: '11 (init 9, step 1 2, step 2 0)'."""
    if "compiles" not in row:
        return "—"
    phases = row.get("phases") or {k: row[k] for k in ("first_call", "second_call") if k in row}
    split = ", ".join(f"{k.replace('_', ' ')} {v['compiles']}" for k, v in phases.items())
    return f"{row['compiles']} ({split})" if split else str(row["compiles"])


def report_run(data) -> list[str]:
    lr = data["logreg"]
    lines = [
        "## Run cost",
        "",
        "### Logistic regression: run wall / (evaluations x one jitted value_and_grad)",
        "",
        "value_and_grad s: median of single jitted calls (in brackets: per evaluation inside "
        "one compiled loop, no dispatch; the ratio against it in brackets too).",
        "",
        "| samples x features | steps | evals | status | run s | value_and_grad s | ratio "
        "| target | result |",
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    if "error" in lr:
        lines.append(f"| {_err(lr)} | | | | | | | | |")
    else:
        lines.append(
            f"| {lr['samples']} x {lr['features']} | {lr['num_steps']} | {lr['num_fun_evals']} | "
            f"{lr['status']} | {_f(lr['wall_s'])} | {_f(lr['value_and_grad_s'])} "
            f"({_f(lr['value_and_grad_in_loop_s'])}) | {_f(lr['ratio'])} "
            f"({_f(lr['ratio_in_loop'])}) | ≤ {TARGETS['logreg']} | "
            f"{_verdict(lr['ratio'], TARGETS['logreg'])} |"
        )
    lines += [
        "",
        f"### Extended Rosenbrock, float32, to |g|_inf <= {data['gtol']}",
        "",
        "Wall after compile (median); iterations and evaluations from a separate counted run.",
        "",
        "| n | solver | wall s | iterations | evals | abs(g)_inf | reached gtol | hit max_steps |",
        "| ---: | --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for n, rows in data["rosenbrock"].items():
        for name in ("jaxsearch", "optax", "jaxopt", "optimistix"):
            row = rows[name]
            if "error" in row:
                lines.append(f"| {n} | {name} | {_err(row)} | | | | | |")
                continue
            lines.append(
                f"| {n} | {name} | {_f(row['wall_s'])} | {row['iterations']} | {row['evals']} | "
                f"{_f(row['gnorm_inf'])} | {row['reached_gtol']} | {row['hit_max_steps']} |"
            )
    lines += [
        "",
        "| n | jaxsearch / optax wall | target | result |",
        "| ---: | ---: | ---: | --- |",
    ]
    for n, rows in data["rosenbrock"].items():
        ratio = rows["ratio_jaxsearch_optax"]
        lines.append(
            f"| {n} | {_f(ratio)} | ≤ {TARGETS['rosenbrock']} | "
            f"{_verdict(ratio, TARGETS['rosenbrock'])} |"
        )
    lines += [
        "",
        f"### Bytes accessed per L-BFGS step (XLA cost analysis of one compiled step, "
        f"inner loops once) against the floor (4m + 8) x 4n bytes, m = {MEMORY_SIZE}",
        "",
        "| n | solver | bytes per step | floor | / floor |",
        "| ---: | --- | ---: | ---: | ---: |",
    ]
    for n, rows in data["rosenbrock"].items():
        b = rows["bytes"]
        for name in ("jaxsearch", "optax"):
            row = b[name]
            lines.append(
                f"| {n} | {name} | {_f(row.get('bytes_accessed'))} | {_f(b['floor_bytes'])} | "
                f"{_f(row.get('vs_floor')) if 'error' not in row else _err(row)} |"
            )
    return lines


def report_memory(d) -> list[str]:
    mib = 2.0**20
    target = TARGETS["memory"]
    return [
        f"## Memory: L-BFGS run (m = {d['memory_size']}), extended Rosenbrock n = {d['n']}, "
        "float32",
        "",
        "XLA memory analysis of the compiled run: temp + argument + output, in n-vectors "
        "(bytes / 4n).",
        "",
        "| temp MiB | argument MiB | output MiB | alias MiB | vectors | target | result "
        "| peak RSS MiB before → after | device peak MiB before → after |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |",
        f"| {d['temp_bytes'] / mib:.1f} | {d['argument_bytes'] / mib:.1f} | "
        f"{d['output_bytes'] / mib:.1f} | {d['alias_bytes'] / mib:.1f} | {d['vectors']:.2f} | "
        f"≤ {target} (2m + 6) | {_verdict(d['vectors'], target)} | "
        f"{d['peak_rss_before_bytes'] / mib:.0f} → {d['peak_rss_after_bytes'] / mib:.0f} | "
        f"{_mib(d['device_peak_before_bytes'])} → {_mib(d['device_peak_after_bytes'])} |",
    ]


def _mib(x):
    return "—" if x is None else f"{x / 2.0**20:.0f}"


def report_small(data) -> list[str]:
    lines = [
        f"## Small: 2-D Rosenbrock from (-1.2, 1), {data['dtype']}, gtol = {data['gtol']}",
        "",
        "Speed-up: scipy's median wall / this median wall (in brackets: the same for the "
        "fastest calls; scipy's 40-odd dispatches per run make it sensitive to CPU load).",
        "",
        "| solver | median wall s | iterations | evals | f | status | speed-up vs scipy "
        "| target | result |",
        "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |",
    ]
    for name, row in data["rows"].items():
        if "error" in row:
            lines.append(f"| {name} | {_err(row)} | | | | | | | |")
            continue
        target = TARGETS["small"] if name == "jaxsearch run" else None
        lines.append(
            f"| {name} | {_f(row['wall_s'])} | {row['iterations']} | {row['evals']} | "
            f"{_f(row['value'])} | {row['status'][:40]} | {_f(row['speedup_vs_scipy'])} "
            f"({_f(row['speedup_vs_scipy_min'])}) | "
            f"{f'≥ {target}' if target else ''} | "
            f"{_verdict(row['speedup_vs_scipy'], target, at_most=False) if target else ''} |"
        )
    return lines


REPORTS = {
    "compile": report_compile,
    "run": report_run,
    "memory": report_memory,
    "small": report_small,
}


def markdown(meta, results) -> str:
    lines = [
        f"# jaxsearch speed, {meta['backend']} ({meta['device_kind']})",
        "",
        f"{meta['started']}; jax {meta['versions']['jax']}; sizes: {meta['size_set']}; "
        f"command: `{' '.join(meta['argv'])}`",
    ]
    for name in sorted(results, key=SECTIONS.index):
        data = results[name]
        lines.append("")
        if "error" in data:
            lines += [f"## {name}", "", f"error: {data['error']}"]
        else:
            lines += REPORTS[name](data)
    return "\n".join(lines) + "\n"


def versions() -> dict:
    import importlib.metadata as md

    out = {"python": platform.python_version(), "machine": platform.machine()}
    for pkg in ("jax", "jaxlib", "equinox", "optax", "jaxopt", "optimistix", "scipy", "numpy"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


# ------------------------------------------------------------------------------------- main


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="quick sizes (default on CPU)")
    size.add_argument("--full", action="store_true", help="full sizes (default on GPU/TPU)")
    p.add_argument("--only", default=",".join(SECTIONS), help="comma list of " + ",".join(SECTIONS))
    p.add_argument("--out", default=str(output.RESULTS), help="output directory")
    a = p.parse_args(argv)
    a.sections = [s.strip() for s in a.only.split(",") if s.strip()]
    unknown = set(a.sections) - set(SECTIONS)
    if unknown:
        p.error(f"unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    return a


def main(argv=None):
    a = parse_args(argv)
    backend = jax.default_backend()
    full = a.full or (backend != "cpu" and not a.quick)
    sizes = FULL if full else QUICK
    meta = {
        "backend": backend,
        "device_kind": jax.devices()[0].device_kind,
        "device_count": jax.device_count(),
        "size_set": "full" if full else "quick",
        "sizes": dataclasses.asdict(sizes),
        "targets": TARGETS,
        "argv": sys.argv if argv is None else ["speed.py", *argv],
        "versions": versions(),
        "cpu": platform.processor() or platform.machine(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    runners = {
        "compile": lambda: section_compile(sizes),
        "run": lambda: section_run(sizes),
        "memory": lambda: section_memory(sizes.memory_n),
        "small": section_small,
    }
    out_dir = pathlib.Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = {}
    print(f"{backend} ({meta['device_kind']}), {meta['size_set']} sizes", flush=True)
    for name in sorted(a.sections, key=EXECUTION_ORDER.index):
        print(f"[{name}]", flush=True)
        t0 = time.perf_counter()
        results[name] = guarded(name, runners[name])
        results[name]["section_wall_s"] = time.perf_counter() - t0
        meta["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
        text = write(out_dir, backend, meta, results)  # after each section: partial results kept
    print("\n" + text)
    print(f"wrote {out_dir}/speed_{backend}.json and speed_{backend}.md")
    return 0


def write(out_dir, backend, meta, results) -> str:
    text = markdown(meta, results)
    output.write(out_dir, output.stem("speed", backend), text, {"meta": meta, "results": results})
    return text


if __name__ == "__main__":
    sys.exit(main())
