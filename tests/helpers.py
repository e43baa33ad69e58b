"""One registry of the directions and line searches that parametrised tests draw from, so a
new method (or a new form of one) is tested everywhere by adding one line here.

Each entry builds a new object (tests that count compiles need fresh, equal instances).

Below the registry, small helpers that several test modules share (test modules import
nothing from each other)."""

import math
import os
from typing import ClassVar

import hypothesis
import jax
import jax.numpy as jnp
import numpy as np

import jaxsearch as js
import jaxsearch.internal as jsi
from jaxsearch._compile import seam


def spread_diagonal(v):
    """A preconditioner for any params: P = diag(0.5 ... 2) per leaf, in the leaf's order
    (module level, so fresh registry entries are equal and share compiled programs)."""
    return jax.tree_util.tree_map(
        lambda x: x * jnp.linspace(0.5, 2.0, x.size, dtype=x.dtype).reshape(x.shape), v
    )


DIRECTIONS = {
    "Gradient": lambda: js.Gradient(),
    "LBFGS": lambda: js.LBFGS(),
    "LBFGS-compact": lambda: js.LBFGS(form="compact"),
    "BFGS": lambda: js.BFGS(),
    "SSBFGS": lambda: js.SSBFGS(),
    "SSBroyden": lambda: js.SSBroyden(),
    "NonlinearCG": lambda: js.NonlinearCG(),
    "LBFGS-preconditioned": lambda: js.LBFGS(preconditioner=spread_diagonal),
    "NonlinearCG-preconditioned": lambda: js.NonlinearCG(preconditioner=spread_diagonal),
    "NewtonCG": lambda: js.NewtonCG(),
    "Newton": lambda: js.Newton(),
    "Preconditioned": lambda: js.Preconditioned(),
    "BarzilaiBorwein": lambda: js.BarzilaiBorwein(),
}

# Least-squares directions (`js.AbstractLeastSquares`): their fn returns residuals, not a
# scalar, so they are kept apart from DIRECTIONS, whose generic tests (compile counts, resume,
# engine control flow, the search matrix, adversarial objectives) are written on scalar
# objectives. ALL_DIRECTIONS serves the tests that take either kind: the conformance kit
# (`check_direction` checks a least-squares direction on residual problems of its own,
# tests/methods/test_direction_contract.py). Their residual forms of the other generic checks
# (every dtype and a mixed pytree, resume, step loop, vmap, implicit adjoint, NIST StRD)
# are in tests/methods/test_least_squares.py, parametrised over this dict.
LEAST_SQUARES = {
    "GaussNewton": lambda: js.GaussNewton(),
    "LevenbergMarquardt": lambda: js.LevenbergMarquardt(),
    "GaussNewtonCG": lambda: js.GaussNewtonCG(),
}

ALL_DIRECTIONS = {**DIRECTIONS, **LEAST_SQUARES}

SEARCHES = {
    "Zoom": lambda: js.Zoom(),
    "MoreThuente": lambda: js.MoreThuente(),
    "HagerZhang": lambda: js.HagerZhang(),
    "Backtracking": lambda: js.Backtracking(),
    "FixedStep": lambda: js.FixedStep(1e-3),
    "StochasticArmijo": lambda: js.StochasticArmijo(),
    "NonmonotoneArmijo": lambda: js.NonmonotoneArmijo(),
}


def pairs(directions=None, searches=None) -> list[tuple[str, str]]:
    """(direction, search) names, all of `directions` x `searches` (default: the whole
    registry) but a fixed step only with steepest descent (others need a search to be safe)."""
    directions = list(DIRECTIONS) if directions is None else directions
    searches = list(SEARCHES) if searches is None else searches
    return [(d, s) for d in directions for s in searches if s != "FixedStep" or d == "Gradient"]


def search_classes(base: type = js.AbstractLineSearch) -> dict[str, type]:
    """The classes of the registry's searches that subclass `base`, by class name (once each,
    however many forms of a class the registry lists)."""
    classes = [type(make()) for make in SEARCHES.values()]
    return {cls.__name__: cls for cls in classes if issubclass(cls, base)}


def solver(direction: str, search: str, **settings) -> js.Solver:
    """A new Solver from the registry's direction and search."""
    return js.Solver(DIRECTIONS[direction](), SEARCHES[search](), **settings)


