"""The retrace warning: a solver that compiles again and again for the same shapes because fn
is a new function object each call, computing something else each time (a closure over new
data), says so, once, and says how to fix it. New closures over the same computation share one
compile (tests/compile/test_same_computation.py) and never warn."""

import functools
import warnings

import jax
import jax.numpy as jnp
import pytest

import jaxsearch as js


def _square(x, scale):
    return scale * jnp.sum(x**2)


def _run_times(solver, make_fn, times, shape=(3,)):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(times):
            solver.run(make_fn(), jnp.full(shape, 1.0 + i))
    return [w for w in caught if issubclass(w.category, js.RetraceWarning)]


def _closure_over_new_data():
    """A new lambda over a new array each call: another computation's constants each time."""
    _closure_over_new_data.calls += 1
    centre = jnp.full((3,), float(_closure_over_new_data.calls))
    return lambda x: jnp.sum((x - centre) ** 2)


_closure_over_new_data.calls = 0


def test_new_lambda_over_new_data_per_call_warns_once():
    solver = js.Solver(max_steps=3, gtol=1e-3)  # its own settings: a compile key of its own
    caught = _run_times(solver, _closure_over_new_data, 5)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "new function object" in message and "args" in message and "run" in message


def test_new_lambda_over_the_same_computation_never_warns():
    solver = js.Solver(max_steps=3, gtol=1e-2)
    assert _run_times(solver, lambda: lambda x: jnp.sum(x**2), 5) == []


def test_new_partial_with_new_settings_per_call_warns():
    solver = js.Solver(max_steps=4, gtol=1e-3)
    scales = iter([2.0, 3.0, 4.0])
    caught = _run_times(solver, lambda: functools.partial(_square, scale=next(scales)), 3)
    assert len(caught) == 1


def test_same_function_never_warns():
    solver = js.Solver(max_steps=5, gtol=1e-3)
    assert _run_times(solver, lambda: _square_one, 5) == []


def _square_one(x):
    return jnp.sum(x**2)


def test_new_shapes_are_not_a_retrace_to_warn_about():
    solver = js.Solver(max_steps=6, gtol=1e-3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in (2, 3, 4, 5):
            solver.run(lambda x: jnp.sum(x**2), jnp.ones(n))
    assert not [w for w in caught if issubclass(w.category, js.RetraceWarning)]


def test_two_closures_are_not_yet_a_pattern():
    """Two different closures for the same shapes (e.g. two problems) compile twice: no
    warning until the third."""
    solver = js.Solver(max_steps=7, gtol=1e-3)
    assert _run_times(solver, _closure_over_new_data, 2) == []


def test_step_warns_too():
    solver = js.Solver(max_steps=8, gtol=1e-3)
    x = jnp.ones(3)
    state = solver.init(x)
    with pytest.warns(js.RetraceWarning, match="Solver.step"):
        for i in range(3):
            centre = jnp.full((3,), float(i))
            solver.step(lambda p, c=centre: jnp.sum((p - c) ** 2), x, state)


def test_the_same_function_never_warns_when_its_stand_in_is_made_anew():
    """The same fn object compiled again (caches cleared) is no new object to warn about,
    though its stand-in (the compile wing's `Computation`) is made anew each time."""
    from jaxsearch._compile import seam

    solver = js.Solver(max_steps=9, gtol=1e-3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            seam.forget_computations()
            jax.clear_caches()
            solver.run(_square_one, jnp.ones(3))
    assert not [w for w in caught if issubclass(w.category, js.RetraceWarning)]


def test_a_run_inside_a_callers_jit_never_warns():
    """Inside a caller's `jax.jit`, that jit's compile is the caller's: a new jit over a new
    closure per call is no retrace of the solver's own to warn about."""
    solver = js.Solver(max_steps=3, gtol=1e-2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(3):
            centre = jnp.full((3,), float(i))

            def fit(x, centre=centre):
                return solver.run(lambda p: jnp.sum((p - centre) ** 2), x).params

            jax.jit(fit)(jnp.ones(3))
    assert not [w for w in caught if issubclass(w.category, js.RetraceWarning)]
