"""The Solver converges, counts evaluations honestly, and reports why it stopped."""

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js

from ..helpers import pairs, solver
from ..problems import (
    QUADRATIC_WEIGHTS,
    ROSENBROCK_START,
    EvaluationLog,
    inf_norm,
    logistic,
    logistic_data,
    nan_away_from,
    quadratic,
    rosenbrock,
    rosenbrock_f32,
    rosenbrock_tree,
    scipy_minimize,
    spd_quadratic_data,
    weighted_quadratic,
)

# A subset of the registry (tests/helpers.py), to keep the suite's time down.
DIRECTION_NAMES = ["LBFGS", "Gradient"]
SEARCH_NAMES = ["Zoom", "Backtracking"]
PAIRS = pairs(DIRECTION_NAMES, SEARCH_NAMES)


def solver_for(direction, search, **kwargs):
    """Gradient descent gets enough steps; ftol=0 so only gtol can stop it as converged."""
    max_steps = 40_000 if direction == "Gradient" else 500
    kwargs = {"gtol": 1e-6, "ftol": 0.0, "max_steps": max_steps, **kwargs}
    return solver(direction, search, **kwargs)


@pytest.mark.parametrize("direction,search", PAIRS)
def test_rosenbrock_float64(direction, search):
    with jax.enable_x64(True):
        result = solver_for(direction, search).run(rosenbrock, jnp.array(ROSENBROCK_START))
        assert result.status == js.Status.CONVERGED_GTOL, result.message
        assert result.success
        np.testing.assert_allclose(result.params, [1.0, 1.0], atol=1e-5)
        # The reported value and gradient are those of the returned params (up to the
        # rounding differences between compiled and eager evaluation).
        np.testing.assert_allclose(result.value, rosenbrock(result.params), rtol=1e-6, atol=1e-14)
        np.testing.assert_allclose(
            result.grad, jax.grad(rosenbrock)(result.params), rtol=1e-6, atol=1e-12
        )
        assert inf_norm(result.grad) <= 1e-6


@pytest.mark.parametrize("direction,search", PAIRS)
def test_spd_quadratic_float64(direction, search):
    a, b, solution = spd_quadratic_data(n=50, cond=100.0)
    with jax.enable_x64(True):
        result = solver_for(direction, search).run(
            quadratic, jnp.zeros(50), jnp.asarray(a), jnp.asarray(b)
        )
        assert result.status == js.Status.CONVERGED_GTOL, result.message
        # |x - x*| <= |A^{-1}| |g| <= 1 * gtol * sqrt(n) (smallest eigenvalue is 1).
        np.testing.assert_allclose(result.params, solution, atol=1e-5)


@pytest.mark.parametrize("direction,search", PAIRS)
def test_logistic_regression_float64(direction, search):
    x, y = logistic_data()
    lam = 1e-2

    with jax.enable_x64(True):
        args = (jnp.asarray(x), jnp.asarray(y), lam)
        reference = scipy_minimize(
            logistic, np.zeros(10), args, method="L-BFGS-B", gtol=1e-10, ftol=0.0
        )
        result = solver_for(direction, search).run(
            logistic, jnp.zeros(10), jnp.asarray(x), jnp.asarray(y), lam
        )
        assert result.status == js.Status.CONVERGED_GTOL, result.message
        # Strong convexity (lam) bounds |w - w*| <= |g| / lam.
        np.testing.assert_allclose(result.params, reference.x, atol=2e-4)


def test_lbfgs_zoom_evaluations_against_scipy():
    """At most 1.2x scipy L-BFGS-B's evaluations on 2-D Rosenbrock, same tolerances."""
    with jax.enable_x64(True):
        reference = scipy_minimize(rosenbrock, ROSENBROCK_START, method="L-BFGS-B", gtol=1e-6)
        assert reference.success
        result = js.Solver(js.LBFGS(), js.Zoom(), gtol=1e-6).run(
            rosenbrock, jnp.array(ROSENBROCK_START)
        )
        assert result.success, result.message
        np.testing.assert_allclose(result.params, [1.0, 1.0], atol=1e-4)
        assert int(result.num_fun_evals) <= 1.2 * reference.nfev, (
            int(result.num_fun_evals),
            reference.nfev,
        )


