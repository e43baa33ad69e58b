"""The benchmark runner's evaluation counter (benchmarks/problems.py) agrees with the solvers'
own counts: it is how every solver's evaluations are compared (issue 4)."""

import importlib.util
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize

import jaxsearch as js

from .problems import rosenbrock

_PATH = pathlib.Path(__file__).parent.parent / "benchmarks" / "problems.py"
_spec = importlib.util.spec_from_file_location("benchmark_problems", _PATH)
benchmark_problems = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(benchmark_problems)


def _objective(x, args):
    del args
    return rosenbrock(x)


def test_counter_matches_jaxsearch():
    with jax.enable_x64(True):
        counter = benchmark_problems.Counter()
        fn = benchmark_problems.counted(_objective, counter)
        solver = js.Solver(gtol=1e-6, ftol=0.0)
        result = solver.run(fn, jnp.array([-1.2, 1.0]), None)
        evaluations, differentiated = counter.read()
        assert evaluations == int(result.num_fun_evals) > 10
        assert differentiated == evaluations


def test_counter_matches_scipy():
    with jax.enable_x64(True):
        counter = benchmark_problems.Counter()
        value_and_grad = jax.jit(
            jax.value_and_grad(benchmark_problems.counted(_objective, counter))
        )

        def f(x):
            value, grad = value_and_grad(jnp.asarray(x), None)
            return float(value), np.asarray(grad)

        f(np.zeros(2))  # compile
        counter.reset()
        reference = scipy.optimize.minimize(
            f, np.array([-1.2, 1.0]), jac=True, method="L-BFGS-B", options=dict(gtol=1e-6)
        )
        assert counter.read() == (reference.nfev, reference.nfev)
