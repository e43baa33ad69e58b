"""Derivatives of `run`'s solution with respect to args: implicit (the default) and unrolled."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js

from ..helpers import LEAN, TIGHT
from ..problems import (
    REGRESSION_A as A,
    REGRESSION_B as B,
    REGRESSION_LABELS as LABELS,
    regression_solution,
    ridge,
    ridge_closed_form,
)

IMPLICIT = js.Solver(**TIGHT)
UNROLLED = js.Solver(**TIGHT, adjoint=js.UnrolledAdjoint())


def lean_jit(f):
    """f compiled as one program with the lean XLA options (helpers.LEAN): a derivative of a
    run (an unrolled one most of all) is a long compile, about a third shorter this way than
    eagerly (a forward and a backward program under XLA's defaults); what it computes is the
    same. Eager derivatives stay in test_bounded_vjp_is_linear_in_the_cotangent, the implicit
    ridge's d/db and forward mode, and the rest of test_derivative_with_respect_to_x0_is_zero."""
    return jax.jit(f, compiler_options=LEAN)


def logistic(w, a, labels, penalty):
    z = a @ w
    return jnp.mean(jnp.logaddexp(0, z) - labels * z) + 0.5 * penalty * jnp.sum(w**2)


def logistic_with_aux(w, a, labels, penalty):
    return logistic(w, a, labels, penalty), {"margin": jnp.min(a @ w)}


@pytest.mark.parametrize("solver", [IMPLICIT, UNROLLED], ids=["implicit", "unrolled"])
def test_ridge_derivative_matches_closed_form(solver):
    with jax.enable_x64(True):
        data, penalty = (jnp.asarray(A), jnp.asarray(B)), jnp.asarray(0.7)
        expected = jax.jacfwd(ridge_closed_form, argnums=2)(*data, penalty)
        solved = lambda p: regression_solution(solver, ridge, data, p)  # noqa: E731
        reverse = lean_jit(jax.jacrev(solved))(penalty)
        assert np.max(np.abs(reverse - expected)) <= 1e-10 * np.max(np.abs(expected))
        if solver is UNROLLED:  # (each checkpointed derivative costs a long compile)
            return
        # ... and with respect to the data: d w* / d b
        expected_b = jax.jacfwd(ridge_closed_form, argnums=1)(*data, penalty)
        got_b = jax.jacrev(lambda b: solver.run(ridge, jnp.zeros(5), data[0], b, penalty).params)(
            data[1]
        )
        assert np.max(np.abs(got_b - expected_b)) <= 1e-10 * np.max(np.abs(expected_b))
        # forward mode too
        forward = jax.jacfwd(lambda p: regression_solution(solver, ridge, data, p))(penalty)
        assert np.max(np.abs(forward - expected)) <= 1e-10 * np.max(np.abs(expected))


@pytest.mark.parametrize("solver", [IMPLICIT, UNROLLED], ids=["implicit", "unrolled"])
def test_logistic_derivative_matches_finite_differences(solver):
    with jax.enable_x64(True):
        data = (jnp.asarray(A), jnp.asarray(LABELS))

        def validation_loss(penalty):  # a hyperparameter objective through the solution
            w = regression_solution(solver, logistic, data, penalty)
            return jnp.sum((data[0] @ w - 1.0) ** 2)

        penalty, h = 0.05, 1e-5
        grad = lean_jit(jax.grad(validation_loss))(jnp.asarray(penalty))
        central = (
            validation_loss(jnp.asarray(penalty + h)) - validation_loss(jnp.asarray(penalty - h))
        ) / (2 * h)
        assert abs(float(grad) - float(central)) <= 1e-6 * abs(float(central))


def test_value_and_aux_derivatives_follow_the_chain_rule():
    """d f(w*(p), p)/dp = (partial f / partial p) at w* (the envelope theorem), and aux's
    derivative combines dw*/dp with aux's own dependence on p."""
    solver = js.Solver(**TIGHT, has_aux=True)
    with jax.enable_x64(True):
        data = (jnp.asarray(A), jnp.asarray(LABELS))

        def outputs(p):
            result = solver.run(logistic_with_aux, jnp.zeros(5), *data, p)
            return result.value, result.aux["margin"], result.params

        p = jnp.asarray(0.05)
        (value, margin, w), (value_dot, margin_dot, w_dot) = jax.jvp(outputs, (p,), (1.0,))
        envelope = jax.grad(logistic, argnums=3)(w, *data, p)
        assert abs(float(value_dot - envelope)) <= 1e-10 * abs(float(envelope))
        margin_of = lambda w: jnp.min(data[0] @ w)  # noqa: E731
        expected_margin = jax.jvp(margin_of, (w,), (w_dot,))[1]
        assert abs(float(margin_dot - expected_margin)) <= 1e-12 * abs(float(expected_margin))
        assert abs(float(jax.grad(lambda p: outputs(p)[0])(p) - envelope)) <= 1e-10 * abs(
            float(envelope)
        )


def test_implicit_derivative_under_vmap():
    with jax.enable_x64(True):
        data = (jnp.asarray(A), jnp.asarray(B))
        penalties = jnp.asarray([0.1, 1.0, 10.0])
        solved = lambda p: regression_solution(IMPLICIT, ridge, data, p)
        got = lean_jit(jax.vmap(jax.jacrev(solved)))(penalties)
        expected = jax.vmap(jax.jacfwd(ridge_closed_form, argnums=2), (None, None, 0))(
            *data, penalties
        )
        assert np.max(np.abs(got - expected)) <= 1e-10 * np.max(np.abs(expected))


def mixed_ridge(params, a, b, penalty):
    w = jnp.concatenate([params["low"].astype(jnp.float32), params["high"]])
    return ridge(w, a, b, penalty)


@pytest.mark.parametrize("low", [jnp.bfloat16, jnp.float16, jnp.float32])
def test_implicit_derivative_in_low_and_mixed_precision(low):
    """Tangents keep each leaf's dtype (JAX rejects any other); the CG works in float32."""
    solver = js.Solver(gtol=1e-3)
    data = (jnp.asarray(A, jnp.float32), jnp.asarray(B, jnp.float32))
    params = {"low": jnp.zeros(2, low), "high": jnp.zeros(3, jnp.float32)}

    weights = jnp.asarray(np.random.default_rng(1).normal(size=5), jnp.float32)

    def solved(p):
        return solver.run(mixed_ridge, params, *data, p).params

    def score(p):  # a scalar of the solution; jax.jacrev cannot stack mixed-dtype outputs
        w = solved(p)
        return jnp.dot(jnp.concatenate([w["low"].astype(jnp.float32), w["high"]]), weights)

    penalty = jnp.asarray(0.7, jnp.float32)
    w_dot = lean_jit(lambda p: jax.jvp(solved, (p,), (jnp.ones((), jnp.float32),))[1])(penalty)
    assert w_dot["low"].dtype == low and w_dot["high"].dtype == jnp.float32
    expected_w = jax.jacfwd(ridge_closed_form, argnums=2)(*data, penalty)
    expected = jnp.dot(expected_w, weights)
    tol = 0.05 if low != jnp.float32 else 1e-3
    assert abs(float(lean_jit(jax.grad(score))(penalty) - expected)) <= tol * abs(float(expected))


def test_newton_cg_inner_loop_is_unrolled_through_the_engines_loop():
    """NewtonCG's CG loop runs through `DirectionInfo.while_loop` with its bound, so the
    unrolled derivative exists and agrees with the implicit one (no special case in Solver)."""
    with jax.enable_x64(True):
        data = (jnp.asarray(A), jnp.asarray(B))
        penalty = jnp.asarray(0.3)

        def solved(adjoint):
            solver = js.Solver(js.NewtonCG(), **TIGHT, adjoint=adjoint)
            return lambda p: regression_solution(solver, ridge, data, p)

        unrolled = lean_jit(jax.jacrev(solved(js.UnrolledAdjoint())))(penalty)
        expected = jax.jacfwd(ridge_closed_form, argnums=2)(*data, penalty)
        np.testing.assert_allclose(unrolled, expected, rtol=1e-6, atol=1e-9)


def test_adjoint_settings_are_checked():
    with pytest.raises(ValueError, match="rtol must lie in"):
        js.ImplicitAdjoint(rtol=2.0)
    with pytest.raises(ValueError, match="max_cg_steps"):
        js.ImplicitAdjoint(max_cg_steps=0)
    with pytest.raises(ValueError, match="checkpoints"):
        js.UnrolledAdjoint(checkpoints=0)


def test_conjugate_gradients_solve_stop_and_bound():
    """The linear solve behind ImplicitAdjoint: exact on an SPD system, its first iterate with
    max_cg_steps=1, and a finite stop where the matrix is not positive definite."""
    with jax.enable_x64(True):
        m = jnp.asarray(A.T @ A + 0.1 * np.eye(5))
        b = jnp.asarray(B[:5])
        solve = js.ImplicitAdjoint()._conjugate_gradients
        v = solve(lambda x: m @ x, b)
        assert np.max(np.abs(v - np.linalg.solve(m, b))) <= 1e-10 * np.max(np.abs(v))
        first = js.ImplicitAdjoint(max_cg_steps=1)._conjugate_gradients(lambda x: m @ x, b)
        assert np.allclose(first, (b @ b) / (b @ m @ b) * b, rtol=1e-14)
        indefinite = jnp.diag(jnp.asarray([1.0, -1.0, 2.0, 3.0, 4.0]))
        stopped = solve(lambda x: indefinite @ x, jnp.ones(5))
        assert np.all(np.isfinite(stopped))


def test_unrolled_adjoint_rejects_forward_mode():
    with jax.enable_x64(True):
        data = (jnp.asarray(A), jnp.asarray(B))
        with pytest.raises(Exception, match="(?i)forward-mode|jvp"):
            jax.jvp(lambda p: regression_solution(UNROLLED, ridge, data, p), (0.7,), (1.0,))


def test_implicit_derivative_with_active_bounds():
    """With bounds, the components at a bound stay there (derivative 0) and the free ones
    follow the problem restricted to them: w_F = (A_F'A_F + p I)^-1 A_F'b."""
    with jax.enable_x64(True):
        data, penalty = (jnp.asarray(A), jnp.asarray(B)), jnp.asarray(0.7)
        bounds = (jnp.zeros(5), jnp.full(5, jnp.inf))

        def bounded(p):
            return IMPLICIT.run(ridge, jnp.full(5, 0.5), *data, p, bounds=bounds).params

        w = bounded(penalty)
        free = np.asarray(w) > 0
        assert 0 < free.sum() < 5  # some components at the bound, some free
        jac = lean_jit(jax.jacrev(bounded))(penalty)
        expected = jax.jacfwd(ridge_closed_form, argnums=2)(data[0][:, free], data[1], penalty)
        assert np.all(np.asarray(jac)[~free] == 0)
        assert np.max(np.abs(np.asarray(jac)[free] - expected)) <= 1e-8 * np.max(np.abs(expected))


def shifted_bowl(x, c):
    return jnp.sum((x - c) ** 2)


C = np.array([0.5, 2.0, -0.2])  # x* = clip(c, -1, 1): the middle component at its bound


@pytest.mark.parametrize("solver", [IMPLICIT, UNROLLED], ids=["implicit", "unrolled"])
def test_gradient_through_a_bounded_run(solver):
    """d/dc sum(x*(c)) = [1, 0, 1] for x* = argmin sum((x - c)^2) over [-1, 1]^3: jax.grad
    (one cotangent on every component, free and active together) through the box, with both
    adjoints (the unrolled one runs L-BFGS-B's Cauchy-point loop as a checkpointed loop)."""
    with jax.enable_x64(True):

        def total(c):
            return jnp.sum(solver.run(shifted_bowl, jnp.zeros(3), c, bounds=(-1.0, 1.0)).params)

        grad = lean_jit(jax.grad(total))(jnp.asarray(C))
        np.testing.assert_allclose(grad, [1.0, 0.0, 1.0], atol=1e-8)


def test_bounded_vjp_is_linear_in_the_cotangent():
    """The implicit derivative's reverse pass solves with H on the free components and the
    identity on the active ones for every cotangent, not only for unit ones."""
    with jax.enable_x64(True):

        def solve(c):
            return IMPLICIT.run(shifted_bowl, jnp.zeros(3), c, bounds=(-1.0, 1.0)).params

        _, vjp = jax.vjp(solve, jnp.asarray(C))
        for cotangent in ([1.0, 1.0, 0.0], [0.0, 3.0, 2.0], [1.0, 1.0, 1.0]):
            (got,) = vjp(jnp.asarray(cotangent))
            np.testing.assert_allclose(got, np.asarray(cotangent) * [1, 0, 1], atol=1e-10)


def test_derivative_with_respect_to_x0_is_zero():
    """The solution does not depend on x0: jax.grad and jax.jvp of run with respect to x0
    alone give zero (documented), rather than a TypeError."""
    with jax.enable_x64(True):
        c = jnp.asarray(C)
        x0 = jnp.zeros(3)
        grad = lean_jit(jax.grad(lambda x0: IMPLICIT.run(shifted_bowl, x0, c).value))(x0)
        np.testing.assert_array_equal(grad, np.zeros(3))
        params, tangent = jax.jvp(
            lambda x0: IMPLICIT.run(shifted_bowl, x0, c).params, (x0,), (jnp.ones(3),)
        )
        np.testing.assert_allclose(params, C, atol=1e-10)
        np.testing.assert_array_equal(tangent, np.zeros(3))
        # with respect to x0 and c together: only c's tangent moves the solution
        _, tangent = jax.jvp(
            lambda x0, c: IMPLICIT.run(shifted_bowl, x0, c).params,
            (x0, c),
            (jnp.ones(3), jnp.array([1.0, 0.0, 0.0])),
        )
        np.testing.assert_allclose(tangent, [1.0, 0.0, 0.0], atol=1e-10)


class _Recording(js.AbstractAdjoint):
    """An adjoint of its own: no derivative rule, it only runs what it is handed."""

    def while_loop(self, cond, body, init, max_steps=None):
        return jax.lax.while_loop(cond, body, init)

    def apply(self, minimise, x0, args, problem):
        result = minimise(x0, args)
        # The optimality conditions it is handed are those of the run's solution.
        value = problem.fn(result.params, *args)
        return eqx.tree_at(
            lambda r: r.aux, result, {"value_again": value}, is_leaf=lambda x: x is None
        )


def test_an_adjoint_is_handed_the_whole_run():
    """`AbstractAdjoint.apply` gets the run as a function of (x0, args) and the problem (fn,
    has_aux, box): an adjoint needs nothing private of the solver."""
    with jax.enable_x64(True):
        data, penalty = (jnp.asarray(A), jnp.asarray(B)), jnp.asarray(0.7)
        solver = js.Solver(**TIGHT, adjoint=_Recording())
        result = solver.run(ridge, jnp.zeros(5), *data, penalty)
        np.testing.assert_allclose(result.params, ridge_closed_form(*data, penalty), rtol=1e-8)
        np.testing.assert_allclose(result.aux["value_again"], result.value, rtol=1e-12)
