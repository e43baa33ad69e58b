"""The base of the sufficient-decrease searches (`_linesearch/_decrease.py`): the settings
it checks, the trial budget, `monotone`, and the best-point fallback `end_on_best`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js
import jaxsearch.internal as jsi
from jaxsearch._linesearch._decrease import AbstractDecreaseSearch
from jaxsearch.testing import LINES as PHIS, drive

from ..helpers import SEARCHES as REGISTRY, search_classes

# The registry's searches (tests/helpers.py) built on the base, by class: the tests below
# build each with settings of their own.
SEARCHES = search_classes(AbstractDecreaseSearch)
# The registry's searches without it: FixedStep has no decrease test, NonmonotoneArmijo
# tests against a reference value of its own and has no best-point fallback.
WITHOUT_THE_BASE = {"FixedStep", "NonmonotoneArmijo"}


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_sufficient_decrease_search_has_the_base(name):
    assert isinstance(REGISTRY[name](), AbstractDecreaseSearch) == (name not in WITHOUT_THE_BASE)


@pytest.mark.parametrize("name", list(SEARCHES))
@pytest.mark.parametrize(
    "setting, value, rule",
    [
        ("max_trials", 0, "max_trials must be an integer >= 1"),
        ("max_step_size", 0.0, "max_step_size must be positive"),
        ("max_step_size", -1.0, "max_step_size must be positive"),
        ("epsilon", -1e-3, "epsilon must be None or >= 0"),
    ],
)
def test_the_base_checks_the_shared_settings(name, setting, value, rule):
    with pytest.raises(ValueError, match=f"{name}: {rule}"):
        SEARCHES[name](**{setting: value})


@pytest.mark.parametrize("max_trials", [1, 2, 3, 5])
@pytest.mark.parametrize("name", list(SEARCHES))
def test_max_trials_is_the_evaluations_a_search_may_use(name, max_trials):
    """`max_trials=k`: no search evaluates phi more than k times (`drive` asserts it), the
    re-evaluation of a failed search's best trial included, and searches far from their
    step judge all the trials they may. A search that re-evaluates its best trial judges
    k - 1 trials (one for k = 1) and keeps the k-th evaluation for that (the out-of-trials
    tests of each search check that it takes it); it is never needed after a single trial
    (that trial is the best, or there is none), so k = 2 evaluates at most once."""
    search = SEARCHES[name](max_trials=max_trials)
    guesses = (1e3, 1e-3, 0.5)
    used = [len(drive(search, phi, jnp.float32, guess=g)[0]) for phi in PHIS for g in guesses]
    judged = max(max_trials - 1, 1) if search.refines_best else max_trials
    assert search.judged_trials == judged
    assert judged <= max(used) <= max_trials, used  # (drive checks every search)


@pytest.mark.parametrize("name", list(SEARCHES))
def test_max_steps_is_deprecated_for_max_trials(name):
    """The old keyword keeps the old budget: max_steps trials judged, and for a search that
    re-evaluates its best trial (all but the backtracking ones) one evaluation more."""
    with pytest.warns(DeprecationWarning, match=rf"{name}\(max_steps=7\).*max_trials="):
        search = SEARCHES[name](max_steps=7)
    refines = "Backtracking" not in name and name != "StochasticArmijo"
    assert search.max_trials == 7 + refines
    assert search == SEARCHES[name](max_trials=7 + refines)
    assert search.judged_trials == 7
    with pytest.raises(TypeError, match="max_trials only"):
        SEARCHES[name](max_steps=7, max_trials=8)


def test_zoom_max_steps_25_is_the_default_budget():
    with pytest.warns(DeprecationWarning):
        assert js.Zoom(max_steps=25) == js.Zoom()
    assert js.Zoom().max_trials == 26


def test_the_adjoint_s_cg_steps_are_max_cg_steps():
    with pytest.warns(DeprecationWarning, match=r"ImplicitAdjoint\(max_cg_steps=4\)"):
        adjoint = js.ImplicitAdjoint(max_steps=4)
    assert adjoint == js.ImplicitAdjoint(max_cg_steps=4)


@pytest.mark.parametrize("name", list(SEARCHES))
def test_monotone_exactly_without_a_rounding_allowance(name):
    assert SEARCHES[name](epsilon=0).monotone
    assert not SEARCHES[name]().monotone
    assert not SEARCHES[name](epsilon=1e-6).monotone


def rising_within_rounding(t):
    """The value creeps up by far less than float32's allowance while the slope says f falls
    until t = 1: a change lost in rounding, which the slope tests may accept."""
    return 1.0 + 1e-5 * t, -1e-3 * (1.0 - t)


def accepted_rise(ls, phi, dtype) -> float:
    """phi(step) - phi(0) in `dtype` (as the search saw them) after a search on `phi`
    (0 without a step)."""
    trials, values, search = drive(ls, phi, dtype)
    if float(search.step) == 0:
        return 0.0
    assert trials[-1] == search.step
    seen = np.asarray([values[-1][0], phi(0.0)[0]]).astype(dtype)
    return float(seen[0]) - float(seen[1])


@pytest.mark.parametrize("name", list(SEARCHES))
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_a_search_without_allowance_never_accepts_a_rise(name, dtype):
    """`monotone` is a promise the solver relies on (it then keeps no separate best point):
    with epsilon = 0 no accepted step raises phi, on every line of the contract and on one
    whose rise is lost in rounding (where the default allowance accepts a rise)."""
    with jax.enable_x64(dtype == jnp.float64):
        for phi in [*PHIS, rising_within_rounding]:
            assert accepted_rise(SEARCHES[name](epsilon=0), phi, dtype) <= 0, phi.__name__


def test_the_default_allowance_accepts_a_rise_lost_in_rounding():
    """The line above does tell the two apart: with the default allowance Hager-Zhang's
    approximate Wolfe test takes a step whose value is above phi(0)."""
    assert accepted_rise(js.HagerZhang(), rising_within_rounding, jnp.float32) > 0


def _settle(accept=False, fail=False, refining=False, best=0.0, t=1.0, finite=True, nxt=0.5):
    b = jnp.asarray
    done, taken, refine, trial = jsi.end_on_best(
        b(accept), b(fail), b(refining), b(best), b(t), b(finite), b(nxt)
    )
    return bool(done), bool(taken), bool(refine), float(trial)


def test_settle_accepts_and_goes_on():
    assert _settle(accept=True) == (True, True, False, 0.5)
    assert _settle() == (False, False, False, 0.5)  # neither: the next trial


def test_settle_ends_a_failed_search_on_its_best_trial():
    assert _settle(fail=True, best=1.0, t=1.0) == (True, True, False, 0.5)  # best is this trial
    assert _settle(fail=True, best=0.25, t=1.0) == (False, False, True, 0.25)  # evaluate it again
    assert _settle(fail=True, best=0.0) == (True, False, False, 0.5)  # none: no step


def test_settle_takes_a_re_evaluated_best_only_where_finite():
    assert _settle(refining=True, t=0.25) == (True, True, False, 0.25)
    assert _settle(refining=True, t=0.25, finite=False) == (True, False, False, 0.25)