def compute(direction, state, grad, dtype, hvp=None, x=None):
    """(d, scaled, state) of `direction.compute` at a point without bounds, as the solver
    calls it (x is only read with bounds)."""
    info = jsi.DirectionInfo(x, grad, dtype, hvp)
    d, scaled, state, limit = direction.compute(state, info)
    assert float(limit) == float("inf")  # no limit without bounds
    return d, scaled, state


# --------------------------------------------------------------------------- settings

# Solver settings that run to the rounding level of float64 (gtol alone stops the run).
TIGHT = dict(gtol=1e-12, ftol=0.0)

# The lean XLA options (elemental fusion emitters, LLVM at -O1) that "auto" picks for a small
# problem on a CPU, at about half the compile time of XLA's defaults: `run(...,
# compiler_options=LEAN)` where a large `max_steps` prices them out of "auto", and
# `jax.jit(..., compiler_options=LEAN)` for a test's own jit of a solver call (under a trace,
# the caller's compile decides), in tests of what a program computes. The options change how
# XLA compiles it, not what it computes (no fast math either way). XLA's defaults (None) on
# other backends.
LEAN = dict(seam.LEAN_OPTIONS) if jax.default_backend() == "cpu" else None


# ------------------------------------------------------------------ hypothesis profiles

# "ci" (the default: few examples, derandomized) and "fuzz" (2000 examples per test), selected
# by the environment variable HYPOTHESIS_PROFILE (`nox -s fuzz`).
hypothesis.settings.register_profile(
    "ci",
    max_examples=6,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[hypothesis.HealthCheck.too_slow, hypothesis.HealthCheck.data_too_large],
)
hypothesis.settings.register_profile(
    "fuzz",
    max_examples=2000,
    deadline=None,
    print_blob=True,
    suppress_health_check=[hypothesis.HealthCheck.too_slow, hypothesis.HealthCheck.data_too_large],
)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
# Applied per test (not `load_profile`), so other test modules keep their own settings.
PROFILE_SETTINGS = hypothesis.settings.get_profile(PROFILE)
FUZZ = PROFILE != "ci"


# ------------------------------------------------------------------ L-BFGS's reference


def random_pair(rng, n):
    """A random (s, y) pair of n-vectors."""
    s = rng.standard_normal(n)
    y = s + 0.3 * rng.standard_normal(n)  # s'y > 0 with high probability
    return s, y


def explicit_lbfgs_direction(pairs, g):
    """-H g with H from the BFGS inverse update (N&W eq. 6.17) applied to gamma I over the pairs."""
    n = g.shape[0]
    s_last, y_last = pairs[-1]
    h = (s_last @ y_last) / (y_last @ y_last) * np.eye(n)
    for s, y in pairs:
        rho = 1.0 / (s @ y)
        v = np.eye(n) - rho * np.outer(y, s)
        h = v.T @ h @ v + rho * np.outer(s, s)
    return -h @ g


# ------------------------------------------------------------------ a broken search


class Endless(js.AbstractLineSearch):
    """A broken search that never ends: it halves its trial for ever."""

    max_step_size: float = math.inf
    max_trials: int = 7
    evaluates_each_step: ClassVar[bool] = False
    monotone: ClassVar[bool] = False

    def allowance(self, state):
        return 0.0

    def init(self, dtype):
        return None

    def start(self, state, phi0, dphi0, guess, min_step, scaled=None, max_step=None):
        dtype = phi0.dtype
        false = jnp.array(False)
        return jsi.SearchState(
            trial=guess.astype(dtype),
            done=false,
            step=jnp.zeros((), dtype),
            success=false,
            num_trials=jnp.zeros((), jnp.int32),
            min_step=min_step,
            max_step=jnp.full((), jnp.inf, dtype),
        )

    def update(self, search, t, phi, dphi):
        return jsi.SearchState(
            trial=search.trial / 2,
            done=jnp.array(False),
            step=t,  # claims a step, but never ends
            success=jnp.array(False),
            num_trials=search.num_trials + 1,
            min_step=search.min_step,
            max_step=search.max_step,
        )

    def finish(self, state, search):
        return None
