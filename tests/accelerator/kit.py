"""What the accelerator tier's modules share: the sizes, chosen once by backend; the float32
problems with their known minimisers; the pairs of directions and line searches.

Importing this module compiles nothing (it reads the backend's name and builds no array):
plain `pytest` on a CPU collects the tier and skips it (tests/accelerator/conftest.py).

The objectives compute every product at float32 precision (`precision="highest"`): on a TPU,
JAX computes a float32 matmul in one bfloat16 pass by default (about three significant
digits), and no solver reaches a gtol of 1e-4 through an objective that rounds so. The
library's own products are left as they are: what the solver computes is what is tested.
"""

import dataclasses
import functools
import math
import os
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

import jaxsearch as js

from ..helpers import ALL_DIRECTIONS, LEAST_SQUARES, SEARCHES, pairs
from ..problems import (
    REGRESSION_A,
    REGRESSION_B,
    logistic_data,
    rosenbrock,
    spd_quadratic_data,
)

ON_CPU = jax.default_backend() == "cpu"  # the tier checking itself (JAXSEARCH_ACCELERATOR_ON_CPU)

# Problems in one `vmap` or `batched_run` (issue 48: 10^4 on an accelerator), and how many of
# them are solved one at a time to compare with.
BATCH = 500 if ON_CPU else 10_000
SAMPLE = 200

HIGHEST = jax.lax.Precision.HIGHEST
F32_EPS = float(np.finfo(np.float32).eps)


# --------------------------------------------------------------------------- objectives


def quadratic(x, a, b):
    """0.5 x'Ax - b'x (tests/problems.py's) with float32 products."""
    return 0.5 * jnp.dot(x, jnp.matmul(a, x, precision=HIGHEST), precision=HIGHEST) - jnp.dot(
        b, x, precision=HIGHEST
    )


def logistic(w, x, y, lam):
    """L2-regularised logistic regression (tests/problems.py's) with float32 products."""
    margins = y * jnp.matmul(x, w, precision=HIGHEST)
    return jnp.mean(jnp.logaddexp(jnp.zeros((), margins.dtype), -margins)) + 0.5 * lam * jnp.dot(
        w, w, precision=HIGHEST
    )


def rosenbrock_residuals(x):
    """r with 0.5 |r|^2 = Rosenbrock / 2 (2-D); minimiser (1, 1), r = 0 there."""
    return jnp.stack([10 * (x[1] - x[0] ** 2), 1 - x[0]])


def regression_residuals(w, a, b):
    """A w - b with float32 products: linear least squares."""
    return jnp.matmul(a, w, precision=HIGHEST) - b


# ----------------------------------------------------------------------------- problems


@dataclasses.dataclass(frozen=True)
class Problem:
    """A float32 problem with its float64 minimiser and the curvature there."""

    name: str
    fn: Callable
    x0: np.ndarray
    args: tuple
    minimiser: np.ndarray
    lambda_min: float  # least eigenvalue of the Hessian at the minimiser
    lipschitz: float  # a bound on the Hessian's largest eigenvalue along the way
    gtol: float
    least_squares: bool = False

    def arrays(self):
        """x0 and args as float32 device arrays."""
        args = tuple(jnp.asarray(a, jnp.float32) for a in self.args)
        return jnp.asarray(self.x0, jnp.float32), args

    def bound(self) -> float:
        """How far from the minimiser a point with |g|_inf <= gtol may be: |g|_2 / lambda_min
        to first order, doubled for the second-order term and float32's rounding of g, plus
        float32's rounding of the minimiser itself."""
        n = self.minimiser.size
        scale = max(1.0, float(np.max(np.abs(self.minimiser))))
        return 2 * self.gtol * math.sqrt(n) / self.lambda_min + 8 * F32_EPS * scale

    def search(self, name: str) -> js.AbstractLineSearch:
        """The registry's search; a fixed step at 1 / lipschitz (the registry's 1e-3 fits
        Rosenbrock only)."""
        if name == "FixedStep":
            return js.FixedStep(1.0 / self.lipschitz)
        return SEARCHES[name]()


def _rosenbrock_hessian(x):
    return np.array(
        [[1200 * x[0] ** 2 - 400 * x[1] + 2, -400 * x[0]], [-400 * x[0], 200.0]], np.float64
    )


def _logistic_minimiser(x, y, lam):
    """Newton's method in float64 NumPy: the minimiser and the Hessian there."""
    w = np.zeros(x.shape[1])
    for _ in range(50):
        margins = y * (x @ w)
        s = 1 / (1 + np.exp(margins))  # sigma(-margin)
        grad = -(x.T @ (y * s)) / len(y) + lam * w
        hessian = (x.T * (s * (1 - s))) @ x / len(y) + lam * np.eye(x.shape[1])
        w = w - np.linalg.solve(hessian, grad)
    assert np.max(np.abs(grad)) < 1e-12
    return w, hessian


