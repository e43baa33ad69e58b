"""`Solver.as_optimistix()` inside `optx.minimise` (issue 37, item 6): optimistix's own
minimisation test problems, its `max_steps`, `throw`, `has_aux` and adjoints, one compile per
shape, float32, float64, pytrees and `vmap`.

The problems are those of optimistix's test suite (`minimisation_fn_minima_init_args` in
tests/helpers.py of patrick-kidger/optimistix, run by its test_minimise.py with
atol = rtol = 1e-4 on f at the returned point): the same functions, starts and minima,
written anew here, with a random positive definite matrix of our own for the bowl."""

import functools
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
import pytest

import jaxsearch as js

from ..helpers import LEAN

# ------------------------------------------------------------------------------ problems


def bowl(y, matrix):
    """v' M v over the 20 entries v of y; minimum 0 at 0."""
    v = jnp.concatenate([jnp.ravel(leaf) for leaf in jax.tree.leaves(y)])
    return v @ matrix @ v


def himmelblau(y, args):
    """(a^2 + b - 11)^2 + (a + b^2 - 7)^2; minimum 0 (at (3, 2) from the start below)."""
    (a, b), (c1, c2) = y, args
    return (a**2 + b - c1) ** 2 + (a + b**2 - c2) ** 2


def matyas(y, args):
    """0.26 (a^2 + b^2) - 0.48 a b; minimum 0 at (0, 0)."""
    (a, b), (c1, c2) = y, args
    return c1 * (a**2 + b**2) - c2 * a * b


def beale(y, args):
    """Beale's function; minimum 0 at (3, 0.5)."""
    (a, b), (c1, c2, c3) = y, args
    return (c1 - a + a * b) ** 2 + (c2 - a + a * b**2) ** 2 + (c3 - a + a * b**3) ** 2


def square_minus_one(y, args):
    """|y|^2 - 1; minimum -1 at 0."""
    return jnp.sum(jnp.square(y)) - 1.0


PROBLEMS = {
    "bowl": bowl,
    "himmelblau": himmelblau,
    "matyas": matyas,
    "beale": beale,
    "square_minus_one": square_minus_one,
}


def _starts():
    """(minimum, y0, args) of each problem, in float64 (call under x64)."""
    f64 = lambda *xs: tuple(jnp.asarray(x, jnp.float64) for x in xs)  # noqa: E731
    a = np.random.default_rng(17).standard_normal((20, 20))
    return {
        "bowl": (0.0, ({"a": jnp.full((2, 3, 3), 0.05)}, jnp.full(2, 0.05)), jnp.asarray(a.T @ a)),
        "himmelblau": (0.0, list(f64(2.0, 2.5)), f64(11.0, 7.0)),
        "matyas": (0.0, list(f64(6.0, 6.0)), f64(0.26, 0.48)),
        "beale": (0.0, list(f64(2.0, 0.0)), f64(1.5, 2.25, 2.625)),
        "square_minus_one": (-1.0, jnp.asarray(1.0, jnp.float64), None),
    }


SMOKE_AUX = {"ones": jnp.ones((2, 3)), "twos": 2 * jnp.ones(2)}


def _with_aux(fn):
    return lambda y, args: (fn(y, args), SMOKE_AUX)


COMPOSITIONS = {
    "LBFGS+Zoom": (js.Solver(js.LBFGS(), js.Zoom()), False),
    "BFGS+HagerZhang": (js.Solver(js.BFGS(), js.HagerZhang()), True),  # has_aux
}


@functools.cache
def _solve(composition: str, problem: str):
    """`optx.minimise` of `problem` with `composition`, jitted (one per pair, reused)."""
    solver, has_aux = COMPOSITIONS[composition]
    fn = PROBLEMS[problem]
    objective = _with_aux(fn) if has_aux else fn
    minimiser = solver.as_optimistix()

    def solve(y0, args):
        return optx.minimise(
            objective, minimiser, y0, args, has_aux=has_aux, max_steps=10_000, throw=False
        )

    return jax.jit(solve, compiler_options=LEAN)


@pytest.mark.parametrize("problem", list(PROBLEMS))
@pytest.mark.parametrize("composition", list(COMPOSITIONS))
def test_optimistix_problems(composition, problem):
    """Each problem solved through `optx.minimise` (f within 1e-4 of its minimum, as
    optimistix's own test asks), the run successful, and with `has_aux=True` fn's aux
    returned."""
    with jax.enable_x64(True):
        minimum, y0, args = _starts()[problem]
        sol = _solve(composition, problem)(y0, args)
        assert sol.result == optx.RESULTS.successful
        assert js.Status(sol.stats["status"]).converged
        value = float(PROBLEMS[problem](sol.value, args))
        np.testing.assert_allclose(value, minimum, atol=1e-4, rtol=1e-4)
        assert jax.tree.structure(sol.value) == jax.tree.structure(y0)
        assert all(leaf.dtype == jnp.float64 for leaf in jax.tree.leaves(sol.value))
        if COMPOSITIONS[composition][1]:
            assert jax.tree.all(
                jax.tree.map(lambda a, b: bool(jnp.all(a == b)), sol.aux, SMOKE_AUX)
            )


