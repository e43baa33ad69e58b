"""The objective is traced once per compile, in `run` and in a jitted `step`."""

import equinox as eqx
import jax.numpy as jnp
import pytest

import jaxsearch as js

from ..helpers import solver

# A subset of the registry (tests/helpers.py); FixedStep with L-BFGS too: tracing is the same.
DIRECTION_NAMES = ["Gradient", "LBFGS"]
SEARCH_NAMES = ["Zoom", "Backtracking", "FixedStep"]


def counting_objective(counter):
    """A new function object (so nothing is cached for it) that counts its traces."""

    def fn(x, data):
        counter.append(1)
        return jnp.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (data - x[:-1]) ** 2)

    return fn


@pytest.mark.parametrize("search", SEARCH_NAMES)
@pytest.mark.parametrize("direction", DIRECTION_NAMES)
def test_fn_traced_once(direction, search):
    method = solver(direction, search, max_steps=10)
    x0, data = jnp.array([-1.2, 1.0]), jnp.array([1.0])

    traces = []
    method.run(counting_objective(traces), x0, data)
    assert len(traces) == 1

    traces = []
    fn = counting_objective(traces)

    @eqx.filter_jit
    def train_step(params, state, data):
        return method.step(fn, params, state, data)

    params, state = x0, method.init(x0)
    for _ in range(3):
        params, state = train_step(params, state, data)
    assert len(traces) == 1


def test_traced_once_with_aux_and_module_params():
    traces = []

    def fn(params, scale):
        traces.append(1)
        value = jnp.sum((params["w"] - scale) ** 2)
        return value, {"value_twice": 2 * value, "name_length": len(params["name"])}

    solver = js.Solver(has_aux=True)
    params = {"w": jnp.zeros(3), "name": "weights"}
    result = solver.run(fn, params, jnp.array(2.0))
    assert len(traces) == 1
    assert result.params["name"] == "weights"
    assert float(result.aux["value_twice"]) == pytest.approx(2 * float(result.value))
    assert result.aux["name_length"] == 7
