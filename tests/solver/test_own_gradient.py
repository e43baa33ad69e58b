"""Objectives that return their own gradient: `Solver(value_and_grad=True)`, fn returning
(value, grad) (or ((value, aux), grad)), evaluated through the single evaluation site with no
differentiation of fn; Hessian-vector products by forward differences of fn's gradient."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js

from ..helpers import DIRECTIONS, SEARCHES, solver as make_solver
from ..problems import rosenbrock


def own_rosenbrock(x):
    """Rosenbrock and its gradient (autodiff inside fn: what a hand-written adjoint gives)."""
    return jax.value_and_grad(rosenbrock)(x)


def doubled_rosenbrock(x):
    """Rosenbrock with a wrong gradient: twice the true one."""
    value, grad = jax.value_and_grad(rosenbrock)(x)
    return value, 2 * grad


# ------------------------------------------------------------------------- the simulator


def _simulate(x):
    """A host 'simulator': Rosenbrock in 2-D and its gradient in NumPy (float64 inside,
    float32 out: a callback's results are canonicalised outside `jax.enable_x64`'s thread)."""
    x = np.asarray(x, np.float64)
    value = 100 * (x[1] - x[0] ** 2) ** 2 + (1 - x[0]) ** 2
    grad = np.array([-400 * x[0] * (x[1] - x[0] ** 2) - 2 * (1 - x[0]), 200 * (x[1] - x[0] ** 2)])
    return np.float32(value), grad.astype(np.float32)


def simulator(x):
    """The simulator behind `jax.pure_callback`: (value, grad), batched by a loop under vmap."""
    shapes = (jax.ShapeDtypeStruct((), jnp.float32), jax.ShapeDtypeStruct((2,), jnp.float32))
    return jax.pure_callback(_simulate, shapes, x, vmap_method="sequential")


CALLS = [0]


def _count():
    CALLS[0] += 1


@jax.custom_vjp
def no_forward_mode(g):
    """g, which JAX cannot differentiate in forward mode (as a hand-written adjoint's)."""
    return g


no_forward_mode.defvjp(lambda g: (g, None), lambda _, ct: (ct,))


def counted_quadratic(x, a, b):
    """0.5 x'Ax - b'x and its gradient (not differentiable in forward mode), counting the
    evaluations on the host."""
    jax.debug.callback(_count)
    return 0.5 * x @ (a @ x) - b @ x, no_forward_mode(a @ x - b)


# ------------------------------------------------------------------------------ fixtures

PAIRS = {
    "LBFGS-Zoom": (js.LBFGS, js.Zoom),
    "BFGS-HagerZhang": (js.BFGS, js.HagerZhang),
    "NonlinearCG-MoreThuente": (js.NonlinearCG, js.MoreThuente),
}


@pytest.fixture
def x64():
    with jax.enable_x64(True):
        yield


# The autodiff runs the own-gradient runs are compared with, one per pair (float64).
_autodiff_runs: dict = {}


def autodiff_run(pair: str):
    if pair not in _autodiff_runs:
        direction, search = PAIRS[pair]
        solver = js.Solver(direction(), search(), max_steps=100)
        _autodiff_runs[pair] = solver.run(rosenbrock, jnp.array([-1.2, 1.0]), history=True)
    return _autodiff_runs[pair]


@pytest.mark.parametrize("pair", list(PAIRS))
def test_iterates_match_autodiff(pair, x64):
    """Float64 Rosenbrock: every step's f and gradient norm, and the solution, as with
    autodiff (to float64 rounding: the two programs need not be the same)."""
    direction, search = PAIRS[pair]
    auto = autodiff_run(pair)
    own = js.Solver(direction(), search(), max_steps=100, value_and_grad=True)
    mine = own.run(own_rosenbrock, jnp.array([-1.2, 1.0]), history=True)
    assert auto.success and mine.success
    assert int(mine.num_steps) == int(auto.num_steps)
    assert int(mine.num_fun_evals) == int(auto.num_fun_evals)
    h_auto, h_mine = auto.history.to_numpy(), mine.history.to_numpy()
    np.testing.assert_allclose(h_mine["value"], h_auto["value"], rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(h_mine["grad_norm"], h_auto["grad_norm"], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(mine.params, auto.params, rtol=1e-12)
    assert mine.grad.dtype == jnp.float64 and mine.value.dtype == jnp.float64


def test_wrong_gradient_changes_path(x64):
    """The gradient fn returns is the one used: twice the true gradient gives another path,
    and `result.grad` is what fn returned."""
    auto = autodiff_run("LBFGS-Zoom")
    solver = js.Solver(js.LBFGS(), js.Zoom(), max_steps=100, value_and_grad=True)
    wrong = solver.run(doubled_rosenbrock, jnp.array([-1.2, 1.0]), history=True)
    values_auto, values_wrong = auto.history.to_numpy()["value"], wrong.history.to_numpy()["value"]
    assert not np.allclose(values_auto[1:4], values_wrong[1:4], rtol=1e-3)  # row 0: f(x0)
    np.testing.assert_allclose(wrong.grad, 2 * jax.grad(rosenbrock)(wrong.iterate), rtol=1e-8)


@pytest.mark.parametrize("direction", [js.NewtonCG, js.Newton])
def test_newton_difference_products_solve_a_quadratic(direction, x64):
    """Newton-CG and Newton with forward-difference products of fn's gradient (which JAX
    cannot differentiate in forward mode) solve a float64 quadratic; for Newton-CG, each
    product is one more call of fn, counted by the direction's `num_hvp` and not in
    `num_fun_evals` (Newton's n products are one batched call)."""
    rng = np.random.default_rng(0)
    m = rng.standard_normal((6, 6))
    a, b = jnp.asarray(m @ m.T + 6 * np.eye(6)), jnp.asarray(rng.standard_normal(6))
    solver = js.Solver(direction(), gtol=1e-10, ftol=0.0, value_and_grad=True)
    CALLS[0] = 0
    result = solver.run(counted_quadratic, jnp.zeros(6), a, b)
    assert result.success
    np.testing.assert_allclose(result.params, jnp.linalg.solve(a, b), rtol=1e-8)
    products = int(result.state.direction.num_hvp)
    assert products >= 6  # CG needs n products on a generic quadratic, Newton n per step
    if direction is js.NewtonCG:
        assert CALLS[0] == int(result.num_fun_evals) + products


def test_difference_product_rule():
    """H v is (g(x + eps v) - g(x)) / eps with eps = sqrt(u) (1 + |x|_2) / |v|_2, u the
    machine epsilon of x's least precise leaf; v = 0 gives 0."""
    from jaxsearch._objective import Objective

    own = Objective(lambda p: p, False, Objective.OWN_GRADIENT)  # fn is not called here
    hessian_vector_product = own.hessian_vector_product

    def evaluate(p):
        g = {"a": p["a"].astype(jnp.float32) ** 3, "b": jnp.sin(p["b"])}
        return jnp.zeros(()), g, None

    x = {"a": jnp.array([1.0, 2.0], jnp.bfloat16), "b": jnp.array([0.5], jnp.float32)}
    v = {"a": jnp.array([1.0, -1.0], jnp.bfloat16), "b": jnp.array([2.0], jnp.float32)}
    g = evaluate(x)[1]
    hv = hessian_vector_product(evaluate, x, v, grad=g)
    u = float(jnp.finfo(jnp.bfloat16).eps)

    def norm(tree):
        return np.sqrt(sum(np.sum(np.asarray(leaf, np.float64) ** 2) for leaf in tree.values()))

    eps = np.float32(np.sqrt(u) * (1 + norm(x)) / norm(v))
    moved = {
        k: (x[k].astype(jnp.float32) + eps * v[k].astype(jnp.float32)).astype(x[k].dtype) for k in x
    }
    g_moved = evaluate(moved)[1]
    for k in x:
        expected = ((g_moved[k] - g[k]) / eps).astype(v[k].dtype)
        assert hv[k].dtype == v[k].dtype
        np.testing.assert_allclose(
            np.asarray(hv[k], np.float32), np.asarray(expected, np.float32), rtol=1e-2
        )
    zero = jax.tree.map(jnp.zeros_like, v)
    assert all(
        bool(jnp.all(leaf == 0))
        for leaf in jax.tree.leaves(hessian_vector_product(evaluate, x, zero, grad=g))
    )


def test_pure_callback_simulator_run_and_vmap():
    """A simulator behind `jax.pure_callback` (no JAX derivative at all), L-BFGS with Zoom,
    under `run` and under `jax.vmap` (each problem as on its own)."""
    solver = js.Solver(js.LBFGS(), js.Zoom(), gtol=1e-4, value_and_grad=True)
    starts = jnp.array([[-1.2, 1.0], [2.0, 2.0]])
    alone = [solver.run(simulator, x0) for x0 in starts]
    assert all(bool(r.success) for r in alone)
    for r in alone:
        np.testing.assert_allclose(r.params, jnp.ones(2), atol=1e-3)
    batch = jax.vmap(lambda x0: solver.run(simulator, x0))(starts)
    assert bool(jnp.all(batch.success))
    for i, r in enumerate(alone):
        np.testing.assert_allclose(batch.params[i], r.params, rtol=1e-5)


def test_has_aux():
    """fn returns ((value, aux), grad): aux comes back from the returned point; with bounds
    (L-BFGS-B), and `init` learns aux's structure from fn."""

    def fn(x, c):
        value, grad = jax.value_and_grad(lambda x: jnp.sum((x - c) ** 2))(x)
        return (value, {"mean": jnp.mean(x)}), grad

    solver = js.Solver(has_aux=True, value_and_grad=True)
    c = jnp.array([1.0, -2.0, 3.0])
    result = solver.run(fn, jnp.zeros(3), c, bounds=(-jnp.inf, 2.5))
    assert result.success
    np.testing.assert_allclose(result.params, jnp.array([1.0, -2.0, 2.5]), atol=1e-5)
    np.testing.assert_allclose(result.aux["mean"], jnp.mean(result.params), rtol=1e-6)
    state = solver.init(jnp.zeros(3), fn=fn, args=(c,))
    assert state.aux["mean"].dtype == jnp.float32


def _bowl(params, centre):
    """sum over leaves of (p - centre)^2 in float32, and its gradient in float32 (cast to
    params' dtypes by the solver)."""
    value = jnp.zeros((), jnp.float32)
    grad = {}
    for key, p in params.items():
        diff = p.astype(jnp.float32) - centre
        value = value + jnp.sum(diff**2)
        grad[key] = 2 * diff
    return value, grad


@pytest.mark.parametrize(
    "dtypes", [("float32",), ("bfloat16",), ("float16", "bfloat16", "float32")]
)
def test_dtypes(dtypes):
    """Params in float32, bfloat16, and a pytree mixing float16, bfloat16 and float32, with
    fn's gradient in float32: the run solves, and grad comes back in params' dtypes (float64:
    `test_iterates_match_autodiff`)."""
    params = {f"p{i}": jnp.zeros(3, jnp.dtype(d)) for i, d in enumerate(dtypes)}
    centre = jnp.array([0.5, -1.0, 2.0], jnp.float32)
    result = js.Solver(gtol=1e-2, value_and_grad=True).run(_bowl, params, centre)
    assert bool(result.success)
    for key, p in params.items():
        assert result.params[key].dtype == p.dtype
        assert result.grad[key].dtype == p.dtype
        np.testing.assert_allclose(result.params[key].astype(jnp.float32), centre, atol=2e-2)
    assert result.value.dtype == jnp.float32


def _closure(scale):
    def fn(x, c):
        return scale * jnp.sum((x - c) ** 2), scale * 2 * (x - c)

    return fn


def test_second_run_compiles_nothing(compiles):
    """A second run from a new x0, with new data in args and fn a new closure computing the
    same (value, grad), compiles nothing: fn is compared by the program it computes, without
    differentiating it."""
    solver = js.Solver(value_and_grad=True)
    solver.run(_closure(3.0), jnp.zeros(3), jnp.ones(3))
    x0, c = jnp.array([2.0, 2.0, 2.0]), jnp.array([1.0, 2.0, 3.0])
    compiles.reset()
    result = solver.run(_closure(3.0), x0, c)
    assert compiles.count == 0
    np.testing.assert_allclose(result.params, c, rtol=1e-5)


def test_every_direction_and_search_traces():
    """Every direction of the registry (with Backtracking) and every line search (with
    L-BFGS) traces a run with fn's own gradient (and `test_least_squares_direction_refused`
    for those that cannot)."""
    x0 = jnp.ones(3)
    names = [(d, "Backtracking") for d in DIRECTIONS] + [("LBFGS", s) for s in SEARCHES]
    for direction, search in names:
        solver = make_solver(direction, search, value_and_grad=True)
        out = jax.eval_shape(lambda x, solver=solver: solver.run(_closure(1.0), x, x0), x0)
        assert out.params.dtype == x0.dtype and out.grad.shape == x0.shape


def test_step_with_an_equinox_model():
    """`init` and `step` on an Equinox model with a non-array field, fn's gradient from
    `eqx.filter_grad` (None at that field): the state caches fn's gradient; and a gradient
    with the model's whole structure (a leaf at the field, ignored) is taken too."""

    class Line(eqx.Module):
        w: jax.Array
        act: object = jnp.tanh  # a non-array leaf

    def loss(model):
        return jnp.sum((model.act(model.w) - 0.5) ** 2)

    def fn(model):
        return loss(model), eqx.filter_grad(loss)(model)

    def whole(model):
        return loss(model), Line(eqx.filter_grad(loss)(model).w, act=0.0)

    solver = js.Solver(js.BFGS(), value_and_grad=True)
    model = Line(jnp.zeros(2))
    state = solver.init(model)
    for _ in range(3):
        model, state = solver.step(fn, model, state)
    np.testing.assert_allclose(state.grad.w, eqx.filter_grad(loss)(model).w, rtol=1e-6)
    model, state = solver.step(whole, model, state)
    np.testing.assert_allclose(state.grad.w, eqx.filter_grad(loss)(model).w, rtol=1e-6)


# -------------------------------------------------------------------------------- adjoint


def test_implicit_adjoint_through_own_gradient(x64):
    """The implicit adjoint differentiates the gradient fn returns: the derivative of the
    solution of sinh(x - c) + x = 0 (f = sum cosh(x - c) + |x|^2 / 2) with respect to c is
    cosh(x - c) / (cosh(x - c) + 1), elementwise."""

    def own(x, c):
        return jax.value_and_grad(lambda x: jnp.sum(jnp.cosh(x - c)) + 0.5 * jnp.sum(x**2))(x)

    solver = js.Solver(gtol=1e-12, ftol=0.0, value_and_grad=True)
    c, c_dot = jnp.array([0.3, -0.7]), jnp.array([1.0, 2.0])
    result, tangent = jax.jvp(lambda c: solver.run(own, jnp.zeros(2), c), (c,), (c_dot,))
    x = result.params
    expected = jnp.cosh(x - c) / (jnp.cosh(x - c) + 1) * c_dot
    np.testing.assert_allclose(tangent.params, expected, rtol=1e-10)
    np.testing.assert_allclose(tangent.value, jnp.sum(-jnp.sinh(x - c) * c_dot), atol=1e-10)


def test_implicit_adjoint_refuses_a_callback():
    """Differentiating a run of a simulator behind `jax.pure_callback` with respect to args
    raises a TypeError that says what to do instead."""
    solver = js.Solver(value_and_grad=True)
    shift = jnp.array([0.0, 0.0])

    def fn(x, shift):
        return simulator(x - shift)

    with pytest.raises(TypeError, match="UnrolledAdjoint"):
        jax.jacfwd(lambda s: solver.run(fn, jnp.zeros(2), s).params)(shift)


# --------------------------------------------------------------------------------- errors


def test_wrong_gradient_structure():
    solver = js.Solver(value_and_grad=True)
    params = {"a": jnp.zeros(2), "b": jnp.zeros(3)}

    def missing(p):
        return jnp.sum(p["a"] ** 2), {"a": 2 * p["a"]}

    def wrong_shape(p):
        return jnp.sum(p["a"] ** 2), {"a": 2 * p["a"], "b": jnp.zeros(4)}

    def no_pair(p):
        return jnp.sum(p["a"] ** 2)

    def complex_grad(p):
        return jnp.sum(p["a"] ** 2), {"a": p["a"].astype(jnp.complex64), "b": p["b"]}

    with pytest.raises(TypeError, match="another structure than params"):
        solver.run(missing, params)
    with pytest.raises(TypeError, match=r"grad\['b'\] has shape \(4,\) where the param has"):
        solver.run(wrong_shape, params)
    with pytest.raises(TypeError, match=r"must return a pair \(value, grad\)"):
        solver.run(no_pair, params)
    with pytest.raises(TypeError, match=r"grad\['a'\] has dtype complex64"):
        solver.run(complex_grad, params)
    with pytest.raises(TypeError, match="another structure than params"):
        solver.init(params, fn=missing)
    with pytest.raises(TypeError, match="shape"):
        solver.step(wrong_shape, params, solver.init(params))


def test_least_squares_direction_refused():
    for direction in (js.GaussNewton(), js.LevenbergMarquardt()):
        with pytest.raises(TypeError, match="cannot take value_and_grad=True"):
            js.Solver(direction, value_and_grad=True)


def test_as_optax_refused():
    pytest.importorskip("optax")
    with pytest.raises(TypeError, match="value_and_grad=False"):
        js.Solver(value_and_grad=True).as_optax()
