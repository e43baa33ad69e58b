"""What every `AbstractLineSearch` must do, checked for each search in the registry
(`tests/helpers.py`): a new search is held to the contract by adding it there.

Each search is driven by hand on one-dimensional phi(t) in closed form, as the solver drives
it: `start`, then `update` at `trial` until `done`. The cap rules of `start` are checked in
detail in test_linesearch_cap.py; here: no trial above the cap or below the resolution.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js

from .helpers import SEARCHES
from .test_linesearch_cap import _start, _update

NAN = (math.nan, math.nan)


def quadratic(t):  # minimum at 2
    return (t - 2) ** 2 - 4, 2 * (t - 2)


def quartic(t):  # flat minimum at 0.3
    return (t - 0.3) ** 4 - 0.3**4, 4 * (t - 0.3) ** 3


def falling(t):  # no minimiser: a Wolfe point is where the slope has flattened
    return math.exp(-t), -math.exp(-t)


def nan_beyond_one(t):  # a quadratic with its minimum at 3, undefined beyond t = 1
    return quadratic(t / 1.5) if t <= 1 else NAN


def inf_beyond_half(t):
    return quadratic(t) if t <= 0.5 else (math.inf, math.inf)


def nowhere_finite(t):
    return quadratic(t) if t == 0 else NAN


PHIS = [quadratic, quartic, falling, nan_beyond_one, inf_beyond_half]


def avals(tree):
    return jax.tree.structure(tree), [
        (x.shape, x.dtype, getattr(x, "weak_type", False)) for x in jax.tree.leaves(tree)
    ]


def drive(ls, phi, dtype, guess=1.0, max_step=None, min_step=0.0):
    """One search: the trials, their (phi, phi') and the search's record after each update;
    checks that the record's structure and avals never change from `start` on."""

    def c(v):
        return jnp.asarray(np.asarray(v, np.float64).astype(dtype))

    phi0, dphi0 = phi(0.0)
    cap = None if max_step is None else c(max_step)
    search = _start(ls, ls.init(dtype), c(phi0), c(dphi0), c(guess), c(min_step), cap)
    started = avals(search)
    trials, values = [], []
    while not bool(search.done):
        assert len(trials) < ls.max_trials, f"no end within the budget of {ls.max_trials}"
        t = search.trial
        trials.append(t)
        values.append(phi(float(t)))
        search = _update(ls, search, t, c(values[-1][0]), c(values[-1][1]))
        assert avals(search) == started, "the search's record changed structure or avals"
    return trials, values, search


def check_contract(ls, phi, dtype, **options):
    trials, values, search = drive(ls, phi, dtype, **options)
    step = float(search.step)
    assert step >= 0 and bool(search.success) <= (step > 0)
    if step > 0:
        # The last trial is the step: the solver keeps that evaluation as the new iterate.
        assert trials[-1] == search.step
        value, slope = values[-1]
        assert math.isfinite(value) and math.isfinite(slope), "a non-finite trial was taken"
        if ls.monotone:
            assert value <= phi(0.0)[0]
    assert all(t > 0 and math.isfinite(float(t)) for t in trials)
    return trials, search


@pytest.mark.parametrize("phi", PHIS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("name", list(SEARCHES))
def test_contract_float32(name, phi):
    trials, search = check_contract(SEARCHES[name](), phi, jnp.float32)
    if name != "FixedStep":  # every other search finds a step on these lines
        assert float(search.step) > 0 and bool(search.success)


@pytest.mark.parametrize("name", list(SEARCHES))
def test_contract_float64(name):
    with jax.enable_x64(True):
        for phi in PHIS:
            check_contract(SEARCHES[name](), phi, jnp.float64)


@pytest.mark.parametrize("name", list(SEARCHES))
def test_nowhere_finite_ends_within_budget_with_no_step(name):
    _, search = check_contract(SEARCHES[name](), nowhere_finite, jnp.float32, guess=4.0)
    assert float(search.step) == 0 and not bool(search.success)


@pytest.mark.parametrize("name", list(SEARCHES))
def test_no_trial_above_the_cap_nor_below_the_resolution(name):
    ls = SEARCHES[name]()
    for phi in PHIS:
        trials, _ = check_contract(ls, phi, jnp.float32, guess=5.0, max_step=0.75)
        assert all(float(t) <= 0.75 for t in trials), trials
        trials, _ = check_contract(ls, phi, jnp.float32, guess=5.0, min_step=1e-2)
        assert all(float(t) >= 1e-2 for t in trials), trials
    # A cap below the resolution: no trial at all, no step.
    trials, search = check_contract(ls, quadratic, jnp.float32, max_step=1e-3, min_step=1e-2)
    assert trials == [] and float(search.step) == 0


class _TakeFirst(js.FixedStep):
    """A broken search: it takes its first trial whatever phi is there."""

    def update(self, search, t, phi, dphi):
        search = super().update(search, t, phi, dphi)
        return eqx.tree_at(lambda s: (s.step, s.success), search, (t, jnp.array(True)))


def test_the_contract_catches_a_search_that_takes_a_non_finite_trial():
    with pytest.raises(AssertionError, match="non-finite trial was taken"):
        check_contract(_TakeFirst(1.0), nowhere_finite, jnp.float32)


def test_the_contract_catches_a_search_that_never_ends():
    from .test_step_limits import Endless

    with pytest.raises(AssertionError, match="no end within the budget"):
        check_contract(Endless(), quadratic, jnp.float32)
