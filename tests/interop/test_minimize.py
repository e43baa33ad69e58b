"""`js.minimize` against `scipy.optimize.minimize` on the same problems (issue 51, item 1):
L-BFGS-B with and without bounds matches scipy's x to 1e-6 relative in float64, its fun and
nit, in no more evaluations; BFGS, CG and Newton-CG reach scipy's answers; scipy's options,
statuses, callback and errors; one compile per shape, jit and vmap."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize

import jaxsearch as js

from ..problems import quadratic, rosenbrock, spd_quadratic_data

SIZES = (2, 5, 10)


def _start(n):
    return np.tile([-1.2, 1.0], 5)[:n]  # scipy's usual start for Rosenbrock


def _scipy(fn, x0, args=(), **kwargs):
    """scipy's minimize on fn with jax's value and gradient, in float64 (under x64)."""
    value_and_grad = jax.jit(jax.value_and_grad(fn))

    def f(x, *a):
        value, grad = value_and_grad(jnp.asarray(x), *a)
        return float(value), np.asarray(grad)

    return scipy.optimize.minimize(f, np.asarray(x0, np.float64), args, jac=True, **kwargs)


def _bounds(n):
    return [(-2.0, 0.8)] * n  # excludes the minimiser (1, ..., 1): the upper bounds are active


@pytest.fixture(scope="module")
def rosenbrock_runs():
    """(scipy's, ours) per (n, bounded), L-BFGS-B with each side's defaults, float64."""
    runs = {}
    with jax.enable_x64(True):
        for n in SIZES:
            for bounded in (False, True):
                bounds = _bounds(n) if bounded else None
                reference = _scipy(rosenbrock, _start(n), method="L-BFGS-B", bounds=bounds)
                ours = js.minimize(rosenbrock, jnp.asarray(_start(n)), bounds=bounds)
                runs[n, bounded] = reference, ours
    return runs


@pytest.mark.parametrize("bounded", [False, True], ids=["free", "bounded"])
@pytest.mark.parametrize("n", SIZES)
def test_lbfgsb_matches_scipy(rosenbrock_runs, n, bounded):
    reference, ours = rosenbrock_runs[n, bounded]
    assert reference.success and bool(ours.success), ours.message
    assert ours.x.dtype == jnp.float64
    np.testing.assert_allclose(ours.x, reference.x, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(float(ours.fun), reference.fun, rtol=1e-6, atol=1e-12)
    assert int(ours.nit) == reference.nit
    assert int(ours.nfev) <= reference.nfev, (int(ours.nfev), reference.nfev)
    if bounded:
        assert np.all(np.asarray(ours.x) <= 0.8) and np.any(np.asarray(ours.x) == 0.8)


def test_lbfgsb_quadratic_with_args_and_tol():
    """A quadratic with data in args; `tol` sets ftol and gtol as scipy's does."""
    a, b, solution = spd_quadratic_data(n=8, cond=50.0)
    with jax.enable_x64(True):
        args = (jnp.asarray(a), jnp.asarray(b))
        for tol in (None, 1e-10):
            reference = _scipy(quadratic, np.zeros(8), args, method="L-BFGS-B", tol=tol)
            ours = js.minimize(quadratic, jnp.zeros(8), args, tol=tol)
            np.testing.assert_allclose(ours.x, reference.x, rtol=1e-6)
            assert int(ours.nit) == reference.nit
            assert int(ours.nfev) <= reference.nfev
        np.testing.assert_allclose(ours.x, solution, atol=1e-5)


def _rosenbrock_and_grad(x):
    return jax.value_and_grad(rosenbrock)(x)


def test_jac_true_and_callable_jac(rosenbrock_runs):
    reference, _ = rosenbrock_runs[2, True]
    with jax.enable_x64(True):
        x0 = jnp.asarray(_start(2))
        own = js.minimize(_rosenbrock_and_grad, x0, jac=True, bounds=_bounds(2))
        given = js.minimize(rosenbrock, x0, jac=jax.grad(rosenbrock), bounds=_bounds(2))
        for ours in (own, given):
            np.testing.assert_allclose(ours.x, reference.x, rtol=1e-6)
            assert int(ours.nfev) <= reference.nfev


@pytest.mark.parametrize("method", ["BFGS", "CG", "Newton-CG"])
def test_other_methods_reach_scipys_answer(method):
    a, b, solution = spd_quadratic_data(n=6, cond=20.0)
    with jax.enable_x64(True):
        reference = _scipy(rosenbrock, _start(2), method=method)
        ours = js.minimize(rosenbrock, jnp.asarray(_start(2)), method=method.lower())
        assert reference.success and bool(ours.success), ours.message
        assert int(ours.status) == 0
        np.testing.assert_allclose(ours.x, reference.x, atol=1e-4)
        # within 15% of scipy's evaluations (BFGS spends a few more on 2-D Rosenbrock)
        assert int(ours.nfev) <= 1.15 * reference.nfev, (int(ours.nfev), reference.nfev)
        args = (jnp.asarray(a), jnp.asarray(b))
        ours = js.minimize(quadratic, jnp.zeros(6), args, method=method)
        np.testing.assert_allclose(ours.x, solution, atol=1e-4)


def test_maxiter_status_and_result_access():
    with jax.enable_x64(True):
        reference = _scipy(rosenbrock, _start(2), method="L-BFGS-B", options={"maxiter": 5})
        ours = js.minimize(rosenbrock, jnp.asarray(_start(2)), options={"maxiter": 5})
        assert reference.status == int(ours.status) == 1 and not bool(ours.success)
        assert int(ours.nit) == 5
        np.testing.assert_allclose(ours.x, reference.x, rtol=1e-6)
        assert set(ours.keys()) >= {"x", "fun", "jac", "nit", "nfev", "njev", "status"}
        assert ours["nit"] is ours.nit and "message" in ours and "hess_inv" not in ours
        assert "max_steps" in ours.message and "status: 1" in repr(ours)
        assert isinstance(ours.result, js.Result)
        with pytest.raises(KeyError):
            ours["hess_inv"]
        # maxfun is a budget: the search is cut off where it is spent
        budget = js.minimize(rosenbrock, jnp.asarray(_start(2)), options={"maxfun": 10})
        assert int(budget.status) == 1 and int(budget.nfev) == 10


def test_scipy_bounds_object_and_x0_outside():
    with jax.enable_x64(True):
        bounds = scipy.optimize.Bounds(-2.0, [0.8, 0.5, np.inf])
        x0 = jnp.array([-1.2, 1.0, 3.0])  # x0[1] above its bound: projected, as scipy clips
        reference = _scipy(rosenbrock, x0, method="L-BFGS-B", bounds=bounds)
        ours = js.minimize(rosenbrock, x0, bounds=bounds)
        np.testing.assert_allclose(ours.x, reference.x, rtol=1e-6)


def test_callback_sees_each_iterate_and_changes_nothing():
    seen = []

    def callback(intermediate_result):
        seen.append((np.asarray(intermediate_result.x), float(intermediate_result["fun"])))

    with jax.enable_x64(True):
        x0 = jnp.asarray(_start(2))
        plain = js.minimize(rosenbrock, x0)
        watched = js.minimize(rosenbrock, x0, callback=callback)
        assert len(seen) == int(plain.nit) == int(watched.nit)
        assert int(watched.nfev) == int(plain.nfev)
        np.testing.assert_array_equal(watched.x, plain.x)
        for x, fun in seen:
            np.testing.assert_allclose(fun, rosenbrock(jnp.asarray(x)), rtol=1e-8, atol=1e-14)
        assert not np.array_equal(seen[0][0], np.asarray(x0))  # not called at x0
        xs = []
        js.minimize(rosenbrock, x0, callback=lambda xk: xs.append(np.asarray(xk)))
        np.testing.assert_array_equal(xs[0], seen[0][0])  # scipy's legacy callback(xk)


def test_callback_stop_iteration():
    calls = []

    def callback(intermediate_result):
        calls.append(intermediate_result.fun)
        if len(calls) == 3:
            raise StopIteration

    with jax.enable_x64(True):
        ours = js.minimize(rosenbrock, jnp.asarray(_start(2)), callback=callback)
        calls.clear()
        reference = _scipy(rosenbrock, _start(2), method="L-BFGS-B", callback=callback)
    assert reference.status == int(ours.status) == 99 and not bool(ours.success)
    assert ours.message == reference.message == "`callback` raised `StopIteration`."
    assert int(ours.nit) == reference.nit == 3


def test_return_all():
    ours = js.minimize(rosenbrock, jnp.asarray(_start(2), jnp.float32), method="BFGS",
                       options={"return_all": True})  # fmt: skip
    assert len(ours.allvecs) == int(ours.nit) + 1 and "allvecs" in ours.keys()
    np.testing.assert_array_equal(ours.allvecs[0], _start(2).astype(np.float32))


def test_under_jit_and_vmap():
    starts = jnp.array([[-1.2, 1.0], [2.0, 2.0]], jnp.float32)
    eager = js.minimize(rosenbrock, starts[0])

    def inside(x):
        res = js.minimize(rosenbrock, x)
        assert "float32[2]" in repr(res)
        with pytest.raises(TypeError, match="inside jax.jit"):
            print(res.message)
        with pytest.raises(TypeError, match="concrete values"):
            js.minimize(rosenbrock, x, callback=print)
        return res

    jitted = jax.jit(inside)(starts[0])
    np.testing.assert_allclose(jitted.x, eager.x, atol=1e-5)
    assert bool(jitted.success) and isinstance(jitted.message, str)
    batched = jax.vmap(lambda x: js.minimize(rosenbrock, x, bounds=[(-2, 0.8)] * 2))(starts)
    assert batched.status.shape == (2,) and len(batched.message) == 2
    np.testing.assert_allclose(batched.x[:, 0], [0.8, 0.8], atol=1e-6)
    assert "traced" not in repr(batched)


def _closure(scale):
    def f(x):
        return rosenbrock(x) * scale

    return f


def test_compiles_once_per_shape_and_dtype(compiles):
    js.minimize(_closure(2.0), jnp.array([0.5, 0.5, 0.5]))
    compiles.reset()
    again = js.minimize(_closure(2.0), jnp.array([-1.0, 0.2, 0.3]))  # new closure, new x0
    assert compiles.count == 0
    assert bool(again.success)


def test_float32_integer_and_pytree_x0():
    ours = js.minimize(rosenbrock, np.array([-1.2, 1.0], np.float32))
    assert ours.x.dtype == jnp.float32 and ours.fun.dtype == jnp.float32
    np.testing.assert_allclose(ours.x, [1.0, 1.0], atol=1e-3)
    assert js.minimize(rosenbrock, [0, 0]).x.dtype == jnp.result_type(float)
    tree = js.minimize(lambda p: rosenbrock(jnp.stack([p["a"], p["b"]])), {"a": 0.0, "b": 0.0})
    np.testing.assert_allclose([tree.x["a"], tree.x["b"]], [1.0, 1.0], atol=1e-3)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(method="Nelder-Mead"), ValueError, "Unknown method"),
        (dict(method="lm"), ValueError, "LevenbergMarquardt"),
        (dict(method="trf"), ValueError, "GaussNewton"),
        (dict(options={"maxfev": 10}), ValueError, "Unknown option.*maxcor"),
        (dict(method="CG", options={"maxcor": 5}), ValueError, "Unknown option"),
        (dict(hess=lambda x: x), ValueError, "Hessian-vector"),
        (dict(hessp=lambda x, p: p), ValueError, "Hessian-vector"),
        (dict(constraints=[{"type": "eq", "fun": jnp.sum}]), ValueError, "trust-constr"),
        (dict(method="BFGS", bounds=[(0, 1)] * 2), ValueError, "L-BFGS-B"),
        (dict(bounds=[(0, 1)] * 3), ValueError, "one .lo, hi. pair per entry"),
        (dict(bounds=[(1, 0)] * 2), ValueError, "greater than"),
        (dict(method="BFGS", options={"xrtol": 1e-3}), ValueError, "xtol"),
        (dict(method="BFGS", options={"norm": 1}), ValueError, "inf or 2"),
        (dict(options={"maxls": 0}), ValueError, "positive"),
        (dict(jac="exact"), ValueError, "jac must be"),
        (dict(x0={"a": jnp.zeros(2)}, bounds=[(0, 1)] * 2), TypeError, "pytree"),
    ],
)
def test_refusals_name_the_alternative(kwargs, error, match):
    x0 = kwargs.pop("x0", jnp.zeros(2))
    with pytest.raises(error, match=match):
        js.minimize(rosenbrock, x0, **kwargs)


