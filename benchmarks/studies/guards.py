"""What does each guard inside a step cost? (issue 61, item 3)
Date: 2026-12-07, commit 47c4e2e

The training step of benchmarks/suite/first_call.py (an MLP 64-256-1, tanh, 4096 rows, mean
squared error, `js.Solver(gtol=0.0, ftol=0.0, max_steps=10**6)`, the step
`jax.jit(lambda p, s, X, Y: solver.step(f, p, s, X, Y))`), compiled with each guard taken
out in turn, by patching the private function that computes it while the step is traced:

- `fingerprint`: the foreign-params check (`_traced.own_params`) and the fingerprint of the
  returned params;
- `min_step`: the search's resolution limit (`_misc.tree_min_step`, a pass over x and d);
- `finite`: the finiteness check of f and the gradient at a step's start (`Engine.check`).

Prints, per variant, the HLO instructions of the compiled step, its compile seconds and
its ms per step (the minimum over interleaved blocks of 50 steps after 6 warm-up steps),
and each one's share of the whole step (1 - variant / all guards):

    python -m benchmarks.studies.guards
    python -m benchmarks.studies.guards --rounds 7
"""

import argparse
import contextlib
import re
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxsearch as js
from jaxsearch import _engine, _traced, _transitions
from jaxsearch._state import fingerprint_dtype


def mlp(key, rows=4096, width=256):
    k1, k2, k3, k4 = jax.random.split(key, 4)
    X = jax.random.normal(k1, (rows, 64))
    Y = jax.random.normal(k2, (rows, 1))
    p0 = {
        "w1": jax.random.normal(k3, (64, width)) / 8,
        "b1": jnp.zeros(width),
        "w2": jax.random.normal(k4, (width, 1)) / 16,
        "b2": jnp.zeros(1),
    }
    return p0, X, Y


def loss(p, X, Y):
    h = jnp.tanh(X @ p["w1"] + p["b1"])
    return jnp.mean((h @ p["w2"] + p["b2"] - Y) ** 2)


@contextlib.contextmanager
def patched(obj, name, value):
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def no_fingerprint():
    stack = contextlib.ExitStack()
    stack.enter_context(patched(_traced, "own_params", lambda state, diff: state))
    zeros = lambda x: jnp.zeros(2, fingerprint_dtype(x))  # noqa: E731
    stack.enter_context(patched(_traced, "fingerprint", zeros))
    return stack


def no_min_step():
    return patched(_transitions, "tree_min_step", lambda x, d, dtype: jnp.zeros((), dtype))


def no_finite_check():
    def check(self, value, grad, grad_norm):
        code = jnp.where(grad_norm <= self.solver.gtol, js.Status.CONVERGED_GTOL, js.Status.RUNNING)
        return code.astype(jnp.int32)

    return patched(_engine.Engine, "check", check)


VARIANTS = {
    "all guards": contextlib.nullcontext,
    "no fingerprint": no_fingerprint,
    "no min_step": no_min_step,
    "no finite check": no_finite_check,
}


def compiled(solver, args, variant):
    js.clear_caches()
    jax.clear_caches()
    with VARIANTS[variant]():
        step = jax.jit(lambda p, s, X, Y: solver.step(loss, p, s, X, Y))
        start = time.perf_counter()
        program = step.lower(*args).compile()
        seconds = time.perf_counter() - start
    text = program.as_text()
    instructions = sum(1 for line in text.splitlines() if re.match(r"\s+(ROOT )?%\S+ = ", line))
    return program, seconds, instructions


def block(program, p, s, X, Y, steps):
    start = time.perf_counter()
    for _ in range(steps):
        p, s = program(p, s, X, Y)
    jax.block_until_ready((p, s))
    return (time.perf_counter() - start) / steps, p, s


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=50)
    options = parser.parse_args(argv)
    p0, X, Y = mlp(jax.random.key(0))
    solver = js.Solver(gtol=0.0, ftol=0.0, max_steps=10**6)
    s0 = solver.init(p0, value_dtype=jnp.float32)
    built = {v: compiled(solver, (p0, s0, X, Y), v) for v in VARIANTS}
    runs = {}
    for v, (program, _, _) in built.items():
        _, p, s = block(program, p0, s0, X, Y, 6)
        runs[v] = (p, s)
    best = {v: np.inf for v in VARIANTS}
    for _ in range(options.rounds):
        for v, (program, _, _) in built.items():
            t, p, s = block(program, *runs[v], X, Y, options.steps)
            runs[v] = (p, s)
            best[v] = min(best[v], t)
    device = jax.devices()[0]
    print(f"{jax.default_backend()} ({device.device_kind}), jax {jax.__version__}")
    print("| variant | HLO instructions | compile s | ms per step | share of the step |")
    print("| --- | ---: | ---: | ---: | ---: |")
    whole = best["all guards"]
    for v, (_, seconds, instructions) in built.items():
        share = 1 - best[v] / whole
        print(f"| {v} | {instructions} | {seconds:.2f} | {1e3 * best[v]:.3f} | {share:+.1%} |")


if __name__ == "__main__":
    main()
