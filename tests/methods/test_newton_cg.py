"""Newton-CG: the exact Newton step with a tiny forcing term, the negative-curvature exits of
N&W algorithm 7.1, evaluations against scipy's Newton-CG computed live, float32 and mixed
precision, compile-once, and constructor validation."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize

import jaxsearch as js
from jaxsearch._direction._newton_cg import CGExit, NewtonCG

from ..helpers import compute
from ..problems import (
    ROSENBROCK_START,
    avals,
    inf_norm,
    logistic,
    logistic_data,
    quadratic,
    rosenbrock,
    rosenbrock_f32,
    spd_quadratic_data,
)


def hvp_of(fn, x, *args):
    return lambda v: jax.jvp(lambda p: jax.grad(fn)(p, *args), (x,), (v,))[1]


# ------------------------------------------------------------------- exact Newton step


def test_tiny_forcing_gives_exact_newton_step():
    n = 20
    a, b, solution = spd_quadratic_data(n=n, cond=100.0)
    x0 = np.random.default_rng(3).standard_normal(n)
    direction = NewtonCG(forcing=1e-13, max_cg_steps=200)
    with jax.enable_x64(True):
        args = (jnp.asarray(a), jnp.asarray(b))
        x = jnp.asarray(x0)
        g = jax.grad(quadratic)(x, *args)
        state = direction.init(x, jnp.float64)
        d, scaled, new = compute(direction, state, g, jnp.float64, hvp_of(quadratic, x, *args))
        np.testing.assert_allclose(d, -np.linalg.solve(a, np.asarray(g)), rtol=1e-8)
        assert bool(scaled) and d.dtype == jnp.float64
        assert int(new.exit) == CGExit.CONVERGED
        assert 1 <= int(new.cg_steps) == int(new.num_hvp) <= 200
        assert avals(new) == avals(state)
        print(f"exact Newton step on n={n}: {int(new.cg_steps)} CG steps")

        for search in (js.Zoom(), js.MoreThuente()):
            solver = js.Solver(direction, search, gtol=1e-8, ftol=0.0)
            result = solver.run(quadratic, x, *args)
            assert result.status == js.Status.CONVERGED_GTOL, result.message
            assert 1 <= int(result.num_steps) <= 2
            np.testing.assert_allclose(result.params, solution, rtol=1e-7)


def test_compute_needs_hvp():
    direction = NewtonCG()
    state = direction.init(jnp.zeros(2), jnp.float32)
    with pytest.raises(ValueError, match="Hessian-vector products"):
        compute(direction, state, jnp.ones(2), jnp.float32)


def test_zero_gradient_gives_zero_direction():
    direction = NewtonCG()
    state = direction.init(jnp.zeros(2), jnp.float32)
    d, _, new = compute(direction, state, jnp.zeros(2), jnp.float32, lambda v: v)
    np.testing.assert_array_equal(d, jnp.zeros(2))
    assert int(new.num_hvp) == 0


# ------------------------------------------------------------------- negative curvature


def saddle(x):
    """x0^2 - x1^2 + x1^4: Hessian diag(2, 12 x1^2 - 2), indefinite for |x1| < 1/sqrt(6);
    local minimisers (0, +-1/sqrt(2)), a saddle at 0."""
    return x[0] ** 2 - x[1] ** 2 + x[1] ** 4


def test_negative_curvature_at_first_inner_step_gives_steepest_descent():
    """At (0, 0.1), p_0 = -g = (0, 0.196) has p'Hp < 0: d = -g, and unscaled."""
    with jax.enable_x64(True):
        x = jnp.array([0.0, 0.1])
        g = jax.grad(saddle)(x)
        direction = NewtonCG()
        d, scaled, state = compute(
            direction, direction.init(x, jnp.float64), g, jnp.float64, hvp_of(saddle, x)
        )
        np.testing.assert_array_equal(d, -g)
        assert not bool(scaled)
        assert int(state.exit) == CGExit.NEGATIVE_CURVATURE
        assert int(state.cg_steps) == 0 and int(state.num_hvp) == 1


