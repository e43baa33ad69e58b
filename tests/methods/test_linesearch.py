"""The line searches: Zoom finds strong Wolfe points, Backtracking finds Armijo points.

Every search runs through one jitted driver per (line search, objective) that evaluates
phi(t) = f(x + t d) and phi'(t) once per `lax.while_loop` iteration, exactly as the solver
does, and records every trial (tests/methods/linesearch_driver.py; the problems are in
tests/methods/linesearch_problems.py). Problems are array arguments of that driver, so each search
configuration compiles once per dtype.

Accepted steps are checked independently: phi and phi' are recomputed in float64 numpy from
closed forms at the point the search evaluated, and the conditions are required to hold up to
the rounding error of the values the search was actually given (measured, per point, as the
difference between the driver's record and the float64 value) plus a few ulps for the
comparison itself.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize

import jaxsearch as js

from ..problems import rosenbrock
from .linesearch_driver import (
    DTYPES,
    Run,
    armijo_strictly,
    cast,
    check_contract,
    check_point,
    precision,
    run_1d,
    run_nd,
)
from .linesearch_problems import (
    CASES_1D,
    FUNCTIONS_1D,
    ND_CASES,
    NONFINITE,
    STEEP,
    Fn1d,
    phi_1d,
    rosenbrock_masked,
)


def check_zoom(run: Run, ls: js.Zoom, true_phi):
    """Zoom: success means strong Wolfe; any other step at least has sufficient decrease."""
    check_contract(run, ls)
    if run.step > 0:
        decrease, curvature = check_point(run, run.n - 1, true_phi, ls.c1, ls.c2)
        assert decrease, f"accepted step {run.step} fails sufficient decrease"
        if run.success:
            assert curvature, f"step {run.step} reported as strong Wolfe fails curvature"


def check_backtracking(run: Run, ls: js.Backtracking, t0: float, true_phi):
    """Backtracking: trials are t0 shrink^k; it accepts the first that satisfies Armijo."""
    check_contract(run, ls)
    expected = t0 * ls.shrink ** np.arange(run.n)
    np.testing.assert_allclose(run.trials, expected, rtol=8 * run.n * run.eps)
    for i in range(run.n - 1):  # every rejected trial fails Armijo (beyond rounding)
        assert not armijo_strictly(run, i, true_phi, ls.c1), (
            f"trial {run.trials[i]} satisfies Armijo but was rejected"
        )
    last_ok, _ = check_point(run, run.n - 1, true_phi, ls.c1, None)
    if run.success:
        assert run.step > 0 and last_ok, f"accepted step {run.step} fails Armijo"
    else:
        assert run.step == 0 and run.n == ls.max_trials


def scipy_line_search(f, fprime, x, d):
    """scipy's strong Wolfe search (first trial 1.0): (step or None, fc, gc, success)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", scipy.optimize._linesearch.LineSearchWarning)
        step, fc, gc, _, _, slope = scipy.optimize.line_search(f, fprime, x, d, c1=1e-4, c2=0.9)
    return step, fc, gc, step is not None and slope is not None


# --------------------------------------------------------------------------------------------
# Tests.

ZOOM = js.Zoom()
BACKTRACKING = js.Backtracking()
SEARCHES = {"zoom": ZOOM, "backtracking": BACKTRACKING}


# A demanding c1 puts many trials near the sufficient-decrease line, where a wrong test shows.
DEMANDING_ZOOM = js.Zoom(c1=0.4, c2=0.5)


def zoom_for(fn: Fn1d, config: str) -> js.Zoom:
    """The default Zoom, one with the function's own (Moré & Thuente) tolerances, or one with
    a demanding c1."""
    if config == "demanding":
        return DEMANDING_ZOOM
    return ZOOM if config == "default" else js.Zoom(c1=fn.c1, c2=fn.c2)


def check(run: Run, ls, t0: float, true_phi):
    if isinstance(ls, js.Zoom):
        check_zoom(run, ls, true_phi)
    else:
        check_backtracking(run, ls, t0, true_phi)


