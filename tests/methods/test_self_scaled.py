"""Self-scaled BFGS and Broyden (Al-Baali 1998; Al-Baali & Khalfan 2005): one update against
the papers' formulas written out in NumPy float64, the secant equation, the parameter rules at
points worked by hand, and runs on Rosenbrock against scipy's BFGS."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize

import jaxsearch as js
import jaxsearch.internal as jsi
from jaxsearch.testing import check_direction


def _family_update(h, s, y, tau, phi):
    """The self-scaled Broyden family's inverse update, as the papers write it."""
    sy, hy = s @ y, h @ y
    yhy = y @ hy
    v = s / sy - hy / yhy
    return (h - np.outer(hy, hy) / yhy + phi * yhy * np.outer(v, v)) / tau + np.outer(s, s) / sy


def _ssbroyden_parameters(b, h, n):
    """Al-Baali & Khalfan's rules as Urbán, Stefanou & Pons state them, in plain Python."""
    a = b * h - 1
    c = np.sqrt(a / (1 + a))
    rho_minus = min(1.0, h * (1 - c))
    theta = max((rho_minus - 1) / a, min(1 / rho_minus, (1 - b) / b))
    sigma = 1 + a * theta
    rho_plus = min(1.0, 1 / b)
    power = sigma ** (-1 / (n - 1))
    tau = min(rho_plus * power, sigma) if theta <= 0 else rho_plus * min(power, 1 / theta)
    return tau, (1 - theta) / sigma


def _one_update(direction, h, g, s, y):
    """The direction's H_{k+1} from H_k = h after `compute` at g and `update` with (s, y)."""
    with jax.enable_x64(True):
        x = jnp.zeros(len(g))
        state = direction.init(x, jnp.float64)
        state = state.__class__(
            **{**vars(state), "inv_hessian": jnp.asarray(h), "count": jnp.int32(1)}
        )
        info = jsi.DirectionInfo(x=x, grad=jnp.asarray(g), dtype=jnp.float64)
        _, _, state, _ = direction.compute(state, info)
        new = direction.update(state, jnp.asarray(s), jnp.asarray(y), jnp.float64)
        return np.asarray(new.inv_hessian), int(new.count)


def _random_pair(seed, n=6, alpha=0.7):
    """An SPD H_k, a gradient g, the step s = -alpha H g and a y with s'y > 0."""
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(n, n))
    h = q @ q.T + 0.5 * np.eye(n)
    g = rng.normal(size=n)
    s = -alpha * h @ g
    a = rng.normal(size=(n, n))
    y = (a @ a.T + np.eye(n)) @ s  # the gradient change of a convex quadratic along s
    return h, g, s, y


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ssbfgs_update_is_the_papers(seed):
    """tau = min(1, 1/b) with b = s'B s / s'y, phi = 1: to float64 rounding."""
    h, g, s, y = _random_pair(seed)
    b = (s @ np.linalg.solve(h, s)) / (s @ y)
    expected = _family_update(h, s, y, min(1.0, 1 / b), 1.0)
    new, count = _one_update(js.SSBFGS(), h, g, s, y)
    assert count == 2
    np.testing.assert_allclose(new, expected, rtol=1e-10, atol=1e-12 * np.abs(expected).max())
    np.testing.assert_allclose(new @ y, s, rtol=1e-9, atol=1e-12)  # secant: H_{k+1} y = s


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_ssbroyden_update_is_the_papers(seed):
    """tau and phi from Al-Baali & Khalfan's rules, the update from the family's formula."""
    h, g, s, y = _random_pair(seed)
    b = (s @ np.linalg.solve(h, s)) / (s @ y)
    hk = (y @ h @ y) / (s @ y)
    tau, phi = _ssbroyden_parameters(b, hk, len(s))
    assert phi != 1.0  # a member other than BFGS, or the test would not test the rule
    expected = _family_update(h, s, y, tau, phi)
    new, _ = _one_update(js.SSBroyden(), h, g, s, y)
    np.testing.assert_allclose(new, expected, rtol=1e-9, atol=1e-11 * np.abs(expected).max())
    np.testing.assert_allclose(new @ y, s, rtol=1e-9, atol=1e-12)
    assert np.all(np.linalg.eigvalsh(new) > 0)


def test_ssbroyden_parameters_by_hand():
    """Where the pair is a multiple of a Newton step (a = b h - 1 = 0), v = 0 and phi does
    not enter the update: tau is SSBFGS's min(1, 1/b). At b = 4, h = 1 (a = 3, c = sqrt(3)/2):
    rho- = 1 - sqrt(3)/2, theta = theta- = (rho- - 1)/3 (above (1 - b)/b = -3/4), sigma =
    1 + 3 theta = rho-, tau = min(sigma^(-1/4) / 4, sigma) = sigma and phi = (1 - theta)/sigma,
    about 9.6: a member far outside the convex class [0, 1]."""
    with jax.enable_x64(True):
        for b, h in [(1.0, 1.0), (2.0, 0.5), (0.5, 2.0)]:
            tau, phi = js.SSBroyden().scaling(jnp.float64(b), jnp.float64(h), 5)
            assert float(tau) == min(1.0, 1 / b)
        tau, phi = js.SSBroyden().scaling(jnp.float64(4.0), jnp.float64(1.0), 5)
        rho_minus = 1 - np.sqrt(3) / 2
        theta = (rho_minus - 1) / 3
        np.testing.assert_allclose(float(tau), rho_minus, rtol=1e-14)
        np.testing.assert_allclose(float(phi), (1 - theta) / rho_minus, rtol=1e-14)
        assert 9.5 < float(phi) < 9.7
        tau, phi = js.SSBFGS().scaling(jnp.float64(4.0), jnp.float64(1.0), 5)
        assert (float(tau), float(phi)) == (0.25, 1.0)


