"""The Moré–Thuente line search: the same trials as MINPACK-2's dcsrch (scipy's port), strong
Wolfe at every success, honest failures, and L-BFGS-B's evaluation counts at solver level.

The searches run through the jitted driver of tests/methods/linesearch_driver.py (one evaluation of
phi, phi' per `lax.while_loop` iteration, every trial recorded); accepted steps are checked
there, independently, in float64 numpy.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize._dcsrch import DCSRCH

import jaxsearch as js
from jaxsearch._linesearch._more_thuente import MoreThuente

from ..problems import logistic, logistic_data, rosenbrock, scipy_minimize
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
    FUNCTIONS_1D,
    MT_FUNCTIONS,
    MT_STARTS,
    ND_CASES,
    NONFINITE,
    STEEP,
)

DEFAULT = MoreThuente()

# Moré & Thuente (1994), section 5: (mu, eta) = (ftol, gtol) of each function, and Tables 1-6:
# the number of evaluations and the step (two significant digits) from the starts 1e-3, 1e-1,
# 1e1, 1e3. scipy's port of dcsrch reproduces every one of them.
PAPER_TOLERANCES = {
    "mt1": (1e-3, 0.1),
    "mt2": (0.1, 0.1),
    "mt3": (0.1, 0.1),
    "mt4": (1e-3, 1e-3),
    "mt5": (1e-3, 1e-3),
    "mt6": (1e-3, 1e-3),
}
PAPER_COUNTS = {
    "mt1": (6, 3, 1, 4),
    "mt2": (12, 8, 8, 11),
    "mt3": (12, 12, 10, 13),
    "mt4": (4, 1, 3, 4),
    "mt5": (6, 3, 7, 8),
    "mt6": (13, 11, 8, 11),
}
PAPER_STEPS = {
    "mt1": (1.4, 1.4, 10, 37),
    "mt2": (1.6, 1.6, 1.6, 1.6),
    "mt3": (1.0, 1.0, 1.0, 1.0),
    "mt4": (0.085, 0.10, 0.35, 0.83),
    "mt5": (0.075, 0.078, 0.073, 0.076),
    "mt6": (0.93, 0.93, 0.92, 0.92),
}
# The paper's tables end every search by the conditions, never by the interval's width: its
# xtol is taken tight here (the default 0.1 stops mt2, mt3 and mt6 early, in dcsrch too).
PAPER_XTOL = 1e-10
MT_NAMES = [fn.name for fn in MT_FUNCTIONS]
MT_CASES = [(name, t0) for name in MT_NAMES for t0 in MT_STARTS]


def paper_search(name: str) -> MoreThuente:
    ftol, gtol = PAPER_TOLERANCES[name]
    return MoreThuente(ftol=ftol, gtol=gtol, xtol=PAPER_XTOL)


def dcsrch(true_phi, ls: MoreThuente, t0: float):
    """scipy's dcsrch with the same settings: (trials, step or None, task)."""
    trials = []

    def phi(t):
        trials.append(float(t))
        return true_phi(t)[0]

    def dphi(t):
        return true_phi(t)[1]

    phi0, dphi0 = true_phi(0.0)
    search = DCSRCH(phi, dphi, ls.ftol, ls.gtol, ls.xtol, 0.0, ls.max_step_size)
    step, _, _, task = search(t0, phi0=phi0, derphi0=dphi0, maxiter=ls.max_trials)
    return np.asarray(trials), step, task


def check_more_thuente(run: Run, ls: MoreThuente, true_phi):
    """Success means strong Wolfe; any other step at least has sufficient decrease and is the
    trial with the lowest value among those with sufficient decrease."""
    check_contract(run, ls)
    if run.step > 0:
        decrease, curvature = check_point(run, run.n - 1, true_phi, ls.ftol, ls.gtol)
        assert decrease, f"accepted step {run.step} fails sufficient decrease"
        if run.success:
            assert curvature, f"step {run.step} reported as strong Wolfe fails curvature"
    if not run.success:
        # The last trial re-evaluates an earlier one when that one was the best.
        again = run.n > 1 and run.trials[-1] in run.trials[:-1]
        tried = run.trials[:-1] if again else run.trials
        clearly = [armijo_strictly(run, i, true_phi, ls.ftol) for i in range(len(tried))]
        if run.step > 0:
            lowest = np.min(run.values[: len(tried)][clearly], initial=np.inf)
            assert run.values[-1] <= lowest, (run.step, tried)
        else:
            assert not any(clearly), f"no step, but {tried[clearly]} had sufficient decrease"