def test_reference_functions_match_the_searched_ones():
    """The numpy references (closed-form slopes) agree with the JAX objectives the searches
    see, so the independent checks check the right function."""
    with precision("float64"):
        value_and_slope = jax.jit(jax.value_and_grad(phi_1d))
        for fn in [*FUNCTIONS_1D.values(), *NONFINITE.values(), STEEP]:
            p = cast(fn.params, jnp.float64)
            kind = cast(fn.kind, jnp.int32)
            for t in (0.0, 0.3, 0.995, 1.0, 1.7, 12.0):
                value, slope = value_and_slope(cast(t, jnp.float64), kind, p)
                ref_value, ref_slope = fn.np(t)
                np.testing.assert_allclose(float(value), ref_value, rtol=1e-12, atol=1e-15)
                np.testing.assert_allclose(float(slope), ref_slope, rtol=1e-10, atol=1e-13)
        compiled = {}
        for case in ND_CASES.values():
            x, d, args = case.arrays("float64")
            if case.jax_fn not in compiled:
                compiled[case.jax_fn] = jax.jit(jax.value_and_grad(case.jax_fn))
            value_and_grad = compiled[case.jax_fn]
            for t in (0.0, 1e-3, 0.5):
                point = jnp.asarray(x + t * d)
                value, grad = value_and_grad(point, *map(jnp.asarray, args))
                ref_value, ref_grad = case.np_fn(np.asarray(point)[: case.size], *case.np_args)
                np.testing.assert_allclose(float(value), ref_value, rtol=1e-12)
                np.testing.assert_allclose(
                    np.asarray(grad)[: case.size], ref_grad, rtol=1e-10, atol=1e-12
                )
            if case.jax_fn is rosenbrock_masked:
                masked = rosenbrock_masked(jnp.asarray(x), jnp.asarray(args[0]))
                plain = rosenbrock(jnp.asarray(x[: case.size]))
                np.testing.assert_allclose(float(masked), float(plain), rtol=1e-14)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("config", ["default", "more_thuente", "demanding"])
@pytest.mark.parametrize("name,t0", CASES_1D)
def test_zoom_1d_accepts_only_strong_wolfe_points(name, t0, config, dtype):
    fn = FUNCTIONS_1D[name]
    ls = zoom_for(fn, config)
    run = run_1d(ls, fn, t0, dtype)
    check_zoom(run, ls, fn.np)
    # mt2's strong Wolfe set, |t - 1.596| <= 2.5e-9 (c2 = 0.1; 2.2e-8 for c2 = 0.9), is finer
    # than float32's resolution there (1.2e-7).
    if config != "demanding" and not (name == "mt2" and dtype == "float32"):
        assert run.success, f"no strong Wolfe point after {run.n} trials; best step {run.step}"


@pytest.mark.parametrize("config", ["default", "more_thuente"])
@pytest.mark.parametrize("name,t0", CASES_1D)
def test_zoom_succeeds_on_more_thuente_functions_float64(name, t0, config):
    """Every Moré & Thuente function from every published start is well posed in float64."""
    fn = FUNCTIONS_1D[name]
    ls = zoom_for(fn, config)
    run = run_1d(ls, fn, t0, "float64")
    check_zoom(run, ls, fn.np)
    assert run.success, f"no strong Wolfe point after {run.n} trials; best step {run.step}"