def test_one_optimistix_step_is_one_step():
    """`optx.minimise` takes the steps `run` takes, evaluates fn as often, and returns the
    point `run` returns (float64, L-BFGS + Zoom, Beale's function)."""
    solver = COMPOSITIONS["LBFGS+Zoom"][0]
    with jax.enable_x64(True):
        _, y0, args = _starts()["beale"]
        result = solver.run(beale, y0, args)
        sol = _solve("LBFGS+Zoom", "beale")(y0, args)
        assert int(sol.stats["num_steps"]) == int(result.num_steps)
        assert int(sol.stats["num_fun_evals"]) == int(result.num_fun_evals)
        assert int(sol.stats["status"]) == int(result.status)
        for ours, theirs in zip(sol.value, result.params, strict=True):
            np.testing.assert_allclose(float(ours), float(theirs), rtol=1e-12)


# ----------------------------------------------------------- max_steps, throw, results


def rosenbrock(y, args):
    return jnp.sum(100 * (y[1:] - y[:-1] ** 2) ** 2 + (1 - y[:-1]) ** 2)


def scaled_rosenbrock(y, scale):
    return scale * rosenbrock(y, None)


@pytest.fixture(scope="module")
def rosenbrock_in_twenty_steps():
    """`optx.minimise` of `scale` times Rosenbrock in float32 with max_steps=20 and
    throw=False, jitted. The solver's own `throw`, `max_steps` and `has_aux` are unused
    (optimistix's arguments decide): with them, the starts below would raise, stop after 5
    steps, or unpack f as (f, aux)."""
    minimiser = js.Solver(gtol=1e-4, throw=True, max_steps=5, has_aux=True).as_optimistix()
    return jax.jit(
        lambda y0, scale: optx.minimise(
            scaled_rosenbrock, minimiser, y0, scale, max_steps=20, throw=False
        ),
        compiler_options=LEAN,
    )


def test_max_steps_nonfinite_and_one_compile(rosenbrock_in_twenty_steps, compiles):
    """One compile for every y0 and args of a shape: from near the minimiser the run
    converges; from (-1.2, 1) it reaches optimistix's max_steps (its result, and MAX_STEPS in
    the stats); from a start where f overflows, or one that holds NaN, the result is
    nonfinite."""
    near, far, overflow, nan = (
        jnp.array(y, jnp.float32) for y in ([1.1, 1.2], [-1.2, 1.0], [1e30, 1.0], [np.nan, 1.0])
    )
    one, two = jnp.float32(1.0), jnp.float32(2.0)
    compiles.reset()
    starts = ((near, one), (far, two), (overflow, one), (nan, one))
    sols = [rosenbrock_in_twenty_steps(*start) for start in starts]
    jax.block_until_ready(sols)
    assert compiles.count == 1
    sol = sols[0]
    assert sol.result == optx.RESULTS.successful
    np.testing.assert_allclose(np.asarray(sol.value), 1.0, atol=1e-3)
    sol = sols[1]
    assert sol.result == optx.RESULTS.nonlinear_max_steps_reached
    assert js.Status(sol.stats["status"]) == js.Status.MAX_STEPS
    assert int(sol.stats["num_steps"]) == 20
    assert sol.value.dtype == jnp.float32
    # f(x0) is the highest f seen: the best point is a later one
    assert float(rosenbrock(sol.value, None)) < float(rosenbrock(far, None))
    for sol in sols[2:]:
        assert sol.result == optx.RESULTS.nonfinite
        assert js.Status(sol.stats["status"]) == js.Status.NONFINITE


def test_throw_raises_at_max_steps():
    """With optimistix's `throw=True` (its default), a run that reaches `max_steps` raises
    optimistix's error; `autodiff_mode="bwd"` is accepted."""
    minimiser = js.Solver().as_optimistix()
    options = {"autodiff_mode": "bwd"}
    solve = jax.jit(
        lambda y0: optx.minimise(rosenbrock, minimiser, y0, options=options, max_steps=3).value,
        compiler_options=LEAN,
    )
    with pytest.raises(Exception, match="maximum number of steps"):
        jax.block_until_ready(solve(jnp.array([-1.2, 1.0])))


