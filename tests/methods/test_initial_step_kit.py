"""The conformance kit for initial-step rules (`jaxsearch.testing.check_initial_step`): every
built-in rule passes it, rules broken on purpose fail naming their class; and a published rule
needs only what `InitialStepInfo` hands it: scipy's first trial, written from public names,
gives on Rosenbrock the trials of scipy's formula computed from the iterates' values of f."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js
from jaxsearch.testing import check_initial_step

from .test_initial_steps import Recorded, Returns, first

BUILT_IN = [
    js.InitialQuadratic(),
    js.InitialStatic(),
    js.InitialStatic(0.5, scaled=True),
    js.InitialPrevious(),
    js.InitialConstantChange(),
    js.InitialDecaying(),
    js.InitialHagerZhang(),
]


@pytest.mark.parametrize("rule", BUILT_IN, ids=lambda rule: type(rule).__name__)
def test_every_built_in_rule_passes_the_kit(rule):
    check_initial_step(rule)


class Scipy(js.AbstractInitialStep):
    """scipy's first trial (`scalar_search_wolfe1`, as `minimize(method="BFGS")` calls it):
    t = min(1, 1.01 * 2 (f_k - f_{k-1}) / phi'(0)), 1 where that is negative. Before the first
    step scipy takes f_{k-1} = f_0 + |g_0| / 2."""

    def init(self, dtype):
        return ()

    def first_trial(self, state, info):
        g_norm = jnp.sqrt(
            sum(jnp.sum(g.astype(info.dtype) ** 2) for g in jax.tree.leaves(info.grad))
        )
        prev = jnp.where(jnp.isnan(info.prev_value), info.value + g_norm / 2, info.prev_value)
        t = jnp.minimum(1, 1.01 * 2 * (info.value - prev) / info.slope)
        return jnp.where(t < 0, 1, t).astype(info.dtype)

    def update(self, state, step, slope, moved):
        return state


def test_scipy_s_rule_passes_the_kit():
    check_initial_step(Scipy())
    check_initial_step(Recorded())


def _rosenbrock(x):
    return jnp.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


@pytest.mark.parametrize("direction", [js.BFGS(), js.LBFGS()], ids=lambda d: type(d).__name__)
def test_scipy_s_rule_gives_scipy_s_trials_on_rosenbrock(direction):
    """On Rosenbrock from (-1.2, 1), a non-convex problem, step by step in float64: the rule's
    first trial at each search is NumPy's transcription of scipy's formula from f at the two
    last iterates (as `Solver.step` returns them) and the search's phi'(0)."""
    seen = []

    class Watched(Scipy):
        def first_trial(self, state, info):
            t = super().first_trial(state, info)
            g_norm = jnp.linalg.norm(info.grad)
            fields = (t, info.slope, info.value, info.prev_value, g_norm)
            jax.debug.callback(lambda *v: seen.append([float(a) for a in v]), *fields)
            return t

    with jax.enable_x64(True):
        x = jnp.array([-1.2, 1.0])
        solver = js.Solver(direction, js.Zoom(), initial_step=Watched())
        state = solver.init(x)
        values = [float(_rosenbrock(x))]
        g_norms = []
        for _ in range(25):
            g_norms.append(float(jnp.linalg.norm(jax.grad(_rosenbrock)(x))))
            x, state = solver.step(_rosenbrock, x, state)
            values.append(float(state.value))
    assert len(seen) == 25 and values[-1] < values[0]
    trials, slopes, value, prev_value, g_norm = np.array(seen).T
    # what InitialStepInfo hands the rule: f_k, f_{k-1} (NaN at first) and the gradient at x_k
    # (f(x_0) as the solver's program evaluates it may differ in its last bit from ours)
    np.testing.assert_allclose(value[0], values[0], rtol=1e-15)
    values[0] = value[0]
    np.testing.assert_array_equal(value, values[:-1])
    np.testing.assert_array_equal(prev_value, [np.nan, *values[:-2]])
    np.testing.assert_allclose(g_norm, g_norms, rtol=1e-13)  # the gradient, to its rounding
    g0 = g_norms[0]
    prev = np.array([values[0] + g0 / 2, *values[:-2]])
    expected = np.minimum(1.0, 1.01 * 2 * (np.array(values[:-1]) - prev) / slopes)
    expected = np.where(expected < 0, 1.0, expected)
    assert np.any(expected < 1)  # the formula, not its cap, decides some trials
    np.testing.assert_allclose(trials, expected, rtol=1e-12)


class _Vector(js.AbstractInitialStep):
    def init(self, dtype):
        return ()

    def first_trial(self, state, info):
        return jnp.abs(info.d)  # a trial per parameter

    def update(self, state, step, slope, moved):
        return state


class _Weak(Recorded):
    def init(self, dtype):
        return jnp.asarray(0.0)  # weakly typed


@pytest.mark.parametrize(
    "rule, message",
    [
        (_Vector(), r"first trial \(float32\): _Vector\.first_trial: returned .* float32\[4\]"),
        (Returns(-1.0), r"first_trial returned t = -1\.0 at search 1 .*not positive"),
        (_Weak(), r"_Weak\.init: the state's field \(the value itself\) is ~float32\[\]"),
    ],
    ids=["vector", "negative", "weak"],
)
def test_the_kit_catches_a_broken_rule(rule, message):
    with pytest.raises(AssertionError, match=message) as caught:
        check_initial_step(rule)
    assert len(str(caught.value)) < 800
    assert type(rule).__name__ in str(caught.value)


def test_a_python_number_is_a_first_trial_and_another_dtype_is_refused():
    """A weakly typed first trial (a Python float) is cast to the scalar dtype; a float32
    trial where the scalar dtype is float64 is refused, naming the class and member."""

    class Quarter(Returns):
        def first_trial(self, state, info):
            return self.trial  # a Python float

    solver = js.Solver(js.Gradient(), js.Backtracking(), initial_step=Quarter(0.25), max_steps=3)
    result = solver.run(lambda x: jnp.sum(x**2), jnp.ones(3), history=True)
    np.testing.assert_array_equal(result.history.to_numpy()["step_size"], [0.0] + [0.25] * 3)
    check_initial_step(Quarter(0.25))

    class Narrow(Returns):
        def first_trial(self, state, info):
            return jnp.asarray(self.trial, jnp.float32)

    with jax.enable_x64(True):
        with pytest.raises(TypeError, match=r"Narrow\.first_trial: .*float32\[\].* float64"):
            js.Solver(initial_step=Narrow(0.25)).run(lambda x: jnp.sum(x**2), jnp.ones(3))


def test_a_rule_that_returns_a_vector_is_refused_before_it_runs():
    """The solver refuses a vector at trace time (a TypeError naming the class and member);
    a negative trial, a value, is the kit's to catch: the solver then tries t = 1."""
    with pytest.raises(TypeError, match=r"_Vector\.first_trial: .*float32\[2\]"):
        first(_Vector())
    assert first(Returns(-1.0)) == 1.0