# Module level, so that each keeps its identity (part of the compile key) across tests.
LOGGED = {"lowp-math": EvaluationLog(rosenbrock), "f32-math": EvaluationLog(rosenbrock_f32)}


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("direction,search", PAIRS)
@pytest.mark.parametrize("math", list(LOGGED))
def test_low_precision_is_honest(dtype, direction, search, math):
    """params, value and grad come from one evaluation in the run's own program, bit for bit
    (checked against that program's record of its evaluations, never against a second,
    separately compiled evaluation, which may round otherwise in low precision)."""
    fn = LOGGED[math]
    fn.records.clear()
    solver = solver_for(direction, search, gtol=1e-3, max_steps=300)
    x0 = jnp.array(ROSENBROCK_START, dtype)
    result = solver.run(fn, x0)
    assert result.params.dtype == dtype
    assert bool(jnp.all(jnp.isfinite(result.params)))
    honest = {js.Status.CONVERGED_GTOL, js.Status.STALLED, js.Status.LINESEARCH_FAILED}
    if direction == "Gradient":
        honest.add(js.Status.MAX_STEPS)  # gradient descent may simply be slow
    assert js.Status(int(result.status)) in honest, result.message
    # Whatever it claims is measured at the returned point, in the same program.
    fn.assert_evaluated(result.params, result.value, result.grad)
    if result.status == js.Status.CONVERGED_GTOL:
        assert inf_norm(result.grad) <= 1e-3
    # Never worse than the start, nor than any point it evaluated and accepted.
    assert float(result.value) <= float(fn.first_value)


def logistic_f32_math(w, x, y, lam):
    return logistic(w.astype(jnp.float32), x, y, lam)


@pytest.mark.parametrize("memory_dtype", [None, jnp.float32])
def test_bfloat16_params_reach_bfloat16_resolution(memory_dtype):
    """bfloat16 params with float32 arithmetic: L-BFGS gets within a few bfloat16 spacings
    of the float64 minimiser of a well-conditioned problem."""
    x, y = logistic_data(dtype=np.float32)
    with jax.enable_x64(True):
        reference = js.Solver(gtol=1e-10, ftol=0.0).run(
            logistic, jnp.zeros(10), jnp.asarray(x, np.float64), jnp.asarray(y, np.float64), 1e-2
        )
        w_star = np.asarray(reference.params)
    solver = js.Solver(js.LBFGS(memory_dtype=memory_dtype), js.Zoom(), gtol=1e-4, max_steps=300)
    result = solver.run(
        logistic_f32_math, jnp.zeros(10, jnp.bfloat16), jnp.asarray(x), jnp.asarray(y), 1e-2
    )
    assert result.params.dtype == jnp.bfloat16
    spacing = 2.0**-7 * np.abs(w_star).max()  # bfloat16 has 8 significant bits
    np.testing.assert_allclose(np.asarray(result.params, np.float64), w_star, atol=4 * spacing)


@pytest.mark.parametrize("direction,search", PAIRS)
def test_pytree_matches_flat(direction, search):
    solver = solver_for(direction, search, max_steps=200)
    with jax.enable_x64(True):
        flat = solver.run(rosenbrock, jnp.array(ROSENBROCK_START))
        tree = solver.run(rosenbrock_tree, {"a": jnp.array([-1.2]), "b": (jnp.array([1.0]),)})
        assert int(tree.status) == int(flat.status)
        assert int(tree.num_steps) == int(flat.num_steps)
        assert int(tree.num_fun_evals) == int(flat.num_fun_evals)
        np.testing.assert_allclose(tree.params["a"], flat.params[:1], rtol=1e-10)
        np.testing.assert_allclose(tree.params["b"][0], flat.params[1:], rtol=1e-10)


def test_mixed_dtype_pytree_runs():
    def fn(p):
        x = jnp.concatenate([p["lo"].astype(jnp.float32), p["hi"]])
        return rosenbrock(x)

    params = {"lo": jnp.array([-1.2], jnp.bfloat16), "hi": jnp.array([1.0], jnp.float32)}
    result = js.Solver(gtol=1e-3, max_steps=200).run(fn, params)
    assert result.params["lo"].dtype == jnp.bfloat16
    assert result.params["hi"].dtype == jnp.float32
    assert float(result.value) < 1e-2


def test_has_aux_returns_aux_at_final_point():
    def fn(x):
        return rosenbrock(x), {"residual": x - 1.0}

    with jax.enable_x64(True):
        result = js.Solver(gtol=1e-8, has_aux=True).run(fn, jnp.array(ROSENBROCK_START))
        assert result.success, result.message
        np.testing.assert_array_equal(result.aux["residual"], result.params - 1.0)


