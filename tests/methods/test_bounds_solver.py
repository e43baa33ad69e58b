"""Box constraints through the solver: L-BFGS-B (and projected gradient) against scipy's
L-BFGS-B, feasibility of every iterate in every dtype, and clear errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize

import jaxsearch as js
from jaxsearch._pairing import DEFAULT_SEARCHES

from ..problems import rosenbrock


def shifted_quadratic(x, hessian, centre):
    r = x - centre
    return 0.5 * r @ (hessian @ r)


def scipy_bounded(fn, x0, lower, upper, args=()):
    value_and_grad = jax.jit(jax.value_and_grad(fn))

    def f(x):
        value, grad = value_and_grad(jnp.asarray(x), *args)
        return float(value), np.asarray(grad, np.float64)

    bounds = list(
        zip(np.broadcast_to(lower, x0.shape), np.broadcast_to(upper, x0.shape), strict=True)
    )
    return scipy.optimize.minimize(f, np.asarray(x0), jac=True, method="L-BFGS-B", bounds=bounds)


DTYPE_NAMES = ["float16", "bfloat16", "float32", "float64"]

ROSENBROCK_CASES = {
    # (x0, lower, upper): bounds active at the solution, and one box that holds the minimiser
    "upper-active": (np.full(6, -1.2), -2.0, 0.5),
    "lower-active": (np.full(6, 3.0), 1.5, 4.0),
    "mixed": (
        np.array([-1.2, 1.0, -1.2, 1.0, -1.2, 1.0]),
        np.array([-np.inf, -1, 0.0, -np.inf, 0.2, -2]),
        np.array([0.8, np.inf, 0.9, np.inf, np.inf, 0.7]),
    ),
    "interior": (np.array([-1.2, 1.0, -1.2, 1.0]), -5.0, 5.0),
}


@pytest.mark.parametrize("case", sorted(ROSENBROCK_CASES))
def test_rosenbrock_matches_scipy(case):
    x0, lower, upper = ROSENBROCK_CASES[case]
    with jax.enable_x64(True):
        reference = scipy_bounded(rosenbrock, x0, lower, upper)
        result = js.Solver().run(rosenbrock, jnp.asarray(x0), bounds=(lower, upper))
        assert js.Status(int(result.status)).converged, js.Status(int(result.status))
        assert np.max(np.abs(np.asarray(result.params) - reference.x)) <= 1e-5
        assert abs(float(result.value) - reference.fun) <= 1e-8 * max(1.0, abs(reference.fun))
        print(case, int(result.num_fun_evals), reference.nfev)
        assert int(result.num_fun_evals) <= 1.2 * reference.nfev + 2


def test_bounded_quadratic_known_active_set():
    """min 1/2 (x - c)'H(x - c) over [0, 1]^n with H SPD; checked against the KKT
    conditions and scipy: the active set and the projected gradient at the solution."""
    rng = np.random.default_rng(3)
    n = 8
    q = rng.normal(size=(n, n))
    hessian = q @ q.T + n * np.eye(n)
    centre = rng.normal(scale=2.0, size=n)
    with jax.enable_x64(True):
        args = (jnp.asarray(hessian), jnp.asarray(centre))
        reference = scipy_bounded(shifted_quadratic, np.full(n, 0.5), 0.0, 1.0, args)
        result = js.Solver(gtol=1e-9, ftol=0.0).run(
            shifted_quadratic, jnp.full(n, 0.5), *args, bounds=(0.0, 1.0)
        )
        x = np.asarray(result.params)
        assert np.max(np.abs(x - reference.x)) <= 1e-6
        g = hessian @ (x - centre)
        at_lower, at_upper = x == 0.0, x == 1.0
        assert at_lower.any() and at_upper.any()  # the test means something
        assert np.all(g[at_lower] >= 0) and np.all(g[at_upper] <= 0)
        free = ~(at_lower | at_upper)
        assert np.max(np.abs(g[free]), initial=0) <= 1e-8


FEASIBILITY_CASES = [
    *[pytest.param(js.LBFGS(), d, id=f"lbfgsb-{d}") for d in DTYPE_NAMES],
    *[pytest.param(js.Gradient(), d, id=f"projected-gradient-{d}") for d in DTYPE_NAMES[:2]],
]


@pytest.mark.parametrize(("direction", "dtype"), FEASIBILITY_CASES)
def test_every_iterate_is_feasible(direction, dtype, compiles):
    """Every point `step` returns lies in the box as given (bounds rounded inwards), and the
    jitted bounded step compiles once."""
    lower, upper = -0.3, 0.7  # not representable in binary: rounding must go inwards
    with jax.enable_x64(dtype == "float64"):
        solver = js.Solver(direction, gtol=1e-3, max_steps=40)
        x = jnp.asarray([-1.2, 1.0, 0.2, -0.1], dtype)
        state = solver.init(x, jnp.float32)
        step = jax.jit(lambda x, st: solver.step(rosenbrock, x, st, bounds=(lower, upper)))
        for k in range(15):
            x, state = step(x, state)
            if k == 0:
                compiles.reset()
            wide = np.asarray(x, np.float64)
            assert np.all(wide >= lower) and np.all(wide <= upper), (dtype, wide)
        assert compiles.count == 0  # (before the eager reference below compiles its ops)
        assert float(state.value) < float(rosenbrock(jnp.asarray([-0.3, 0.7, 0.2, -0.1])))


def mixed_loss(params):
    x = jnp.concatenate([params["a"].astype(jnp.float32), params["b"]])
    return rosenbrock(x)


def test_mixed_pytree_bounds_per_leaf(compiles):
    """Per-leaf bounds on a bfloat16/float32 pytree; a second start compiles nothing."""
    params = {"a": jnp.asarray([-1.2, 1.0], jnp.bfloat16), "b": jnp.asarray([0.5, 0.5])}
    lower = {"a": -0.5, "b": jnp.asarray([0.0, 0.6])}
    upper = {"a": jnp.asarray([0.25, 0.5], jnp.float32), "b": 2.0}
    solver = js.Solver(gtol=1e-3)
    solver.run(mixed_loss, jax.tree.map(jnp.zeros_like, params), bounds=(lower, upper))
    compiles.reset()
    result = solver.run(mixed_loss, params, bounds=(lower, upper))
    assert compiles.count == 0
    a, b = np.asarray(result.params["a"], np.float32), np.asarray(result.params["b"])
    assert result.params["a"].dtype == jnp.bfloat16 and result.params["b"].dtype == jnp.float32
    assert np.all(a >= -0.5) and np.all(a <= np.asarray([0.25, 0.5]))
    assert np.all(b >= np.asarray([0.0, 0.6])) and np.all(b <= 2.0)
    assert js.Status(int(result.status)) != js.Status.NONFINITE


def test_new_bounds_values_do_not_recompile(compiles):
    solver = js.Solver()
    x0 = jnp.asarray([-1.2, 1.0, 0.5])
    solver.run(rosenbrock, x0, bounds=(jnp.asarray(-2.0), jnp.asarray(0.5)))
    compiles.reset()
    result = solver.run(rosenbrock, x0, bounds=(jnp.asarray(-1.0), jnp.asarray(0.8)))
    assert compiles.count == 0
    assert jnp.max(result.params) <= jnp.asarray(0.8)


def test_step_takes_bounds_as_run_does(compiles):
    """`step` builds its box on the host, as `run`: new Python-number bounds compile nothing,
    and a lower bound above its upper is refused by `step` itself."""
    solver = js.Solver()
    x0 = jnp.asarray([-1.2, 1.0, 0.5])
    state = solver.init(x0, bounds=(-2.0, 0.5))
    x, state = solver.step(rosenbrock, x0, state, bounds=(-2.0, 0.5))
    compiles.reset()
    x, state = solver.step(rosenbrock, x, state, bounds=(-1.0, 0.8))
    assert compiles.count == 0
    assert float(jnp.max(x)) <= 0.8
    with pytest.raises(ValueError, match="lower must not exceed upper"):
        solver.step(rosenbrock, x, state, bounds=(1.0, -1.0))


def test_bounds_errors():
    x0 = jnp.zeros(3)
    with pytest.raises(TypeError, match="cannot honour bounds"):
        js.Solver(js.NonlinearCG()).run(rosenbrock, x0, bounds=(-1.0, 1.0))
    with pytest.raises(TypeError, match="cannot honour bounds"):
        js.Solver(js.BFGS()).init(x0, bounds=(-1.0, 1.0))
    with pytest.raises(ValueError, match="lower must not exceed upper"):
        js.Solver().run(rosenbrock, x0, bounds=(1.0, -1.0))
    with pytest.raises(TypeError, match="pair"):
        js.Solver().run(rosenbrock, x0, bounds=1.0)
    with pytest.raises(ValueError, match="does not broadcast"):
        js.Solver().run(rosenbrock, x0, bounds=(jnp.zeros(2), 1.0))
    with pytest.raises(TypeError, match="structure of params"):
        js.Solver().run(rosenbrock, x0, bounds=({"a": 0.0}, 1.0))


class _HagerZhangWhenBounded(js.LBFGS):
    pass


def test_init_and_step_must_agree_on_bounds(monkeypatch):
    """Where the line search with bounds keeps another state than the one without, a state
    from `init` without bounds cannot serve a `step` with them (nor the reverse)."""
    # HagerZhang's state is unlike Zoom's.
    monkeypatch.setitem(DEFAULT_SEARCHES, _HagerZhangWhenBounded, (js.Zoom, js.HagerZhang))
    solver = js.Solver(_HagerZhangWhenBounded())
    x = jnp.zeros(3)
    with pytest.raises(TypeError, match="pass the same bounds to init and step"):
        solver.step(rosenbrock, x, solver.init(x), bounds=(-1.0, 1.0))
    with pytest.raises(TypeError, match="pass the same bounds to init and step"):
        solver.step(rosenbrock, x, solver.init(x, bounds=(-1.0, 1.0)))
    assert js.Solver().bounded_linesearch == js.MoreThuente()  # L-BFGS-B's search by default
    assert js.Solver(js.LBFGS(), js.Zoom()).bounded_linesearch == js.Zoom()  # given: kept
