"""The problems of the line-search tests (test_linesearch.py, test_hager_zhang.py,
test_more_thuente.py), each a line phi(t) = f(x + t d) for the driver of
tests/methods/linesearch_driver.py with an independent float64 reference: one-dimensional functions
(Moré & Thuente's and a few more) and n-dimensional problems along descent directions."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import scipy.special
from jax import lax

from ..problems import logistic, logistic_data, quadratic, spd_quadratic_data

MT_STARTS = [1e-3, 1e-1, 1e1, 1e3]  # Moré & Thuente (1994), section 5
ROSENBROCK_PAD = 10  # Rosenbrock n = 2..10 runs padded to this length, see `rosenbrock_masked`


# --------------------------------------------------------------------------------------------
# One-dimensional test functions: phi(t) = f(0 + t * 1). JAX versions (what the search sees)
# are branches of one `lax.switch`, so one compiled driver serves all of them; numpy float64
# versions with hand-written derivatives are the independent reference.


def _gamma(b):
    return jnp.sqrt(1 + b * b) - b


def _mt1(t, p):  # Moré & Thuente function 1: -t / (t^2 + beta)
    return -t / (t * t + p[0])


def _mt2(t, p):  # function 2: (t + beta)^5 - 2 (t + beta)^4
    s = t + p[0]
    return s**5 - 2 * s**4


def _mt3(t, p):  # function 3: phi_0(t) + 2 (1 - beta) / (l pi) sin(l pi t / 2)
    beta, ell = p[0], p[1]
    base = jnp.where(
        t <= 1 - beta,
        1 - t,
        jnp.where(t >= 1 + beta, t - 1, (t - 1) ** 2 / (2 * beta) + beta / 2),
    )
    return base + 2 * (1 - beta) / (ell * np.pi) * jnp.sin(ell * np.pi / 2 * t)


def _mt456(t, p):  # functions 4-6: gamma(b1) sqrt((1 - t)^2 + b2^2) + gamma(b2) sqrt(t^2 + b1^2)
    b1, b2 = p[0], p[1]
    return _gamma(b1) * jnp.sqrt((1 - t) ** 2 + b2 * b2) + _gamma(b2) * jnp.sqrt(t * t + b1 * b1)


def _quadratic1(t, p):  # p0 (t - p1)^2
    return p[0] * (t - p[1]) ** 2


def _quartic1(t, p):  # p0 (t - p1)^4: zero curvature at the minimiser
    return p[0] * (t - p[1]) ** 4


def _nan_beyond(t, p):  # t^2 - 2t, NaN for t >= p0
    return jnp.where(t < p[0], t * t - 2 * t, jnp.nan)


def _inf_beyond(t, p):  # t^2 - 2t, +inf for t >= p0
    return jnp.where(t < p[0], t * t - 2 * t, jnp.inf)


@jax.custom_jvp
def _nan_tangent_beyond(t, c):
    return t


@_nan_tangent_beyond.defjvp
def _nan_tangent_beyond_jvp(primals, tangents):
    t, c = primals
    dt, _ = tangents
    return t, dt * jnp.where(t < c, jnp.ones((), t.dtype), jnp.nan)  # linear in dt


def _nan_slope_beyond(t, p):  # t^2 - 2t with a finite value but a NaN slope for t >= p0
    u = _nan_tangent_beyond(t, p[0])
    return u * u - 2 * u


def _steep(t, p):  # -t + p0 t^4: sufficient decrease only for tiny t when p0 is huge
    return -t + p[0] * t**4


_BRANCHES = [
    _mt1,
    _mt2,
    _mt3,
    _mt456,
    _quadratic1,
    _quartic1,
    _nan_beyond,
    _inf_beyond,
    _nan_slope_beyond,
    _steep,
]


def phi_1d(x, kind, p):
    """The one-dimensional objective `kind` (an index into the branches) at x."""
    return lax.switch(kind, _BRANCHES, x, p)


def _np_gamma(b):
    return np.sqrt(1 + b * b) - b


def _np_mt1(t, p):
    den = t * t + p[0]
    return -t / den, (t * t - p[0]) / den**2


def _np_mt2(t, p):
    s = t + p[0]
    return s**5 - 2 * s**4, 5 * s**4 - 8 * s**3


def _np_mt3(t, p):
    beta, ell = p
    if t <= 1 - beta:
        base, dbase = 1 - t, -1.0
    elif t >= 1 + beta:
        base, dbase = t - 1, 1.0
    else:
        base, dbase = (t - 1) ** 2 / (2 * beta) + beta / 2, (t - 1) / beta
    w = ell * np.pi / 2
    return base + (1 - beta) / w * np.sin(w * t), dbase + (1 - beta) * np.cos(w * t)


def _np_mt456(t, p):
    b1, b2 = p
    r1, r2 = np.sqrt((1 - t) ** 2 + b2 * b2), np.sqrt(t * t + b1 * b1)
    g1, g2 = _np_gamma(b1), _np_gamma(b2)
    return g1 * r1 + g2 * r2, -g1 * (1 - t) / r1 + g2 * t / r2


def _np_quadratic1(t, p):
    return p[0] * (t - p[1]) ** 2, 2 * p[0] * (t - p[1])


def _np_quartic1(t, p):
    return p[0] * (t - p[1]) ** 4, 4 * p[0] * (t - p[1]) ** 3


def _np_nan_beyond(t, p):
    return (t * t - 2 * t, 2 * t - 2) if t < p[0] else (np.nan, 0.0)


def _np_inf_beyond(t, p):
    return (t * t - 2 * t, 2 * t - 2) if t < p[0] else (np.inf, 0.0)


def _np_nan_slope_beyond(t, p):
    return t * t - 2 * t, (2 * t - 2 if t < p[0] else np.nan)


def _np_steep(t, p):
    return -t + p[0] * t**4, -1 + 4 * p[0] * t**3


_NP_BRANCHES = [
    _np_mt1,
    _np_mt2,
    _np_mt3,
    _np_mt456,
    _np_quadratic1,
    _np_quartic1,
    _np_nan_beyond,
    _np_inf_beyond,
    _np_nan_slope_beyond,
    _np_steep,
]


@dataclasses.dataclass(frozen=True)
class Fn1d:
    name: str
    kind: int
    params: tuple[float, float]
    c1: float = 1e-4  # Moré & Thuente's mu and eta, made valid for Zoom (which needs c1 < c2)
    c2: float = 0.9

    def np(self, t: float) -> tuple[float, float]:
        return _NP_BRANCHES[self.kind](float(t), self.params)


# Moré & Thuente (1994), section 5, with their beta's. Their tolerances (mu, eta) are
# (1e-3, 0.1), (0.1, 0.1), (0.1, 0.1), (1e-3, 1e-3) x 3; Zoom requires c1 < c2, so where
# mu = eta we keep c2 = eta and take c1 = eta / 10.
MT_FUNCTIONS = [
    Fn1d("mt1", 0, (2.0, 0.0), c1=1e-3, c2=0.1),
    Fn1d("mt2", 1, (0.004, 0.0), c1=1e-2, c2=0.1),
    Fn1d("mt3", 2, (0.01, 39.0), c1=1e-2, c2=0.1),
    Fn1d("mt4", 3, (0.001, 0.001), c1=1e-4, c2=1e-3),
    Fn1d("mt5", 3, (0.01, 0.001), c1=1e-4, c2=1e-3),
    Fn1d("mt6", 3, (0.001, 0.01), c1=1e-4, c2=1e-3),
]
SIMPLE_FUNCTIONS = [
    Fn1d("quadratic", 4, (1.0, 1.0), c1=1e-4, c2=0.1),
    Fn1d("quartic", 5, (1.0, 1.0), c1=1e-4, c2=0.1),
]
FUNCTIONS_1D = {f.name: f for f in MT_FUNCTIONS + SIMPLE_FUNCTIONS}
NAN_BEYOND = Fn1d("nan_beyond", 6, (0.5, 0.0))
INF_BEYOND = Fn1d("inf_beyond", 7, (0.5, 0.0))
NAN_SLOPE_BEYOND = Fn1d("nan_slope_beyond", 8, (0.5, 0.0))
NONFINITE = {f.name: f for f in (NAN_BEYOND, INF_BEYOND, NAN_SLOPE_BEYOND)}
STEEP = Fn1d("steep", 9, (1e6, 0.0))
CASES_1D = [(name, t0) for name in FUNCTIONS_1D for t0 in MT_STARTS]  # (function, first trial)


# --------------------------------------------------------------------------------------------
# n-dimensional problems along random descent directions.


def rosenbrock_masked(x, n):
    """`problems.rosenbrock(x[:n])` for x padded to a fixed length: one compile for all n."""
    index = jnp.arange(x.shape[0] - 1, dtype=n.dtype)
    terms = 100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2
    return jnp.sum(jnp.where(index < n - 1, terms, jnp.zeros((), x.dtype)))


def _np_rosenbrock(x):
    a = x[1:] - x[:-1] ** 2
    grad = np.zeros_like(x)
    grad[:-1] = -400 * x[:-1] * a - 2 * (1 - x[:-1])
    grad[1:] += 200 * a
    return float(np.sum(100 * a**2 + (1 - x[:-1]) ** 2)), grad


def _np_quadratic(x, a, b):
    return float(0.5 * x @ (a @ x) - b @ x), (a + a.T) / 2 @ x - b


def _np_logistic(w, x, y, lam):
    margins = y * (x @ w)
    value = np.mean(np.logaddexp(0, -margins)) + 0.5 * lam * (w @ w)
    grad = x.T @ (-y * scipy.special.expit(-margins)) / x.shape[0] + lam * w
    return float(value), grad


@dataclasses.dataclass(frozen=True, eq=False)
class CaseNd:
    """phi(t) = f(x + t d): `jax_fn(x, *jax_args)` for the search, `np_fn(x[:size], *np_args)`
    (value, gradient) in float64 as the reference."""

    name: str
    jax_fn: object
    np_fn: object
    x: np.ndarray
    d: np.ndarray
    jax_args: tuple
    np_args: tuple
    size: int  # leading entries of x that the reference sees

    def __repr__(self):
        return self.name

    def arrays(self, dtype_name):
        """x, d and the float arguments rounded to `dtype_name` (as numpy)."""
        dtype = np.dtype(dtype_name)
        fl = lambda a: a.astype(dtype) if np.issubdtype(a.dtype, np.floating) else a
        return self.x.astype(dtype), self.d.astype(dtype), tuple(fl(a) for a in self.jax_args)

    def true_phi(self, dtype_name):
        """Float64 (value, slope) at the point x + t d as the search computed it (in dtype)."""
        x, d, _ = self.arrays(dtype_name)
        np_args = tuple(
            a.astype(dtype_name).astype(np.float64) if np.issubdtype(a.dtype, np.floating) else a
            for a in self.np_args
        )
        x64, d64 = x[: self.size].astype(np.float64), d[: self.size].astype(np.float64)

        def phi(t):
            if t == 0:
                point = x64
            else:
                tt = np.asarray(t).astype(dtype_name)
                point = (x[: self.size] + tt * d[: self.size]).astype(np.float64)
            value, grad = self.np_fn(point, *np_args)
            return value, float(grad @ d64)

        return phi


def _descent(rng, grad, kind):
    if kind == "steepest":
        return -grad
    d = rng.standard_normal(grad.shape)
    return -d if d @ grad > 0 else d


def _nd_cases():
    cases = []
    for n in range(2, 11):
        rng = np.random.default_rng(100 + n)
        x = rng.uniform(-2, 2, n)
        grad = _np_rosenbrock(x)[1]
        for kind in ("steepest", "random"):
            d = _descent(rng, grad, kind)
            pad = ROSENBROCK_PAD - n
            cases.append(
                CaseNd(
                    f"rosenbrock{n}-{kind}",
                    rosenbrock_masked,
                    _np_rosenbrock,
                    np.concatenate([x, np.zeros(pad)]),
                    np.concatenate([d, np.zeros(pad)]),
                    (np.asarray(n, np.int32),),
                    (),
                    n,
                )
            )
    a, b, _ = spd_quadratic_data(n=50, cond=100.0, seed=0)
    rng = np.random.default_rng(1)
    x = rng.standard_normal(50)
    grad = _np_quadratic(x, a, b)[1]
    for kind in ("steepest", "random", "newton"):
        d = np.linalg.solve(a, -grad) if kind == "newton" else _descent(rng, grad, kind)
        cases.append(
            CaseNd(f"spd_quadratic-{kind}", quadratic, _np_quadratic, x, d, (a, b), (a, b), 50)
        )
    xs, ys = logistic_data(n=200, d=10, seed=0)
    lam = np.asarray(1e-2)
    rng = np.random.default_rng(2)
    w = rng.standard_normal(10)
    grad = _np_logistic(w, xs, ys, lam)[1]
    for kind in ("steepest", "random"):
        d = _descent(rng, grad, kind)
        args = (xs, ys, lam)
        cases.append(CaseNd(f"logistic-{kind}", logistic, _np_logistic, w, d, args, args, 10))
    return cases


ND_CASES = {case.name: case for case in _nd_cases()}