@pytest.mark.parametrize(
    "dtype,smallest,largest", [("float64", 1e-10, 1e32), ("float32", 1e-8, 1e16)]
)
@pytest.mark.parametrize("c2", [0.9, 0.1])
def test_zoom_on_a_quadratic_from_any_first_trial(c2, dtype, smallest, largest):
    """Issue 33, item 8: on phi(t) = (t - 1)^2 Zoom succeeds from every first trial t0 from
    `smallest` to `largest` (phi(largest) stays finite). From t0 >= 10 (no sufficient
    decrease) the bracket is [0, t0], the cubic through its ends is phi itself, and its
    minimiser t = 1, however near 0 it lies, is the second trial and is accepted. (Zoom used
    to bisect wherever the interpolant lay within 10% of an end: log2(t0) trials, more than
    its 25 from t0 ~ 1e8 on.) From below, each expansion at most quintuples the step (Moré &
    Thuente's bound, t + 4 (t - t_prev))."""
    ls = js.Zoom(c2=c2)
    fn = FUNCTIONS_1D["quadratic"]
    for k in range(round(np.log10(smallest)), round(np.log10(largest)) + 1):
        run = run_1d(ls, fn, 10.0**k, dtype)
        check_zoom(run, ls, fn.np)
        assert run.success, (10.0**k, run.n, run.step)
        if k >= 1:
            assert run.n == 2, (10.0**k, run.trials)
            assert abs(run.step - 1) <= 4 * run.eps, (10.0**k, run.step)


# A demanding c1 puts many trials near the Armijo line, where a wrong test would show.
BACKTRACKING_CONFIGS = {"default": BACKTRACKING, "c1=0.5": js.Backtracking(c1=0.5, shrink=0.7)}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("config", BACKTRACKING_CONFIGS)
@pytest.mark.parametrize("name,t0", CASES_1D)
def test_backtracking_1d_accepts_first_armijo_point(name, t0, config, dtype):
    fn = FUNCTIONS_1D[name]
    ls = BACKTRACKING_CONFIGS[config]
    run = run_1d(ls, fn, t0, dtype)
    check_backtracking(run, ls, t0, fn.np)  # success exactly when some t0 shrink^k is Armijo
    if config == "default":
        assert run.success


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("search", SEARCHES)
@pytest.mark.parametrize("name", ND_CASES)
def test_nd_random_descent_directions(name, search, dtype):
    """Rosenbrock n = 2..10, an SPD quadratic and logistic regression along steepest-descent,
    random descent and (quadratic) Newton directions, first trial 1."""
    ls = SEARCHES[search]
    run = run_nd(ls, name, dtype)
    check(run, ls, 1.0, ND_CASES[name].true_phi(dtype))
    assert run.success


def _scipy_cases():
    """(name, f, fprime, x, d, ours) for the scipy comparison, all float64."""
    cases = []
    for name, fn in FUNCTIONS_1D.items():
        f = lambda x, fn=fn: fn.np(x[0])[0]
        fprime = lambda x, fn=fn: np.array([fn.np(x[0])[1]])
        ours = lambda fn=fn: run_1d(ZOOM, fn, 1.0, "float64")
        cases.append((name, f, fprime, np.zeros(1), np.ones(1), ours))
    for name, case in ND_CASES.items():
        f = lambda x, case=case: case.np_fn(x, *case.np_args)[0]
        fprime = lambda x, case=case: case.np_fn(x, *case.np_args)[1]
        x, d = case.x[: case.size], case.d[: case.size]
        cases.append((name, f, fprime, x, d, lambda name=name: run_nd(ZOOM, name, "float64")))
    return {c[0]: c[1:] for c in cases}


SCIPY_CASES = _scipy_cases()
# phi is unimodal on t > 0 here (convex, or a single minimiser), so two strong Wolfe searches
# that both zoom in on it must end at comparable values; Rosenbrock along a line is a quartic
# with up to two minimisers and mt3 oscillates, so there the steps may differ.
UNIMODAL = {"mt1", "mt2", "mt4", "mt5", "mt6", "quadratic", "quartic"} | {
    name for name in ND_CASES if not name.startswith("rosenbrock")
}


def compare_with_scipy(name):
    """Ours and scipy's line search from the same first trial t = 1 with c1 = 1e-4, c2 = 0.9:
    (our run, scipy's step, scipy's fc (counting phi(0)), scipy's gc)."""
    f, fprime, x, d, ours = SCIPY_CASES[name]
    run = ours()
    step, fc, gc, ok = scipy_line_search(f, fprime, x, d)
    assert ok, "scipy's line search failed"
    return run, step, fc, gc


