"""Does the compact representation of L-BFGS beat the two-loop recursion? (issue 5)
Date: 2026-12-07, commit e365f29

    python -m benchmarks.studies.lbfgs_forms  # n = 1e5, 1e6, 1e7; m = 10; float32
    python -m benchmarks.studies.lbfgs_forms --n 1000000 --m 5,10,20
    python -m benchmarks.studies.lbfgs_forms --in-solver  # whole L-BFGS runs, n = 1e5, 1e6
    python -m benchmarks.studies.lbfgs_forms --auto --out benchmarks/results/lbfgs_forms_auto_tpu.md

`--auto` measures what `LBFGS(form="auto")` decides by, on this backend: for extended
Rosenbrock from n = 2 to 2^20 (`--n`, default 2,100,1000,10000,100000,1048576), the first
call of `jax.jit(run)` (trace, compile and run) and the wall per step after it, each form in
turn in one process; and `jax.jit(jax.vmap(run))` over batches of random starts (10^4 of
n = 2, 10^3 of n = 100, 100 of n = 10^4), its wall and how many problems end
CONVERGED_GTOL. `--select-limit K` sets `_slots.SELECT_LIMIT` (the buffer size up to which
a TPU reads a slot by a select) for the run.

`--in-solver` runs `Solver(direction, Zoom(), gtol=1e-3)` on extended Rosenbrock in float32
with `js.LBFGS(form="two_loop")` and `js.LBFGS(form="compact")`, where S'Y and Y'Y are
kept up to date inside the run, and reports compile time, wall time per step after compile,
and the compiled program's temporary memory in n-vectors.

The two-loop recursion (`js.LBFGS().compute`, Nocedal & Wright algorithm 7.4) walks the m
pairs one at a time: each step reads s_i or y_i and reads and writes the work vector, so a
direction moves about 4m n-vectors of memory plus 4m for the work vector, in 4m small kernels.

The compact representation of Byrd, Nocedal & Schnabel (1994, eq. 3.13) writes the inverse
Hessian as H = gamma I + [S  gamma Y] M [S'; gamma Y'] with S, Y the n x m matrices of the
pairs (oldest first), R the upper triangle of S'Y, D its diagonal, and

    M = [[R^-T (D + gamma Y'Y) R^-1, -R^-T], [-R^-1, 0]].

With a = S'g and b = Y'g (one pass over S and Y), H g = gamma g + S p + gamma Y q where
p = R^-T (D + gamma Y'Y) R^-1 a - gamma R^-T b and q = -R^-1 a (a second pass). S'Y and Y'Y
change by one row and column per iteration, and those come from the same products (S'y_new =
S'g_{k+1} - S'g_k, and so on), so an implementation keeps them at O(m^2) cost; here they are
given, not timed. Both forms are timed as jitted functions on the same full memory, after
compile, as the median of repeated calls; the script also checks that they agree.
"""

import argparse
import pathlib
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np

import jaxsearch as js
import jaxsearch.internal as jsi
from jaxsearch._direction import _slots


def full_memory(n: int, m: int, dtype):
    """An L-BFGS state holding m pairs (s, y) with s'y > 0, written oldest first to slots
    0 .. m-1 (so after m updates `head` is 0 again and slot order is chronological)."""
    direction = js.LBFGS(memory_size=m)
    rng = np.random.default_rng(0)
    state = direction.init(jnp.zeros(n, dtype), dtype)
    update = jax.jit(lambda st, s, y: direction.update(st, s, y, dtype))
    for _ in range(m):
        s = jnp.asarray(rng.standard_normal(n), dtype)
        y = jnp.asarray(s * rng.uniform(0.5, 2.0, n) + 0.1 * rng.standard_normal(n), dtype)
        state = update(state, s, y)
    assert int(state.count) == m and int(state.head) == 0
    return direction, state


def compact_direction(S, Y, StY, YtY, gamma, g):
    """-H g by the compact representation; S, Y are (m, n), oldest pair first."""
    R = jnp.triu(StY)
    D = jnp.diag(jnp.diag(StY))
    a, b = S @ g, Y @ g
    r_inv_a = jsl.solve_triangular(R, a, lower=False)
    middle = (D + gamma * YtY) @ r_inv_a - gamma * b
    p = jsl.solve_triangular(R, middle, trans="T", lower=False)
    q = -r_inv_a
    return -(gamma * g + p @ S + gamma * (q @ Y))


def median_s(fn, *args, reps: int) -> float:
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def compare(n: int, m: int, reps: int) -> dict:
    dtype = jnp.float32
    direction, state = full_memory(n, m, dtype)
    g = jnp.asarray(np.random.default_rng(1).standard_normal(n), dtype)
    two_loop = jax.jit(lambda st, g: direction.compute(st, jsi.DirectionInfo(None, g, dtype))[0])
    compact = jax.jit(compact_direction)
    S, Y = state.s, state.y
    StY = S @ Y.T  # maintained at O(m^2) per iteration by an implementation: not timed
    YtY = Y @ Y.T
    d_two_loop = two_loop(state, g)
    d_compact = compact(S, Y, StY, YtY, state.gamma, g)
    agreement = float(jnp.max(jnp.abs(d_compact - d_two_loop)) / jnp.max(jnp.abs(d_two_loop)))
    t_two_loop = median_s(two_loop, state, g, reps=reps)
    t_compact = median_s(compact, S, Y, StY, YtY, state.gamma, g, reps=reps)
    return dict(
        n=n,
        m=m,
        two_loop_s=t_two_loop,
        compact_s=t_compact,
        speedup=t_two_loop / t_compact,
        max_rel_difference=agreement,
    )