def test_step_loop_matches_run():
    solver = js.Solver(js.LBFGS(), js.Zoom(), gtol=1e-8, max_steps=100)
    with jax.enable_x64(True):
        x0 = jnp.array(ROSENBROCK_START)
        result = solver.run(rosenbrock, x0)
        params, state = x0, solver.init(x0)
        for _ in range(int(result.num_steps)):
            params, state = solver.step(rosenbrock, params, state)
        # Two programs compiled apart (a loop and one step, both with the lean options where
        # cheap) may round differently: 1 ulp in x[1] here, the same path.
        np.testing.assert_allclose(params, result.params, rtol=1e-14, atol=0)
        assert int(state.num_fun_evals) == int(result.num_fun_evals)
        assert int(state.status) == int(result.status)


def test_converged_start_takes_no_step():
    with jax.enable_x64(True):
        result = js.Solver().run(rosenbrock, jnp.array([1.0, 1.0]))
        assert result.status == js.Status.CONVERGED_GTOL
        assert int(result.num_steps) == 0
        assert int(result.num_fun_evals) == 1


def test_nonfinite_start_returns_input():
    x0 = jnp.array([jnp.nan, 1.0])
    result = js.Solver().run(rosenbrock, x0)
    assert result.status == js.Status.NONFINITE
    assert int(result.num_fun_evals) == 1
    np.testing.assert_array_equal(result.params, x0)


def barrier(x):
    """Finite only inside the unit ball; the unit first step lands outside it."""
    r = jnp.sum(x**2)
    return jnp.where(r < 1, -jnp.log1p(-r) + jnp.sum((x - 0.3) ** 2), jnp.nan)


@pytest.mark.parametrize("direction,search", PAIRS)
def test_nonfinite_trials_are_never_accepted(direction, search):
    with jax.enable_x64(True):
        result = solver_for(direction, search, gtol=1e-8).run(barrier, jnp.array([0.9, 0.0]))
        assert bool(jnp.all(jnp.isfinite(result.params)))
        assert result.status == js.Status.CONVERGED_GTOL, result.message


def test_stalled_is_not_converged():
    """bfloat16 params whose minimiser lies between two representable numbers: the search
    cannot make progress, and the run must not claim convergence."""

    def fn(x):
        return jnp.sum((x.astype(jnp.float32) - 0.3) ** 2)

    solver = js.Solver(js.LBFGS(), js.Backtracking(), gtol=0.0, ftol=0.0, max_steps=50)
    result = solver.run(fn, jnp.array([0.3], jnp.bfloat16))
    assert not result.success
    assert js.Status(int(result.status)) in {js.Status.STALLED, js.Status.LINESEARCH_FAILED}


def test_zero_decrease_below_value_resolution_is_not_ftol_convergence():
    """f rounds to the same bfloat16 value at every step. With ftol below bfloat16's
    resolution a zero decrease does not pass ftol: the searches judge the steps by their
    slopes and the run reaches the minimiser. An ftol that bfloat16 resolves stops at once."""

    def fn(x):
        return jnp.sum(1000.0 + (x - 0.3) ** 2).astype(jnp.bfloat16)

    x0 = jnp.array([0.31, -0.2])
    solver = js.Solver(js.Gradient(), js.Backtracking(), gtol=0.0, max_steps=50)
    result = solver.run(fn, x0)
    assert float(result.value) == float(fn(x0))
    assert result.status == js.Status.CONVERGED_GTOL, result.message
    np.testing.assert_allclose(np.asarray(result.params), 0.3, rtol=1e-6)
    coarse = js.Solver(js.Gradient(), js.Backtracking(), gtol=0.0, ftol=1e-2, max_steps=50)
    result = coarse.run(fn, x0)
    assert result.status == js.Status.CONVERGED_FTOL and int(result.num_steps) == 1


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"gtol": -1.0}, "gtol"),
        ({"ftol": -1.0}, "ftol"),
        ({"max_steps": 0}, "max_steps"),
    ],
)
def test_solver_rejects_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        js.Solver(**kwargs)


def test_solver_rejects_bad_components():
    with pytest.raises(TypeError, match="direction"):
        js.Solver(js.Zoom())
    with pytest.raises(ValueError, match="memory_size"):
        js.LBFGS(memory_size=0)


