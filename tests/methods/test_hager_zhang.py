"""The Hager–Zhang line search: every accepted step satisfies the Wolfe (T1) or approximate
Wolfe (T2) conditions of Hager & Zhang (2005), checked independently in float64 numpy; honest
failures; the state kept between searches; and, at solver level, the ill-conditioned quadratic
on which approximate Wolfe reaches a gtol that a strong Wolfe search cannot.

The searches run through the jitted driver of tests/methods/linesearch_driver.py (one evaluation of
phi, phi' per `lax.while_loop` iteration, every trial recorded).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js
from jaxsearch._linesearch._conditions import value_tolerance
from jaxsearch._linesearch._hager_zhang import HagerZhang

from ..problems import quadratic, rosenbrock, spd_quadratic_data
from .linesearch_driver import (
    DTYPES,
    Run,
    check_contract,
    run_1d,
    run_nd,
)
from .linesearch_problems import (
    CASES_1D,
    FUNCTIONS_1D,
    ND_CASES,
    NONFINITE,
    STEEP,
)


class _ApproximateFromStart(HagerZhang):
    """HagerZhang whose state says "approximate Wolfe" from the first search on (as after
    CG_DESCENT's switch), so that T2 is exercised by the one-search driver."""

    def init(self, dtype):
        return eqx.tree_at(lambda s: s.approx, super().init(dtype), jnp.array(True))


HZ = HagerZhang()
HZ_APPROX = _ApproximateFromStart()
# A demanding delta and sigma: the acceptable sets are narrow, so a wrong test would show.
HZ_DEMANDING = HagerZhang(delta=0.4, sigma=0.5)
CONFIGS = {"wolfe": HZ, "approximate": HZ_APPROX, "demanding": HZ_DEMANDING}


# ------------------------------------------------------------------------------------------
# Independent checks in float64.


def _epsilon(ls: HagerZhang, run: Run) -> float:
    """The search's epsilon in the run's dtype (told apart by its machine epsilon)."""
    dtype = np.float64 if run.eps < 1e-10 else np.float32
    return value_tolerance(ls.epsilon, dtype)


def conditions(run: Run, i: int, true_phi, ls: HagerZhang):
    """(T1, T2, sufficient decrease, approximate value bound) at trial i, in float64.

    T1: phi(t) - phi(0) <= delta t phi'(0) and phi'(t) >= sigma phi'(0);
    T2: (2 delta - 1) phi'(0) >= phi'(t) >= sigma phi'(0) and phi(t) <= phi(0) + eps_k,
    with eps_k = epsilon C_0 = epsilon |phi(0)| (the first search: C_0 = |f_0|). Allowances:
    the measured error of each value the search was given plus 4 ulps of each quantity.
    """
    t = float(run.trials[i])
    p0, g0 = true_phi(0.0)
    pt, gt = true_phi(t)
    if not (np.isfinite(pt) and np.isfinite(gt)):
        return False, False, False, False
    e0, ed0 = abs(run.phi0 - p0), abs(run.dphi0 - g0)
    et, edt = abs(run.values[i] - pt), abs(run.slopes[i] - gt)
    ulps = 4 * run.eps
    d, s = ls.delta, ls.sigma
    eps_k = _epsilon(ls, run) * abs(run.phi0)
    tol_f = e0 + et + d * t * ed0 + ulps * (abs(p0) + abs(pt) + d * t * abs(g0))
    decrease = pt - p0 <= d * t * g0 + tol_f
    curvature = gt >= s * g0 - (edt + s * ed0 + ulps * (abs(gt) + s * abs(g0)))
    upper = gt <= (2 * d - 1) * g0 + (edt + ed0 + ulps * (abs(gt) + abs(g0)))
    bound = pt <= p0 + eps_k + e0 + et + ulps * (abs(p0) + abs(pt) + eps_k)
    t1 = decrease and curvature
    t2 = upper and curvature and bound
    return bool(t1), bool(t2), bool(decrease), bool(bound)


def _clearly(run: Run, i: int, true_phi, ls: HagerZhang, approx: bool) -> bool:
    """Trial i satisfies the fallback test (sufficient decrease, or the approximate value
    bound in approximate mode) by more than the rounding allowance."""
    t = float(run.trials[i])
    p0, g0 = true_phi(0.0)
    pt, gt = true_phi(t)
    if not (np.isfinite(pt) and np.isfinite(gt)):
        return False
    allowance = abs(run.phi0 - p0) + abs(run.values[i] - pt) + ls.delta * t * abs(run.dphi0 - g0)
    allowance += 4 * run.eps * (abs(p0) + abs(pt) + ls.delta * t * abs(g0))
    if approx:
        return bool(pt < p0 + _epsilon(ls, run) * abs(run.phi0) - allowance)
    return bool(pt < p0 + ls.delta * t * g0 - allowance)


def check_hz(run: Run, ls: HagerZhang, true_phi):
    """Success means T1 or T2 at the step (the last trial); any other step satisfies the
    fallback test and has the lowest value among the trials that clearly do; no step only
    when no trial clearly does."""
    check_contract(run, ls)
    approx = isinstance(ls, _ApproximateFromStart)
    last = run.n - 1
    if run.success:
        t1, t2, _, _ = conditions(run, last, true_phi, ls)
        assert t1 or t2, f"step {run.step} satisfies neither Wolfe nor approximate Wolfe"
        return
    again = run.n > 1 and run.trials[-1] in run.trials[:-1]
    tried = run.n - 1 if again else run.n
    clearly = [_clearly(run, i, true_phi, ls, approx) for i in range(tried)]
    if run.step > 0:
        _, _, decrease, bound = conditions(run, last, true_phi, ls)
        assert bound if approx else decrease, f"fallback step {run.step} fails its test"
        lowest = np.min(run.values[:tried][clearly], initial=np.inf)
        assert run.values[-1] <= lowest, (run.step, run.trials)
    else:
        assert not any(clearly), f"no step, but {run.trials[:tried][clearly]} qualified"


# ------------------------------------------------------------------------------------------
# One-dimensional functions (Moré & Thuente's six and two simple ones) and n-dim problems.


# (config, dtype): the demanding configuration in float64 only (compile time).
SETTINGS_1D = [(c, d) for c in CONFIGS for d in DTYPES if c != "demanding" or d == "float64"]
# Approximate mode in float64 only along the n-dim problems (compile time).
SETTINGS_ND = [("wolfe", "float32"), ("wolfe", "float64"), ("approximate", "float64")]


@pytest.mark.parametrize("config,dtype", SETTINGS_1D)
@pytest.mark.parametrize("name,t0", CASES_1D)
def test_1d_accepts_only_wolfe_or_approximate_wolfe_points(name, t0, config, dtype):
    fn, ls = FUNCTIONS_1D[name], CONFIGS[config]
    run = run_1d(ls, fn, t0, dtype)
    check_hz(run, ls, fn.np)
    if config != "demanding":
        assert run.success, f"no acceptable point after {run.n} trials; step {run.step}"


@pytest.mark.parametrize("config,dtype", SETTINGS_ND)
@pytest.mark.parametrize("name", ND_CASES)
def test_nd_random_descent_directions(name, config, dtype):
    """Rosenbrock n = 2..10, an SPD quadratic and logistic regression along steepest-descent,
    random descent and (quadratic) Newton directions, first trial 1."""
    ls = CONFIGS[config]
    run = run_nd(ls, name, dtype)
    check_hz(run, ls, ND_CASES[name].true_phi(dtype))
    assert run.success


def test_wolfe_failure_switches_to_approximate_wolfe():
    """On mt4 and mt6 the Wolfe set for delta = 0.1 is a sliver near t = 0 (the decrease is
    tiny compared to phi'(0)), so secant^2 closes in on the minimiser, which satisfies T2
    but not T1; as CG_DESCENT does, the search then succeeds with approximate Wolfe."""
    for name in ("mt4", "mt6"):
        fn = FUNCTIONS_1D[name]
        run = run_1d(HZ, fn, 0.1, "float64")
        check_hz(run, HZ, fn.np)
        t1, t2, _, _ = conditions(run, run.n - 1, fn.np, HZ)
        assert run.success and t2 and not t1, (name, run.step)


# ------------------------------------------------------------------------------------------
# Non-finite trials, running out of trials, validation.


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", NONFINITE)
@pytest.mark.parametrize("t0", [1.0, 1e3])
def test_nonfinite_trials_are_backed_off_from(t0, name, dtype):
    """phi = t^2 - 2t for t < 0.5 and NaN / +inf (or a NaN slope) beyond: the first trial is
    non-finite; the search only tries smaller steps after it and accepts a finite one."""
    fn = NONFINITE[name]
    run = run_1d(HZ, fn, t0, dtype)
    check_hz(run, HZ, fn.np)
    finite = np.isfinite(run.values) & np.isfinite(run.slopes)
    assert not finite[0]
    assert np.all(run.trials[1:] < run.trials[0])
    assert run.success and 0 < run.step < 0.5
    assert np.isfinite(fn.np(run.step)).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", NONFINITE)
def test_fails_honestly_when_acceptable_points_are_all_nonfinite(name, dtype):
    """phi = t^2 - 2t with sigma = 0.1: phi'(t) >= sigma phi'(0) needs t >= 0.9, all in the
    non-finite region t >= 0.5 (for T1 and T2 alike). From t0 = 1e-3 the search expands into
    it and must back off; it fails with the finite trial of lowest value (which has
    sufficient decrease)."""
    fn = NONFINITE[name]
    ls = HagerZhang(delta=0.05, sigma=0.1)
    run = run_1d(ls, fn, 1e-3, dtype)
    check_hz(run, ls, fn.np)
    finite = np.isfinite(run.values) & np.isfinite(run.slopes)
    assert not np.all(finite), "never reached the non-finite region"
    assert not run.success
    assert 1e-3 <= run.step < 0.5
    assert run.values[-1] == np.min(run.values[finite])


def _outcome(run: Run, max_steps: int) -> str:
    if run.success:
        return "success"
    if run.step == 0:
        return "no step"
    return "re-evaluated best" if run.n == max_steps + 1 else "last trial"


OUT_OF_TRIALS_CASES = [(FUNCTIONS_1D[name], t0) for name, t0 in CASES_1D] + [(STEEP, 1e3)]


@pytest.mark.parametrize("max_steps", [1, 3])
def test_out_of_trials(max_steps):
    """With too few trials the search follows the same trials as with enough, then returns
    a checked point (re-evaluated last if need be) or no step; every outcome occurs.
    `max_steps` trials are judged, within a budget of `max_trials` = `max_steps + 1`."""
    ls = HagerZhang(max_trials=max_steps + 1)
    outcomes = set()
    for fn, t0 in OUT_OF_TRIALS_CASES:
        full = run_1d(HZ, fn, t0, "float64")
        run = run_1d(ls, fn, t0, "float64")
        check_hz(run, ls, fn.np)
        k = min(run.n, max_steps)
        np.testing.assert_array_equal(run.trials[:k], full.trials[:k])
        if full.success and full.n <= max_steps:
            assert run.success and run.step == full.step and run.n == full.n
        outcomes.add(_outcome(run, max_steps))
    expected = {1: {"success", "no step", "last trial"}, 3: {"re-evaluated best"}}
    assert outcomes >= expected[max_steps], outcomes


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(delta=0.0), r"\bdelta must"),
        (dict(delta=0.5), r"\bdelta must"),
        (dict(delta=0.3, sigma=0.2), r"\bsigma must"),
        (dict(sigma=1.0), r"\bsigma must"),
        (dict(epsilon=-1.0), r"\bepsilon must"),
        (dict(theta=1.0), r"\btheta must"),
        (dict(gamma=0.0), r"\bgamma must"),
        (dict(omega=-1.0), r"\bomega must"),
        (dict(Delta=1.5), r"\bDelta must"),
        (dict(psi1=1.0), r"\bpsi1 must"),
        (dict(psi2=0.0), r"\bpsi2 must"),
        (dict(rho=1.0), r"\brho must"),
        (dict(max_trials=0), r"\bmax_trials must"),
        (dict(max_step_size=0.0), r"\bmax_step_size must"),
    ],
)
def test_constructor_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        HagerZhang(**kwargs)


