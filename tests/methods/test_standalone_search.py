"""A line search used by itself: `search.run(fn, params, direction, ...)` (jaxopt's `ls.run`,
scipy's `scipy.optimize.line_search`), returning a `js.LineSearchResult`."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize

import jaxsearch as js


def rosenbrock(x):
    return jnp.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def quadratic(x):
    return 0.5 * jnp.sum(jnp.arange(1, x.size + 1, dtype=x.dtype) * (x - 1) ** 2)


def quadratic_np(x):
    return 0.5 * np.sum(np.arange(1, x.size + 1) * (x - 1) ** 2)


def rosenbrock_np(x):
    return np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


PROBLEMS = {
    "quadratic": (quadratic, quadratic_np, [0.0, 3.0, -1.0, 0.5]),
    "rosenbrock": (rosenbrock, rosenbrock_np, [-1.2, 1.0]),
}
SEARCHES = {
    "Zoom": js.Zoom,
    "Backtracking": js.Backtracking,
    "HagerZhang": js.HagerZhang,
    "MoreThuente": js.MoreThuente,
}


def conditions_hold(search, phi0, dphi0, t, phi, dphi) -> bool:
    """The search's own acceptance test at t, in float64 (with a rounding margin)."""
    slack = 1e-10 * max(1.0, abs(phi0))
    if isinstance(search, js.Zoom):
        c1, c2, strong = search.c1, search.c2, True
    elif isinstance(search, js.MoreThuente):
        c1, c2, strong = search.ftol, search.gtol, True
    elif isinstance(search, js.HagerZhang):  # a first search: T1, the Wolfe conditions
        c1, c2, strong = search.delta, search.sigma, False
    else:
        return phi <= phi0 + search.c1 * t * dphi0 + slack
    decrease = phi <= phi0 + c1 * t * dphi0 + slack
    curvature = abs(dphi) <= c2 * abs(dphi0) if strong else dphi >= c2 * dphi0
    return decrease and curvature


@pytest.mark.parametrize("problem", list(PROBLEMS))
@pytest.mark.parametrize("name", list(SEARCHES))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_accepted_step_meets_the_searchs_conditions(problem, name, dtype):
    fn, fn_np, x0 = PROBLEMS[problem]
    search = SEARCHES[name]()
    with jax.enable_x64(dtype == "float64"):
        x = jnp.asarray(x0, dtype)
        d = -jax.grad(fn)(x)
        result = search.run(fn, x, d)
        assert bool(result.success)
        step = float(result.step)
        assert step > 0
        # params is x + step d; value and grad are fn's at params
        rtol = 1e-5 if dtype == "float32" else 1e-12
        np.testing.assert_allclose(result.params, x + result.step.astype(dtype) * d, rtol=rtol)
        value, grad = jax.value_and_grad(fn)(result.params)
        np.testing.assert_allclose(result.value, value, rtol=rtol)
        np.testing.assert_allclose(result.grad, grad, rtol=rtol, atol=rtol)
        assert result.value.dtype == jnp.dtype(dtype) and result.grad.dtype == jnp.dtype(dtype)
        assert int(result.num_fun_evals) >= 2  # at x, then at least one trial
    if dtype == "float64":  # the conditions, on the line in float64
        x, d = np.asarray(x0), np.asarray(d, np.float64)
        with jax.enable_x64(True):
            phi = lambda t: float(fn(jnp.asarray(x + t * d)))  # noqa: E731
            dphi = lambda t: float(jax.grad(fn)(jnp.asarray(x + t * d)) @ d)  # noqa: E731
            assert conditions_hold(search, phi(0), dphi(0), step, phi(step), dphi(step))


@pytest.mark.parametrize("problem", list(PROBLEMS))
def test_zoom_and_scipy_line_search_both_meet_strong_wolfe(problem):
    """scipy.optimize.line_search (strong Wolfe, c1 = 1e-4, c2 = 0.9) and Zoom with the same
    constants on the same line: the steps may differ; both satisfy the conditions."""
    fn, fn_np, x0 = PROBLEMS[problem]
    search = js.Zoom(c1=1e-4, c2=0.9)
    with jax.enable_x64(True):
        x = jnp.asarray(x0, jnp.float64)
        grad = jax.grad(fn)
        d = -grad(x)
        ours = search.run(fn, x, d)
        fprime = lambda v: np.asarray(grad(jnp.asarray(v)))  # noqa: E731
        theirs = scipy.optimize.line_search(fn_np, fprime, np.asarray(x), np.asarray(d))
        phi = lambda t: fn_np(np.asarray(x) + t * np.asarray(d))  # noqa: E731
        dphi = lambda t: float(fprime(np.asarray(x) + t * np.asarray(d)) @ np.asarray(d))  # noqa: E731
    assert bool(ours.success) and theirs[0] is not None
    for t in (float(ours.step), float(theirs[0])):
        assert conditions_hold(search, phi(0), dphi(0), t, phi(t), dphi(t)), t