def compare_with_dcsrch(run: Run, trials: np.ndarray, step, task: bytes, rtol: float):
    """Our trials are dcsrch's. Where dcsrch converges, we do too, at the same step after the
    same number of trials; where it warns, it has re-evaluated its best point as a last trial,
    and we stop at the same trial (re-evaluating our best point if it was not the last)."""
    if task.startswith(b"CONV"):
        assert run.success
        assert run.n == len(trials), (run.trials, trials)
        np.testing.assert_allclose(run.trials, trials, rtol=rtol)
        np.testing.assert_allclose(run.step, step, rtol=rtol)
    else:
        assert task.startswith(b"WARN"), task
        assert not run.success
        searched = len(trials) - 1
        np.testing.assert_allclose(run.trials[:searched], trials[:searched], rtol=rtol)
        assert run.n in (searched, searched + 1), (run.trials, trials)


# ------------------------------------------------------------------------------------------
# The Moré–Thuente test functions.


@pytest.mark.parametrize("name,t0", MT_CASES)
def test_paper_tables_and_scipy_dcsrch(name, t0):
    """Published tolerances, float64: strong Wolfe after exactly the published number of
    evaluations, at the published step, along the very trials of scipy's dcsrch."""
    fn, ls = FUNCTIONS_1D[name], paper_search(name)
    run = run_1d(ls, fn, t0, "float64")
    check_more_thuente(run, ls, fn.np)
    trials, step, task = dcsrch(fn.np, ls, t0)
    assert task.startswith(b"CONV"), task
    compare_with_dcsrch(run, trials, step, task, rtol=1e-6)
    k = MT_STARTS.index(t0)
    assert run.n == PAPER_COUNTS[name][k]
    assert float(f"{run.step:.2g}") == PAPER_STEPS[name][k]


@pytest.mark.parametrize("name,t0", MT_CASES)
def test_default_settings_follow_dcsrch(name, t0):
    """L-BFGS-B's settings (ftol 1e-3, gtol 0.9, xtol 0.1), float64: dcsrch's trials and
    outcome, including its xtol warnings (there we return the best sufficient-decrease point)."""
    fn = FUNCTIONS_1D[name]
    run = run_1d(DEFAULT, fn, t0, "float64")
    check_more_thuente(run, DEFAULT, fn.np)
    compare_with_dcsrch(run, *dcsrch(fn.np, DEFAULT, t0), rtol=1e-6)


@pytest.mark.parametrize("name,t0", MT_CASES)
def test_paper_tolerances_float32(name, t0):
    """In float32 the trials drift from float64's, but every search ends in strong Wolfe, except
    on mt2: its strong Wolfe set |t - 1.596| <= 2.5e-9 (eta = 0.1) is below float32 resolution
    at t = 1.6 (1.2e-7), so the search ends when its bracket can shrink no further, with the
    best sufficient-decrease point."""
    fn, ls = FUNCTIONS_1D[name], paper_search(name)
    run = run_1d(ls, fn, t0, "float32")
    check_more_thuente(run, ls, fn.np)
    if name == "mt2":
        assert not run.success and run.step > 0
        assert run.n < ls.judged_trials, "ended by its budget, not by the bracket"
    else:
        assert run.success, f"no strong Wolfe point after {run.n} trials; best step {run.step}"


# ------------------------------------------------------------------------------------------
# n-dimensional problems along random descent directions.


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ND_CASES)
def test_nd_random_descent_directions(name, dtype):
    """Rosenbrock n = 2..10, an SPD quadratic and logistic regression along steepest-descent,
    random descent and (quadratic) Newton directions, first trial 1: strong Wolfe; in float64
    along dcsrch's trials."""
    case = ND_CASES[name]
    run = run_nd(DEFAULT, name, dtype)
    true_phi = case.true_phi(dtype)
    check_more_thuente(run, DEFAULT, true_phi)
    assert run.success
    if dtype == "float64":
        compare_with_dcsrch(run, *dcsrch(true_phi, DEFAULT, 1.0), rtol=1e-6)


