"""A dynamic cap on the step of one search: `start(..., max_step=...)`, as L-BFGS-B passes
`stpmax` (the distance to the edge of the feasible box) to Moré–Thuente's dcsrch.

Every search is driven by hand on one-dimensional phi(t) given in closed form (numpy float64,
cast to the search's dtype), with `start` and `update` compiled once per configuration and
dtype, and the cap passed as an array, so it is traced.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js

SEARCHES = {
    "zoom": js.Zoom(),
    "more-thuente": js.MoreThuente(),
    "hager-zhang": js.HagerZhang(),
    "backtracking": js.Backtracking(),
    "fixed": js.FixedStep(5.0),
}
# Hager–Zhang from a state: after a step of 50 (QuadStep first, at psi1 * 50 = 5), and in
# approximate Wolfe mode.
HZ_STATES = {
    "hager-zhang-quad": lambda s: eqx.tree_at(lambda s: s.prev_step, s, s.prev_step + 50),
    "hager-zhang-approx": lambda s: eqx.tree_at(lambda s: s.approx, s, jnp.array(True)),
}
CONFIGS = [*SEARCHES, *HZ_STATES]
SEARCHING = [name for name in CONFIGS if name != "fixed"]


def _ls(config):
    """The search of a configuration's name, or the search itself."""
    if isinstance(config, js.AbstractLineSearch):
        return config
    return SEARCHES["hager-zhang" if config in HZ_STATES else config]


def _c1(ls) -> float:
    return {js.MoreThuente: "ftol", js.HagerZhang: "delta"}.get(type(ls), "c1")


@eqx.filter_jit
def _start(ls, state, phi0, dphi0, guess, min_step, max_step):
    return ls.start(state, phi0, dphi0, guess, min_step, max_step=max_step)


@eqx.filter_jit
def _update(ls, search, t, phi, dphi):
    return ls.update(search, t, phi, dphi)


def drive(config, f, guess, max_step, dtype="float64", min_step=0.0):
    """One search on phi = f (float64 (phi, phi') from t): (trials, final search record)."""
    ls = _ls(config)
    dtype = jnp.dtype(dtype)

    def c(v):
        return jnp.asarray(np.asarray(v, np.float64).astype(dtype))

    state = ls.init(dtype)
    if isinstance(config, str) and config in HZ_STATES:
        state = HZ_STATES[config](state)
    phi0, dphi0 = f(0.0)
    cap = None if max_step is None else c(max_step)
    search = _start(ls, state, c(phi0), c(dphi0), c(guess), c(min_step), cap)
    trials = []
    while not bool(search.done):
        assert len(trials) <= getattr(ls, "max_trials", 1) + 1, trials
        t = search.trial
        trials.append(float(t))
        value, slope = f(float(t))
        search = _update(ls, search, t, c(value), c(slope))
    if max_step is not None:  # (a) no trial ever exceeds the cap
        assert all(t <= float(c(max_step)) for t in trials), (trials, max_step)
    return trials, jax.device_get(search)


def linear(t):
    return -t, -1.0


def quadratic_far(t):  # (t - 100)^2 - 100^2: decreasing on [0, 100]
    return (t - 100) ** 2 - 100**2, 2 * (t - 100)


def quadratic(t):  # (t - 1)^2 - 1: minimiser 1, back to phi(0) = 0 at t = 2
    return (t - 1) ** 2 - 1, 2 * (t - 1)


def wave(t):  # -sin(2 pi t) / (2 pi): minimiser 1/4; phi > 0 with phi' < 0 just below t = 1
    return -math.sin(2 * math.pi * t) / (2 * math.pi), -math.cos(2 * math.pi * t)


def wave_high(t):  # 1000 + wave: at t = 0.9999, phi - phi(0) = 1e-4, within 1e-6 |phi(0)|
    value, slope = wave(t)
    return 1000 + value, slope


def mt1(t):  # Moré & Thuente's function 1, beta = 2
    return -t / (t * t + 2), (t * t - 2) / (t * t + 2) ** 2


def quartic(t):  # (t - 0.7)^4 + t: minimiser 0.7 - 4^(-1/3) = 0.07
    return (t - 0.7) ** 4 + t - 0.7**4, 4 * (t - 0.7) ** 3 + 1


