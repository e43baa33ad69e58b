"""Inspection of the programs a solver traces and compiles, for the tests that pin their shape
(marked `program_shape`): the equations and control flow of a jaxpr, nested ones included, and
the copies in the optimised HLO of a compiled `run`."""

import re

import jax
import jax.numpy as jnp
from jax.extend import core as jcore

import jaxsearch as js

from .problems import rosenbrock


def control_flow(jaxpr) -> list[tuple[str, int]]:
    """(primitive, depth) of every while, cond and scan in `jaxpr`, nested ones included; the
    depth counts the control flow around it (not calls such as jit or custom_jvp)."""
    found = []

    def visit(jaxpr, depth):
        for eqn in jaxpr.eqns:
            inner = depth
            if eqn.primitive.name in ("while", "cond", "scan"):
                found.append((eqn.primitive.name, depth))
                inner = depth + 1
            for value in eqn.params.values():
                for sub in value if isinstance(value, list | tuple) else (value,):
                    if isinstance(sub, jcore.ClosedJaxpr):
                        visit(sub.jaxpr, inner)
                    elif isinstance(sub, jcore.Jaxpr):
                        visit(sub, inner)

    visit(jaxpr, 0)
    return found


def run_jaxpr(solver, **options):
    """The jaxpr of `solver.run` on Rosenbrock from a float32 2-vector (run's `options`)."""
    return jax.make_jaxpr(lambda x: solver.run(rosenbrock, x, **options).params)(
        jnp.zeros(2, jnp.float32)
    ).jaxpr


def all_eqns(jaxpr):
    """Every equation of `jaxpr`, those of nested jaxprs included."""
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():
            for sub in value if isinstance(value, list | tuple) else (value,):
                if isinstance(sub, jcore.ClosedJaxpr):
                    yield from all_eqns(sub.jaxpr)
                elif isinstance(sub, jcore.Jaxpr):
                    yield from all_eqns(sub)


def cond_branches(jaxpr) -> list[int]:
    """The number of branches of every cond in `jaxpr`, nested ones included."""
    return [len(eqn.params["branches"]) for eqn in all_eqns(jaxpr) if eqn.primitive.name == "cond"]


def lbfgs_memory_copies(n: int, form: str = "auto") -> list[str]:
    """The copies of an L-BFGS memory buffer ((m, n) float32) in the optimised program of a
    compiled `run` (the one that initialises it, outside the loop, aside)."""
    solver = js.Solver(js.LBFGS(memory_size=3, form=form))
    x0 = jnp.zeros(n, jnp.float32)
    text = jax.jit(lambda x: solver.run(rosenbrock, x).params).lower(x0).compile().as_text()
    return [
        line
        for line in text.splitlines()
        if f"f32[3,{n}]" in line and " copy(" in line and "broadcast" not in line
    ]


def loop_body_kernels(solver) -> int:
    """The kernels (fusions) and copies in the body of the main loop of `solver.run`'s
    optimised program, on Rosenbrock from a float32 2-vector under `jax.jit`: each is a
    thunk XLA:CPU runs at every iteration (the branches of its conditionals aside)."""
    x0 = jnp.zeros(2, jnp.float32)
    text = jax.jit(lambda x: solver.run(rosenbrock, x).params).lower(x0).compile().as_text()
    bodies = re.findall(r" while\(.*?body=(%[\w.\-]+)", text)
    computations = {}
    for block in text.split("\n\n"):
        header = re.match(r"^(?:ENTRY )?(%[\w.\-]+) ", block.strip())
        if header:
            computations[header.group(1)] = block
    # the main loop: the body with the most kernels (the directions' own loops are small)
    return max(
        sum((" fusion(" in line) or (" copy(" in line) for line in computations[body].splitlines())
        for body in bodies
    )