def rosenbrock(x):
    x1, x2 = x[0::2], x[1::2]
    return jnp.sum(100.0 * (x2 - x1**2) ** 2 + (1 - x1) ** 2)


def in_solver(n: int, direction, reps: int) -> dict:
    solver = js.Solver(direction, js.Zoom(), gtol=1e-3)
    x0 = jnp.tile(jnp.asarray([-1.2, 1.0], jnp.float32), n // 2)
    run = jax.jit(lambda x: solver.run(rosenbrock, x))
    jax.clear_caches()
    t0 = time.perf_counter()
    compiled = run.lower(x0).compile()
    compile_s = time.perf_counter() - t0
    result = jax.block_until_ready(compiled(x0))
    wall = median_s(compiled, x0, reps=reps)
    steps = int(result.num_steps)
    return dict(
        n=n,
        form=direction.form,
        compile_s=compile_s,
        steps=steps,
        evals=int(result.num_fun_evals),
        per_step_s=wall / steps,
        temp_vectors=compiled.memory_analysis().temp_size_in_bytes / (4 * n),
    )


def auto_rows(sizes, batches, reps: int, emit) -> None:
    """`--auto`'s two tables, each markdown line handed to `emit` as it is measured."""
    forms = ("two_loop", "compact")
    emit("| n | form | first call s | ms per step | steps |")
    emit("| ---: | --- | ---: | ---: | ---: |")
    for n in sizes:
        x0 = jnp.tile(jnp.asarray([-1.2, 1.0], jnp.float32), n // 2)
        for form in forms:
            solver = js.Solver(js.LBFGS(form=form), gtol=1e-3, ftol=0.0, max_steps=300)
            run = jax.jit(lambda x, solver=solver: solver.run(rosenbrock, x))
            t0 = time.perf_counter()
            steps = int(jax.block_until_ready(run(x0)).num_steps)
            first = time.perf_counter() - t0
            wall = min(median_s(run, x0, reps=1) for _ in range(reps))
            emit(f"| {n} | {form} | {first:.2f} | {1e3 * wall / steps:.3f} | {steps} |")
    emit("")
    emit("| problems x n | form | wall ms | CONVERGED_GTOL |")
    emit("| --- | --- | ---: | ---: |")
    for batch, n in batches:
        start = jnp.tile(jnp.asarray([-1.2, 1.0], jnp.float32), n // 2)
        x0s = start + 0.5 * jax.random.normal(jax.random.key(3), (batch, n), jnp.float32)
        for form in forms:
            solver = js.Solver(js.LBFGS(form=form), gtol=1e-4, max_steps=500)
            run = jax.jit(jax.vmap(lambda x, solver=solver: solver.run(rosenbrock, x)))
            converged = int(jnp.sum(run(x0s).status == js.Status.CONVERGED_GTOL))
            wall = min(median_s(run, x0s, reps=1) for _ in range(max(2, reps // 2)))
            emit(f"| {batch} x {n} | {form} | {1e3 * wall:.1f} | {converged} |")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", default="100000,1000000,10000000")
    parser.add_argument("--m", default="10")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--in-solver", action="store_true")
    parser.add_argument("--auto", action="store_true")
    parser.add_argument("--select-limit", type=int)
    parser.add_argument("--out", help="--auto: also write the tables to this markdown file")
    options = parser.parse_args(argv)
    device = jax.devices()[0]
    head = f"{jax.default_backend()} ({device.device_kind}), jax {jax.__version__}, float32"
    print(head + "\n")
    if options.auto:
        if options.select_limit is not None:
            _slots.SELECT_LIMIT = options.select_limit
        sizes = options.n
        if sizes == parser.get_default("n"):
            sizes = "2,100,1000,10000,100000,1048576"
        batches = ((10_000, 2), (1_000, 100), (100, 10_000))
        command = "python -m benchmarks.studies.lbfgs_forms " + " ".join(argv or sys.argv[1:])
        limit = f"; SELECT_LIMIT {_slots.SELECT_LIMIT}" if jax.default_backend() == "tpu" else ""
        lines = [f'# L-BFGS forms for "auto"\n\n{head}{limit}; `{command}`\n']

        def emit(line):  # the file is rewritten at each row: a run cut short keeps its rows
            print(line, flush=True)
            lines.append(line)
            if options.out:
                pathlib.Path(options.out).write_text("\n".join(lines) + "\n")

        auto_rows(list(map(int, sizes.split(","))), batches, max(3, options.reps // 4), emit)
        return
    if options.in_solver:
        n_values = "100000,1000000" if options.n == parser.get_default("n") else options.n
        print("| n | form | compile s | steps | evals | ms per step | temp n-vectors |")
        print("| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
        for n in map(int, n_values.split(",")):
            for direction in (js.LBFGS(form="two_loop"), js.LBFGS(form="compact")):
                r = in_solver(n, direction, max(3, options.reps // 4))
                print(
                    f"| {n} | {r['form']} | {r['compile_s']:.2f} | {r['steps']} | {r['evals']} "
                    f"| {1e3 * r['per_step_s']:.2f} | {r['temp_vectors']:.1f} |",
                    flush=True,
                )
        return
    print("| n | m | two-loop s | compact s | two-loop / compact | max relative difference |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for n in map(int, options.n.split(",")):
        for m in map(int, options.m.split(",")):
            r = compare(n, m, options.reps)
            print(
                f"| {r['n']} | {r['m']} | {r['two_loop_s']:.3g} | {r['compact_s']:.3g} "
                f"| {r['speedup']:.2f} | {r['max_rel_difference']:.1e} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
