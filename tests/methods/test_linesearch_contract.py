"""What every `AbstractLineSearch` must do, checked by the public kit
(`jaxsearch.testing.check_line_search`) for each search in the registry (`tests/helpers.py`):
a new search is held to the contract by adding it there. The kit itself is tested here on
searches broken on purpose, each caught with the message that names its flaw.

The cap rules of `start` are checked in detail in test_linesearch_cap.py.
"""

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
import pytest

import jaxsearch as js
import jaxsearch.internal as jsi
from jaxsearch.testing import LINES, check_line_search, drive

from ..helpers import SEARCHES, Endless


@pytest.mark.parametrize("name", list(SEARCHES))
def test_every_search_passes_the_kit(name):
    check_line_search(SEARCHES[name]())


@pytest.mark.parametrize("name", [n for n in SEARCHES if n != "FixedStep"])
def test_every_search_with_a_decrease_test_finds_a_step_on_the_kits_lines(name):
    search = SEARCHES[name]()
    for phi in LINES:
        _, _, record = drive(search, phi, jnp.float32)
        assert float(record.step) > 0 and bool(record.success), phi.__name__


class _Halving(js.AbstractLineSearch):
    """Armijo backtracking by halving, written with the public toolkit only; `flaw` breaks
    it on purpose in one way for the kit's tests (None: sound)."""

    flaw: str | None = eqx.field(static=True, default=None)
    max_step_size: float = float("inf")
    max_trials: int = eqx.field(static=True, default=20)
    evaluates_each_step: ClassVar[bool] = False
    monotone: ClassVar[bool] = True

    def allowance(self, state):
        return 0.0

    def init(self, dtype):
        return None

    def start(self, state, phi0, dphi0, guess, min_step, scaled=None, max_step=None):
        cap = jsi.search_cap(self.max_step_size, max_step, phi0.dtype)
        if self.flaw == "cap":
            cap = jnp.full((), jnp.inf, phi0.dtype)  # ignores the dynamic cap
        return _HalvingState(**jsi.capped_start(guess, min_step, cap), phi0=phi0, dphi0=dphi0)

    def update(self, search, t, phi, dphi):
        ok = jnp.isfinite(phi) & jnp.isfinite(dphi) & (phi <= search.phi0 + 1e-4 * t * search.dphi0)
        if self.flaw == "nan":
            ok = ok | ~jnp.isfinite(phi)  # takes a non-finite trial
        give_up = (search.num_trials + 1 >= self.max_trials) | (t / 2 < search.min_step)
        if self.flaw == "budget":
            give_up = jnp.array(False)  # halves for ever
        trial = jnp.where(ok, t, t / 2)
        done = ok | give_up
        if self.flaw in ("uncapped", "uncapped-static"):  # doubles while phi falls, unclipped
            below = t < search.max_step  # stops growing at the cap, past it by then
            if self.flaw == "uncapped-static":  # grows only where no dynamic cap binds
                below = below & (search.max_step >= self.max_step_size)
            grow = ok & (dphi < 0) & below & ~give_up
            trial, done = jnp.where(grow, 2 * t, trial), done & ~grow
        search = jsi.after_trial(
            search, trial=trial, done=done, step=jnp.where(ok, t, 0), success=ok
        )
        if self.flaw == "dtype":  # the state's dtype changes
            search = eqx.tree_at(lambda s: s.trial, search, trial.astype(jnp.float16))
        return search

    def finish(self, state, search):
        return None


class _HalvingState(jsi.SearchState):
    phi0: jnp.ndarray
    dphi0: jnp.ndarray


def test_the_kit_passes_a_sound_search_written_from_public_names():
    check_line_search(_Halving())


@pytest.mark.parametrize(
    "flaw, message",
    [
        ("nan", "a non-finite trial was accepted"),
        ("cap", r"cap rules: trial \d+, t = .* lies outside"),
        ("budget", "trial budget: the search did not end within max_trials = 20"),
        (
            "dtype",
            r"state structure \(float32\): _Halving.update: the search state's field \.trial "
            r"is float16\[\] where the search state it replaces has float32\[\]",
        ),
    ],
)
def test_the_kit_catches_a_broken_search(flaw, message):
    with pytest.raises(AssertionError, match=message):
        check_line_search(_Halving(flaw=flaw))


def test_the_kit_catches_a_search_that_grows_its_trials_past_the_cap():
    """Issue 50: a search that doubles its trial while phi falls, unclipped, passes where every
    search starts at its cap; the kit starts some below it, under a dynamic cap and a static
    one, and names the class and the trial."""
    with pytest.raises(AssertionError) as caught:
        check_line_search(_Halving(flaw="uncapped"))
    message = str(caught.value)
    assert len(message) < 800
    assert message.startswith("_Halving (float32): cap rules: trial 3, t = ")
    assert "lies outside [min_step, cap]" in message


def test_the_kit_checks_the_static_cap_below_the_first_guess():
    """The same search with the dynamic cap clipped but not the static one: caught by the
    searches the kit builds with a smaller `max_step_size`."""
    with pytest.raises(AssertionError, match=r"cap rules: trial \d+, .*max_step_size = 0\.5, "):
        check_line_search(_Halving(flaw="uncapped-static"))


def test_the_kit_catches_a_search_that_never_ends():
    with pytest.raises(AssertionError, match="trial budget"):
        check_line_search(Endless())
