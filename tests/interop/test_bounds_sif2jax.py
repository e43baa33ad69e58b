"""L-BFGS-B on bound-constrained CUTEst problems from sif2jax, against scipy's L-BFGS-B (issue 9):
the same minimiser to 1e-6 in float64, at most 1.2x scipy's evaluations (+2), and a returned
point in the box. The full sweep is benchmarks/suite/bounded_vs_scipy.py.

The problems are a few of sif2jax's `bounded_minimisation_problems` on which the default
solver takes scipy's path to a unique minimiser (see the benchmark's table); between them
they have bounds active at the solution (HS2, HS3MOD: one each; DIAGIQB: 7 of 10; HS4: both,
at a corner), a variable fixed by lower == upper (BOX2), one-sided and two-sided boxes, and
interior minimisers of boxed problems (HART6, HS5).
"""

import importlib
import importlib.util
import pathlib
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize

import jaxsearch as js


def _sif2jax_problem(module: str, name: str):
    """An instance of sif2jax's problem `name` from `sif2jax.cutest._bounded_minimisation`.

    `import sif2jax` defines every one of its ~1000 problem classes and takes 30-80 s here, so
    when it has not been imported yet, the one module is imported under stand-in parent
    packages (no `__init__` run), which are removed again afterwards: a later `import sif2jax`
    then runs the real ones and reuses the modules loaded here."""
    full = f"sif2jax.cutest._bounded_minimisation.{module}"
    if "sif2jax.cutest" in sys.modules:
        return getattr(importlib.import_module(full), name)()
    root = pathlib.Path(importlib.util.find_spec("sif2jax").origin).parent
    parents = {
        "sif2jax": root,
        "sif2jax.cutest": root / "cutest",
        "sif2jax.cutest._bounded_minimisation": root / "cutest" / "_bounded_minimisation",
    }
    stand_ins = []
    for package, path in parents.items():
        if package not in sys.modules:
            stub = types.ModuleType(package)
            stub.__path__ = [str(path)]
            sys.modules[package] = stub
            stand_ins.append(package)
    try:
        return getattr(importlib.import_module(full), name)()
    finally:
        for package in stand_ins:
            del sys.modules[package]


class Objective:
    """A sif2jax objective f(y, args) as jaxsearch's fn(x, *args), equal (so sharing compiled
    programs) by problem name. The tests run under strict dtype promotion (conftest). The eight
    objectives below do trace under it in float64 (checked), but sif2jax writes f in NumPy
    style with no promise about implicit promotion, so f itself is traced under standard
    promotion, here and explicitly; the solver's own code stays under strict."""

    def __init__(self, problem):
        self.problem = problem
        self.name = problem.name

    def __call__(self, y, args):
        with jax.numpy_dtype_promotion("standard"):
            return jnp.asarray(self.problem.objective(y, args), y.dtype)

    def __eq__(self, other):
        return isinstance(other, Objective) and other.name == self.name

    def __hash__(self):
        return hash(("sif2jax", self.name))


# name -> module; each run of the default solver compiles in ~1-3 s, scipy's in < 0.5 s
PROBLEMS = {
    "HS2": "hs2",  # Rosenbrock with x2 >= 1.5: the lower bound active
    "HS3MOD": "hs3mod",  # x2 >= 0 active at the solution
    "HS4": "hs4",  # x1 >= 1, x2 >= 0 both active: the corner (1, 0)
    "HS5": "hs5",  # -1.5 <= x1 <= 4, -3 <= x2 <= 3: an interior minimiser
    "BOX2": "box2",  # x3 fixed by 1 <= x3 <= 1 (lower == upper), x1, x2 free
    "DIAGIQB": "diagiqb",  # n = 10 indefinite diagonal quadratic in a box, 7 bounds active
    "HART6": "hart6",  # Hartmann 6 in [0, 1]^6: interior local minimiser
}

SOLVER = js.Solver(max_steps=15_000)  # otherwise the defaults, as scipy's (maxiter 15000)


def _load(name):
    problem = _sif2jax_problem(PROBLEMS[name], name)
    n = int(problem.num_variables())
    lower, upper = problem.bounds
    lower = np.broadcast_to(np.asarray(-np.inf if lower is None else lower, np.float64), (n,))
    upper = np.broadcast_to(np.asarray(np.inf if upper is None else upper, np.float64), (n,))
    x0 = np.clip(np.asarray(problem.y0, np.float64).reshape(n), lower, upper)
    return Objective(problem), x0, problem.args, lower, upper


def _scipy_lbfgsb(fn, x0, args, lower, upper):
    value_and_grad = jax.jit(jax.value_and_grad(fn))

    def f(x):
        value, grad = value_and_grad(jnp.asarray(x), args)
        return float(value), np.asarray(grad, np.float64)

    return scipy.optimize.minimize(
        f, x0, jac=True, method="L-BFGS-B", bounds=scipy.optimize.Bounds(lower, upper)
    )


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_sif2jax_bounded_matches_scipy(name):
    with jax.enable_x64(True):
        fn, x0, args, lower, upper = _load(name)
        reference = _scipy_lbfgsb(fn, x0, args, lower, upper)
        assert reference.success, reference.message  # the comparison means something
        result = SOLVER.run(fn, jnp.asarray(x0), args, bounds=(lower, upper))
        x = np.asarray(result.params)
        assert x.dtype == np.float64
        status = js.Status(int(result.status))
        assert status.converged, status
        assert np.all(x >= lower) and np.all(x <= upper), (x, lower, upper)
        assert np.max(np.abs(x - reference.x)) <= 1e-6, (x, reference.x)
        assert abs(float(result.value) - reference.fun) <= 1e-8 * max(1.0, abs(reference.fun))
        evals = int(result.num_fun_evals)
        assert evals <= 1.2 * reference.nfev + 2, (evals, reference.nfev)