def _armijo(f, t, c1) -> bool:
    phi0, dphi0 = f(0.0)
    return f(t)[0] <= phi0 + c1 * t * dphi0


# --------------------------------------------------------------------------------------------
# (b) f falls all the way to the cap: the search ends there, successfully.


@pytest.mark.parametrize("f", [linear, quadratic_far], ids=lambda f: f.__name__)
@pytest.mark.parametrize("name", CONFIGS)
def test_falling_to_the_cap_ends_at_the_cap(name, f):
    with jax.enable_x64(True):
        guesses = [10.0, 1.0] if name != "backtracking" else [10.0, 3.0]  # never grows
        for guess in guesses:
            trials, search = drive(name, f, guess, 3.0)
            assert float(search.step) == 3.0 and bool(search.success), (guess, trials)
            assert bool(search.done) and trials[-1] == 3.0
            if guess >= 3.0 or name == "hager-zhang-quad":
                assert trials == [3.0]  # the first trial is min(guess, cap)


def test_falling_to_the_cap_float32():
    """The cap 0.3 is not a float32: the step is the float32 cap, exactly."""
    cap32 = float(np.float32(0.3))
    for name in CONFIGS:
        for guess in [1.0, 0.1]:
            if name == "backtracking" and guess < 0.3:
                continue
            trials, search = drive(name, linear, guess, 0.3, "float32")
            assert search.step.dtype == np.float32
            assert float(search.step) == cap32 and bool(search.success), (name, guess, trials)
            assert float(search.max_step) == cap32


def test_fixed_step_is_capped():
    with jax.enable_x64(True):
        for cap, expected in [(0.2, 0.2), (5.0, 5.0), (7.0, 5.0), (np.inf, 5.0)]:
            trials, search = drive("fixed", quadratic, 1.0, cap)
            assert trials == [expected] and float(search.step) == expected
            assert bool(search.success)


# --------------------------------------------------------------------------------------------
# (c) A cap above every trial the uncapped search makes changes nothing.


@pytest.mark.parametrize("f", [quadratic, mt1, quartic, wave], ids=lambda f: f.__name__)
@pytest.mark.parametrize("name", CONFIGS)
def test_a_cap_above_all_trials_changes_nothing(name, f):
    with jax.enable_x64(True):
        for guess in [1e-3, 0.5, 10.0]:
            trials, search = drive(name, f, guess, None)
            cap = 4 * max(trials)
            capped_trials, capped = drive(name, f, guess, cap)
            assert capped_trials == trials, (guess, cap)
            assert float(capped.step) == float(search.step)
            assert bool(capped.success) == bool(search.success)
            static = _ls(name).max_step_size  # FixedStep's: the learning rate
            assert float(capped.max_step) == min(cap, static)
            assert float(search.max_step) == static


# --------------------------------------------------------------------------------------------
# (d) No sufficient decrease at the cap: the search goes on inside [0, cap].


@pytest.mark.parametrize(
    "f,cap",
    [(quadratic, 2.5), (wave, 0.95), (wave_high, 0.9999)],
    ids=["rising", "falling", "falling-within-epsilon"],
)
@pytest.mark.parametrize("name", SEARCHING)
def test_no_sufficient_decrease_at_the_cap(name, f, cap):
    """At the cap: phi(2.5) = 1.25 > phi(0) with phi' > 0; phi(0.95) > phi(0) with phi' < 0;
    phi(0.9999) - phi(0) = 1e-4 with phi' < 0, where Hager–Zhang's B1 would take a lower end
    and expand. In approximate mode Hager–Zhang accepts the last (T2's first half holds)."""
    ls = _ls(name)
    with jax.enable_x64(True):
        trials, search = drive(name, f, 10.0, cap)
        assert trials[0] == cap
        step = float(search.step)
        if name == "hager-zhang-approx" and f is wave_high:
            assert step == cap and bool(search.success)
            return
        assert 0 < step < cap, trials
        assert _armijo(f, step, getattr(ls, _c1(ls))), (step, trials)
        if name != "backtracking":
            assert bool(search.success), trials  # a Wolfe point inside
            assert abs(f(step)[1]) < 0.9 * abs(f(0.0)[1]) or name.startswith("hager")


