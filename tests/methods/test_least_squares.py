"""Least squares (issue 36, part 1): with a least-squares direction (`js.GaussNewton`,
`js.LevenbergMarquardt`, any `js.AbstractLeastSquares`), fn returns residuals r and the
solver minimises f = 0.5 |r|^2. Checked on a consistent linear problem (one Gauss-Newton
step), on the NIST StRD problems of higher difficulty against NIST's certified values, in
low precision and mixed dtypes, under vmap, resumed, with history, aux and bounds, and by the
errors of a residual fn given to another direction."""

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize

import jaxsearch as js
import jaxsearch.internal as jsi
from benchmarks import nist_problems as nist
from jaxsearch.testing import check_direction

from ..helpers import LEAST_SQUARES

TIGHT = dict(gtol=1e-12, ftol=0.0)
# The least-squares directions, and LM from the damping tau (`factor=None`; the default
# starts from MINPACK's radius, factor=1.0).
WITH_TAU = {**LEAST_SQUARES, "LM-tau": lambda: js.LevenbergMarquardt(factor=None)}


def nist_residuals(b, problem):
    return nist.residuals(b, problem)


def exponential(params, t, y):  # y ~ a exp(-k t) + c
    return params["a"] * jnp.exp(-params["k"] * t) + params["c"] - y


def exponential_data(dtype):
    t = jnp.linspace(0.0, 3.0, 20, dtype=dtype)
    y = (2.0 * jnp.exp(-1.3 * t) + 0.5).astype(dtype)
    x0 = {"a": jnp.asarray(1.0, dtype), "k": jnp.asarray(0.5, dtype), "c": jnp.asarray(0.0, dtype)}
    return x0, t, y


# ------------------------------------------------------------------ linear least squares


def test_consistent_linear_problem_takes_one_gauss_newton_step():
    """r(x) = A x - b with b = A x*: the unit Gauss-Newton step lands on x* to float64
    rounding, and the run converges there in one step."""
    with jax.enable_x64(True):
        rng = np.random.default_rng(0)
        a = jnp.asarray(rng.normal(size=(12, 5)))
        solution = jnp.asarray(rng.normal(size=5))
        b = a @ solution
        solver = js.Solver(js.GaussNewton(), **TIGHT, max_steps=5)
        result = solver.run(lambda x, a, b: a @ x - b, jnp.zeros(5), a, b)
        assert result.status == js.Status.CONVERGED_GTOL, result.message
        assert int(result.num_steps) == 1
        np.testing.assert_allclose(result.params, solution, rtol=1e-13, atol=1e-13)
        # `run` hands GaussNewton J from its evaluations: no JVP of the direction's own
        assert int(result.state.direction.num_jvp) == 0


def test_value_is_half_the_squared_residual_norm():
    """`result.value` and the history's values are 0.5 |r|^2, computed by hand, and the
    gradient is J'r (the solver's f is the least-squares objective, not fn's output)."""
    with jax.enable_x64(True):
        x0, t, y = exponential_data(jnp.float64)
        for direction in (js.GaussNewton(), js.LevenbergMarquardt()):
            solver = js.Solver(direction, max_steps=2, gtol=0.0, ftol=0.0)
            result = solver.run(exponential, x0, t, y, history=True)
            r = exponential(result.params, t, y)
            expected = 0.5 * float(jnp.sum(r * r))
            assert float(result.value) == pytest.approx(expected, rel=1e-14)
            grad = jax.grad(lambda p: 0.5 * jnp.sum(exponential(p, t, y) ** 2))(result.params)
            for key in grad:
                np.testing.assert_allclose(result.grad[key], grad[key], rtol=1e-12)
            values = result.history.to_numpy()["value"]  # f after each step
            assert values[-1] == pytest.approx(expected, rel=1e-14)


# ------------------------------------------------------------------ NIST StRD

LM_PROBLEMS = ["MGH09", "Thurber", "BoxBOD", "Rat42", "Eckerle4", "Rat43", "Bennett5"]
GN_PROBLEMS = list(nist.PROBLEMS)  # from start 2


def _fit(direction, name, start):
    problem = nist.PROBLEMS[name]
    with jax.enable_x64(True):
        solver = js.Solver(direction, **TIGHT, max_steps=1000)
        b0 = jnp.asarray(problem.starts[start], jnp.float64)
        return solver.run(nist_residuals, b0, problem)


