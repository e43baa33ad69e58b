"""A method that breaks its contract in what it returns (a weakly typed field, a vector where a
scalar is due, a field that changes dtype) is refused while the solver traces it, with a
TypeError of a few lines that names the class, the member and the field (`jaxsearch/_contract.py`)
rather than JAX's error about the engine's loop; and the checks cost the program nothing."""

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

import jaxsearch as js
import jaxsearch.internal as jsi
from jaxsearch import _engine, _transitions
from jaxsearch._linesearch import _initial

from ..problems import rosenbrock
from ..program_inspection import run_jaxpr


class _State(jsi.SearchState):
    phi0: jax.Array
    dphi0: jax.Array
    best: jax.Array


class _Halving(js.AbstractLineSearch):
    """Armijo backtracking by halving, from public names; `flaw` breaks one field's dtype."""

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
        best = jnp.asarray(0.0) if self.flaw == "weak" else jnp.zeros((), phi0.dtype)
        return _State(**jsi.capped_start(guess, min_step, cap), phi0=phi0, dphi0=dphi0, best=best)

    def update(self, search, t, phi, dphi):
        ok = jnp.isfinite(phi) & jnp.isfinite(dphi) & (phi <= search.phi0 + 1e-4 * t * search.dphi0)
        give_up = (search.num_trials + 1 >= self.max_trials) | (t / 2 < search.min_step)
        best = jnp.where(ok, t, search.best)
        if self.flaw == "float16":
            best = best.astype(jnp.float16)
        return jsi.after_trial(
            search,
            trial=jnp.where(ok, t, t / 2),
            done=ok | give_up,
            step=jnp.where(ok, t, 0),
            success=ok,
            best=best,
        )

    def finish(self, state, search):
        return None


class _VectorRule(js.AbstractInitialStep):
    """A first trial per parameter: a vector where the contract asks for a scalar."""

    def init(self, dtype):
        return ()

    def first_trial(self, state, info):
        return jnp.ones((3,), info.dtype)

    def update(self, state, step, slope, moved):
        return state


class _Count(js.AbstractInitialStep):
    """t = 1, counting the searches in its state; `flaw` "int64" widens the count."""

    flaw: str | None = eqx.field(static=True, default=None)

    def init(self, dtype):
        return {"searches": jnp.zeros((), jnp.int32)}

    def first_trial(self, state, info):
        return jnp.ones((), info.dtype)

    def update(self, state, step, slope, moved):
        return {"searches": (state["searches"] + 1).astype(jnp.float32)}


X0 = jnp.array([-1.2, 1.0, 0.5])


def _refused(solver, *fields):
    with pytest.raises(TypeError) as caught:
        solver.run(rosenbrock, X0)
    message = str(caught.value)
    assert len(message) < 800, message
    for field in fields:
        assert field in message, message
    return message


def test_a_weakly_typed_field_of_a_search_state_is_refused_naming_it():
    message = _refused(js.Solver(js.LBFGS(), _Halving(flaw="weak")), "_Halving.start", ".best")
    assert "weakly typed" in message


def test_a_field_whose_dtype_changes_in_update_is_refused_naming_it():
    message = _refused(js.Solver(js.LBFGS(), _Halving(flaw="float16")), "_Halving.update", ".best")
    assert "float16[]" in message and "float32[]" in message


def test_a_rule_that_returns_a_vector_is_refused():
    solver = js.Solver(js.LBFGS(), js.Zoom(), initial_step=_VectorRule())
    message = _refused(solver, "_VectorRule.first_trial", "float32[3]")
    assert "0-d" in message


def test_a_rule_whose_state_changes_dtype_is_refused_naming_the_field():
    solver = js.Solver(js.LBFGS(), js.Zoom(), initial_step=_Count())
    _refused(solver, "_Count.update", "['searches']", "float32[]", "int32[]")


class _Half(js.AbstractMemorylessDirection):
    """Steepest descent in float16 whatever the params' dtype: a d unlike the gradient."""

    supports_bounds: ClassVar[bool] = False

    def init(self, params, dtype):
        return None

    def compute(self, state, info):
        d = jax.tree.map(lambda g: -g.astype(jnp.float16), info.grad)
        return d, jnp.array(False), state, jnp.full((), jnp.inf, info.dtype)


def test_a_direction_unlike_the_gradient_is_refused_naming_the_leaf():
    solver = js.Solver(_Half(), js.Zoom())
    _refused(solver, "_Half.compute", "d's field", "float16[3]", "float32[3]")


def test_the_sound_search_runs():
    result = js.Solver(js.LBFGS(), _Halving(), max_steps=200).run(rosenbrock, X0)
    assert bool(result.value < 1e-6)


def test_the_checks_add_nothing_to_the_program(monkeypatch):
    """The jaxpr of a run is the same to the letter with the checks and without."""
    solver = js.Solver(js.LBFGS(), js.HagerZhang())
    checked = str(run_jaxpr(solver))
    calls = []
    where = {
        "remembered": _engine,
        "searched": _engine,
        "computed": _transitions,
        "ended": _transitions,
        "search_started": _transitions,
        "scalar_of": _initial,
    }
    names = tuple(name for name in where if name != "scalar_of")
    for name, module in where.items():
        monkeypatch.setattr(module, name, lambda *args, name=name: calls.append(name))
    js.clear_caches()  # trace the run anew
    jax.clear_caches()
    assert str(run_jaxpr(solver)) == checked
    assert set(calls) == {*names, "scalar_of"}