def test_negative_curvature_later_returns_last_iterate():
    """At (1, 0.1), p_0 = -g has positive curvature; p_1 is H-conjugate to p_0 in 2-D with H
    indefinite, so its curvature is negative: d = z_1 = alpha_0 (-g). (A small forcing term
    keeps the residual test from ending the loop at z_1 first.)"""
    with jax.enable_x64(True):
        x = jnp.array([1.0, 0.1])
        g = np.asarray(jax.grad(saddle)(x))
        hess = np.asarray(jax.hessian(saddle)(x))
        assert np.linalg.eigvalsh(hess)[0] < 0
        direction = NewtonCG(forcing=1e-6)
        d, scaled, state = compute(
            direction,
            direction.init(x, jnp.float64),
            jnp.asarray(g),
            jnp.float64,
            hvp_of(saddle, x),
        )
        alpha0 = (g @ g) / (g @ hess @ g)
        np.testing.assert_allclose(d, -alpha0 * g, rtol=1e-12)
        assert float(jnp.dot(d, g)) < 0 and bool(scaled)
        assert int(state.exit) == CGExit.NEGATIVE_CURVATURE
        assert int(state.cg_steps) == 1 and int(state.num_hvp) == 2


def shifted_saddle(x):
    """`saddle` moved by 0.5 along x0: minimisers (0.5, +-1/sqrt(2)). Runs use it because a
    parameter exactly 0.0 with a zero direction entry makes the solver's `tree_min_step`
    NaN (see `test_saddle_run_through_zero_parameter`)."""
    return (x[0] - 0.5) ** 2 - x[1] ** 2 + x[1] ** 4


@pytest.mark.parametrize("start", [(0.5, 0.1), (1.5, 0.1), (1.5, -0.2)])
@pytest.mark.parametrize("search", [js.Zoom(), js.MoreThuente()], ids=["zoom", "more-thuente"])
def test_indefinite_start_reaches_a_local_minimiser(start, search):
    """From points where the Hessian is indefinite (the first start exits CG at j = 0 with
    d = -g, the others later), every direction is a descent direction (the solver would
    otherwise replace it and reset: counted below) and the run ends at a local minimiser."""
    with jax.enable_x64(True):
        x0 = jnp.array(start)
        assert np.linalg.eigvalsh(np.asarray(jax.hessian(shifted_saddle)(x0)))[0] < 0
        g = jax.grad(shifted_saddle)(x0)
        direction = NewtonCG()
        d, _, first = compute(
            direction, direction.init(x0, jnp.float64), g, jnp.float64, hvp_of(shifted_saddle, x0)
        )
        assert float(jnp.dot(d, g)) < 0
        assert int(first.exit) in (CGExit.NEGATIVE_CURVATURE, CGExit.CONVERGED)
        result = js.Solver(direction, search, gtol=1e-10, ftol=0.0).run(shifted_saddle, x0)
        assert result.status == js.Status.CONVERGED_GTOL, result.message
        np.testing.assert_allclose(result.params[0], 0.5, atol=1e-9)
        np.testing.assert_allclose(abs(float(result.params[1])), 1 / np.sqrt(2), atol=1e-9)
        assert np.sign(float(result.params[1])) == np.sign(start[1])
        hessian = np.asarray(jax.hessian(shifted_saddle)(result.params))
        assert np.linalg.eigvalsh(hessian)[0] > 0


def test_saddle_run_through_zero_parameter():
    """The unshifted saddle from (1, 0.1): the Newton step in x0 lands on exactly 0.0."""
    with jax.enable_x64(True):
        result = js.Solver(NewtonCG(), js.Zoom(), gtol=1e-10, ftol=0.0).run(
            saddle, jnp.array([1.0, 0.1])
        )
        assert result.status == js.Status.CONVERGED_GTOL, result.message


# ----------------------------------------------------------------- scipy's Newton-CG


