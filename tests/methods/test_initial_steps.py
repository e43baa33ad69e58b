"""The initial-step rules (`Solver(initial_step=...)`): each rule's first trial by hand, the
solver's safeguards around it, and that the engine uses the rule and its state."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js
import jaxsearch.internal as jsi
from jaxsearch._linesearch import initial_step


def f32(v):
    return jnp.asarray(v, jnp.float32)


def info(
    *,
    scaled=False,
    slope=-4.0,
    d_norm=2.0,
    value=3.0,
    prev_decrease=0.3,
    prev_step=0.0,
    x=(1.0, -2.0),
    d=(0.5, 0.25),
    grad=(-1.0, -0.5),
    prev_value=np.nan,
):
    return jsi.InitialStepInfo(
        jnp.array(scaled),
        f32(slope),
        f32(d_norm),
        f32(value),
        f32(prev_decrease),
        f32(prev_step),
        jnp.asarray(x, jnp.float32),
        jnp.asarray(d, jnp.float32),
        jnp.asarray(grad, jnp.float32),
        f32(prev_value),
    )


def first(rule, state=None, cap=1e10, **kwargs):
    state = rule.init(jnp.float32) if state is None else state
    return float(initial_step(rule, state, info(**kwargs), cap))


def test_quadratic_the_default():
    """Unit step for scaled directions; N&W (3.60) after a step; 1 / |d| on the first or after
    an unusable decrease; the cap."""
    rule = js.InitialQuadratic()
    assert isinstance(js.Solver().initial_step, js.InitialQuadratic)
    assert first(rule, scaled=True) == 1.0
    assert first(rule) == pytest.approx(2 * 0.3 / 4.0)
    assert first(rule, prev_decrease=np.nan) == pytest.approx(0.5)
    assert first(rule, prev_decrease=-1.0) == pytest.approx(0.5)
    assert first(rule, d_norm=1e-12, prev_decrease=np.nan, cap=10.0) == 10.0


def test_static():
    assert first(js.InitialStatic(0.25)) == 0.25
    assert first(js.InitialStatic(0.25), scaled=True) == 0.25  # whatever the direction
    assert first(js.InitialStatic(3.0, scaled=True)) == pytest.approx(3.0 / 2.0)  # |d| = 2


def test_previous():
    assert first(js.InitialPrevious(), prev_step=0.125) == 0.125
    assert first(js.InitialPrevious(0.5)) == 0.5  # no previous step


def test_constant_change():
    """N&W eq. 3.59: t = t_{k-1} phi'_{k-1}(0) / phi'_k(0); alpha without a previous step."""
    rule = js.InitialConstantChange(alpha=0.5)
    state = rule.init(jnp.float32)
    assert first(rule, state) == 0.5
    state = rule.update(state, f32(0.25), f32(-8.0), jnp.array(True))
    assert float(state) == -2.0
    assert first(rule, state, slope=-4.0) == 0.5  # 0.25 * 8 / 4
    assert first(rule, state, slope=-1.0) == 2.0
    state = rule.update(state, f32(0.0), f32(-8.0), jnp.array(False))  # no move: start again
    assert first(rule, state) == 0.5


def test_decaying():
    """tau / (tau + k) for scaled directions, a step of that length otherwise, with k the
    steps that moved (counted in the state, which keeps its dtype)."""
    rule = js.InitialDecaying(tau=3.0)
    state = rule.init(jnp.float32)
    assert first(rule, state, scaled=True) == 1.0
    assert first(rule, state) == pytest.approx(0.5)  # 1 / |d|, |d| = 2
    for moved in (True, False, True):
        state = rule.update(state, f32(0.5), f32(-1.0), jnp.array(moved))
    assert state.dtype == jnp.float32 and not state.weak_type
    assert float(state) == 2.0
    assert first(rule, state, scaled=True) == pytest.approx(3.0 / 5.0)
    assert first(rule, state) == pytest.approx(3.0 / 5.0 / 2.0)
    assert js.InitialDecaying().tau == 5.0
    with pytest.raises(ValueError, match="tau"):
        js.InitialDecaying(tau=0.0)


def test_hager_zhang():
    """I0: psi0 |x|_inf / |d|_inf, else psi0 |f| / -phi'(0), else 1; I2: psi2 t_{k-1}."""
    rule = js.InitialHagerZhang(psi0=0.01, psi2=2.0)
    assert first(rule) == pytest.approx(0.01 * 2.0 / 0.5)
    assert first(rule, x=(0.0, 0.0)) == pytest.approx(0.01 * 3.0 / 4.0)
    assert first(rule, x=(0.0, 0.0), value=0.0) == 1.0
    assert first(rule, prev_step=0.3) == pytest.approx(0.6)


class Returns(js.AbstractInitialStep):
    """A rule of one's own that returns `trial`, whatever it is."""

    trial: float

    def init(self, dtype):
        return ()

    def first_trial(self, state, info):
        return jnp.asarray(self.trial, info.dtype)

    def update(self, state, step, slope, moved):
        return state


