"""Params on a device mesh: `run` and a jitted `step` keep every parameter-sized leaf (result,
state, L-BFGS memory) sharded like the params, gather no parameter-sized array, and agree
with a single-device run.

Each test runs a script in a subprocess with 8 simulated CPU devices (XLA_FLAGS must be set
before jax is imported), on both kinds of mesh: `Auto` (the partitioner chooses shardings)
and `Explicit` (shardings in the types, `jax.make_mesh`'s default). The scripts' jits compile
with the lean XLA options (`tests/helpers.py`'s LEAN): they change how XLA's CPU backend emits
the fusions, not the partitioner's collectives (the same ops on the same shapes in every
program here as under XLA's defaults) or what is computed, at about half the compile time.
"""

import pathlib
import subprocess
import sys

import pytest

# Each script asserts that the compiled `run` and `step` hold no parameter-sized collective.
pytestmark = pytest.mark.program_shape

ROOT = pathlib.Path(__file__).resolve().parents[2]

SCRIPT = r"""
import os, re, sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")
import jaxsearch as js
from jaxsearch._compile.seam import LEAN_OPTIONS

LEAN = dict(LEAN_OPTIONS) if jax.default_backend() == "cpu" else None  # as tests/helpers.py
n, N = 8 * 32, 32  # parameters (sharded), examples (replicated)
rng = np.random.default_rng(0)
A_np = rng.standard_normal((N, n)) / np.sqrt(n)
b_np = np.where(A_np @ rng.standard_normal(n) + 0.1 * rng.standard_normal(N) > 0, 1.0, -1.0)


def loss(w, A, b):  # logistic regression, features sharded: A is (N, n) with P(None, "x")
    z = b * jnp.sum(A * w, axis=1)  # a reduction, not a dot: no out_sharding to name
    return jnp.mean(jnp.logaddexp(0.0, -z)) + 5e-4 * jnp.sum(w * w)


COLLECTIVE = re.compile(
    r"=\s*(.+?)\s+(all-gather|all-reduce|all-to-all|collective-permute|reduce-scatter)"
    r"(-start)?\("
)


def big_collectives(hlo):
    # Collectives whose result holds a parameter-sized array (n elements or more); scalar
    # all-reduces of inner products and the (N,) all-reduce of A w are fine.
    found = []
    for line in hlo.splitlines():
        m = COLLECTIVE.search(line)
        if not m:
            continue
        for dims in re.findall(r"\[([0-9,]*)\]", m.group(1)):
            size = int(np.prod([int(d) for d in dims.split(",") if d]))
            if size >= n:
                found.append(line.strip()[:160])
    return found


def param_sized(tree):
    return [
        (jax.tree_util.keystr(path), leaf)
        for path, leaf in jax.tree_util.tree_leaves_with_path(tree)
        if isinstance(leaf, jax.Array) and leaf.size >= n
    ]


def check_sharded(what, tree, mesh):
    leaves = param_sized(tree)
    assert leaves, what
    for name, leaf in leaves:
        spec = P("x") if leaf.ndim == 1 else P(None, "x")  # (m, n) memory: replicated on m
        want = NamedSharding(mesh, spec)
        assert leaf.sharding.is_equivalent_to(want, leaf.ndim), (what, name, leaf.sharding)
    return len(leaves)


def close(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    err = float(np.max(np.abs(a - b)))
    assert np.allclose(a, b, rtol=1e-6, atol=1e-12), (what, err)
    return err


directions = {
    "LBFGS": lambda: js.Solver(),
    "LBFGS-compact": lambda: js.Solver(js.LBFGS(form="compact")),
    "Gradient": lambda: js.Solver(js.Gradient(), max_steps=30),
    "NonlinearCG": lambda: js.Solver(js.NonlinearCG(), max_steps=30),
    "NewtonCG": lambda: js.Solver(js.NewtonCG(max_cg_steps=10)),
}
for item in sys.argv[1:]:
    kind, name = item.split(":")
    axis_type = {"auto": AxisType.Auto, "explicit": AxisType.Explicit}[kind]
    mesh = jax.make_mesh((8,), ("x",), axis_types=(axis_type,))
    solver = directions[name]()
    w0 = jax.device_put(jnp.zeros(n), NamedSharding(mesh, P("x")))
    A = jax.device_put(jnp.asarray(A_np), NamedSharding(mesh, P(None, "x")))
    b = jax.device_put(jnp.asarray(b_np), NamedSharding(mesh, P()))
    single = (jnp.zeros(n), jnp.asarray(A_np), jnp.asarray(b_np))

    # run: (a) result sharded like params, (c) no parameter-sized collective, (d) agreement
    run_jit = jax.jit(lambda x0, A, b: solver.run(loss, x0, A, b), compiler_options=LEAN)
    run = run_jit.lower(w0, A, b).compile()
    assert not big_collectives(run.as_text()), big_collectives(run.as_text())
    result = run(w0, A, b)
    reference = run_jit(*single)
    assert js.Status(int(result.status)).converged, js.Status(int(result.status))
    assert int(result.num_steps) == int(reference.num_steps)
    check_sharded("run", (result.params, result.grad), mesh)
    run_err = close(result.params, reference.params, "run params")

    # step: (b) every parameter-sized state leaf sharded like params, from init on
    state = solver.init(w0, fn=loss, args=(A, b))
    leaves = check_sharded("init", state, mesh)
    step = jax.jit(lambda p, s, A, b: solver.step(loss, p, s, A, b), compiler_options=LEAN)
    compiled = step.lower(w0, state, A, b).compile()
    assert not big_collectives(compiled.as_text()), big_collectives(compiled.as_text())
    p, s = w0, state
    p1, s1 = single[0], solver.init(single[0], fn=loss, args=single[1:])
    for _ in range(3):
        p, s = compiled(p, s, A, b)  # compiled for init's shardings: later states match them
        p1, s1 = step(p1, s1, *single[1:])
        check_sharded("step", (p, s), mesh)
    step_err = max(
        close(p, p1, "step params"),
        close(s.grad, s1.grad, "step grad"),
        *(close(x, y, "step state") for (_, x), (_, y) in zip(param_sized(s), param_sized(s1))),
    )
    print(
        f"{kind:8} {name:13} steps {int(result.num_steps):2} run diff {run_err:.1e} "
        f"step diff {step_err:.1e} sharded state leaves {leaves} OK"
    )
"""


def run_script(*cases):
    completed = subprocess.run(
        [sys.executable, "-c", SCRIPT, *cases],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    lines = [line for line in completed.stdout.splitlines() if line.endswith(" OK")]
    assert len(lines) == len(cases), completed.stdout
    print(completed.stdout)


def test_lbfgs_sharded():
    """The default solver (L-BFGS memory with a leading (memory_size,) axis), in both forms
    (the compact form's products with the memory are reduced over the sharded axis)."""
    run_script("auto:LBFGS", "explicit:LBFGS", "auto:LBFGS-compact", "explicit:LBFGS-compact")


def test_other_directions_sharded():
    """Steepest descent, nonlinear CG (g and d in its state) and Newton-CG (Hessian-vector
    products); BFGS keeps a dense n x n matrix and is not meant for sharded params."""
    run_script("explicit:Gradient", "auto:NonlinearCG", "auto:NewtonCG")
