"""What the compile-once tests (compile/test_compile.py for `step`, compile/test_compile_run.py
for `run`) share: the params dtype settings, the solvers, and objectives of their own.

The objectives are module level and used by those tests alone: their identity is part of
every compile key, so no other test can have compiled these programs already in the same
worker process."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

import jaxsearch as js

from .helpers import LEAN, solver
from .problems import rosenbrock

GTOL = 1e-6  # the settings of `make_solver`'s solvers
MAX_STEPS = 20

# --------------------------------------------------------------------------- objectives


def _flat(params, dtype):
    """The leaves of params (in `jax.tree.leaves` order), ravelled, cast to dtype, joined."""
    return jnp.concatenate([jnp.ravel(x).astype(dtype) for x in jax.tree.leaves(params)])


def shifted_rosenbrock(params, shift):
    """Rosenbrock of (params - shift), evaluated in shift's dtype; minimum 0 at 1 + shift.
    `shift` is a data argument passed through `args`, like a mini-batch."""
    return rosenbrock(_flat(params, shift.dtype) - shift)


def rosenbrock_f64(x):
    """Rosenbrock evaluated in float64 whatever the dtype of x (needs x64)."""
    return rosenbrock(x.astype(jnp.float64))


# ------------------------------------------------------------------------------ settings


@dataclasses.dataclass(frozen=True)
class Setting:
    """A params dtype setting: the params' leaf dtypes, the state's value_dtype (None: inferred)
    and the dtype of the objective's data, which is the dtype fn returns."""

    name: str
    dtypes: tuple  # one per leaf; a single leaf is a bare array, several a dict
    value_dtype: object
    data_dtype: object
    x64: bool = False

    def params(self, seed: int):
        """Rosenbrock-like 2-D start near (-1.2, 1), different for each seed."""
        x = np.array([-1.2, 1.0]) + 0.05 * np.random.default_rng(seed).standard_normal(2)
        if len(self.dtypes) == 1:
            return jnp.asarray(x, self.dtypes[0])
        return {
            "a": jnp.asarray(x[:1], self.dtypes[0]),
            "b": {"c": jnp.asarray(x[1:], self.dtypes[1])},
        }

    def data(self, seed: int):
        shift = 0.1 * np.random.default_rng(1000 + seed).standard_normal(2)
        return jnp.asarray(shift, self.data_dtype)

    def expected_value_dtype(self):
        return jnp.dtype(self.data_dtype if self.value_dtype is None else self.value_dtype)


SETTINGS = [
    # Low precision params, float32 values: the mixed-precision use case.
    Setting("float16", (jnp.float16,), jnp.float32, jnp.float32),
    Setting("bfloat16", (jnp.bfloat16,), jnp.float32, jnp.float32),
    # value_dtype inferred (None) from the params: float32, and float64 under x64.
    Setting("float32", (jnp.float32,), None, jnp.float32),
    Setting("float64", (jnp.float64,), None, jnp.float64, x64=True),
    # A pytree mixing a bfloat16 and a float32 leaf.
    Setting("mixed_bf16_f32", (jnp.bfloat16, jnp.float32), jnp.float32, jnp.float32),
]


# The keywords of the user train steps' `eqx.filter_jit`: on a CPU, the lean XLA options that
# `run` and `step` choose for their own programs (helpers.LEAN, about half the compile time of
# XLA's defaults). What these tests count is whether a program compiles, not how XLA optimises
# it.
USER_JIT = {"compiler_options": LEAN}


def make_solver(direction: str, search: str) -> js.Solver:
    """A new Solver, from newly built direction and line search objects each time."""
    return solver(direction, search, gtol=GTOL, max_steps=MAX_STEPS)


# ------------------------------------------------------------------------------ helpers


def leaf_dtypes(tree) -> list:
    """The dtypes of the leaves of tree."""
    return [x.dtype for x in jax.tree.leaves(tree)]


def weak_leaves(tree) -> list[str]:
    """Paths of the weakly typed leaves of tree."""
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [jax.tree_util.keystr(path) for path, x in flat if jax.typeof(x).weak_type]


def block(tree):
    """tree, once every array in it is computed."""
    return jax.block_until_ready(tree)


def steps_in_user_jit(train_step, solver, setting, seeds, compiles):
    """(params, state, state at init): `setting`'s params and a fresh state stepped once per
    seed by the user's jitted `train_step(solver, params, state, data)`, with new data of
    that seed each time; `compiles` counts from the first step."""
    params = setting.params(seeds[0])
    batches = [setting.data(seed) for seed in seeds]
    state0 = block(solver.init(params, value_dtype=setting.value_dtype))
    state = state0
    compiles.reset()
    for batch in batches:
        params, state = train_step(solver, params, state, batch)
    return block((params, state)) + (state0,)