# ------------------------------------------------------------------------------------------
# The state between searches and the initial step (I1 / I2).


def _search(ls, state, f, t0, scaled):
    """One search on phi(t) = f(t) in float64, driven eagerly: (search, trials)."""
    f64 = jnp.float64
    grad = jax.grad(f)
    zero = jnp.zeros((), f64)
    search = ls.start(state, f(zero), grad(zero), jnp.asarray(t0, f64), zero, jnp.asarray(scaled))
    trials = []
    while not bool(search.done):
        t = search.trial
        trials.append(float(t))
        search = ls.update(search, t, f(t), grad(t))
    return search, trials


def test_state_initial_steps_and_switch():
    """C_0 = |f_0|, Q_0 = 1, then C_1 = C_0 + (|f_1| - C_0) / (1 + Delta); the previous step
    starts QuadStep (psi1 alpha_{k-1}), whose convex quadratic's minimiser is the next trial;
    a scaled direction starts from the guess; |f_1 - f_0| <= omega C_0 switches to T2."""
    with jax.enable_x64(True):
        ls = HZ
        f = lambda t: (t - 2.0) ** 2 + 3.0  # f(0) = 7, minimiser 2
        state = ls.init(jnp.float64)
        search, trials = _search(ls, state, f, 2.0, False)  # first search: the guess
        assert trials == [2.0] and bool(search.success)
        state = ls.finish(state, search)
        assert float(state.prev_step) == 2.0 and not bool(state.approx)
        # C_0 = |f_0| = 7; the next search, from f_1 = 3, has epsilon_1 = 1e-6 C_1.
        assert float(state.scale.C) == 7.0 and float(state.scale.Q) == 1.0
        zero = jnp.zeros((), jnp.float64)
        at_min = ls.start(state, jnp.asarray(3.0), jnp.asarray(-1.0), jnp.asarray(1.0), zero)
        np.testing.assert_allclose(float(at_min.scale.Q), 1 + 0.7)
        np.testing.assert_allclose(float(at_min.scale.C), 7 + (3 - 7) / 1.7)
        np.testing.assert_allclose(float(at_min.bound), 3 + 1e-6 * (7 + (3 - 7) / 1.7))
        # Not scaled, previous step 2: QuadStep at 0.2, then the quadratic's minimiser 2.
        search, trials = _search(ls, state, f, 5.0, False)
        np.testing.assert_allclose(trials, [0.2, 2.0])
        # Scaled: the guess.
        search, trials = _search(ls, state, f, 5.0, True)
        assert trials[0] == 5.0
        # A step that changes f by at most omega C switches to approximate Wolfe for good.
        flat = lambda t: 1e-9 * (t - 1.0) ** 2 + 1.0
        search, _ = _search(ls, state, flat, 1.0, True)
        assert bool(search.success)
        switched = ls.finish(state, search)
        assert bool(switched.approx)
        assert bool(ls.finish(switched, search).approx)