def test_docstring_example():
    res = js.minimize(rosenbrock, jnp.array([-1.2, 1.0]), bounds=[(-2, 0.8), (None, None)])
    assert bool(res.success) and int(res.status) == 0 and bool(res.x[0] == 0.8)


def test_ignored_options_are_accepted():
    """Finite-difference and printing options change nothing (the gradient is jax's)."""
    plain = js.minimize(rosenbrock, jnp.zeros(2))
    ignored = js.minimize(
        rosenbrock, jnp.zeros(2), jac="2-point", options={"eps": 1e-3, "disp": True}
    )
    np.testing.assert_array_equal(plain.x, ignored.x)


def _quartic(x):
    return jnp.sum(x**4)


def test_default_maxiter_is_200_n_and_tol_sets_the_main_tolerance():
    with jax.enable_x64(True):
        slow = js.minimize(_quartic, jnp.array([0.7]), method="BFGS", options={"gtol": 1e-300})
        assert int(slow.nit) == 200 and int(slow.status) == 1
        for method, tol in (("BFGS", 1e-3), ("Newton-CG", 1e-2)):
            loose = js.minimize(_quartic, jnp.array([0.7]), method=method, tol=tol)
            assert bool(loose.success), loose.message
            if method == "BFGS":  # gtol: the gradient's largest entry
                assert float(jnp.max(jnp.abs(loose.jac))) <= tol
            else:  # xtol: the last step's largest entry
                assert "xtol" in loose.message
