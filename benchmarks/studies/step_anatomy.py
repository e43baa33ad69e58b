"""Where do the instructions of the compiled training step come from? (issue 61, item 1)
Date: 2026-12-07, commit 8677bc2

The training step of benchmarks/suite/first_call.py (an MLP 64-256-1, tanh, 4096 rows, mean
squared error, `solver.step` under `jax.jit`), compiled; every instruction of the optimised
HLO is charged to the innermost frame of jaxsearch's code that made it (XLA keeps each
instruction's Python stack in the module's StackFrames), grouped by area: fn's evaluation, the
direction, the line search, the engine and its transitions, the guards, the search's packing,
and the rest. Then the totals of the step for each direction x search, and optax.lbfgs's
documented update under the same jit. HLO instructions (fusions and their bodies) are what the
backend compiles; XLA's compile time grows with them, if not in proportion:

    python -m benchmarks.studies.step_anatomy
    python -m benchmarks.studies.step_anatomy --areas-only
"""

import argparse
import collections
import re

import jax
import jax.numpy as jnp
import optax

import jaxsearch as js
from benchmarks.studies.guards import loss, mlp

INSTRUCTION = re.compile(r"\s+(ROOT )?%\S+ = ")
# (area, a pattern of "file:function" of the innermost jaxsearch frame), first match wins
AREAS = (
    ("fn and its gradient", r"_compile/_programs\.py:call|_evaluate\.py|_objective\.py"),
    ("guard: fingerprint", r"_state\.py:(fingerprint|_mix|_weights|_add3|same_point)|own_params"),
    ("guard: resolution (min_step)", r"tree_min_step|_misc\.py:spacing"),
    ("guard: finiteness", r"tree_all_finite|:.*\.check$"),
    ("direction", r"_direction/"),
    ("line search", r"_linesearch/"),
    ("search packing", r"_packing\.py"),
    ("engine and transitions", r"_engine\.py|_transitions\.py|_machine\.py|_stopping\.py"),
    ("pytree helpers (selects, dots, norms)", r"_misc\.py|_box\.py"),
)


def sections(text: str, name: str) -> dict:
    start = text.index(name + "\n") + len(name) + 1
    found = {}
    for line in text[start:].splitlines():
        match = re.match(r"(\d+) (.*)", line)
        if not match:
            break
        found[int(match.group(1))] = match.group(2)
    return found


def innermost(text: str):
    """For each instruction: the innermost jaxsearch frame as "file:function", or None."""
    names = {k: v.strip('"') for k, v in sections(text, "FunctionNames").items()}
    files = {k: v.strip('"') for k, v in sections(text, "FileNames").items()}
    locations = {}
    for k, v in sections(text, "FileLocations").items():
        ids = dict(re.findall(r"(\w+)=(\d+)", v))
        locations[k] = (files[int(ids["file_name_id"])], names[int(ids["function_name_id"])])
    frames = {}
    for k, v in sections(text, "StackFrames").items():
        ids = dict(re.findall(r"(\w+)=(\d+)", v))
        frames[k] = (int(ids["file_location_id"]), int(ids["parent_frame_id"]))
    for line in text.splitlines():
        if not INSTRUCTION.match(line):
            continue
        frame = re.search(r"stack_frame_id=(\d+)", line)
        where = None
        fid = int(frame.group(1)) if frame else None
        while fid in frames:
            path, function = locations[frames[fid][0]]
            if "jaxsearch/" in path:
                where = path.split("jaxsearch/")[-1] + ":" + function
                break
            parent = frames[fid][1]
            fid = None if parent in (0, fid) else parent
        yield where


def area(where) -> str:
    if where is None:
        return "no jaxsearch frame (parameters, tuples, fusion wiring)"
    for name, pattern in AREAS:
        if re.search(pattern, where):
            return name
    return "other: " + where


def step_text(solver, p0, X, Y) -> str:
    state = solver.init(p0, value_dtype=jnp.float32)
    step = jax.jit(lambda p, s, X, Y: solver.step(loss, p, s, X, Y))
    return step.lower(p0, state, X, Y).compile().as_text()


def optax_text(p0, X, Y) -> str:
    opt = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(loss)

    def step(p, s, X, Y):
        value, grad = value_and_grad(p, X, Y, state=s)
        updates, s = opt.update(
            grad, s, p, value=value, grad=grad, value_fn=lambda q: loss(q, X, Y)
        )
        return optax.apply_updates(p, updates), s

    return jax.jit(step).lower(p0, opt.init(p0), X, Y).compile().as_text()


def count(text: str) -> int:
    return sum(1 for line in text.splitlines() if INSTRUCTION.match(line))


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--areas-only", action="store_true")
    options = parser.parse_args(argv)
    p0, X, Y = mlp(jax.random.key(0))
    device = jax.devices()[0]
    print(f"{jax.default_backend()} ({device.device_kind}), jax {jax.__version__}\n")
    text = step_text(js.Solver(gtol=0.0, ftol=0.0, max_steps=10**6), p0, X, Y)
    areas = collections.Counter(area(w) for w in innermost(text))
    total = sum(areas.values())
    print(f"`js.Solver()`'s step (L-BFGS, Zoom): {total} HLO instructions\n")
    print("| area | instructions | share |")
    print("| --- | ---: | ---: |")
    for name, n in areas.most_common():
        print(f"| {name} | {n} | {n / total:.1%} |")
    print(f"\noptax.lbfgs's update under the same jit: {count(optax_text(p0, X, Y))} instructions")
    if options.areas_only:
        return
    print("\n| direction | search | instructions |")
    print("| --- | --- | ---: |")
    directions = {
        "Gradient": js.Gradient,
        'LBFGS(form="two_loop")': lambda: js.LBFGS(form="two_loop"),
        'LBFGS(form="compact")': lambda: js.LBFGS(form="compact"),
    }
    searches = {
        "FixedStep(1e-3)": lambda: js.FixedStep(1e-3),
        "Backtracking": js.Backtracking,
        "Zoom": js.Zoom,
    }
    for d_name, direction in directions.items():
        for s_name, search in searches.items():
            solver = js.Solver(direction(), search(), gtol=0.0, ftol=0.0, max_steps=10**6)
            print(f"| {d_name} | {s_name} | {count(step_text(solver, p0, X, Y))} |")


if __name__ == "__main__":
    main()