def test_bad_objective_outputs():
    x0 = jnp.zeros(2)
    with pytest.raises(TypeError, match="scalar"):
        js.Solver().run(lambda x: x, x0)
    with pytest.raises(TypeError, match="has_aux=True"):
        js.Solver().run(lambda x: (jnp.sum(x), x), x0)
    with pytest.raises(TypeError, match="has_aux=False"):
        js.Solver(has_aux=True).run(jnp.sum, x0)
    with pytest.raises(TypeError, match="floating"):
        js.Solver().run(lambda x: jnp.sum(x).astype(jnp.int32), x0)
    with pytest.raises(TypeError, match="value_dtype"):
        js.Solver().init(x0, value_dtype=jnp.int32)
    with pytest.raises(TypeError, match="floating"):
        js.Solver().init({"w": x0, "n": jnp.array(3)})


def test_equinox_module_params():
    """Only inexact array leaves are optimised; the rest of an eqx.Module passes through."""
    model = eqx.nn.MLP(2, 1, 4, 1, key=jax.random.key(0))
    x = jnp.linspace(-1, 1, 16).reshape(8, 2)
    y = jnp.sin(x[:, :1])

    def loss(m, x, y):
        return jnp.mean((jax.vmap(m)(x) - y) ** 2)

    result = js.Solver(max_steps=50).run(loss, model, x, y)
    assert result.params.activation is model.activation
    assert float(result.value) < float(loss(model, x, y))


class Scaled(eqx.Module):
    """A model with a Python float field: its static configuration, not a parameter."""

    w: jax.Array
    scale: float


def test_python_numbers_inside_equinox_modules_stay_configuration():
    """A Python number in a plain container of params is refused (test_errors); inside an
    Equinox module it is the module's configuration and passes through unchanged."""

    def loss(p):
        return jnp.sum((p["model"].scale * p["model"].w - 1.0) ** 2) + jnp.sum(p["b"] ** 2)

    params = {"model": Scaled(jnp.zeros(3), 2.0), "b": jnp.ones(2)}
    result = js.Solver().run(loss, params)
    assert result.params["model"].scale == 2.0
    np.testing.assert_allclose(result.params["model"].w, 0.5, atol=1e-5)
    assert bool(result.success)


def test_evaluation_count_is_honest():
    """num_fun_evals equals the number of times fn actually ran (a host-side counter)."""
    calls = []

    def counted(x):
        jax.debug.callback(lambda: calls.append(1))
        return rosenbrock(x)

    for method in (js.Solver(), js.Solver(js.Gradient(), js.Backtracking(), max_steps=50)):
        calls.clear()
        result = method.run(counted, jnp.array(ROSENBROCK_START))
        jax.effects_barrier()
        assert len(calls) == int(result.num_fun_evals) > int(result.num_steps) > 0


@pytest.mark.parametrize("direction,search", PAIRS)
def test_accepted_values_never_increase(direction, search):
    solver = solver_for(direction, search, max_steps=30)
    params = jnp.array(ROSENBROCK_START)
    state = solver.init(params)
    values = []
    for _ in range(30):
        params, state = solver.step(rosenbrock, params, state)
        values.append(float(state.value))
    assert values[0] <= float(rosenbrock(jnp.array(ROSENBROCK_START)))
    assert all(b <= a for a, b in zip(values, values[1:], strict=False))
    assert values[-1] < values[0]


class _Ascent(js.AbstractDirection):
    """A broken direction: +grad, and a state that counts computes since the last reset."""

    supports_bounds: ClassVar[bool] = False

    def init(self, params, dtype):
        return jnp.zeros((), jnp.int32)

    def compute(self, state, info):
        return info.grad, jnp.array(False), state + 1, jnp.full((), jnp.inf, info.dtype)

    def update(self, state, s, y, dtype, accept=True):
        return state

    def reset(self, state):
        return jnp.zeros((), jnp.int32)

    def gradient_replaced(self, state):
        return state


def test_non_descent_direction_restarts_from_steepest_descent():
    solver = js.Solver(_Ascent(), js.Zoom(), gtol=1e-6, ftol=0.0, max_steps=20_000)
    with jax.enable_x64(True):
        result = solver.run(rosenbrock, jnp.array(ROSENBROCK_START))
        assert result.status == js.Status.CONVERGED_GTOL, result.message
        params, state = jnp.array(ROSENBROCK_START), solver.init(jnp.array(ROSENBROCK_START))
        for _ in range(3):
            params, state = solver.step(rosenbrock, params, state)
            assert int(state.direction) == 0  # reset after every compute


