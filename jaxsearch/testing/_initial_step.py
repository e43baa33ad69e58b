"""The conformance kit for an initial-step rule: `check_initial_step`."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._contract import same_avals, scalar_of, strongly_typed
from .._linesearch import AbstractInitialStep, InitialStepInfo
from ._common import contract, counting_compiles, require, scoped_x64

_STEPS = 5


def _quadratic(n: int = 4):
    """f(x) = 0.5 x'Ax - b'x, A diagonal of condition number 10, in float64."""
    return np.geomspace(1.0, 10.0, n), np.linspace(1.0, -1.0, n)


def _path(scaled: bool) -> list[dict]:
    """The `InitialStepInfo` fields at the start of each of `_STEPS` exact steepest-descent searches
    on `_quadratic` from x0 = 0 (`scaled`: d = -g / a_max, said to be scaled), as float64 NumPy
    arrays (prev_* NaN or 0 before the first step), and each search's step."""
    a, b = _quadratic()
    x, prev_value, prev_decrease, prev_step, out = np.zeros_like(b), math.nan, math.nan, 0.0, []
    for _ in range(_STEPS):
        g = a * x - b
        d = -g / a.max() if scaled else -g
        slope, value = float(g @ d), float(0.5 * x @ (a * x) - b @ x)
        t = -slope / float(d @ (a * d))
        out.append(
            dict(
                scaled=scaled,
                slope=slope,
                d_norm=float(np.linalg.norm(d)),
                value=value,
                prev_decrease=prev_decrease,
                prev_step=prev_step,
                x=x,
                d=d,
                grad=g,
                prev_value=prev_value,
                step=t,
            )
        )
        x = x + t * d
        prev_decrease = value - float(0.5 * x @ (a * x) - b @ x)
        prev_value, prev_step = value, t
    return out


def _info(fields: dict, dtype) -> InitialStepInfo:
    def c(v):
        return jnp.asarray(np.asarray(v, np.float64).astype(dtype))

    return InitialStepInfo(
        jnp.asarray(fields["scaled"]),
        *(c(fields[k]) for k in ("slope", "d_norm", "value", "prev_decrease", "prev_step")),
        *(c(fields[k]) for k in ("x", "d", "grad", "prev_value")),
    )


@eqx.filter_jit
def _first(rule, state, info):
    return rule.first_trial(state, info)


@eqx.filter_jit
def _update(rule, state, step, slope, moved):
    return rule.update(state, step, slope, moved)


def _check_at(rule: AbstractInitialStep, dtype) -> None:
    name = np.dtype(dtype).name
    who = f"{type(rule).__name__} ({name})"
    initial = rule.init(dtype)
    with contract(name):
        strongly_typed(rule, "init", initial, "state")
    with counting_compiles() as compiles:
        for scaled in (False, True):
            state = initial
            for k, fields in enumerate(_path(scaled)):
                info = _info(fields, dtype)
                t = _first(rule, state, info)
                with contract(name, "first trial"):
                    scalar_of(rule, "first_trial", t, dtype, "the first trial")
                require(
                    math.isfinite(float(t)) and float(t) > 0,
                    who,
                    f"first_trial returned t = {float(t)} at search {k + 1} of steepest descent "
                    f"on a quadratic (scaled {scaled}): not positive and finite (the solver "
                    "would try t = 1 instead)",
                    "return a positive, finite first trial on such ordinary inputs",
                )
                step = jnp.asarray(np.float64(fields["step"]).astype(dtype))
                for moved in (False, True):
                    after = _update(rule, state, step, info.slope, jnp.array(moved))
                    with contract(f"{name}, moved {moved}"):
                        same_avals(rule, "update", initial, after, "state")
                state = after
                if k == 0 and not scaled:
                    first = len(compiles)
        require(
            len(compiles) == first,
            who,
            f"one compile: later searches compiled {len(compiles) - first} more programs",
            "give every leaf of the state a fixed dtype and keep the settings hashable",
        )
    _check_vmap(rule, dtype, who)


def _check_vmap(rule: AbstractInitialStep, dtype, who: str) -> None:
    """`first_trial` and `update` under `jax.vmap` over three searches."""
    infos = [_info(fields, dtype) for fields in _path(False)[1:4]]
    batch = jax.tree.map(lambda *leaves: jnp.stack(leaves), *infos)
    state = jax.tree.map(lambda s: jnp.stack([s] * 3), rule.init(dtype))
    t = jax.vmap(rule.first_trial)(state, batch)
    require(
        jnp.shape(t) == (3,) and bool(jnp.all(jnp.isfinite(t) & (t > 0))),
        who,
        f"vmap: over three searches first_trial gave {t}, not three positive trials",
        "compute the trial from the state and info only (no Python branch on their values)",
    )
    moved = jnp.array([True, False, True])
    after = jax.vmap(rule.update)(state, batch.prev_step, batch.slope, moved)
    shapes = [jnp.shape(leaf) for leaf in jax.tree.leaves(state)]
    require(
        str(jax.tree.structure(after)) == str(jax.tree.structure(state))
        and [jnp.shape(leaf) for leaf in jax.tree.leaves(after)] == shapes,
        who,
        "vmap: update over three searches changed the state's structure or shapes",
        "compute the state from its inputs only (no Python branch on their values)",
    )


def check_initial_step(rule: AbstractInitialStep) -> None:
    """Check the initial-step `rule` against what the solver relies on (`AbstractInitialStep`);
    raise an AssertionError naming the class and the first property that fails. Driven through
    five exact steepest-descent searches on a quadratic (d = -g, then d = -g / 10 said to be
    scaled) with every `InitialStepInfo` field, in float32 and float64: `init`'s state has no
    weakly typed leaf and `update` (moved or not) keeps its avals; `first_trial` is a positive
    finite 0-d array of the scalar dtype (or weakly typed); later searches compile nothing; under
    `jax.vmap` over three searches, three positive trials, and `update` keeps the state's
    structure and shapes."""
    who = type(rule).__name__
    require(
        isinstance(rule, AbstractInitialStep),
        who,
        "not an AbstractInitialStep",
        "subclass jaxsearch.AbstractInitialStep",
    )
    for dtype in (np.float32, np.float64):
        with scoped_x64(dtype):
            _check_at(rule, dtype)