# --------------------------------------------------------------------------------------------
# (e) max_step=None: exactly the search without a cap; a cap >= max_step_size is none.


@pytest.mark.parametrize("name", CONFIGS)
def test_no_binding_cap_is_no_cap(name):
    with jax.enable_x64(True):
        ls = _ls(name)
        for f in [linear, quadratic, wave, mt1]:
            for guess in [1e-3, 0.4, 10.0]:
                runs = [
                    drive(name, f, guess, cap)
                    for cap in [None, np.inf, ls.max_step_size, 3 * ls.max_step_size]
                ]
                trials, search = runs[0]
                for other_trials, other in runs[1:]:
                    assert other_trials == trials
                    for a, b in zip(jax.tree.leaves(search), jax.tree.leaves(other), strict=True):
                        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("make", [js.Zoom, js.MoreThuente, js.HagerZhang])
def test_static_cap_keeps_its_own_rules(make):
    """phi = -t against max_step_size = 100: the searches fail there as before (success False,
    step 100) whether max_step is None or any value >= 100; a dynamic cap of 99 is a success."""
    ls = make(max_step_size=100.0)
    with jax.enable_x64(True):
        for cap in [None, 100.0, 1e3]:
            trials, search = drive(ls, linear, 1.0, cap)
            assert float(search.step) == 100.0 and not bool(search.success), trials
        trials, search = drive(ls, linear, 1.0, 99.0)
        assert float(search.step) == 99.0 and bool(search.success), trials


# --------------------------------------------------------------------------------------------
# A cap no step can use.


@pytest.mark.parametrize("name", CONFIGS)
def test_cap_below_resolution_ends_at_once(name):
    with jax.enable_x64(True):
        for cap, min_step in [(1e-3, 1e-2), (0.0, 0.0), (np.nan, 0.0)]:
            trials, search = drive(name, linear, 1.0, cap, min_step=min_step)
            assert trials == [] and bool(search.done), cap
            assert float(search.step) == 0 and not bool(search.success)
        # At the resolution itself the cap is usable.
        trials, search = drive(name, linear, 1.0, 1e-2, min_step=1e-2)
        assert trials == [1e-2] and float(search.step) == 1e-2


def rising_steeply(t):  # 0.97 t^2 - t: Armijo holds at t = 1, where phi' = 0.94 > 0.9 |phi'(0)|
    return 0.97 * t * t - t, 1.94 * t - 1


@pytest.mark.parametrize("name", ["zoom", "more-thuente"])
def test_cap_with_decrease_but_rising_is_not_taken(name):
    """dcsrch stops at stpmax only while f still falls steeply there (phi'(cap) <= c1 phi'(0));
    here the slope at the cap is positive and too steep for strong Wolfe, so the strong Wolfe
    searches look inside [0, cap] and find a lower point."""
    with jax.enable_x64(True):
        trials, search = drive(name, rising_steeply, 10.0, 1.0)
        assert trials[0] == 1.0 and bool(search.success), trials
        step = float(search.step)
        assert 0 < step < 1.0 and rising_steeply(step)[0] < rising_steeply(1.0)[0], trials


@pytest.mark.parametrize("make", [js.Zoom, js.MoreThuente, js.HagerZhang, js.Backtracking])
def test_static_cap_is_honoured_as_a_dynamic_one(make):
    """With no dynamic cap, `max_step_size` below the line's resolution `min_step` ends the
    search at once, with no trial (none above the cap) and no step, as a dynamic cap does;
    a usable `max_step_size` is never exceeded."""
    ls = make(max_step_size=1e-3)
    with jax.enable_x64(True):
        trials, search = drive(ls, linear, 1.0, None, min_step=1e-2)
        assert trials == [] and bool(search.done), trials
        assert float(search.step) == 0 and not bool(search.success)
        for f in [linear, quadratic, wave]:
            trials, search = drive(ls, f, 1.0, None, min_step=1e-6)
            assert trials and max(trials) <= 1e-3, trials


def test_default_cap_is_none():
    """No static cap by default, so that scaling f (and with it d) changes no iterate."""
    for ls in [js.Zoom(), js.MoreThuente(), js.HagerZhang(), js.Backtracking()]:
        assert ls.max_step_size == math.inf