def scipy_newton_cg(fn, x0, args, gtol):
    """scipy Newton-CG stopped by the same criterion as ours: a callback ends the run once
    |grad|_inf <= gtol at the new iterate (scipy's own test is on the step length; its
    callback gradient is computed separately and not counted)."""
    value_and_grad = jax.jit(jax.value_and_grad(fn))
    hessp = jax.jit(lambda x, v, *a: jax.jvp(lambda p: jax.grad(fn)(p, *a), (x,), (v,))[1])
    grad = jax.jit(jax.grad(fn))

    def callback(intermediate_result):
        if np.max(np.abs(np.asarray(grad(jnp.asarray(intermediate_result.x), *args)))) <= gtol:
            raise StopIteration

    return scipy.optimize.minimize(
        lambda x: float(value_and_grad(jnp.asarray(x), *args)[0]),
        np.asarray(x0),
        jac=lambda x: np.asarray(value_and_grad(jnp.asarray(x), *args)[1]),
        hessp=lambda x, v: np.asarray(hessp(jnp.asarray(x), jnp.asarray(v), *args)),
        method="Newton-CG",
        callback=callback,
        options={"xtol": 1e-14, "maxiter": 10_000},
    )


def comparison_problems():
    x, y = logistic_data()
    return {
        "rosenbrock-2": (rosenbrock, np.array(ROSENBROCK_START), ()),
        "rosenbrock-10": (rosenbrock, np.array(ROSENBROCK_START * 5), ()),
        "logistic": (logistic, np.zeros(10), (jnp.asarray(x), jnp.asarray(y), 1e-2)),
    }


COMPARISON = ["rosenbrock-2", "rosenbrock-10", "logistic"]


@functools.cache
def scipy_reference(problem, gtol):
    """scipy's result for a comparison problem (computed once per session, in float64)."""
    with jax.enable_x64(True):
        fn, x0, args = comparison_problems()[problem]
        return scipy_newton_cg(fn, x0, args, gtol)


SEARCHES = {"zoom": js.Zoom(), "more-thuente": js.MoreThuente()}


@pytest.mark.parametrize("search", SEARCHES)
@pytest.mark.parametrize("problem", COMPARISON)
def test_evaluations_against_scipy(problem, search):
    """float64, gtol 1e-6: at most 1.5x scipy's function evaluations. The Hessian-vector
    products are counted too (from the direction's state over a step-by-step run, which
    follows the same path as `run`)."""
    gtol = 1e-6
    with jax.enable_x64(True):
        fn, x0, args = comparison_problems()[problem]
        reference = scipy_reference(problem, gtol)
        assert "StopIteration" in reference.message or reference.success, reference.message
        ref_grad = jax.grad(fn)(jnp.asarray(reference.x), *args)
        assert inf_norm(ref_grad) <= gtol

        solver = js.Solver(NewtonCG(), SEARCHES[search], gtol=gtol, ftol=0.0, max_steps=1000)
        result = solver.run(fn, jnp.asarray(x0), *args)
        assert result.status == js.Status.CONVERGED_GTOL, result.message
        assert inf_norm(jax.grad(fn)(result.params, *args)) <= gtol

        params, state = jnp.asarray(x0), solver.init(jnp.asarray(x0))
        while int(state.status) == js.Status.RUNNING and int(state.num_steps) < 1000:
            params, state = solver.step(fn, params, state, *args)
        assert int(state.num_steps) == int(result.num_steps)
        assert int(state.num_fun_evals) == int(result.num_fun_evals)
        hvps = int(state.direction.num_hvp)

        steps, evals = int(result.num_steps), int(result.num_fun_evals)
        print(
            f"\n{problem:14s} NewtonCG+{search:12s}: {steps:4d} steps {evals:4d} f+g evals "
            f"{hvps:4d} Hv | scipy Newton-CG: {reference.nit:4d} iters {reference.nfev:4d} nfev "
            f"{reference.njev:4d} njev {reference.nhev:4d} Hv"
        )
        assert evals <= 1.5 * reference.nfev, (evals, reference.nfev)


