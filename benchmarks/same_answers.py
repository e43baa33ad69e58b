"""Same answers across a restructuring: record a fixed set of float64 runs through the public
API, then compare another tree's record with it bit for bit.

    python3 -m benchmarks.same_answers record before.npz  # in the old tree
    python3 -m benchmarks.same_answers record after.npz   # in the new tree
    python3 -m benchmarks.same_answers compare before.npz after.npz

The set: every direction x every search (a fixed step with steepest descent only) on three
problems (extended Rosenbrock, a pytree of mixed shapes, an ill-conditioned quadratic), plus
runs with bounds, with aux, resumed in two halves, as a 15-call `step` loop, and under
`jax.vmap` — params, value, gradient norm, status, steps and evaluations of each, in float64
with XLA's default compile options (`compiler_options=None`, so that the lean options'
choice, which depends on the machine's load of nothing but fn, plays no part)."""

import sys

import jax
import jax.numpy as jnp
import numpy as np

import jaxsearch as js

DIRECTIONS = {
    "Gradient": lambda: js.Gradient(),
    "LBFGS": lambda: js.LBFGS(form="two_loop"),
    "LBFGS-compact": lambda: js.LBFGS(form="compact"),
    "BFGS": lambda: js.BFGS(),
    "NonlinearCG": lambda: js.NonlinearCG(),
    "NewtonCG": lambda: js.NewtonCG(),
}
SEARCHES = {
    "Zoom": lambda: js.Zoom(),
    "MoreThuente": lambda: js.MoreThuente(),
    "HagerZhang": lambda: js.HagerZhang(),
    "Backtracking": lambda: js.Backtracking(),
    "FixedStep": lambda: js.FixedStep(1e-3),
}


def rosenbrock(x):
    return jnp.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def tree_problem(p):
    return jnp.sum((p["a"] - 2.0) ** 4) + jnp.sum(jnp.cosh(p["b"] - 0.5)) + p["c"] ** 2


def quadratic(x):
    c = jnp.logspace(0, 3, x.size, dtype=x.dtype)
    return 0.5 * jnp.sum(c * (x - 1) ** 2)


PROBLEMS = {
    "rosenbrock": (rosenbrock, lambda: jnp.array([-1.2, 1.0, -1.2, 1.0])),
    "tree": (
        tree_problem,
        lambda: {"a": jnp.zeros(3), "b": jnp.array([[1.0, -1.0], [2.0, 0.0]]), "c": jnp.array(3.0)},
    ),
    "quadratic": (quadratic, lambda: jnp.zeros(6)),
}


def outcome(result) -> dict:
    fields = {
        "params": result.params,
        "value": result.value,
        "status": result.status,
        "num_steps": result.num_steps,
        "num_fun_evals": result.num_fun_evals,
    }
    flat = {}
    for key, value in fields.items():
        for i, leaf in enumerate(jax.tree.leaves(value)):
            flat[f"{key}.{i}"] = np.asarray(leaf)
    return flat


def state_outcome(params, state) -> dict:
    flat = {f"params.{i}": np.asarray(x) for i, x in enumerate(jax.tree.leaves(params))}
    flat["num_steps"] = np.asarray(state.num_steps)
    flat["num_fun_evals"] = np.asarray(state.num_fun_evals)
    flat["status"] = np.asarray(state.status)
    return flat


def record() -> dict:
    out = {}

    def put(name, flat):
        for key, value in flat.items():
            out[f"{name}/{key}"] = value

    for d_name, direction in DIRECTIONS.items():
        for s_name, search in SEARCHES.items():
            if s_name == "FixedStep" and d_name != "Gradient":
                continue
            solver = js.Solver(direction(), search(), gtol=1e-9, max_steps=300)
            for p_name, (fn, x0) in PROBLEMS.items():
                put(
                    f"{d_name}+{s_name}/{p_name}",
                    outcome(solver.run(fn, x0(), compiler_options=None)),
                )
            # A step loop of 15 calls on Rosenbrock.
            params = PROBLEMS["rosenbrock"][1]()
            state = solver.init(params)
            for _ in range(15):
                params, state = solver.step(rosenbrock, params, state)
            put(f"{d_name}+{s_name}/steps", state_outcome(params, state))
    for d_name in ["Gradient", "LBFGS", "LBFGS-compact"]:
        solver = js.Solver(DIRECTIONS[d_name](), gtol=1e-9, max_steps=300)
        bounds = (jnp.full(4, -0.5), jnp.full(4, 0.8))
        x0 = jnp.array([0.1, 0.2, -0.3, 0.4])
        put(
            f"{d_name}/bounds",
            outcome(solver.run(rosenbrock, x0, bounds=bounds, compiler_options=None)),
        )
    solver = js.Solver(js.LBFGS(), gtol=1e-9, max_steps=300, has_aux=True)
    aux_result = solver.run(
        lambda x: (rosenbrock(x), {"r": x - 1.0}),
        PROBLEMS["rosenbrock"][1](),
        compiler_options=None,
    )
    put("aux", outcome(aux_result) | {"aux": np.asarray(aux_result.aux["r"])})
    for d_name in ["LBFGS", "BFGS", "NonlinearCG"]:
        solver = js.Solver(DIRECTIONS[d_name](), gtol=1e-9, max_steps=12)
        first = solver.run(rosenbrock, PROBLEMS["rosenbrock"][1](), compiler_options=None)
        second = solver.run(rosenbrock, first.iterate, state=first.state, compiler_options=None)
        put(f"{d_name}/resume", outcome(second))
    solver = js.Solver(js.LBFGS(), gtol=1e-9, max_steps=300)
    starts = jnp.stack([jnp.array([-1.2, 1.0, -1.2, 1.0]) * s for s in (0.5, 1.0, 2.0)])
    put("vmap", outcome(jax.vmap(lambda x: solver.run(rosenbrock, x))(starts)))
    return out


def main():
    if sys.argv[1] == "record":
        with jax.enable_x64(True):
            out = record()
        np.savez(sys.argv[2], **out)
        runs = {k.rsplit("/", 1)[0] for k in out}
        print(f"{len(out)} arrays from {len(runs)} runs -> {sys.argv[2]}")
    elif sys.argv[1] == "compare":
        before, after = np.load(sys.argv[2]), np.load(sys.argv[3])
        differ = [
            k
            for k in before.files
            if k not in after.files or not np.array_equal(before[k], after[k], equal_nan=True)
        ]
        missing = sorted(set(after.files) - set(before.files))
        runs = {k.rsplit("/", 1)[0] for k in before.files}
        same = len(before.files) - len(differ)
        print(f"{same} of {len(before.files)} arrays the same bit for bit ({len(runs)} runs)")
        for k in differ:
            print("  differs:", k)
        for k in missing:
            print("  only after:", k)
        sys.exit(1 if differ else 0)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