@pytest.mark.parametrize("name", list(SEARCHES))
def test_an_uphill_direction_gives_no_step(name):
    with jax.enable_x64(True):
        x = jnp.asarray([-1.2, 1.0])
        g = jax.grad(rosenbrock)(x)
        for d in (g, jnp.zeros(2), jnp.asarray([jnp.nan, 0.0])):
            result = SEARCHES[name]().run(rosenbrock, x, d)
            assert not bool(result.success) and float(result.step) == 0
            np.testing.assert_array_equal(result.params, x)
            np.testing.assert_allclose(result.value, rosenbrock(x), rtol=1e-14)
            assert int(result.num_fun_evals) == 1
            state = SEARCHES[name]().init(jnp.float64)
            assert eqx.tree_equal(result.state, state)  # the state is handed back unchanged


def test_value_and_grad_given_save_an_evaluation_and_the_state_carries():
    search = js.HagerZhang()
    x = jnp.asarray([-1.2, 1.0])
    value, grad = jax.value_and_grad(rosenbrock)(x)
    fresh = search.run(rosenbrock, x, -grad)
    given = search.run(rosenbrock, x, -grad, value=value, grad=grad)
    assert int(given.num_fun_evals) == int(fresh.num_fun_evals) - 1
    # (f at x evaluated eagerly, or in the compiled loop: equal up to rounding)
    assert float(given.step) == pytest.approx(float(fresh.step), rel=1e-3)
    # The next search from where this one ended, with its state: HagerZhang's first trial
    # comes from the previous step (QuadStep), which a fresh state does not have.
    x1, g1 = given.params, given.grad
    carried = search.run(rosenbrock, x1, -g1, value=given.value, grad=g1, state=given.state)
    anew = search.run(rosenbrock, x1, -g1, value=given.value, grad=g1)
    assert bool(carried.success)
    assert float(carried.state.prev_step) == float(carried.step)
    assert float(anew.state.prev_step) == float(anew.step)
    assert int(carried.num_fun_evals) != int(anew.num_fun_evals) or float(carried.step) != float(
        anew.step
    )
    with pytest.raises(ValueError, match="both value and grad"):
        search.run(rosenbrock, x, -grad, value=value)


def test_max_step_caps_the_step():
    x = jnp.asarray([0.0, 0.0, 0.0, 0.0])
    d = -jax.grad(quadratic)(x)
    result = js.Zoom().run(quadratic, x, d, guess=10.0, max_step=0.05)
    assert bool(result.success) and float(result.step) == pytest.approx(0.05)


def test_repeated_calls_compile_once_eagerly_and_under_jit(compiles):
    search = js.Zoom()
    step = jax.jit(lambda x, d: search.run(rosenbrock, x, d))
    filtered = eqx.filter_jit(lambda x, d: search.run(rosenbrock, x, d))
    x = jnp.asarray([-1.2, 1.0])
    for call in (lambda x, d: search.run(rosenbrock, x, d), step, filtered):
        directions = [-jax.grad(rosenbrock)(jnp.asarray(y)) for y in ([0.5, 0.5], [2.0, -1.0])]
        call(x, -jax.grad(rosenbrock)(x))
        compiles.reset()
        for start, d in zip(([0.5, 0.5], [2.0, -1.0]), directions, strict=True):
            assert bool(call(jnp.asarray(start), d).success)
        assert compiles.count == 0


def test_under_vmap_each_line_is_its_own_search():
    search = js.MoreThuente()
    starts = jnp.asarray([[-1.2, 1.0], [0.5, 0.5], [2.0, -1.0]])
    directions = -jax.vmap(jax.grad(rosenbrock))(starts)
    batch = jax.vmap(lambda x, d: search.run(rosenbrock, x, d))(starts, directions)
    for i in range(3):
        one = search.run(rosenbrock, starts[i], directions[i])
        np.testing.assert_allclose(batch.step[i], one.step, rtol=1e-6)
        np.testing.assert_allclose(batch.params[i], one.params, rtol=1e-6)
        assert bool(batch.success[i]) == bool(one.success)
        assert int(batch.num_fun_evals[i]) == int(one.num_fun_evals)


def test_pytree_params_and_args():
    def fn(p, target):
        return jnp.sum((p["a"] - target) ** 2) + jnp.sum(p["b"] ** 4)

    params = {"a": jnp.zeros(3), "b": jnp.ones(2)}
    target = jnp.asarray(2.0)
    grad = jax.grad(fn)(params, target)
    d = jax.tree.map(jnp.negative, grad)
    result = js.Backtracking().run(fn, params, d, target)
    assert bool(result.success)
    assert float(result.value) < float(fn(params, target))
    np.testing.assert_allclose(result.grad["a"], jax.grad(fn)(result.params, target)["a"])


def test_in_low_precision_the_step_is_at_least_float32():
    """bfloat16 params, f in float32: the step in float32 (the scalar dtype), params and grad
    in bfloat16."""

    def fn(x):
        return rosenbrock(x.astype(jnp.float32))

    x = jnp.asarray([-1.2, 1.0], jnp.bfloat16)
    result = js.Zoom().run(fn, x, -jax.grad(fn)(x))
    assert bool(result.success)
    assert result.step.dtype == jnp.float32 and result.value.dtype == jnp.float32
    assert result.params.dtype == jnp.bfloat16 and result.grad.dtype == jnp.bfloat16
    assert float(result.value) < float(fn(x))