def test_settings_for_optimistix():
    """`rtol`, `atol` and `norm` are the solver's ftol, its gtol and the infinity norm."""
    minimiser = js.Solver(gtol=1e-7, ftol=1e-8).as_optimistix()
    assert (minimiser.rtol, minimiser.atol, minimiser.norm) == (1e-8, 1e-7, optx.max_norm)


def _state_ending(minimiser, status, steps_since_best):
    """The minimiser's state after a step that ended with `status` and `steps_since_best`."""
    state = minimiser.solver.init(
        jnp.zeros(2), jnp.float32, fn=lambda y, a: (jnp.sum(y**2), None), args=(None,)
    )
    return eqx.tree_at(
        lambda s: (s.status, s.has_eval, s.steps_since_best),
        state,
        (jnp.int32(status), jnp.array(True), jnp.int32(steps_since_best)),
    )


@pytest.mark.parametrize(
    ("status", "steps_since_best", "ends", "result"),
    [
        (js.Status.RUNNING, 0, False, optx.RESULTS.successful),
        (js.Status.CONVERGED_GTOL, 0, True, optx.RESULTS.successful),
        (js.Status.CONVERGED_FTOL, 0, True, optx.RESULTS.successful),
        (js.Status.CONVERGED_XTOL, 0, True, optx.RESULTS.successful),
        (js.Status.STOPPED, 0, True, optx.RESULTS.successful),
        (js.Status.MAX_EVALS, 0, True, optx.RESULTS.nonlinear_max_steps_reached),
        (js.Status.LINESEARCH_FAILED, 0, True, optx.RESULTS.nonlinear_divergence),
        (js.Status.NONFINITE, 0, True, optx.RESULTS.nonfinite),
        (js.Status.STALLED, 0, True, optx.RESULTS.nonlinear_divergence),
        # stall_steps (100) steps without progress: STALLED, as `run` says
        (js.Status.RUNNING, 100, True, optx.RESULTS.nonlinear_divergence),
    ],
)
def test_statuses_map_to_results(status, steps_since_best, ends, result):
    minimiser = js.Solver().as_optimistix()
    state = _state_ending(minimiser, status, steps_since_best)
    terminate, mapped = minimiser.terminate(None, None, None, {}, state, frozenset())
    assert bool(terminate) is ends
    assert mapped == result


def test_returns_the_best_point_and_its_aux():
    """A run whose f rises (a fixed step too long) returns the best point it saw, x0, with
    fn's aux there, as `run` does; with `return_best=False`, the last iterate."""

    def fn(y, args):
        return jnp.sum(y**2), 10 * y

    y0 = jnp.array([1.0, -1.0])
    for return_best, expected in ((True, [1.0, -1.0]), (False, [-8.0, 8.0])):
        solver = js.Solver(js.Gradient(), js.FixedStep(1.5), return_best=return_best)
        sol = optx.minimise(fn, solver.as_optimistix(), y0, has_aux=True, max_steps=3, throw=False)
        np.testing.assert_array_equal(np.asarray(sol.value), expected)
        np.testing.assert_array_equal(np.asarray(sol.aux), 10 * np.asarray(expected))


# ---------------------------------------------------------------------------- adjoints


def quadratic(y, b):
    """y' A y + b' y with A = [[2, -1], [-1, 3]]: minimiser y* = -A^-1 b / 2."""
    a = jnp.array([[2.0, -1.0], [-1.0, 3.0]], b.dtype)
    return y @ a @ y + b @ y


# ImplicitAdjoint with the default L-BFGS + Zoom; RecursiveCheckpointAdjoint differentiates
# through every step's search, and compiles in about half the time with steepest descent and
# backtracking (6 s of CPU against 10 s with L-BFGS + Zoom, which gives the same gradient).
ADJOINTS = {
    "ImplicitAdjoint": (optx.ImplicitAdjoint(), js.LBFGS(), js.Zoom()),
    "RecursiveCheckpointAdjoint": (
        optx.RecursiveCheckpointAdjoint(),
        js.Gradient(),
        js.Backtracking(),
    ),
}


@pytest.mark.parametrize("adjoint", list(ADJOINTS))
def test_gradient_through_minimise(adjoint):
    """d sum(y*) / db through `optx.minimise` with optimistix's adjoints is the closed form
    -A^-1 1 / 2 = (-0.4, -0.3) (float64)."""
    adjoint, direction, search = ADJOINTS[adjoint]
    minimiser = js.Solver(direction, search, gtol=1e-10, ftol=0.0).as_optimistix()
    with jax.enable_x64(True):

        def total(b):
            y0 = jnp.array([2.0, 3.0])
            sol = optx.minimise(quadratic, minimiser, y0, b, adjoint=adjoint, max_steps=100)
            return jnp.sum(sol.value)

        b = jnp.array([-100.0, 5.0])
        value, grad = jax.jit(jax.value_and_grad(total), compiler_options=LEAN)(b)
        np.testing.assert_allclose(float(value), 29.5 + 9.0, rtol=1e-10)
        np.testing.assert_allclose(np.asarray(grad), [-0.4, -0.3], rtol=1e-8)