def _one_trial(ls, state, phi, dphi):
    """start(phi(0) = 1, phi'(0) = -1, guess 1), then one trial at t = 1 with phi, phi'."""
    f64 = jnp.float64
    one, zero = jnp.ones((), f64), jnp.zeros((), f64)
    search = ls.start(state, one, -one, one, zero, jnp.array(True))
    assert float(search.trial) == 1.0
    return ls.update(search, one, jnp.asarray(phi, f64), jnp.asarray(dphi, f64))


@pytest.mark.parametrize(
    "phi,dphi,wolfe,approximate",
    [
        (0.85, -0.85, True, True),  # T1 (0.85 <= 1 - 0.1) and T2
        (0.95, -0.85, False, True),  # no sufficient decrease; T2 (slope in [-0.9, 0.8])
        (0.95, 0.75, False, True),  # T2 with a positive slope
        (1 + 0.5e-6, -0.85, False, True),  # T2: phi <= phi(0) + epsilon |phi(0)|
        (1 + 2e-6, -0.85, False, False),  # above the approximate bound
        (0.95, 0.85, False, False),  # slope above (2 delta - 1) phi'(0) = 0.8
        (0.5, -0.95, False, False),  # slope below sigma phi'(0) = -0.9
        (0.5, 0.9, True, False),  # T1 (the original Wolfe condition is one-sided); not T2
        (float("nan"), -0.85, False, False),
        (0.95, float("nan"), False, False),
    ],
)
def test_acceptance_conditions(phi, dphi, wolfe, approximate):
    """One trial against T1 (Wolfe mode) and T1 or T2 (approximate mode), with
    epsilon_0 = epsilon C_0 = epsilon |phi(0)|."""
    with jax.enable_x64(True):
        for ls, expected in ((HZ, wolfe), (HZ_APPROX, wolfe or approximate)):
            search = _one_trial(ls, ls.init(jnp.float64), phi, dphi)
            assert bool(search.success) == expected == bool(search.done), (ls, phi, dphi)
            assert float(search.step) == (1.0 if expected else 0.0)


