"""`BarzilaiBorwein` and `NonmonotoneArmijo` against NumPy transcriptions of the papers'
iterations in float64 (Barzilai & Borwein 1988; Zhang & Hager 2004; their pairing, Raydan
1997), and their safeguards."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js
import jaxsearch.internal as jsi
from jaxsearch.testing import drive

RNG = np.random.default_rng(3)
Q_, _ = np.linalg.qr(RNG.normal(size=(8, 8)))
A = Q_ @ np.diag(np.geomspace(0.5, 20.0, 8)) @ Q_.T
B = RNG.normal(size=8)
X0 = RNG.normal(size=8)


def quadratic(x, a, b):
    return 0.5 * x @ (a @ x) - b @ x


def bb_step(s, y, variant):
    sy = s @ y
    if not sy > 0:
        return None  # no positive curvature along s: back to -g, unscaled
    alpha = s @ s / sy if variant == "long" else sy / (y @ y)
    return float(np.clip(alpha, 1e-10, 1e10))


def reference(steps, variant="long", eta=0.85, c1=1e-4, shrink=0.5, fixed=None):
    """Raydan's (1997) global BB method with Zhang & Hager's (2004) nonmonotone test (or the
    plain BB iteration with a fixed step `fixed`), transcribed in float64."""
    f = lambda x: 0.5 * x @ A @ x - B @ x  # noqa: E731
    x, g = X0.copy(), A @ X0 - B
    C, Q, alpha, out = f(x), 1.0, None, []
    for _ in range(steps):
        d = -g if alpha is None else -alpha * g
        if fixed is not None:
            t = fixed
        else:
            t = 1 / np.linalg.norm(d) if alpha is None else 1.0  # the solver's first guess
            while not f(x + t * d) <= C + c1 * t * (g @ d):
                t *= shrink
        x_new = x + t * d
        g_new = A @ x_new - B
        alpha = bb_step(x_new - x, g_new - g, variant)
        Q_new = eta * Q + 1
        C, Q = (eta * Q * C + f(x_new)) / Q_new, Q_new
        x, g = x_new, g_new
        out.append(x)
    return np.array(out)


def solver_steps(solver, steps):
    with jax.enable_x64(True):
        a, b = jnp.asarray(A), jnp.asarray(B)
        x = jnp.asarray(X0)
        state = solver.init(x)
        out = []
        for _ in range(steps):
            x, state = solver.step(quadratic, x, state, a, b)
            out.append(np.asarray(x))
        return np.array(out), state


@pytest.mark.parametrize("variant", ["long", "short"])
def test_bb_with_a_unit_step_is_the_papers_iteration(variant):
    """With t = 1 always, x_{k+1} = x_k - alpha_k g_k, alpha_k = s's / s'y (BB1) or s'y / y'y
    (BB2), after a first step along -g (Barzilai & Borwein 1988, eqs. 5 and 6)."""
    solver = js.Solver(js.BarzilaiBorwein(variant), js.FixedStep(1.0), gtol=0.0, ftol=0.0)
    got, _ = solver_steps(solver, 10)
    np.testing.assert_allclose(got, reference(10, variant, fixed=1.0), rtol=1e-9, atol=1e-12)


def test_bb_with_the_nonmonotone_search_is_raydans_method():
    solver = js.Solver(js.BarzilaiBorwein(), gtol=0.0, ftol=0.0)
    assert solver.linesearch == js.NonmonotoneArmijo()  # the default pairing
    got, state = solver_steps(solver, 15)
    np.testing.assert_allclose(got, reference(15), rtol=1e-9, atol=1e-12)
    f = [0.5 * x @ A @ x - B @ x for x in reference(15)]
    assert max(np.diff(f)) > 0  # f rose at some step: the search is nonmonotone
    assert f[-1] < f[0]


def test_bb_falls_back_to_the_unscaled_gradient_without_positive_curvature():
    bb = js.BarzilaiBorwein()
    state = bb.init(jnp.zeros(2), jnp.float32)
    s, y = jnp.array([1.0, 0.0]), jnp.array([-1.0, 0.0])  # s'y < 0
    state = bb.update(state, s, y, jnp.float32)
    g = jnp.array([2.0, -4.0])
    d, scaled, _, _ = bb.compute(state, jsi.DirectionInfo(None, g, jnp.float32))
    np.testing.assert_array_equal(d, -g)
    assert not bool(scaled)
    state = bb.update(state, s, -y, jnp.float32)  # s'y = 1, s's = 1: alpha = 1
    state = bb.update(state, 1e-20 * s, -y, jnp.float32)  # alpha = 1e-20: clipped
    assert float(state.alpha) == pytest.approx(1e-10)
    d, scaled, _, _ = bb.compute(state, jsi.DirectionInfo(None, g, jnp.float32))
    assert bool(scaled)
    np.testing.assert_allclose(d, -1e-10 * g)


def test_nonmonotone_search_accepts_a_rise_below_the_reference_value():
    """The test is against C_k, not phi(0): with C_k above phi(0) a trial that raises f is
    taken; with eta = 0, C_k = phi(0) and it is not (Zhang & Hager 2004, eq. 1.4)."""
    search = js.NonmonotoneArmijo()
    with jax.enable_x64(True):
        # C_k = 10 after one iterate (Q_k = 1); this search: phi(0) = 1, phi(1) = 2.
        state = type(search.init(jnp.float64))(C=jnp.asarray(10.0), Q=jnp.asarray(1.0))
        record = search.start(
            state, jnp.asarray(1.0), jnp.asarray(-1.0), jnp.asarray(1.0), jnp.asarray(0.0)
        )
        record = search.update(record, record.trial, jnp.asarray(2.0), jnp.asarray(3.0))
        assert bool(record.done) and float(record.step) == 1.0
        after = search.finish(state, record)
        # Q = 0.85 + 1, C = (0.85 * 10 + 2) / 1.85.
        np.testing.assert_allclose(float(after.Q), 1.85)
        np.testing.assert_allclose(float(after.C), (0.85 * 10 + 2) / 1.85)


def test_nonmonotone_search_with_eta_zero_is_armijo_backtracking():
    """eta = 0: C_k = f(x_k), so the trials are Backtracking's (shrink 0.5) on any line."""
    from jaxsearch.testing import LINES

    for phi in LINES:
        ours = drive(js.NonmonotoneArmijo(eta=0.0), phi, jnp.float32)
        armijo = drive(js.Backtracking(epsilon=0.0, max_trials=30), phi, jnp.float32)
        assert [float(t) for t in ours[0]] == [float(t) for t in armijo[0]], phi.__name__
        assert float(ours[2].step) == float(armijo[2].step)


def test_new_methods_check_their_settings():
    with pytest.raises(ValueError, match="variant must be"):
        js.BarzilaiBorwein("bb3")
    with pytest.raises(ValueError, match="eta must lie in"):
        js.NonmonotoneArmijo(eta=1.5)