# --------------------------------------------------------------------- vmap and dtypes


def shifted_sum_of_squares(y, target):
    """Sum of (y - target)^2 in float32 over a pytree of float32 and bfloat16 leaves."""
    return jnp.sum((y["w"] - target) ** 2) + jnp.sum((y["h"].astype(jnp.float32) + 2.0) ** 2)


def test_vmap_over_a_mixed_pytree():
    """`jax.vmap` over y0, a pytree with a float32 and a bfloat16 leaf: each problem is
    solved, in its leaves' own dtypes."""
    minimiser = js.Solver().as_optimistix()
    w = jnp.array(np.random.default_rng(0).standard_normal((3, 4)), jnp.float32)
    h = jnp.ones((3, 2), jnp.bfloat16)
    target = jnp.arange(4, dtype=jnp.float32)

    def solve(y0):
        sol = optx.minimise(shifted_sum_of_squares, minimiser, y0, target, throw=False)
        return sol.value, sol.stats["status"]

    value, status = jax.jit(jax.vmap(solve), compiler_options=LEAN)({"w": w, "h": h})
    assert value["w"].dtype == jnp.float32 and value["h"].dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(value["w"]), np.tile(np.arange(4), (3, 1)), atol=1e-5)
    np.testing.assert_allclose(np.asarray(value["h"], np.float32), -2.0, atol=1e-2)
    assert status.shape == (3,)


# -------------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("direction", [js.GaussNewton(), js.LevenbergMarquardt()], ids=type)
def test_least_squares_directions_are_refused(direction):
    with pytest.raises(TypeError, match="least-squares direction"):
        js.Solver(direction).as_optimistix()


def test_own_gradient_is_refused():
    with pytest.raises(TypeError, match="value_and_grad=True"):
        js.Solver(value_and_grad=True).as_optimistix()


def test_the_solver_s_budget_of_evaluations_applies():
    """`max_evals` (and the other stopping rules) carry over: the run stops at the budget
    with optimistix's budget result and the MAX_EVALS status."""
    solver = js.Solver(max_evals=7)
    sol = optx.minimise(rosenbrock, solver.as_optimistix(), jnp.zeros(2), throw=False)
    assert sol.result == optx.RESULTS.nonlinear_max_steps_reached
    assert js.Status(sol.stats["status"]) == js.Status.MAX_EVALS
    assert int(sol.stats["num_fun_evals"]) == 7


@pytest.mark.parametrize(
    ("options", "match"),
    [({"bounds": (0.0, 1.0)}, "takes no options"), ({"autodiff_mode": "fwd"}, "reverse mode")],
)
def test_options_are_refused(options, match):
    minimiser = js.Solver().as_optimistix()
    with pytest.raises(ValueError, match=match):
        optx.minimise(rosenbrock, minimiser, jnp.zeros(2), options=options)


def test_needs_optimistix(monkeypatch):
    """Without optimistix, `as_optimistix()` says what to install."""
    monkeypatch.setitem(sys.modules, "optimistix", None)  # `import optimistix` fails
    monkeypatch.delitem(sys.modules, "jaxsearch._optimistix", raising=False)
    with pytest.raises(ImportError) as raised:
        js.Solver().as_optimistix()
    assert str(raised.value) == "as_optimistix() needs optimistix: pip install optimistix"


def test_every_setting_of_the_solver_carries_over():
    """The inner solver is the user's, but for has_aux, throw and the adjoint: its initial-step
    rule (and any other setting) applies. With `InitialStatic(0.25)` and Backtracking on
    |y|^2, every step is 0.25, as `run` takes it."""

    def sphere(y, args):
        return jnp.sum(y**2), None

    solver = js.Solver(js.Gradient(), js.Backtracking(), initial_step=js.InitialStatic(0.25))
    minimiser = solver.as_optimistix()
    assert minimiser.solver.initial_step == solver.initial_step
    assert minimiser.solver.has_aux and minimiser.solver.throw is False
    sol = optx.minimise(sphere, minimiser, jnp.ones(3), has_aux=True, max_steps=2, throw=False)
    np.testing.assert_allclose(np.asarray(sol.value), 0.25 * np.ones(3))  # halved twice