# ------------------------------------------------------------------------------------------
# Solver level.

GTOL = 1e-6


def _solve(direction, linesearch, fn, x0, *args, max_steps, return_best=True):
    solver = js.Solver(
        direction, linesearch, gtol=GTOL, ftol=0.0, max_steps=max_steps, return_best=return_best
    )
    return solver.run(fn, x0, *args, history=True)


@pytest.mark.parametrize("direction", ["cg", "lbfgs"])
def test_solver_rosenbrock(direction):
    with jax.enable_x64(True):
        d = js.NonlinearCG() if direction == "cg" else js.LBFGS()
        result = _solve(d, HagerZhang(), rosenbrock, jnp.array([-1.2, 1.0]), max_steps=500)
        assert result.status == js.Status.CONVERGED_GTOL, result.status
        np.testing.assert_allclose(np.asarray(result.params), np.ones(2), atol=1e-5)
        print(
            f"rosenbrock {direction}: {int(result.num_steps)} steps, "
            f"{int(result.num_fun_evals)} evaluations"
        )


@pytest.mark.parametrize("direction", ["cg", "lbfgs"])
def test_solver_ill_conditioned_quadratic_reaches_gtol(direction):
    """n = 100, condition number 1e4, float64, gtol 1e-6, ftol = 0. Near the solution the
    changes of f fall below float64's resolution, so sufficient decrease can no longer be
    told apart from rounding (the textbook Zoom, epsilon = 0, stops there, LINESEARCH_FAILED
    or STALLED around |g| ~ 1e-5); the approximate Wolfe conditions use the slope instead
    and reach gtol, with f rising within the allowance epsilon C_k on the way. The run
    returns that last iterate, whose f lies within the allowance of the lowest value seen."""
    with jax.enable_x64(True):
        a, b, solution = spd_quadratic_data(n=100, cond=1e4)
        d = js.NonlinearCG() if direction == "cg" else js.LBFGS()
        args = (jnp.asarray(a), jnp.asarray(b))
        result = _solve(d, HagerZhang(), quadratic, jnp.zeros(100), *args, max_steps=3000)
        assert result.status == js.Status.CONVERGED_GTOL, result.status
        assert np.max(np.abs(np.asarray(result.grad))) <= GTOL
        values = result.history.to_numpy()["value"][1:]  # f after each step (row 0: x0)
        assert np.any(np.diff(values) > 0)  # f rose on the way (within the allowance)
        allowance = 1e-6 * np.max(np.abs(values))  # epsilon C_k, C_k an average of |f|
        assert values.min() <= float(result.value) <= values.min() + allowance
        print(
            f"quadratic {direction}: {int(result.num_steps)} steps, "
            f"{int(result.num_fun_evals)} evaluations"
        )
        if direction == "lbfgs":  # the contrast, on the cheaper of the two pairs
            textbook = js.Zoom(epsilon=0.0)
            zoom = _solve(d, textbook, quadratic, jnp.zeros(100), *args, max_steps=3000)
            assert zoom.status in (js.Status.LINESEARCH_FAILED, js.Status.STALLED), zoom.status
            assert np.max(np.abs(np.asarray(zoom.grad))) > 4 * GTOL