# ---------------------------------------------------------------- low and mixed precision

HONEST = {js.Status.CONVERGED_GTOL, js.Status.STALLED, js.Status.LINESEARCH_FAILED}


@pytest.mark.parametrize("search", SEARCHES)
def test_float32_rosenbrock_is_honest(search):
    gtol = 1e-3
    solver = js.Solver(NewtonCG(), SEARCHES[search], gtol=gtol, ftol=0.0, max_steps=500)
    x0 = jnp.array(ROSENBROCK_START, jnp.float32)
    result = solver.run(rosenbrock_f32, x0)
    status = js.Status(int(result.status))
    print(f"NewtonCG+{search} float32: {status.name}, {int(result.num_steps)} steps")
    assert status in HONEST, result.message
    assert result.params.dtype == jnp.float32
    assert bool(jnp.all(jnp.isfinite(result.params))) and bool(jnp.isfinite(result.value))
    if status == js.Status.CONVERGED_GTOL:
        assert inf_norm(result.grad) <= gtol
    assert float(result.value) <= float(rosenbrock_f32(x0))
    np.testing.assert_allclose(result.params, [1.0, 1.0], atol=2e-2)


def mixed_rosenbrock(p):
    x = jnp.concatenate([p["half"].astype(jnp.float32), p["single"]])
    return rosenbrock(x)


MIXED_START = {"half": jnp.array([-1.2], jnp.bfloat16), "single": jnp.array([1.0, 0.5])}


def test_mixed_precision_run_is_honest():
    result = js.Solver(NewtonCG(), js.Zoom(), gtol=1e-3, max_steps=500).run(
        mixed_rosenbrock, MIXED_START
    )
    status = js.Status(int(result.status))
    assert status in HONEST | {js.Status.CONVERGED_FTOL}, result.message
    assert result.params["half"].dtype == jnp.bfloat16
    assert result.params["single"].dtype == jnp.float32
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(result.params))
    assert float(result.value) < float(mixed_rosenbrock(MIXED_START))
    if status == js.Status.CONVERGED_GTOL:
        assert inf_norm(result.grad) <= 1e-3


def test_step_state_is_stable_and_compiles_once(compiles):
    """A jitted train step with a bfloat16/float32 pytree: 5 steps, one compile, the state
    keeps its avals (no weak types), no NaN."""
    solver = js.Solver(NewtonCG(), js.Zoom(), gtol=1e-12)
    params = MIXED_START
    state = solver.init(params)
    before = avals(state)
    assert not any(weak for _, _, weak in before[1])

    @eqx.filter_jit
    def train_step(params, state):
        return solver.step(mixed_rosenbrock, params, state)

    compiles.reset()
    for _ in range(5):
        params, state = train_step(params, state)
    assert compiles.count == 1
    assert avals(state) == before
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(params))
    assert int(state.direction.num_hvp) >= 5
    assert float(state.value) < float(mixed_rosenbrock(MIXED_START))


# ----------------------------------------------------------------------- validation


def test_constructor_validation():
    with pytest.raises(ValueError, match="forcing must be 'sqrt', 'linear'"):
        NewtonCG(forcing="eisenstat")
    with pytest.raises(ValueError, match="constant forcing must lie in"):
        NewtonCG(forcing=1.5)
    with pytest.raises(ValueError, match="constant forcing must lie in"):
        NewtonCG(forcing=0.0)
    with pytest.raises(ValueError, match="eta_max"):
        NewtonCG(eta_max=1.0)
    with pytest.raises(ValueError, match="max_cg_steps"):
        NewtonCG(max_cg_steps=0)


def test_defaults_construct():
    direction = NewtonCG()
    assert (direction.forcing, direction.eta_max, direction.max_cg_steps) == ("sqrt", 0.5, None)
    assert NewtonCG(forcing="linear").forcing == "linear"
    assert js.Solver(NewtonCG(), js.MoreThuente()) == js.Solver(NewtonCG(), js.MoreThuente())