@pytest.mark.parametrize("name", SCIPY_CASES)
def test_zoom_agrees_with_scipy(name):
    """Both searches succeed and both steps satisfy strong Wolfe (checked here, in float64);
    when both accept the first trial the steps are equal; where phi is unimodal, our value is
    not worse than scipy's by more than 1% of scipy's decrease phi(0) - phi(t_scipy)."""
    f, fprime, x, d, _ = SCIPY_CASES[name]
    run, step, fc, gc = compare_with_scipy(name)
    assert run.success

    def true_phi(t):
        return f(x + t * d), float(fprime(x + t * d) @ d)

    c1, c2 = 1e-4, 0.9
    phi0, dphi0 = true_phi(0.0)
    for t in (run.step, step):
        value, slope = true_phi(t)
        assert value <= phi0 + c1 * t * dphi0 + 1e-14 * abs(phi0), f"step {t}: no decrease"
        assert abs(slope) <= c2 * abs(dphi0) * (1 + 1e-12), f"step {t}: curvature"
    ours_first, scipy_first = run.n == 1, fc == 2 and gc == 1  # scipy's fc counts phi(0)
    if ours_first and scipy_first:
        assert run.step == step == 1.0
    if name in UNIMODAL:
        ours_value, scipy_value = true_phi(run.step)[0], true_phi(step)[0]
        assert ours_value - scipy_value <= 0.01 * (phi0 - scipy_value), (run.step, step)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("search", SEARCHES)