@functools.cache
def problems() -> list[Problem]:
    """Rosenbrock (2-D, from (-1.2, 1)), an SPD quadratic (n = 20, condition number 100), a
    logistic regression (10 features): scalar objectives. Rosenbrock's residuals and a linear
    least-squares fit (30 x 5): residual objectives, for the least-squares directions.

    Each gtol lies well above what float32 resolves there (about 1e-4 for the quadratic's
    gradient): closer to that floor, the first-order directions with the Armijo-type searches
    end STALLED on the CPU too (2-D Rosenbrock at gtol 1e-4, the quadratic at 1e-3)."""
    start = np.array([-1.2, 1.0])
    ones = np.ones(2)
    rosen_eigs = np.linalg.eigvalsh(_rosenbrock_hessian(ones))
    a, b, x_quad = spd_quadratic_data(n=20, cond=100.0)
    quad_eigs = np.linalg.eigvalsh(a)
    x_log, y_log = logistic_data()
    lam = 1e-2
    w_log, h_log = _logistic_minimiser(x_log, y_log, lam)
    gram = x_log.T @ x_log / len(y_log)
    jacobian = np.array([[-20.0, 10.0], [-1.0, 0.0]])  # of the residuals at (1, 1)
    w_reg = np.linalg.lstsq(REGRESSION_A, REGRESSION_B, rcond=None)[0]
    reg_eigs = np.linalg.eigvalsh(REGRESSION_A.T @ REGRESSION_A)
    return [
        Problem(
            "rosenbrock",
            rosenbrock,
            start,
            (),
            ones,
            rosen_eigs[0],
            np.linalg.eigvalsh(_rosenbrock_hessian(start))[-1],
            1e-3,
        ),
        Problem(
            "quadratic", quadratic, np.zeros(20), (a, b), x_quad, quad_eigs[0], quad_eigs[-1], 1e-2
        ),
        Problem(
            "logistic",
            logistic,
            np.zeros(10),
            (x_log, y_log, np.array(lam)),
            w_log,
            np.linalg.eigvalsh(h_log)[0],
            0.25 * np.linalg.eigvalsh(gram)[-1] + lam,
            1e-4,
        ),
        Problem(
            "rosenbrock_residuals",
            rosenbrock_residuals,
            start,
            (),
            ones,
            np.linalg.eigvalsh(jacobian.T @ jacobian)[0],
            np.inf,
            1e-4,
            least_squares=True,
        ),
        Problem(
            "regression_residuals",
            regression_residuals,
            np.zeros(5),
            (REGRESSION_A, REGRESSION_B),
            w_reg,
            reg_eigs[0],
            reg_eigs[-1],
            1e-3,
            least_squares=True,
        ),
    ]


# -------------------------------------------------------------------------------- pairs


def matrix_pairs() -> list[tuple[str, str]]:
    """Every direction of the registry (tests/helpers.py) with every search it pairs with
    (`pairs`: a fixed step with steepest descent only), the least-squares directions too.
    With `JAXSEARCH_ACCELERATOR_PAIRS=cover`, and always on the CPU (where the tier only
    checks itself), a covering subset: every direction with Zoom, every search with L-BFGS
    (compiling the whole matrix takes minutes there, and on a TPU about 100 compiles)."""
    every = pairs() + pairs(list(LEAST_SQUARES))
    if not (ON_CPU or os.environ.get("JAXSEARCH_ACCELERATOR_PAIRS") == "cover"):
        return every
    return [(d, s) for d, s in every if s == "Zoom" or d == "LBFGS" or s == "FixedStep"]


def matrix_problems(direction: str, search: str) -> list[Problem]:
    """The problems of a pair: one of the scalar ones, or of the residual ones for a
    least-squares direction, in turn along the pairs, so that every problem runs and each
    pair compiles once."""
    least_squares = direction in LEAST_SQUARES
    mine = [p for p in problems() if p.least_squares == least_squares]
    position = [pair for pair in matrix_pairs() if (pair[0] in LEAST_SQUARES) == least_squares]
    return [mine[position.index((direction, search)) % len(mine)]]


def matrix_solver(direction: str, search: str, problem: Problem, **settings) -> js.Solver:
    return js.Solver(ALL_DIRECTIONS[direction](), problem.search(search), **settings)


def crawls(direction: str, search: str) -> bool:
    """The pairs docs/methods.md says crawl: nonlinear CG with an Armijo-only search (it needs
    a fairly exact one), Barzilai-Borwein steps with a monotone search (it needs a
    nonmonotone one). On 2-D Rosenbrock they may end STALLED short of gtol, on the CPU too."""
    armijo_only = ("Backtracking", "StochasticArmijo", "NonmonotoneArmijo")
    if direction.startswith("NonlinearCG"):
        return search in armijo_only
    return direction == "BarzilaiBorwein" and search not in ("NonmonotoneArmijo", "FixedStep")


# ------------------------------------------------------------------------ batched problems


def rosenbrock_starts(batch: int = BATCH) -> np.ndarray:
    """Issue 48's starts: [-1.2, 1] + 0.5 normal(key(3), (batch, 2)), float32, as NumPy (rows
    become device arrays by `jnp.asarray`: indexing a device array would compile per index)."""
    noise = jax.random.normal(jax.random.key(3), (batch, 2), jnp.float32)
    return np.asarray(jnp.array([-1.2, 1.0], jnp.float32) + 0.5 * noise)


def sample_indices(batch: int = BATCH, size: int = SAMPLE) -> np.ndarray:
    """`size` indices spread over the whole batch, its first and last ones included, and
    the last 8 (issue 48's failures on a TPU grow with the index)."""
    spread = np.linspace(0, batch - 1, size - 8).round().astype(int)
    return np.unique(np.concatenate([spread, np.arange(batch - 8, batch)]))