def _scipy_solves(name, start) -> bool:
    problem = nist.PROBLEMS[name]
    with jax.enable_x64(True):
        jac = jax.jit(jax.jacfwd(nist_residuals), static_argnums=1)
        fit = scipy.optimize.least_squares(
            lambda b: nist.residuals(b, problem, xp=np),
            problem.starts[start],
            jac=lambda b: np.asarray(jac(jnp.asarray(b), problem)),
            method="trf",
            xtol=1e-15,
            ftol=1e-15,
            gtol=1e-15,
            max_nfev=10_000,
        )
    return bool(np.all(np.abs(fit.x - problem.certified) <= 5e-7 * np.abs(problem.certified)))


@pytest.fixture(scope="module")
def nist_fits():
    fits = {}
    for name in LM_PROBLEMS:
        for start in ("start1", "start2"):
            fits["LM", name, start] = _fit(js.LevenbergMarquardt(), name, start)
    for name in GN_PROBLEMS:
        fits["GN", name, "start2"] = _fit(js.GaussNewton(), name, "start2")
    return fits


CASES = [("LM", n, s) for n in LM_PROBLEMS for s in ("start1", "start2")] + [
    ("GN", n, "start2") for n in GN_PROBLEMS
]


@pytest.mark.parametrize("case", CASES, ids=["-".join(c) for c in CASES])
def test_nist_certified_values(nist_fits, case):
    """Every fitted parameter agrees with NIST's certified value to 6 significant digits
    (|b_i - b*_i| <= 5e-7 |b*_i|), where scipy's least_squares(method="trf") does too."""
    _, name, start = case
    problem = nist.PROBLEMS[name]
    assert _scipy_solves(name, start)
    result = nist_fits[case]
    params = np.asarray(result.params)
    assert np.all(np.isfinite(params)), result.message
    np.testing.assert_allclose(params, problem.certified, rtol=5e-7, atol=0)
    rss = 2 * float(result.value)
    assert rss == pytest.approx(problem.certified_rss, rel=1e-6)


# ------------------------------------------------------------------ dtypes


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("direction", list(WITH_TAU))
def test_low_precision_descends(dtype, direction):
    """In float32 and bfloat16 the run stays finite, keeps the params' dtypes and lowers f;
    f is reported in float32 (the residuals' dtype widened)."""
    make = WITH_TAU[direction]
    x0, t, y = exponential_data(dtype)
    result = js.Solver(make(), max_steps=20).run(exponential, x0, t, y)
    assert result.value.dtype == jnp.float32
    assert all(result.params[k].dtype == dtype for k in x0)
    start = 0.5 * float(jnp.sum(exponential(x0, t, y).astype(jnp.float32) ** 2))
    assert np.isfinite(float(result.value))
    assert float(result.value) < 0.05 * start
    tol = 1e-3 if dtype == jnp.float32 else 0.1
    assert float(result.params["k"]) == pytest.approx(1.3, rel=tol, abs=tol)


@pytest.mark.parametrize("direction", list(WITH_TAU))
def test_mixed_dtype_params(direction):
    """A pytree of float32 and bfloat16 params with float32 residuals runs and descends."""
    make = WITH_TAU[direction]
    x0, t, y = exponential_data(jnp.float32)
    x0 = {**x0, "c": x0["c"].astype(jnp.bfloat16), "k": jnp.full((1,), 0.5, jnp.float32)}

    def fn(p, t, y):
        return exponential({**p, "c": p["c"].astype(jnp.float32), "k": p["k"][0]}, t, y)

    result = js.Solver(make(), max_steps=30).run(fn, x0, t, y)
    assert result.params["c"].dtype == jnp.bfloat16
    assert result.params["k"].dtype == jnp.float32
    start = 0.5 * float(jnp.sum(fn(x0, t, y) ** 2))
    assert float(result.value) < 1e-2 * start
    assert float(result.params["k"][0]) == pytest.approx(1.3, rel=2e-2)


@pytest.mark.parametrize("direction", list(LEAST_SQUARES))
def test_float64_exact(direction):
    """On exact data in float64 both fit the exponential to rounding."""
    make = LEAST_SQUARES[direction]
    with jax.enable_x64(True):
        x0, t, y = exponential_data(jnp.float64)
        result = js.Solver(make(), **TIGHT, max_steps=100).run(exponential, x0, t, y)
        assert result.status == js.Status.CONVERGED_GTOL, result.message
        for key, want in (("a", 2.0), ("k", 1.3), ("c", 0.5)):
            assert float(result.params[key]) == pytest.approx(want, rel=1e-12)