def test_after_a_reset_the_pair_is_scaled_for_h_equal_to_identity():
    """Where d = -H g does not descend, the solver resets the direction and steps along -g:
    the next pair's b is then s's / s'y (B = I), not the one for the H that made d."""
    h, g, _, _ = _random_pair(5)
    s = -0.3 * g
    y = (np.eye(len(g)) * 0.5 + 0.05) @ s  # b = s's / s'y > 1: tau = 1/b < 1
    with jax.enable_x64(True):
        x = jnp.zeros(len(g))
        direction = js.SSBFGS()
        state = direction.init(x, jnp.float64)
        state = state.__class__(**{**vars(state), "inv_hessian": jnp.asarray(h)})
        info = jsi.DirectionInfo(x=x, grad=jnp.asarray(g), dtype=jnp.float64)
        _, _, state, _ = direction.compute(state, info)
        state = direction.reset(state)
        new = direction.update(state, jnp.asarray(s), jnp.asarray(y), jnp.float64)
    b = (s @ s) / (s @ y)
    expected = _family_update(np.eye(len(g)), s, y, min(1.0, 1 / b), 1.0)
    np.testing.assert_allclose(np.asarray(new.inv_hessian), expected, rtol=1e-12, atol=1e-14)


def test_ssbroyden_in_one_dimension():
    """For n = 1 the power sigma^(-1/(n-1)) is taken as 1 (the docstring's rule), so tau is
    min(rho+, sigma) or rho+ min(1, 1/theta), finite; a 1-D quadratic is solved."""
    with jax.enable_x64(True):
        b, h = 4.0, 1.0
        tau, phi = js.SSBroyden().scaling(jnp.float64(b), jnp.float64(h), 1)
        rho_minus = 1 - np.sqrt(3) / 2
        np.testing.assert_allclose(float(tau), min(0.25, rho_minus), rtol=1e-14)
        assert np.isfinite(float(phi))
        solver = js.Solver(js.SSBroyden(), js.Zoom(), gtol=1e-10, ftol=0.0)
        result = solver.run(lambda x: 3.0 * (x[0] - 2.0) ** 2, jnp.array([5.0]))
    assert result.status == js.Status.CONVERGED_GTOL
    np.testing.assert_allclose(result.params, [2.0], rtol=1e-10)


def test_a_pair_failing_the_curvature_guard_changes_nothing():
    h, g, s, _ = _random_pair(0)
    for direction in (js.SSBFGS(), js.SSBroyden()):
        new, count = _one_update(direction, h, g, s, -s)  # s'y < 0
        np.testing.assert_array_equal(new, h)
        assert count == 1


def rosenbrock(x):
    return jnp.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


@pytest.mark.parametrize("direction", ["SSBFGS", "SSBroyden"])
@pytest.mark.parametrize("n", [2, 4])
def test_rosenbrock_against_scipy_bfgs(direction, n):
    """From (-1.2, 1, ...) in float64 with `Zoom`: to |g|_inf <= 1e-8 at (1, ..., 1), in no more
    iterations than scipy's BFGS (its Wolfe search, gtol 1e-8), with H positive definite."""
    x0 = np.array([-1.2, 1.0] * (n // 2))
    with jax.enable_x64(True):
        solver = js.Solver(getattr(js, direction)(), js.Zoom(), gtol=1e-8, ftol=0.0)
        result = solver.run(rosenbrock, jnp.asarray(x0))
        reference = scipy.optimize.minimize(
            lambda x: float(rosenbrock(jnp.asarray(x))),
            x0,
            jac=lambda x: np.asarray(jax.grad(rosenbrock)(jnp.asarray(x))),
            method="BFGS",
            options={"gtol": 1e-8},
        )
    assert reference.success
    assert result.status == js.Status.CONVERGED_GTOL, result.message
    np.testing.assert_allclose(result.params, np.ones(n), rtol=1e-6)
    assert int(result.num_steps) <= reference.nit, (int(result.num_steps), reference.nit)
    h = np.asarray(result.state.direction.inv_hessian)
    assert np.all(np.linalg.eigvalsh(h) > 0)


def test_bad_settings_are_refused():
    for cls in (js.SSBFGS, js.SSBroyden):
        with pytest.raises(ValueError, match="curvature_eps"):
            cls(curvature_eps=-1.0)


class _SelfScaledDFP(js.AbstractSelfScaled):
    """A rule of a user's own: DFP (phi = 0) with Al-Baali's scaling."""

    curvature_eps: float | None = None

    def scaling(self, b, h, n):
        return jnp.minimum(1, 1 / b), jnp.zeros_like(b)


def test_a_rule_of_ones_own_is_a_direction():
    """`AbstractSelfScaled` with only `scaling` written passes the conformance kit and, with
    phi = 0, makes the update the papers' DFP member."""
    check_direction(_SelfScaledDFP())
    h, g, s, y = _random_pair(4)
    b = (s @ np.linalg.solve(h, s)) / (s @ y)
    new, _ = _one_update(_SelfScaledDFP(), h, g, s, y)
    expected = _family_update(h, s, y, min(1.0, 1 / b), 0.0)
    np.testing.assert_allclose(new, expected, rtol=1e-9, atol=1e-11 * np.abs(expected).max())