DEMANDING = MoreThuente(ftol=0.4, gtol=0.5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", [n for n in ND_CASES if n.endswith("random")])
def test_nd_demanding_tolerances(name, dtype):
    """A demanding sufficient-decrease test puts many trials near the sufficient-decrease line,
    where a wrong test shows: strong Wolfe at every success."""
    ls = DEMANDING
    run = run_nd(ls, name, dtype)
    check_more_thuente(run, ls, ND_CASES[name].true_phi(dtype))
    assert run.success


# ------------------------------------------------------------------------------------------
# Failures.


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", NONFINITE)
@pytest.mark.parametrize("t0", [1.0, 1e3])
def test_nonfinite_trials_are_backed_off_from(t0, name, dtype):
    """phi = t^2 - 2t for t < 0.5 and NaN / +inf (or a NaN slope) beyond: the first trial is
    non-finite; the search bisects towards 0 until it is finite again and accepts a finite
    strong Wolfe step."""
    fn = NONFINITE[name]
    run = run_1d(DEFAULT, fn, t0, dtype)
    check_more_thuente(run, DEFAULT, fn.np)
    finite = np.isfinite(run.values) & np.isfinite(run.slopes)
    assert not finite[0]
    assert np.all(run.trials[1:] < run.trials[0])
    assert run.success and 0 < run.step < 0.5
    assert np.isfinite(fn.np(run.step)).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", NONFINITE)
def test_fails_honestly_when_wolfe_points_are_all_nonfinite(name, dtype):
    """phi = t^2 - 2t with gtol = 0.1 (mt1's tolerances): the strong Wolfe set is [0.9, 1.1],
    all in the non-finite region t >= 0.5. From 1e-3 the search extrapolates into it, backs
    off, and fails with the finite sufficient-decrease step of lowest value."""
    fn = NONFINITE[name]
    ls = paper_search("mt1")
    run = run_1d(ls, fn, 1e-3, dtype)
    check_more_thuente(run, ls, fn.np)
    finite = np.isfinite(run.values) & np.isfinite(run.slopes)
    assert not np.all(finite), "never reached the non-finite region"
    assert not run.success
    assert 1e-3 <= run.step < 0.5
    assert run.values[-1] == np.min(run.values[finite])


OUT_OF_TRIALS_CASES = [*MT_CASES, ("quadratic", 1e3), ("steep", 1e3)]
_OUT_OF_TRIALS_FUNCTIONS = {**FUNCTIONS_1D, "steep": STEEP}


@pytest.mark.parametrize("max_steps", [1, 3])
@pytest.mark.parametrize("name,t0", OUT_OF_TRIALS_CASES)
def test_out_of_trials(name, t0, max_steps):
    """With too few trials the search follows the same trials as with enough, then returns the
    best sufficient-decrease step (re-evaluated last if need be) or no step, success False;
    when the full search needed no more trials, the same outcome. `max_steps` trials are
    judged, within a budget of `max_trials` = `max_steps + 1` evaluations."""
    fn = _OUT_OF_TRIALS_FUNCTIONS[name]
    ls = MoreThuente(max_trials=max_steps + 1)
    full = run_1d(DEFAULT, fn, t0, "float64")
    run = run_1d(ls, fn, t0, "float64")
    check_more_thuente(run, ls, fn.np)
    k = min(run.n, max_steps)
    np.testing.assert_array_equal(run.trials[:k], full.trials[:k])
    if full.n <= max_steps:
        assert (run.n, run.step, run.success) == (full.n, full.step, full.success)
    else:
        assert not run.success
        assert run.n in (max_steps, max_steps + 1)
        assert run.n == max_steps + (run.step > 0 and run.step != run.trials[max_steps - 1])


def test_out_of_trials_exercises_every_outcome():
    """The cases above cover no step, the last trial, and a re-evaluated earlier trial."""
    outcomes = set()
    for max_steps in (1, 3):
        ls = MoreThuente(max_trials=max_steps + 1)
        for name, t0 in OUT_OF_TRIALS_CASES:
            run = run_1d(ls, _OUT_OF_TRIALS_FUNCTIONS[name], t0, "float64")
            if run.success:
                outcomes.add("success")
            elif run.step == 0:
                outcomes.add("no step")
            else:
                outcomes.add("re-evaluated best" if run.n == max_steps + 1 else "last trial")
    assert outcomes >= {"no step", "last trial", "re-evaluated best"}, outcomes


@eqx.filter_jit
def _update(ls, search, t, phi, dphi):
    return ls.update(search, t, phi, dphi)


def _drive_by_hand(ls: MoreThuente, fn, t0: float, min_step: float):
    """Drive start/update by hand, with any resolution `min_step` (the driver of
    test_linesearch passes 0): the trials, and the final search record."""
    with precision("float64"):
        dtype = jnp.float64
        phi0, dphi0 = fn.np(0.0)
        search = ls.start(
            ls.init(dtype),
            cast(phi0, dtype),
            cast(dphi0, dtype),
            cast(t0, dtype),
            cast(min_step, dtype),
        )
        trials = []
        while not bool(search.done) and len(trials) < ls.max_trials:
            t = float(search.trial)
            trials.append(t)
            value, slope = fn.np(t)
            search = _update(ls, search, cast(t, dtype), cast(value, dtype), cast(slope, dtype))
        return trials, jax.device_get(search)


@pytest.mark.parametrize(
    "name,t0,min_step",
    [("nan_beyond", 1.0, 0.3), ("steep", 1e3, 5e-3), ("steep", 1e3, 0.05)],
)
def test_never_proposes_a_trial_below_min_step(name, t0, min_step):
    """NaN beyond 0.5 from t = 1: the trials 1, 0.5 fail and the next (0.25) lies below
    min_step = 0.3. -t + 1e6 t^4 from 1e3: the trials shrink about 6x per trial towards the
    sufficient-decrease region t <= 0.01, and the search would next try 0.0046. In each case
    the search gives up with no step, and its last proposal lies below min_step (the solver
    reads this as a stall at the line's resolution)."""
    fn = {**NONFINITE, "steep": STEEP}[name]
    trials, search = _drive_by_hand(DEFAULT, fn, t0, min_step)
    assert bool(search.done) and not bool(search.success)
    assert min(trials) >= min_step, trials
    assert float(search.step) == 0
    assert float(search.trial) < min_step


def test_max_step_size_reached():
    """phi = -t keeps falling: extrapolation reaches max_step_size, where dcsrch stops with a
    warning; the step there has sufficient decrease and is returned, success False."""
    ls = MoreThuente(max_step_size=100.0)
    trials, search = _drive_by_hand(ls, _Linear(), 1.0, 0.0)
    assert trials[-1] == 100.0 and len(trials) < ls.judged_trials, trials
    assert bool(search.done) and not bool(search.success)
    assert float(search.step) == 100.0


class _Linear:
    def np(self, t: float):
        return -t, -1.0


@pytest.mark.parametrize(
    "make,match",
    [
        pytest.param(lambda: MoreThuente(ftol=0.0), r"\bftol must", id="ftol=0"),
        pytest.param(lambda: MoreThuente(ftol=1.0, gtol=1.0), r"\bftol must", id="ftol=1"),
        pytest.param(lambda: MoreThuente(ftol=0.5, gtol=0.4), r"\bgtol must", id="gtol<ftol"),
        pytest.param(lambda: MoreThuente(gtol=1.0), r"\bgtol must", id="gtol=1"),
        pytest.param(lambda: MoreThuente(xtol=-1.0), r"\bxtol must", id="xtol<0"),
        pytest.param(lambda: MoreThuente(max_trials=0), r"\bmax_trials must", id="max_trials=0"),
        pytest.param(
            lambda: MoreThuente(max_step_size=0.0), r"\bmax_step_size must", id="max_step=0"
        ),
    ],
)
def test_constructor_validation(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_equal_tolerances_are_allowed():
    """The paper's own tests take ftol = gtol."""
    assert MoreThuente(ftol=0.1, gtol=0.1).gtol == 0.1


# ------------------------------------------------------------------------------------------
# Solver level: L-BFGS with this search against scipy's L-BFGS-B (which runs dcsrch).

_LOGISTIC_X, _LOGISTIC_Y = logistic_data()
SOLVER_PROBLEMS = {
    "rosenbrock2": (rosenbrock, np.array([-1.2, 1.0]), ()),
    "rosenbrock10": (rosenbrock, np.tile([-1.2, 1.0], 5), ()),
    "logistic": (logistic, np.zeros(10), (_LOGISTIC_X, _LOGISTIC_Y, np.asarray(1e-2))),
}


@pytest.mark.parametrize("name", SOLVER_PROBLEMS)
def test_lbfgs_evaluations_against_scipy_lbfgsb(name):
    """To gtol 1e-6 (ftol off on both sides), float64: converged, in at most 1.2x the
    evaluations of scipy's L-BFGS-B (same memory, same line-search settings)."""
    fn, x0, args = SOLVER_PROBLEMS[name]
    with jax.enable_x64(True):
        jargs = tuple(jnp.asarray(a) for a in args)
        reference = scipy_minimize(fn, x0, jargs, method="L-BFGS-B", gtol=1e-6, ftol=0.0)
        assert reference.success, reference.message
        solver = js.Solver(js.LBFGS(), MoreThuente(), gtol=1e-6, ftol=0.0)
        result = solver.run(fn, jnp.asarray(x0), *jargs)
        ours, theirs = int(result.num_fun_evals), int(reference.nfev)
        print(f"{name}: jaxsearch LBFGS+MoreThuente {ours} evaluations, scipy L-BFGS-B {theirs}")
        assert result.status == js.Status.CONVERGED_GTOL, result.status
        assert float(jnp.max(jnp.abs(result.grad))) <= 1e-6
        np.testing.assert_allclose(result.params, reference.x, atol=1e-4)
        assert ours <= 1.2 * theirs, (ours, theirs)