@pytest.mark.parametrize("bad", [np.nan, np.inf, 0.0, -1.0])
def test_a_guess_that_is_not_finite_and_positive_is_one(bad):
    assert first(Returns(bad)) == 1.0
    assert first(Returns(bad), cap=0.5) == 0.5
    assert first(js.InitialStatic(1.0, scaled=True), d_norm=0.0) == 1.0  # 1 / 0


def test_settings_are_checked():
    with pytest.raises(ValueError, match="alpha"):
        js.InitialStatic(0.0)
    with pytest.raises(ValueError, match="psi2"):
        js.InitialHagerZhang(psi2=-1.0)
    with pytest.raises(TypeError, match="initial_step"):
        js.Solver(initial_step=1.0)


class Recorded(js.AbstractInitialStep):
    """A rule of one's own: trial 0.25 always; its state is the last step it was told of."""

    def init(self, dtype):
        return jnp.zeros((), dtype)

    def first_trial(self, state, info):
        return jnp.full((), 0.25, info.dtype)

    def update(self, state, step, slope, moved):
        return jnp.where(moved, step, -1.0).astype(state.dtype)


def sphere(x):
    return jnp.sum(x**2)


def test_the_solver_uses_the_rule_and_keeps_its_state():
    """Backtracking takes its first trial when it decreases f enough: every step of a
    gradient descent on |x|^2 is the rule's 0.25, and the state holds the last one."""
    solver = js.Solver(js.Gradient(), js.Backtracking(), initial_step=Recorded(), max_steps=4)
    result = solver.run(sphere, jnp.ones(3), history=True)
    np.testing.assert_array_equal(result.history.to_numpy()["step_size"], [0.0] + [0.25] * 4)
    assert float(result.state.initial_step) == 0.25
    # the default rule's first trial is 1 / |d| = 1 / (2 sqrt 3) on the first step
    default = js.Solver(js.Gradient(), js.Backtracking(), max_steps=1).run(sphere, jnp.ones(3))
    assert float(default.state.step_size) == pytest.approx(1 / (2 * np.sqrt(3)), rel=1e-6)


@pytest.mark.parametrize(
    "rule",
    [js.InitialStatic(), js.InitialPrevious(), js.InitialConstantChange(), js.InitialHagerZhang()],
    ids=lambda r: type(r).__name__,
)
def test_each_rule_solves_rosenbrock(rule):
    """Each rule with nonlinear CG and L-BFGS (Zoom) reaches the minimiser in float64."""

    def rosenbrock(x):
        return jnp.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)

    with jax.enable_x64(True):
        for direction in (js.NonlinearCG(), js.LBFGS()):
            solver = js.Solver(direction, initial_step=rule, gtol=1e-8, ftol=0.0)
            result = solver.run(rosenbrock, jnp.zeros(4))
            assert result.success, (type(direction).__name__, result.message)
            np.testing.assert_allclose(result.params, np.ones(4), rtol=1e-6)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_low_precision_and_a_mixed_pytree(dtype):
    params = {"a": jnp.full(3, 2.0, dtype), "b": jnp.full(2, -1.0, jnp.float32)}

    def fn(p):
        return jnp.sum(p["a"].astype(jnp.float32) ** 2) + jnp.sum((p["b"] - 0.5) ** 2)

    for rule in (js.InitialHagerZhang(), js.InitialConstantChange()):
        result = js.Solver(js.NonlinearCG(), initial_step=rule, max_steps=50).run(fn, params)
        assert result.params["a"].dtype == jnp.dtype(dtype)
        assert float(result.value) < 1e-2, (dtype, type(rule).__name__, result.message)


def test_a_setting_as_an_array_compiles_once_and_vmaps(compiles):
    """alpha as a 0-d array is a dynamic leaf: two values share one program; under vmap
    each problem keeps its rule's state."""

    def run(alpha, x0):
        solver = js.Solver(js.Gradient(), js.Backtracking(), initial_step=js.InitialStatic(alpha))
        return solver.run(sphere, x0, history=True).history.to_numpy()["step_size"][1]

    run(jnp.asarray(0.25), jnp.ones(3))
    compiles.reset()
    assert float(run(jnp.asarray(0.125), jnp.ones(3))) == 0.125  # the first step
    assert compiles.count == 0

    solver = js.Solver(js.NonlinearCG(), initial_step=js.InitialConstantChange(), max_steps=3)
    batch = jax.vmap(lambda x: solver.run(sphere, x).state.initial_step)(
        jnp.stack([jnp.ones(3), 2 * jnp.ones(3)])
    )
    single = [solver.run(sphere, x).state.initial_step for x in (jnp.ones(3), 2 * jnp.ones(3))]
    np.testing.assert_allclose(batch, single, rtol=1e-6)
