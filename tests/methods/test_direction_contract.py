"""What every `AbstractDirection` must do, checked by the public kit
(`jaxsearch.testing.check_direction`) for each direction in the registry (`tests/helpers.py`).
The kit itself is tested here on directions broken on purpose, each caught with the message
that names its flaw."""

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
import jax.tree_util as jtu
import pytest

import jaxsearch as js
from jaxsearch.testing import check_direction

from ..helpers import ALL_DIRECTIONS


@pytest.mark.parametrize("name", list(ALL_DIRECTIONS))
def test_every_direction_passes_the_kit(name):
    check_direction(ALL_DIRECTIONS[name]())


class _Momentum(js.AbstractDirection):
    """d = -g + beta d_prev (heavy ball), from public names only; `flaw` breaks it on purpose
    in one way for the kit's tests (None: sound)."""

    flaw: str | None = eqx.field(static=True, default=None)
    beta: float = 0.5
    supports_bounds: ClassVar[bool] = False

    def init(self, params, dtype):
        zeros = jtu.tree_map(jnp.zeros_like, params)
        steps = 0 if self.flaw == "retrace" else jnp.zeros((), jnp.int32)
        return {"prev": zeros, "steps": steps}

    def compute(self, state, info):
        d = jtu.tree_map(
            lambda g, p: (-g.astype(jnp.float32) + self.beta * p.astype(jnp.float32)).astype(
                g.dtype
            ),
            info.grad,
            state["prev"],
        )
        if self.flaw == "ascent":
            d = jtu.tree_map(jnp.negative, d)
        new = {**state, "prev": d}
        if self.flaw == "retrace":
            new["steps"] = state["steps"] + 1  # a Python int: a new program at each step
        return d, jnp.array(False), new, jnp.full((), jnp.inf, info.dtype)

    def update(self, state, s, y, dtype, accept=True):
        if self.flaw == "accept":
            return {**state, "steps": state["steps"] + 1}  # counts rejected steps too
        if self.flaw == "retrace":
            return state
        return {**state, "steps": state["steps"] + jnp.asarray(accept, jnp.int32)}

    def reset(self, state):
        if self.flaw == "reset":
            return state  # forgets nothing
        return {**state, "prev": jtu.tree_map(jnp.zeros_like, state["prev"])}

    def gradient_replaced(self, state):
        return state


def test_the_kit_passes_a_sound_direction_written_from_public_names():
    check_direction(_Momentum())


@pytest.mark.parametrize(
    "flaw, message",
    [
        ("ascent", "descent: d is not a descent direction"),
        ("accept", r"update\(accept=False\) changed the state"),
        ("reset", "reset: after `reset`, compute must give steepest descent"),
        ("retrace", "one compile: later steps compiled"),
    ],
)
def test_the_kit_catches_a_broken_direction(flaw, message):
    with pytest.raises(AssertionError, match=message):
        check_direction(_Momentum(flaw=flaw))