# ------------------------------------------------------------------ solver features


def test_vmap_over_data():
    """`jax.vmap` over the data fits each data set as a run of its own does."""
    with jax.enable_x64(True):
        x0, t, _ = exponential_data(jnp.float64)
        rates = jnp.asarray([0.8, 1.3, 2.0])
        ys = jnp.stack([2.0 * jnp.exp(-k * t) + 0.5 for k in rates])
        solver = js.Solver(js.LevenbergMarquardt(), **TIGHT, max_steps=100)
        batched = jax.vmap(lambda y: solver.run(exponential, x0, t, y).params)(ys)
        np.testing.assert_allclose(batched["k"], rates, rtol=1e-10)
        single = solver.run(exponential, x0, t, ys[1]).params
        np.testing.assert_allclose(batched["k"][1], single["k"], rtol=1e-12)


@pytest.mark.parametrize("direction", list(LEAST_SQUARES))
def test_resume(direction):
    """A run cut after 3 steps and resumed with `state=result.state` ends where one run of
    6 steps does (the damping and its pending gain ratio travel in the state)."""
    make = LEAST_SQUARES[direction]
    with jax.enable_x64(True):
        problem = nist.PROBLEMS["Rat43"]
        b0 = jnp.asarray(problem.start2)
        settings = dict(gtol=0.0, ftol=0.0)
        whole = js.Solver(make(), max_steps=6, **settings).run(nist_residuals, b0, problem)
        half = js.Solver(make(), max_steps=3, **settings)
        first = half.run(nist_residuals, b0, problem)
        second = half.run(nist_residuals, first.iterate, problem, state=first.state)
        assert int(second.num_steps) == 6
        np.testing.assert_allclose(second.params, whole.params, rtol=1e-12)


def test_history_and_aux():
    """`history=True` records 0.5 |r|^2 falling; with `has_aux=True` fn returns (r, aux)."""
    with jax.enable_x64(True):
        x0, t, y = exponential_data(jnp.float64)

        def with_aux(p, t, y):
            r = exponential(p, t, y)
            return r, {"max": jnp.max(jnp.abs(r))}

        solver = js.Solver(js.LevenbergMarquardt(), **TIGHT, max_steps=100, has_aux=True)
        result = solver.run(with_aux, x0, t, y, history=True)
        assert result.status == js.Status.CONVERGED_GTOL, result.message
        r = exponential(result.params, t, y)
        assert float(result.aux["max"]) == pytest.approx(float(jnp.max(jnp.abs(r))))
        values = result.history.to_numpy()["value"]
        values = values[np.isfinite(values)]
        assert len(values) >= 3
        assert np.all(np.diff(values) <= 0)


def test_residuals_as_a_tuple():
    """Residuals may be any pytree, a tuple of arrays too (has_aux=False)."""
    with jax.enable_x64(True):
        x0, t, y = exponential_data(jnp.float64)

        def split(p, t, y):
            r = exponential(p, t, y)
            return r[:10], {"rest": r[10:]}

        result = js.Solver(js.GaussNewton(), **TIGHT, max_steps=50).run(split, x0, t, y)
        assert float(result.params["k"]) == pytest.approx(1.3, rel=1e-12)


@pytest.mark.parametrize("direction", list(LEAST_SQUARES))
def test_bounds_are_refused(direction):
    make = LEAST_SQUARES[direction]
    x0, t, y = exponential_data(jnp.float32)
    bounds = (jax.tree.map(lambda a: a - 10, x0), jax.tree.map(lambda a: a + 10, x0))
    with pytest.raises(TypeError, match="cannot honour bounds"):
        js.Solver(make()).run(exponential, x0, t, y, bounds=bounds)


def test_residuals_with_another_direction_fail_as_before():
    """A residual fn given to a direction that is not least squares fails with the scalar-
    output message, as any non-scalar fn does."""
    x0, t, y = exponential_data(jnp.float32)
    with pytest.raises(TypeError, match="fn must return a scalar"):
        js.Solver(js.BFGS()).run(exponential, x0, t, y)


