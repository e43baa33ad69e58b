"""The benchmark runner's evaluation counter (benchmarks/problems.py) agrees with the solvers'
own counts: it is how every solver's evaluations are compared (issue 4)."""

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize

import jaxsearch as js
from benchmarks import problems as benchmark_problems, summary as benchmark_summary

from ..problems import rosenbrock


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


def _row(solved, f, evals=10, iterations=8, compile_s=None, baseline=None):
    return dict(
        solved=solved,
        f=f,
        evals=evals,
        iterations=iterations,
        wall_s=0.1,
        compile_s=compile_s,
        value_and_grad_compile_s=baseline,
    )


def test_solved_at_the_lowest_f_excludes_plateaus():
    """A zero gradient at f = 9771 does not count where another solver reached f = 1168; within
    1e-4 max(1, |f_low|) of the lowest f does."""
    per = {
        "plateau": _row(True, 9771.0),
        "minimum": _row(True, 1168.0),
        "close": _row(True, 1168.0 + 0.1),
        "unsolved": _row(False, 1000.0),  # lower f, not stationary: still sets f_low
    }
    at = benchmark_summary.at_lowest_f
    assert not at(per, "plateau") and not at(per, "unsolved")
    assert not at(per, "minimum")  # 168 above f_low = 1000
    per["unsolved"]["f"] = 2000.0
    assert at(per, "minimum") and at(per, "close") and not at(per, "plateau")


def test_summary_ratios():
    rows = {
        "A": {"x": _row(True, 0.0, 12, 10, 2.0, 0.5), "scipy": _row(True, 0.0, 10, 9)},
        "B": {"x": _row(False, 5.0, 30, 10, 1.0, 0.5), "scipy": _row(True, 0.0, 20, 9)},
    }
    summary = benchmark_summary.summarise(rows, ["x", "scipy"])["x"]
    assert summary["solved"] == summary["solved_at_lowest_f"] == 1
    assert summary["median_evals_vs_scipy"] == 1.2  # only where both solved
    assert summary["mean_evals_per_iteration"] == (1.2 + 3.0) / 2
    assert summary["compile_vs_value_and_grad"] == 3.0  # (2 + 1) / (0.5 + 0.5)
    assert (
        benchmark_summary.summarise(rows, ["scipy"])["scipy"]["compile_vs_value_and_grad"] is None
    )