@pytest.mark.parametrize("name", NONFINITE)
@pytest.mark.parametrize("t0", [1.0, 1e3])
def test_nonfinite_trials_are_backed_off_from(t0, name, search, dtype):
    """phi = t^2 - 2t for t < 0.5 and NaN / +inf (or a NaN slope) beyond: the first trial is
    non-finite; the search only tries smaller steps after it and accepts a finite one."""
    fn = NONFINITE[name]
    ls = SEARCHES[search]
    run = run_1d(ls, fn, t0, dtype)
    check(run, ls, t0, fn.np)
    finite = np.isfinite(run.values) & np.isfinite(run.slopes)
    assert not finite[0]
    assert np.all(run.trials[1:] < run.trials[0])
    assert run.success and 0 < run.step < 0.5
    assert np.isfinite(fn.np(run.step)).all()
    if search == "backtracking":  # the first of t0 / 2^k below 0.5
        assert run.step == t0 * 0.5 ** np.ceil(np.log2(t0 / 0.5) + 1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", NONFINITE)
def test_zoom_fails_honestly_when_wolfe_points_are_all_nonfinite(name, dtype):
    """phi = t^2 - 2t with c2 = 0.1: the strong Wolfe set is [0.9, 1.1], all in the non-finite
    region t >= 0.5. From t0 = 1e-3 Zoom expands into that region, must back off, and fail
    with a finite sufficient-decrease step (it has one: 1e-3)."""
    fn = NONFINITE[name]
    ls = js.Zoom(c1=1e-4, c2=0.1)
    run = run_1d(ls, fn, 1e-3, dtype)
    check_zoom(run, ls, fn.np)
    finite = np.isfinite(run.values) & np.isfinite(run.slopes)
    assert not np.all(finite), "never reached the non-finite region"
    assert not run.success
    assert 1e-3 <= run.step < 0.5
    # The step is the lowest finite value seen (alpha_lo), re-evaluated if it was not last.
    assert run.values[-1] == np.min(run.values[finite])


def _out_of_trials_outcome(run: Run, judged: int) -> str:
    if run.success:
        return "success"
    if run.step == 0:
        return "no step"
    return "re-evaluated best" if run.n == judged + 1 else "last trial"


# mt2 from 0.5 expands once and then overshoots, so two trials end in the zoom phase with an
# earlier trial as the best point.
OUT_OF_TRIALS_CASES = [*CASES_1D, ("mt2", 0.5)]


@pytest.mark.parametrize("max_trials", [1, 2, 3])
@pytest.mark.parametrize("name,t0", OUT_OF_TRIALS_CASES)
def test_zoom_out_of_trials(name, t0, max_trials):
    """With too few trials Zoom follows the same trials as with enough, then returns no step
    or an already-evaluated step with sufficient decrease (re-evaluated last if need be), and
    success False; when the full search needed no more trials, the same success. It judges
    `max_trials - 1` trials (one with `max_trials=1`) and evaluates at most `max_trials`."""
    fn = FUNCTIONS_1D[name]
    ls = js.Zoom(max_trials=max_trials)
    max_steps = max(max_trials - 1, 1)  # the trials judged
    full = run_1d(ZOOM, fn, t0, "float64")
    run = run_1d(ls, fn, t0, "float64")
    check_zoom(run, ls, fn.np)  # done, n <= max_trials, step 0 or sufficient decrease
    k = min(run.n, max_steps)
    np.testing.assert_array_equal(run.trials[:k], full.trials[:k])
    if full.success and full.n <= max_steps:
        assert run.success and run.step == full.step and run.n == full.n
    else:
        # As documented: the trial with the lowest value among those with sufficient decrease
        # (re-evaluated as one extra trial if it was not the last), else no step.
        assert not run.success
        tried = run.trials[:max_steps]
        decrease = [check_point(run, i, fn.np, ls.c1, None)[0] for i in range(len(tried))]
        if any(decrease):
            best = min(tried[decrease], key=lambda t: fn.np(t)[0])
            assert run.step == best, (run.step, best, tried)
            assert run.n == max_steps + (run.step != tried[-1])
        else:
            assert run.step == 0


def test_zoom_out_of_trials_exercises_every_outcome():
    """The cases above cover no step, the last trial, and a re-evaluated earlier trial."""
    outcomes = set()
    for max_trials in (2, 3):
        ls = js.Zoom(max_trials=max_trials)
        for name, t0 in OUT_OF_TRIALS_CASES:
            run = run_1d(ls, FUNCTIONS_1D[name], t0, "float64")
            outcomes.add(_out_of_trials_outcome(run, max_trials - 1))
    assert outcomes >= {"no step", "last trial", "re-evaluated best"}, outcomes


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "search,name", [("zoom", "steep"), ("backtracking", "steep"), ("backtracking", "quadratic")]
)
def test_no_sufficient_decrease_within_max_steps_gives_no_step(search, name, dtype):
    """From t0 = 1e3 with three trials judged (Zoom's max_trials = 4 leaves room for the
    re-evaluation of a best trial, Backtracking's 3 does not), no trial has sufficient
    decrease (-t + 1e6 t^4 needs t <= 0.01, and Zoom's trials shrink by at most 10x;
    (t - 1)^2 needs t < 2, Backtracking tries 1e3, 500, 250): no step, no success, and no
    extra evaluation."""
    fn = STEEP if name == "steep" else FUNCTIONS_1D["quadratic"]
    ls = js.Zoom(max_trials=4) if search == "zoom" else js.Backtracking(max_trials=3)
    run = run_1d(ls, fn, 1e3, dtype)
    check(run, ls, 1e3, fn.np)
    for i in range(run.n):  # the premise
        assert not check_point(run, i, fn.np, ls.c1, None)[0], run.trials
    assert run.step == 0 and not run.success and run.n == 3


@pytest.mark.parametrize(
    "make,match",
    [
        pytest.param(lambda: js.Zoom(c1=0.0), r"\bc1 must", id="zoom-c1=0"),
        pytest.param(lambda: js.Zoom(c1=0.5, c2=0.4), r"\bc2 must", id="zoom-c2<c1"),
        pytest.param(lambda: js.Zoom(c2=1.0), r"\bc2 must", id="zoom-c2=1"),
        pytest.param(lambda: js.Zoom(max_trials=0), r"\bmax_trials must", id="zoom-max_trials=0"),
        pytest.param(lambda: js.Backtracking(shrink=1.5), r"\bshrink must", id="bt-shrink=1.5"),
        pytest.param(lambda: js.Backtracking(c1=1.0), r"\bc1 must", id="bt-c1=1"),
    ],
)
def test_constructor_validation(make, match):
    with pytest.raises(ValueError, match=match):
        make()