def scaled_rosenbrock(x, scale):
    return (1 - x[0]) ** 2 + scale * (x[1] - x[0] ** 2) ** 2


def test_reevaluate_starts_the_next_step_from_the_new_batch():
    """After `reevaluate`, the next step evaluates f at its params on the new args first (so at
    least two evaluations: that one and a trial), and its state holds f and grad of the new
    objective at the point it returns."""
    solver = js.Solver(max_steps=50)
    params, state = jnp.array([-1.2, 1.0]), solver.init(jnp.array([-1.2, 1.0]))
    for _ in range(3):
        params, state = solver.step(scaled_rosenbrock, params, state, jnp.asarray(100.0))
    new_scale = jnp.asarray(10.0)
    fresh = solver.reevaluate(state)
    assert not bool(fresh.has_eval)
    moved, renewed = solver.step(scaled_rosenbrock, params, fresh, new_scale)
    assert int(renewed.num_fun_evals) - int(state.num_fun_evals) >= 2
    # The step started from f at params on the new batch: its value is no higher than that.
    assert float(renewed.value) <= float(scaled_rosenbrock(params, new_scale))
    np.testing.assert_allclose(renewed.value, scaled_rosenbrock(moved, new_scale), rtol=1e-6)
    np.testing.assert_allclose(
        renewed.grad, jax.grad(scaled_rosenbrock)(moved, new_scale), rtol=1e-5, atol=1e-6
    )


def test_runtime_type_checking_is_on_in_the_test_run():
    """pyproject's addopts install jaxtyping's import hook with beartype for jaxsearch, so an
    argument of the wrong type fails its annotation before the library's own checks run."""
    import jaxtyping

    with pytest.raises(jaxtyping.TypeCheckError):
        js.LBFGS(memory_dtype=3.5)


def test_throw_raises_on_failure_and_names_the_status():
    x0 = jnp.array([-1.2, 1.0])
    with pytest.raises(eqx.EquinoxRuntimeError, match="MAX_STEPS"):
        js.Solver(max_steps=3, throw=True).run(rosenbrock, x0)
    with pytest.raises(eqx.EquinoxRuntimeError, match="NONFINITE"):
        js.Solver(throw=True).run(lambda x: jnp.sum(x) * jnp.nan, x0)
    solver = js.Solver(throw=True)
    state = solver.init(x0)
    with pytest.raises(eqx.EquinoxRuntimeError, match="LINESEARCH_FAILED|STALLED"):
        solver.step(nan_away_from, x0, state, x0)
    # Converged runs return as usual.
    result = solver.run(rosenbrock, x0)
    assert result.status == js.Status.CONVERGED_GTOL or result.status == js.Status.CONVERGED_FTOL


@pytest.mark.parametrize("direction", ["LBFGS", "BFGS", "NonlinearCG", "Gradient"])
def test_state_after_a_failed_search_is_recoverable(direction):
    """A search that cannot move (every trial is NaN) leaves params and the cached f and grad
    as they were and resets the direction's memory; the next step on a sound objective goes
    on from there, with no NaN anywhere."""
    solver = js.Solver(getattr(js, direction)())
    x, weights = jnp.array([0.5, -0.3, 0.8]), QUADRATIC_WEIGHTS
    state = solver.init(x)
    for _ in range(2):  # (CG solves this 3-D quadratic in 3 steps)
        x, state = solver.step(weighted_quadratic, x, state, weights)
    assert int(state.num_steps) == 2 and state.status == js.Status.RUNNING
    failed_x, failed = solver.step(nan_away_from, x, state, x)
    assert failed.status in (js.Status.LINESEARCH_FAILED, js.Status.STALLED)
    np.testing.assert_array_equal(failed_x, x)
    assert float(failed.value) == float(state.value)
    reset = solver.direction.reset(failed.direction)
    for a, b in zip(jax.tree.leaves(reset), jax.tree.leaves(failed.direction), strict=True):
        np.testing.assert_array_equal(a, b)  # already reset
    new_x, after = solver.step(weighted_quadratic, failed_x, failed, weights)
    assert bool(jnp.all(jnp.isfinite(new_x))) and bool(jnp.isfinite(after.value))
    assert float(after.value) < float(failed.value)