def test_direction_needs_residuals():
    """Called without `info.residuals` (e.g. by hand), the directions say what they need."""
    x = jnp.zeros(2)
    info = jsi.DirectionInfo(x, x, jnp.float32)
    for direction in (js.GaussNewton(), js.LevenbergMarquardt()):
        with pytest.raises(ValueError, match="needs the residuals"):
            direction.compute(direction.init(x, jnp.float32), info)


def test_tau_checked():
    with pytest.raises(ValueError, match="tau must be positive"):
        js.LevenbergMarquardt(factor=None, tau=0.0)


def test_tau_needs_factor_none():
    """`tau` is the first damping of the start without a radius factor: given with a factor
    (the default, 1.0) it is refused, not ignored."""
    assert js.LevenbergMarquardt() == js.LevenbergMarquardt(factor=1.0)
    with pytest.raises(ValueError, match="pass factor=None with it"):
        js.LevenbergMarquardt(tau=1e-2)


def test_factor_checked():
    with pytest.raises(ValueError, match="factor must be positive"):
        js.LevenbergMarquardt(factor=0.0)


@pytest.mark.parametrize("direction", list(LEAST_SQUARES))
def test_implicit_derivative(direction):
    """Through the implicit adjoint, d x* / d y of a linear least-squares fit is A's
    pseudo-inverse (the adjoint differentiates 0.5 |r|^2, not fn's output)."""
    make = LEAST_SQUARES[direction]
    with jax.enable_x64(True):
        rng = np.random.default_rng(1)
        a = jnp.asarray(rng.normal(size=(8, 3)))
        y = jnp.asarray(rng.normal(size=8))
        solver = js.Solver(make(), **TIGHT, max_steps=50, adjoint=js.ImplicitAdjoint())

        def fit(y):
            return solver.run(lambda x, y: a @ x - y, jnp.zeros(3), y).params

        np.testing.assert_allclose(jax.jacobian(fit)(y), np.linalg.pinv(a), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("direction", list(LEAST_SQUARES))
def test_step_loop(direction):
    """`init` (with fn, whose residuals fix the value dtype) and jitted `step`s descend as a
    run does; `state.value` is 0.5 |r|^2 at the params."""
    make = LEAST_SQUARES[direction]
    x0, t, y = exponential_data(jnp.float32)
    solver = js.Solver(make())
    state = solver.init(x0, fn=exponential, args=(t, y))
    assert state.value.dtype == jnp.float32
    step = jax.jit(lambda p, s: solver.step(exponential, p, s, t, y))
    params, values = x0, []
    for _ in range(5):
        params, state = step(params, state)
        values.append(float(state.value))
    assert values == sorted(values, reverse=True)
    r = exponential(params, t, y)
    assert values[-1] == pytest.approx(0.5 * float(jnp.sum(r * r)), rel=1e-5, abs=1e-10)
    assert values[-1] < 1e-6


# ------------------------------------------------------------------ r and J together

DENSE = {k: WITH_TAU[k] for k in ("GaussNewton", "LevenbergMarquardt", "LM-tau")}


class _Executions:
    """Counts executions of r (a `jax.debug.callback` inside it) in compiled code."""

    def __init__(self):
        self.count = 0

    def bump(self, *_):
        self.count += 1

    def residuals(self, params, t, y):
        jax.debug.callback(self.bump)
        return exponential(params, t, y)


@pytest.mark.parametrize(
    "dtype", [jnp.float64, jnp.float32, jnp.float16], ids=["float64", "float32", "float16"]
)
@pytest.mark.parametrize("direction", list(DENSE))
def test_run_evaluates_r_once_per_trial(direction, dtype):
    """In `run`, a dense least-squares direction evaluates r once per trial: the evaluation
    that gives f and grad f also gives r and J (`DirectionInfo.jacobian`), and `compute`
    evaluates r no more (before, its `jax.linearize` evaluated r again at every accepted
    point) nor forms a product of its own (`num_jvp` 0)."""
    with jax.enable_x64(dtype == jnp.float64):
        x0, t, y = exponential_data(dtype)
        executions = _Executions()
        result = js.Solver(DENSE[direction](), gtol=1e-3, max_steps=20).run(
            executions.residuals, x0, t, y
        )
        jax.effects_barrier()
        assert int(result.num_steps) >= 3
        assert executions.count == int(result.num_fun_evals)
        assert int(result.state.direction.num_jvp) == 0
        assert all(result.params[k].dtype == dtype for k in x0)
        assert all(result.grad[k].dtype == dtype for k in x0)


@pytest.mark.parametrize("direction", ["GaussNewton", "LevenbergMarquardt"])
def test_run_agrees_with_a_step_loop(direction):
    """`step` hands no J (the direction forms it from `info.residuals`: n JVPs per step) and
    takes grad f by a VJP; `run` takes both from one forward-mode Jacobian. In float64 they
    end at the same params to 1e-10 after the same number of steps."""
    make = DENSE[direction]
    with jax.enable_x64(True):
        x0, t, y = exponential_data(jnp.float64)
        solver = js.Solver(make(), gtol=1e-9, ftol=0.0, max_steps=6)
        result = solver.run(exponential, x0, t, y)
        state = solver.init(x0, fn=exponential, args=(t, y))
        step = jax.jit(lambda p, s: solver.step(exponential, p, s, t, y))
        params = x0
        for _ in range(int(result.num_steps)):
            params, state = step(params, state)
        assert int(state.num_steps) == int(result.num_steps) >= 4
        for k in x0:
            np.testing.assert_allclose(params[k], result.params[k], rtol=1e-10)
        assert int(state.direction.num_jvp) == 3 * int(state.num_steps)  # n = 3 per step


@pytest.mark.parametrize("direction", list(DENSE))
def test_compute_takes_the_jacobian_it_is_handed(direction):
    """Handed (r, J) in `DirectionInfo.jacobian` (no `residuals`), `compute` returns the
    direction it forms from `residuals` itself, with no JVP of its own."""
    make = DENSE[direction]
    with jax.enable_x64(True):
        x0, t, y = exponential_data(jnp.float64)
        x = jnp.stack([x0["a"], x0["k"], x0["c"]]) + 0.1

        def fn(p):
            return exponential({"a": p[0], "k": p[1], "c": p[2]}, t, y)

        r, jac = fn(x), jax.jacfwd(fn)(x)
        grad = jnp.matmul(jac.T, r, precision=jax.lax.Precision.HIGHEST)
        direction = make()
        state = direction.init(x, jnp.float64)

        @jax.jit
        def both(x, grad, r, jac):
            own = direction.compute(state, jsi.DirectionInfo(x, grad, jnp.float64, residuals=fn))
            info = jsi.DirectionInfo(x, grad, jnp.float64, jacobian=(r, jac))
            return own, direction.compute(state, info)

        own, handed = both(x, grad, r, jac)
        np.testing.assert_allclose(handed[0], own[0], rtol=1e-12)
        assert int(own[2].num_jvp) == 3
        assert int(handed[2].num_jvp) == 0


def test_least_squares_run_compiles_once(compiles):
    """A run with r and J in its evaluations compiles its program and fresh state once: a
    run from a new x0 with new data, and a resumed run, compile nothing more."""
    x0, t, y = exponential_data(jnp.float32)
    solver = js.Solver(js.LevenbergMarquardt(), max_steps=10)
    compiles.reset()
    first = solver.run(exponential, x0, t, y)
    jax.block_until_ready(first)
    assert compiles.count == 2
    moved = jax.tree.map(lambda a: a + 0.25, x0)
    jax.block_until_ready((moved, y + 0.125))
    compiles.reset()
    jax.block_until_ready(solver.run(exponential, moved, t, y + 0.125))
    jax.block_until_ready(solver.run(exponential, first.iterate, t, y, state=first.state))
    assert compiles.count == 0


# ------------------------------------------------------------------ the damping rule


def _by_hand(direction, fn, x, state):
    """`direction.compute` at x as the solver calls it, with fn's residuals."""
    grad = jax.grad(lambda p: 0.5 * jnp.sum(fn(p) ** 2))(x)
    info = jsi.DirectionInfo(x, grad, x.dtype, residuals=fn)
    d, _, state, _ = direction.compute(state, info)
    return d, state


def test_radius_follows_the_search_and_the_gain_ratio():
    """Delta (Moré 1978, with the search's outcome): the first step takes lambda = tau and
    Delta = |D^(1/2) d|; a step the search cut (alpha = 1/2) sets Delta to its own length;
    a unit step with rho = 1 (a linear problem) doubles its length, and lambda = 0 (the
    Gauss-Newton step) where that step lies inside."""
    with jax.enable_x64(True):
        a = jnp.asarray([[3.0, 1.0], [1.0, 2.0], [0.0, 1.0]])
        b = jnp.asarray([1.0, -2.0, 0.5])

        def fn(x):
            return a @ x - b

        lm = js.LevenbergMarquardt(factor=None, tau=0.5)
        x = jnp.zeros(2)
        d, state = _by_hand(lm, fn, x, lm.init(x, jnp.float64))
        scale = jnp.linalg.norm(a, axis=0)  # D^(1/2): the column norms of J
        assert float(state.damping) == 0.5
        assert float(state.radius) == pytest.approx(float(jnp.linalg.norm(scale * d)), rel=1e-12)
        # The search cut the unit step: Delta is the length it accepted.
        state = lm.update(state, d / 2, None, jnp.float64)
        x = x + d / 2
        d2, state = _by_hand(lm, fn, x, state)
        assert float(state.radius) == pytest.approx(
            float(jnp.linalg.norm(scale * d / 2)), rel=1e-12
        )
        assert float(state.damping) > 0  # the Gauss-Newton step is longer than that
        assert float(jnp.linalg.norm(scale * d2)) == pytest.approx(float(state.radius), rel=1e-9)
        # A unit step with rho = 1 (f is quadratic): Delta doubles its length.
        state = lm.update(state, d2, None, jnp.float64)
        _, state = _by_hand(lm, fn, x + d2, state)
        assert float(state.radius) == pytest.approx(
            2 * float(jnp.linalg.norm(scale * d2)), rel=1e-9
        )
        # From the first step with a small tau, nearly the Gauss-Newton step: the next
        # Gauss-Newton step (to the solution) lies inside the doubled radius, so lambda = 0.
        lm = js.LevenbergMarquardt(factor=None, tau=1e-6)
        x = jnp.zeros(2)
        d, state = _by_hand(lm, fn, x, lm.init(x, jnp.float64))
        state = lm.update(state, d, None, jnp.float64)
        x = x + d
        d, state = _by_hand(lm, fn, x, state)
        assert float(state.damping) == 0
        np.testing.assert_allclose(x + d, jnp.linalg.lstsq(a, b)[0], rtol=1e-12)


def test_factor_radius_rule():
    """With `factor` (MINPACK's rules): the first Delta is factor |D^(1/2) x| (factor at
    x = 0); after a step the search cut, the gain ratio still applies to its length: rho = 1
    (a linear problem) gives 2 |D^(1/2) s|, where the `tau` rule keeps |D^(1/2) s|."""
    with jax.enable_x64(True):
        a = jnp.asarray([[3.0, 1.0], [1.0, 2.0], [0.0, 1.0]])
        b = jnp.asarray([1.0, -2.0, 0.5])

        def fn(x):
            return a @ x - b

        scale = jnp.linalg.norm(a, axis=0)  # D^(1/2): the column norms of J
        lm = js.LevenbergMarquardt(factor=0.25)
        _, state = _by_hand(lm, fn, jnp.zeros(2), lm.init(jnp.zeros(2), jnp.float64))
        assert float(state.radius) == 0.25
        x = jnp.asarray([0.5, -4.0])
        d, state = _by_hand(lm, fn, x, lm.init(x, jnp.float64))
        assert float(state.radius) == pytest.approx(0.25 * float(jnp.linalg.norm(scale * x)))
        assert float(jnp.linalg.norm(scale * d)) == pytest.approx(float(state.radius), rel=1e-9)
        for made, grown in ((lm, 2), (js.LevenbergMarquardt(factor=None), 1)):
            _, first = _by_hand(made, fn, x, made.init(x, jnp.float64))
            cut = made.update(first, d / 2, None, jnp.float64)
            _, after = _by_hand(made, fn, x + d / 2, cut)
            length = float(jnp.linalg.norm(scale * d / 2))
            assert float(after.radius) == pytest.approx(grown * length, rel=1e-12)


@pytest.fixture(scope="module")
def mgh10_start1():
    """MGH10 (NIST, higher difficulty; y = b1 exp(b2 / (x + b3))) from start 1, float64:
    the final params of LevenbergMarquardt() (factor=1.0) and of LevenbergMarquardt(factor=None)
    (the `tau` start)."""
    problem = nist.PROBLEMS["MGH10"]
    with jax.enable_x64(True):
        b0 = jnp.asarray(problem.start1, jnp.float64)
        ends = {}
        for name, made in (("default", js.LevenbergMarquardt()), ("tau", WITH_TAU["LM-tau"]())):
            solver = js.Solver(made, gtol=0.0, ftol=0.0)
            ends[name] = np.asarray(solver.run(nist_residuals, b0, problem).params)
    return problem, ends


def test_mgh10_start1_by_default(mgh10_start1):
    """The default, `factor=1.0`, reaches MGH10's certified parameters from start 1 to 6
    significant digits."""
    problem, ends = mgh10_start1
    np.testing.assert_allclose(ends["default"], problem.certified, rtol=5e-7, atol=0)


def test_mgh10_start1_tau_ends_at_the_asymptote(mgh10_start1):
    """The `tau` start crosses to b1 < 0, where b1 exp(b2 / (x + b3)) < 0 < y: the run ends
    far from the certified values, with b2 very negative (the model near 0)."""
    problem, ends = mgh10_start1
    assert ends["tau"][0] < 0 and ends["tau"][1] < -1e5


@pytest.mark.parametrize("start", ["start1", "start2"])
def test_bennett5_in_few_steps(start):
    """Once the Gauss-Newton step lies inside the radius, LM takes it: Bennett5 (NIST, higher
    difficulty, a long flat valley) reaches the certified values within 25 steps from both
    starts from the `tau` start (Nielsen's gain-ratio rule, which keeps lambda where rho is
    near 1/2, took 319 and 374 steps; optimistix's LM 808 and 1354; the default's first
    radius, |D^(1/2) x0|, creeps along the valley: benchmarks/suite/least_squares.py)."""
    problem = nist.PROBLEMS["Bennett5"]
    with jax.enable_x64(True):
        solver = js.Solver(js.LevenbergMarquardt(factor=None), gtol=0.0, ftol=0.0, max_steps=25)
        b0 = jnp.asarray(problem.starts[start], jnp.float64)
        result = solver.run(nist_residuals, b0, problem)
    np.testing.assert_allclose(np.asarray(result.params), problem.certified, rtol=5e-7, atol=0)


def test_ill_conditioned_jacobian_in_float32():
    """A consistent linear problem with cond(J) = 1e4 in float32 is solved within 5 steps to
    the accuracy float32 allows: the Gauss-Newton step (lambda = 0) once it lies inside the
    radius, solved from the SVD of J D^(-1/2) (J'J's condition number, 1e8, is past float32's
    1 / eps). Nielsen's rule, lambda / 3 at best per step, on J'J + lambda D, was still 0.9
    away after 5 steps."""
    rng = np.random.default_rng(3)
    u, _ = np.linalg.qr(rng.normal(size=(20, 5)))
    v, _ = np.linalg.qr(rng.normal(size=(5, 5)))
    a = jnp.asarray(u @ np.diag(np.geomspace(1.0, 1e-4, 5)) @ v.T, jnp.float32)
    solution = jnp.asarray(rng.normal(size=5), jnp.float32)
    b = a @ solution
    solver = js.Solver(js.LevenbergMarquardt(), gtol=0.0, ftol=0.0, max_steps=5)
    result = solver.run(lambda x, a, b: a @ x - b, jnp.zeros(5, jnp.float32), a, b)
    # The least-squares perturbation bound (Golub & Van Loan, Thm 5.3.1; Higham, Thm 20.1):
    # data perturbed by a relative eps moves the solution by
    #   |dx| / |x| <= eps (2 cond(J) + cond(J)^2 |r| / (|J| |x|)) + O(eps^2).
    # Rounding b = J x* to float32 and a backward-stable float32 solve are such perturbations,
    # with eps = eps(float32) (c = 2 is the bound's own constant); b's rounding leaves a
    # residual |r| ~ eps |b|, so the second term is negligible here. The error of a solution
    # thus depends on how each machine rounds, up to this bound.
    a64, b64, x64 = (np.asarray(t, np.float64) for t in (a, b, solution))
    cond = np.linalg.cond(a64)
    r = a64 @ np.linalg.lstsq(a64, b64, rcond=None)[0] - b64
    eps = float(jnp.finfo(jnp.float32).eps)
    x_norm = np.linalg.norm(x64)
    bound = eps * (2 * cond + cond**2 * np.linalg.norm(r) / (np.linalg.norm(a64, 2) * x_norm))
    error = np.linalg.norm(np.asarray(result.params, np.float64) - x64)
    assert error <= bound * x_norm, (error, bound * x_norm)


# ------------------------------------------------------------------ the conformance kit


class _Damped(js.AbstractLeastSquares):
    """d = -(J'J + mu I)^-1 J'r with mu halved at each accepted step and 1 after `reset`,
    from public names only; `flaw` breaks it on purpose in one way (None: sound)."""

    flaw: str | None = eqx.field(static=True, default=None)
    supports_bounds: ClassVar[bool] = False

    def init(self, params, dtype):
        state = {"mu": jnp.ones((), jnp.float32)}
        return {**state, "count": 0} if self.flaw == "retrace" else state

    def compute(self, state, info):
        x = jsi.flatten_tree(info.x, jnp.float32)
        jac = jax.jacfwd(
            lambda v: jsi.flatten_tree(info.residuals(jsi.unflatten_tree(v, info.x)), jnp.float32)
        )(x)
        g = jsi.flatten_tree(info.grad, jnp.float32)
        d = -jnp.linalg.solve(jac.T @ jac + state["mu"] * jnp.eye(x.size, dtype=jnp.float32), g)
        if self.flaw == "ascent":
            d = -d
        if self.flaw == "retrace":  # a Python int: a new program at each step
            state = {**state, "count": state["count"] + 1}
        return jsi.unflatten_tree(d, info.grad), jnp.array(True), state, jnp.full((), jnp.inf)

    def update(self, state, s, y, dtype, accept=True):
        if self.flaw == "accept":
            return {**state, "mu": state["mu"] / 2}  # halves on rejected steps too
        if self.flaw == "dtype":
            return {"mu": jnp.where(accept, state["mu"] / 2, state["mu"]).astype(jnp.float16)}
        return {**state, "mu": jnp.where(accept, state["mu"] / 2, state["mu"])}

    def reset(self, state):
        if self.flaw == "reset":
            return state  # forgets nothing
        return {**state, "mu": jnp.ones((), jnp.float32)}

    def gradient_replaced(self, state):
        return state


def test_the_kit_passes_lm_with_tau():
    check_direction(js.LevenbergMarquardt(factor=None))


def test_the_kit_passes_a_sound_least_squares_direction():
    check_direction(_Damped())


@pytest.mark.parametrize(
    "flaw, message",
    [
        ("ascent", "descent: d is not a descent direction of 0.5 |r|"),
        ("accept", r"update\(accept=False\) changed the state"),
        ("reset", "reset: after `reset`, compute must give the d"),
        ("retrace", "one compile: later steps and problems compiled"),
        ("dtype", r"state structure \(.*\): _Damped\.update: the state's field \['mu'\] is f"),
    ],
)
def test_the_kit_catches_a_broken_least_squares_direction(flaw, message):
    with pytest.raises(AssertionError, match=message):
        check_direction(_Damped(flaw=flaw))


def test_invariant_under_a_scaling_of_the_parameters():
    """D = diag(J'J) (a running maximum of J's column norms) makes the iterates invariant under
    a scaling of the parameters: fitting z = c x with r(z / c) retraces x's iterates."""
    with jax.enable_x64(True):
        x0, t, y = exponential_data(jnp.float64)
        c = {"a": 1e3, "k": 1e-2, "c": 7.0}

        def scaled(z, t, y):
            return exponential({key: z[key] / c[key] for key in z}, t, y)

        solver = js.Solver(js.LevenbergMarquardt(), gtol=0.0, ftol=0.0, max_steps=6)
        plain = solver.run(exponential, x0, t, y).params
        z0 = {key: x0[key] * c[key] for key in x0}
        other = solver.run(scaled, z0, t, y).params
        for key in x0:
            assert float(other[key]) / c[key] == pytest.approx(float(plain[key]), rel=1e-10)


def test_a_parameter_the_residuals_ignore():
    """A column of J that is 0 (a parameter r does not depend on) is dropped from the SVD's
    solve: that parameter stays where it is, the others are fitted."""
    with jax.enable_x64(True):
        x0, t, y = exponential_data(jnp.float64)
        x0 = {**x0, "unused": jnp.asarray(0.25)}

        def fn(p, t, y):
            return exponential({k: v for k, v in p.items() if k != "unused"}, t, y)

        result = js.Solver(js.LevenbergMarquardt(), **TIGHT, max_steps=100).run(fn, x0, t, y)
        assert float(result.params["unused"]) == 0.25
        assert float(result.params["k"]) == pytest.approx(1.3, rel=1e-10)
