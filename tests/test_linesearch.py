"""The line searches: Zoom finds strong Wolfe points, Backtracking finds Armijo points.

Every search runs through one jitted driver per (line search, objective) that evaluates
phi(t) = f(x + t d) and phi'(t) once per `lax.while_loop` iteration, exactly as the solver
does, and records every trial. Problems are array arguments of that driver, so each search
configuration compiles once per dtype.

Accepted steps are checked independently: phi and phi' are recomputed in float64 numpy from
closed forms at the point the search evaluated, and the conditions are required to hold up to
the rounding error of the values the search was actually given (measured, per point, as the
difference between the driver's record and the float64 value) plus a few ulps for the
comparison itself.
"""

import dataclasses
import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize
import scipy.special
from jax import lax

import jaxsearch as js

from .problems import logistic, logistic_data, quadratic, rosenbrock, spd_quadratic_data

DTYPES = ["float32", "float64"]
MT_STARTS = [1e-3, 1e-1, 1e1, 1e3]  # Moré & Thuente (1994), section 5
ROSENBROCK_PAD = 10  # Rosenbrock n = 2..10 runs padded to this length, see `rosenbrock_masked`


def cast(value, dtype):
    return jnp.asarray(value).astype(dtype)


def eps_of(dtype_name: str) -> float:
    return float(np.finfo(np.dtype(dtype_name)).eps)


def precision(dtype_name: str):
    """Context for work in `dtype_name`: float64 needs the (global) x64 switch."""
    return jax.enable_x64(dtype_name == "float64")


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


# --------------------------------------------------------------------------------------------
# The driver.


@dataclasses.dataclass(frozen=True)
class Run:
    """Everything one search did, as numpy: the trials in order and what they returned."""

    step: float
    success: bool
    done: bool
    n: int  # evaluations of (phi, phi') after phi(0), phi'(0)
    trials: np.ndarray
    values: np.ndarray
    slopes: np.ndarray
    phi0: float
    dphi0: float
    eps: float  # machine epsilon of the search's dtype


@functools.cache
def driver(ls: js.AbstractLineSearch, f):
    """Jitted `(x, d, guess, args) -> dict`: one search along d from x with f(x, *args)."""
    capacity = ls.max_trials + 1  # a search ends within its budget: one slot to spare

    def phi(x, d, t, args):
        value, grad = jax.value_and_grad(f)(x + t * d, *args)
        return value.astype(t.dtype), jnp.sum(grad * d).astype(t.dtype)

    @jax.jit
    def run(x, d, guess, args):
        dtype = x.dtype
        phi0, dphi0 = phi(x, d, cast(0, dtype), args)
        search = ls.start(ls.init(dtype), phi0, dphi0, guess, jnp.zeros((), dtype))
        empty = jnp.full((capacity,), jnp.nan, dtype)

        def cond(carry):
            search, n, *_ = carry
            return ~search.done & (n < capacity)

        def body(carry):
            search, n, trials, values, slopes = carry
            t = search.trial
            value, slope = phi(x, d, t, args)  # the one evaluation of this iteration
            search = ls.update(search, t, value, slope)
            return (
                search,
                n + 1,
                trials.at[n].set(t),
                values.at[n].set(value),
                slopes.at[n].set(slope),
            )

        init = (search, cast(0, jnp.int32), empty, empty, empty)
        search, n, trials, values, slopes = lax.while_loop(cond, body, init)
        return dict(
            step=search.step,
            success=search.success,
            done=search.done,
            n=n,
            trials=trials,
            values=values,
            slopes=slopes,
            phi0=phi0,
            dphi0=dphi0,
        )

    return run


def _to_run(out, dtype_name) -> Run:
    out = jax.device_get(out)
    n = int(out["n"])
    return Run(
        step=float(out["step"]),
        success=bool(out["success"]),
        done=bool(out["done"]),
        n=n,
        trials=np.asarray(out["trials"][:n], np.float64),
        values=np.asarray(out["values"][:n], np.float64),
        slopes=np.asarray(out["slopes"][:n], np.float64),
        phi0=float(out["phi0"]),
        dphi0=float(out["dphi0"]),
        eps=eps_of(dtype_name),
    )


@functools.cache
def run_1d(ls, fn: Fn1d, t0: float, dtype_name: str) -> Run:
    with precision(dtype_name):
        dtype = jnp.dtype(dtype_name)
        out = driver(ls, phi_1d)(
            cast(0, dtype),
            cast(1, dtype),
            cast(t0, dtype),
            (cast(fn.kind, jnp.int32), cast(fn.params, dtype)),
        )
        return _to_run(out, dtype_name)


# --------------------------------------------------------------------------------------------
# Independent checks in float64.


def check_point(run: Run, i: int, true_phi, c1: float, c2: float | None):
    """Do sufficient decrease (and, with c2, strong curvature) hold at trial i?

    `true_phi(t)` is the float64 reference (value, slope) at the point the search evaluated
    for step t. The allowance is the measured error of each value the search was given plus
    4 ulps of every quantity in the comparison.
    """
    t = float(run.trials[i])
    p0, g0 = true_phi(0.0)
    pt, gt = true_phi(t)
    if not (np.isfinite(pt) and np.isfinite(gt)):
        return False, False
    e0, ed0 = abs(run.phi0 - p0), abs(run.dphi0 - g0)
    et, edt = abs(run.values[i] - pt), abs(run.slopes[i] - gt)
    ulps = 4 * run.eps
    tol_f = e0 + et + c1 * t * ed0 + ulps * (abs(p0) + abs(pt) + c1 * t * abs(g0))
    decrease = pt <= p0 + c1 * t * g0 + tol_f
    if c2 is None:
        return bool(decrease), None
    tol_g = edt + c2 * ed0 + ulps * (abs(gt) + c2 * abs(g0))
    curvature = abs(gt) <= c2 * abs(g0) + tol_g
    return bool(decrease), bool(curvature)


def check_contract(run: Run, ls):
    """The interface contract that holds for every search, successful or not."""
    assert run.done, f"search not done after {run.n} evaluations"
    assert 1 <= run.n <= ls.max_trials
    assert run.step >= 0
    if run.step > 0:
        # The last evaluated trial is the accepted step, and it is finite.
        assert run.trials[-1] == run.step, (run.trials[-1], run.step)
        assert np.isfinite(run.values[-1]) and np.isfinite(run.slopes[-1])
    else:
        assert not run.success
    # The driver's phi'(0) must be a descent slope (the contract of `start`).
    assert run.dphi0 < 0


def check_zoom(run: Run, ls: js.Zoom, true_phi):
    """Zoom: success means strong Wolfe; any other step at least has sufficient decrease."""
    check_contract(run, ls)
    if run.step > 0:
        decrease, curvature = check_point(run, run.n - 1, true_phi, ls.c1, ls.c2)
        assert decrease, f"accepted step {run.step} fails sufficient decrease"
        if run.success:
            assert curvature, f"step {run.step} reported as strong Wolfe fails curvature"


def check_backtracking(run: Run, ls: js.Backtracking, t0: float, true_phi):
    """Backtracking: trials are t0 shrink^k; it accepts the first that satisfies Armijo."""
    check_contract(run, ls)
    expected = t0 * ls.shrink ** np.arange(run.n)
    np.testing.assert_allclose(run.trials, expected, rtol=8 * run.n * run.eps)
    for i in range(run.n - 1):  # every rejected trial fails Armijo (beyond rounding)
        assert not _armijo_strictly(run, i, true_phi, ls.c1), (
            f"trial {run.trials[i]} satisfies Armijo but was rejected"
        )
    last_ok, _ = check_point(run, run.n - 1, true_phi, ls.c1, None)
    if run.success:
        assert run.step > 0 and last_ok, f"accepted step {run.step} fails Armijo"
    else:
        assert run.step == 0 and run.n == ls.max_trials


def _armijo_strictly(run: Run, i: int, true_phi, c1: float) -> bool:
    """Armijo holds at trial i with a margin larger than the rounding allowance."""
    t = float(run.trials[i])
    p0, g0 = true_phi(0.0)
    pt, gt = true_phi(t)
    if not (np.isfinite(pt) and np.isfinite(gt)):  # a non-finite slope is rejected too
        return False
    allowance = abs(run.phi0 - p0) + abs(run.values[i] - pt) + c1 * t * abs(run.dphi0 - g0)
    allowance += 4 * run.eps * (abs(p0) + abs(pt) + c1 * t * abs(g0))
    return bool(pt < p0 + c1 * t * g0 - allowance)


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


@functools.cache
def run_nd(ls, name: str, dtype_name: str, guess: float = 1.0) -> Run:
    case = ND_CASES[name]
    with precision(dtype_name):
        x, d, args = case.arrays(dtype_name)
        out = driver(ls, case.jax_fn)(
            jnp.asarray(x), jnp.asarray(d), cast(guess, dtype_name), tuple(map(jnp.asarray, args))
        )
        return _to_run(out, dtype_name)


def scipy_line_search(f, fprime, x, d):
    """scipy's strong Wolfe search (first trial 1.0): (step or None, fc, gc, success)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", scipy.optimize._linesearch.LineSearchWarning)
        step, fc, gc, _, _, slope = scipy.optimize.line_search(f, fprime, x, d, c1=1e-4, c2=0.9)
    return step, fc, gc, step is not None and slope is not None


# --------------------------------------------------------------------------------------------
# Tests.

ZOOM = js.Zoom()
BACKTRACKING = js.Backtracking()
SEARCHES = {"zoom": ZOOM, "backtracking": BACKTRACKING}
CASES_1D = [(name, t0) for name in FUNCTIONS_1D for t0 in MT_STARTS]


# A demanding c1 puts many trials near the sufficient-decrease line, where a wrong test shows.
DEMANDING_ZOOM = js.Zoom(c1=0.4, c2=0.5)


def zoom_for(fn: Fn1d, config: str) -> js.Zoom:
    """The default Zoom, one with the function's own (Moré & Thuente) tolerances, or one with
    a demanding c1."""
    if config == "demanding":
        return DEMANDING_ZOOM
    return ZOOM if config == "default" else js.Zoom(c1=fn.c1, c2=fn.c2)


def check(run: Run, ls, t0: float, true_phi):
    if isinstance(ls, js.Zoom):
        check_zoom(run, ls, true_phi)
    else:
        check_backtracking(run, ls, t0, true_phi)


def test_reference_functions_match_the_searched_ones():
    """The numpy references (closed-form slopes) agree with the JAX objectives the searches
    see, so the independent checks check the right function."""
    with precision("float64"):
        value_and_slope = jax.jit(jax.value_and_grad(phi_1d))
        for fn in [*FUNCTIONS_1D.values(), *NONFINITE.values(), STEEP]:
            p = cast(fn.params, jnp.float64)
            kind = cast(fn.kind, jnp.int32)
            for t in (0.0, 0.3, 0.995, 1.0, 1.7, 12.0):
                value, slope = value_and_slope(cast(t, jnp.float64), kind, p)
                ref_value, ref_slope = fn.np(t)
                np.testing.assert_allclose(float(value), ref_value, rtol=1e-12, atol=1e-15)
                np.testing.assert_allclose(float(slope), ref_slope, rtol=1e-10, atol=1e-13)
        compiled = {}
        for case in ND_CASES.values():
            x, d, args = case.arrays("float64")
            if case.jax_fn not in compiled:
                compiled[case.jax_fn] = jax.jit(jax.value_and_grad(case.jax_fn))
            value_and_grad = compiled[case.jax_fn]
            for t in (0.0, 1e-3, 0.5):
                point = jnp.asarray(x + t * d)
                value, grad = value_and_grad(point, *map(jnp.asarray, args))
                ref_value, ref_grad = case.np_fn(np.asarray(point)[: case.size], *case.np_args)
                np.testing.assert_allclose(float(value), ref_value, rtol=1e-12)
                np.testing.assert_allclose(
                    np.asarray(grad)[: case.size], ref_grad, rtol=1e-10, atol=1e-12
                )
            if case.jax_fn is rosenbrock_masked:
                masked = rosenbrock_masked(jnp.asarray(x), jnp.asarray(args[0]))
                plain = rosenbrock(jnp.asarray(x[: case.size]))
                np.testing.assert_allclose(float(masked), float(plain), rtol=1e-14)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("config", ["default", "more_thuente", "demanding"])
@pytest.mark.parametrize("name,t0", CASES_1D)
def test_zoom_1d_accepts_only_strong_wolfe_points(name, t0, config, dtype):
    fn = FUNCTIONS_1D[name]
    ls = zoom_for(fn, config)
    run = run_1d(ls, fn, t0, dtype)
    check_zoom(run, ls, fn.np)
    # mt2's strong Wolfe set, |t - 1.596| <= 2.5e-9 (c2 = 0.1; 2.2e-8 for c2 = 0.9), is finer
    # than float32's resolution there (1.2e-7).
    if config != "demanding" and not (name == "mt2" and dtype == "float32"):
        assert run.success, f"no strong Wolfe point after {run.n} trials; best step {run.step}"


@pytest.mark.parametrize("config", ["default", "more_thuente"])
@pytest.mark.parametrize("name,t0", CASES_1D)
def test_zoom_succeeds_on_more_thuente_functions_float64(name, t0, config):
    """Every Moré & Thuente function from every published start is well posed in float64."""
    fn = FUNCTIONS_1D[name]
    ls = zoom_for(fn, config)
    run = run_1d(ls, fn, t0, "float64")
    check_zoom(run, ls, fn.np)
    assert run.success, f"no strong Wolfe point after {run.n} trials; best step {run.step}"


@pytest.mark.parametrize(
    "dtype,smallest,largest", [("float64", 1e-10, 1e32), ("float32", 1e-8, 1e16)]
)
@pytest.mark.parametrize("c2", [0.9, 0.1])
def test_zoom_on_a_quadratic_from_any_first_trial(c2, dtype, smallest, largest):
    """Issue 33, item 8: on phi(t) = (t - 1)^2 Zoom succeeds from every first trial t0 from
    `smallest` to `largest` (phi(largest) stays finite). From t0 >= 10 (no sufficient
    decrease) the bracket is [0, t0], the cubic through its ends is phi itself, and its
    minimiser t = 1, however near 0 it lies, is the second trial and is accepted. (Zoom used
    to bisect wherever the interpolant lay within 10% of an end: log2(t0) trials, more than
    its 25 from t0 ~ 1e8 on.) From below, each expansion at most quintuples the step (Moré &
    Thuente's bound, t + 4 (t - t_prev))."""
    ls = js.Zoom(c2=c2)
    fn = FUNCTIONS_1D["quadratic"]
    for k in range(round(np.log10(smallest)), round(np.log10(largest)) + 1):
        run = run_1d(ls, fn, 10.0**k, dtype)
        check_zoom(run, ls, fn.np)
        assert run.success, (10.0**k, run.n, run.step)
        if k >= 1:
            assert run.n == 2, (10.0**k, run.trials)
            assert abs(run.step - 1) <= 4 * run.eps, (10.0**k, run.step)


# A demanding c1 puts many trials near the Armijo line, where a wrong test would show.
BACKTRACKING_CONFIGS = {"default": BACKTRACKING, "c1=0.5": js.Backtracking(c1=0.5, shrink=0.7)}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("config", BACKTRACKING_CONFIGS)
@pytest.mark.parametrize("name,t0", CASES_1D)
def test_backtracking_1d_accepts_first_armijo_point(name, t0, config, dtype):
    fn = FUNCTIONS_1D[name]
    ls = BACKTRACKING_CONFIGS[config]
    run = run_1d(ls, fn, t0, dtype)
    check_backtracking(run, ls, t0, fn.np)  # success exactly when some t0 shrink^k is Armijo
    if config == "default":
        assert run.success


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("search", SEARCHES)
@pytest.mark.parametrize("name", ND_CASES)
def test_nd_random_descent_directions(name, search, dtype):
    """Rosenbrock n = 2..10, an SPD quadratic and logistic regression along steepest-descent,
    random descent and (quadratic) Newton directions, first trial 1."""
    ls = SEARCHES[search]
    run = run_nd(ls, name, dtype)
    check(run, ls, 1.0, ND_CASES[name].true_phi(dtype))
    assert run.success


def _scipy_cases():
    """(name, f, fprime, x, d, ours) for the scipy comparison, all float64."""
    cases = []
    for name, fn in FUNCTIONS_1D.items():
        f = lambda x, fn=fn: fn.np(x[0])[0]
        fprime = lambda x, fn=fn: np.array([fn.np(x[0])[1]])
        ours = lambda fn=fn: run_1d(ZOOM, fn, 1.0, "float64")
        cases.append((name, f, fprime, np.zeros(1), np.ones(1), ours))
    for name, case in ND_CASES.items():
        f = lambda x, case=case: case.np_fn(x, *case.np_args)[0]
        fprime = lambda x, case=case: case.np_fn(x, *case.np_args)[1]
        x, d = case.x[: case.size], case.d[: case.size]
        cases.append((name, f, fprime, x, d, lambda name=name: run_nd(ZOOM, name, "float64")))
    return {c[0]: c[1:] for c in cases}


SCIPY_CASES = _scipy_cases()
# phi is unimodal on t > 0 here (convex, or a single minimiser), so two strong Wolfe searches
# that both zoom in on it must end at comparable values; Rosenbrock along a line is a quartic
# with up to two minimisers and mt3 oscillates, so there the steps may differ.
UNIMODAL = {"mt1", "mt2", "mt4", "mt5", "mt6", "quadratic", "quartic"} | {
    name for name in ND_CASES if not name.startswith("rosenbrock")
}


def compare_with_scipy(name):
    """Ours and scipy's line search from the same first trial t = 1 with c1 = 1e-4, c2 = 0.9:
    (our run, scipy's step, scipy's fc (counting phi(0)), scipy's gc)."""
    f, fprime, x, d, ours = SCIPY_CASES[name]
    run = ours()
    step, fc, gc, ok = scipy_line_search(f, fprime, x, d)
    assert ok, "scipy's line search failed"
    return run, step, fc, gc


@pytest.mark.parametrize("name", SCIPY_CASES)
def test_zoom_agrees_with_scipy(name):
    """Both searches succeed and both steps satisfy strong Wolfe (checked here, in float64);
    when both accept the first trial the steps are equal; where phi is unimodal, our value is
    not worse than scipy's by more than 1% of scipy's decrease phi(0) - phi(t_scipy)."""
    f, fprime, x, d, _ = SCIPY_CASES[name]
    run, step, fc, gc = compare_with_scipy(name)
    assert run.success

    def true_phi(t):
        return f(x + t * d), float(fprime(x + t * d) @ d)

    c1, c2 = 1e-4, 0.9
    phi0, dphi0 = true_phi(0.0)
    for t in (run.step, step):
        value, slope = true_phi(t)
        assert value <= phi0 + c1 * t * dphi0 + 1e-14 * abs(phi0), f"step {t}: no decrease"
        assert abs(slope) <= c2 * abs(dphi0) * (1 + 1e-12), f"step {t}: curvature"
    ours_first, scipy_first = run.n == 1, fc == 2 and gc == 1  # scipy's fc counts phi(0)
    if ours_first and scipy_first:
        assert run.step == step == 1.0
    if name in UNIMODAL:
        ours_value, scipy_value = true_phi(run.step)[0], true_phi(step)[0]
        assert ours_value - scipy_value <= 0.01 * (phi0 - scipy_value), (run.step, step)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("search", SEARCHES)
@pytest.mark.parametrize("name", NONFINITE)
@pytest.mark.parametrize("t0", [1.0, 1e3])
def test_nonfinite_trials_are_backed_off_from(t0, name, search, dtype):
    """phi = t^2 - 2t for t < 0.5 and NaN / +inf (or a NaN slope) beyond: the first trial is
    non-finite; the search only tries smaller steps after it and accepts a finite one."""
    fn = NONFINITE[name]
    ls = SEARCHES[search]
    run = run_1d(ls, fn, t0, dtype)
    check(run, ls, t0, fn.np)
    finite = np.isfinite(run.values) & np.isfinite(run.slopes)
    assert not finite[0]
    assert np.all(run.trials[1:] < run.trials[0])
    assert run.success and 0 < run.step < 0.5
    assert np.isfinite(fn.np(run.step)).all()
    if search == "backtracking":  # the first of t0 / 2^k below 0.5
        assert run.step == t0 * 0.5 ** np.ceil(np.log2(t0 / 0.5) + 1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", NONFINITE)
def test_zoom_fails_honestly_when_wolfe_points_are_all_nonfinite(name, dtype):
    """phi = t^2 - 2t with c2 = 0.1: the strong Wolfe set is [0.9, 1.1], all in the non-finite
    region t >= 0.5. From t0 = 1e-3 Zoom expands into that region, must back off, and fail
    with a finite sufficient-decrease step (it has one: 1e-3)."""
    fn = NONFINITE[name]
    ls = js.Zoom(c1=1e-4, c2=0.1)
    run = run_1d(ls, fn, 1e-3, dtype)
    check_zoom(run, ls, fn.np)
    finite = np.isfinite(run.values) & np.isfinite(run.slopes)
    assert not np.all(finite), "never reached the non-finite region"
    assert not run.success
    assert 1e-3 <= run.step < 0.5
    # The step is the lowest finite value seen (alpha_lo), re-evaluated if it was not last.
    assert run.values[-1] == np.min(run.values[finite])


def _out_of_trials_outcome(run: Run, judged: int) -> str:
    if run.success:
        return "success"
    if run.step == 0:
        return "no step"
    return "re-evaluated best" if run.n == judged + 1 else "last trial"


# mt2 from 0.5 expands once and then overshoots, so two trials end in the zoom phase with an
# earlier trial as the best point.
OUT_OF_TRIALS_CASES = [*CASES_1D, ("mt2", 0.5)]


@pytest.mark.parametrize("max_trials", [1, 2, 3])
@pytest.mark.parametrize("name,t0", OUT_OF_TRIALS_CASES)
def test_zoom_out_of_trials(name, t0, max_trials):
    """With too few trials Zoom follows the same trials as with enough, then returns no step
    or an already-evaluated step with sufficient decrease (re-evaluated last if need be), and
    success False; when the full search needed no more trials, the same success. It judges
    `max_trials - 1` trials (one with `max_trials=1`) and evaluates at most `max_trials`."""
    fn = FUNCTIONS_1D[name]
    ls = js.Zoom(max_trials=max_trials)
    max_steps = max(max_trials - 1, 1)  # the trials judged
    full = run_1d(ZOOM, fn, t0, "float64")
    run = run_1d(ls, fn, t0, "float64")
    check_zoom(run, ls, fn.np)  # done, n <= max_trials, step 0 or sufficient decrease
    k = min(run.n, max_steps)
    np.testing.assert_array_equal(run.trials[:k], full.trials[:k])
    if full.success and full.n <= max_steps:
        assert run.success and run.step == full.step and run.n == full.n
    else:
        # As documented: the trial with the lowest value among those with sufficient decrease
        # (re-evaluated as one extra trial if it was not the last), else no step.
        assert not run.success
        tried = run.trials[:max_steps]
        decrease = [check_point(run, i, fn.np, ls.c1, None)[0] for i in range(len(tried))]
        if any(decrease):
            best = min(tried[decrease], key=lambda t: fn.np(t)[0])
            assert run.step == best, (run.step, best, tried)
            assert run.n == max_steps + (run.step != tried[-1])
        else:
            assert run.step == 0


def test_zoom_out_of_trials_exercises_every_outcome():
    """The cases above cover no step, the last trial, and a re-evaluated earlier trial."""
    outcomes = set()
    for max_trials in (2, 3):
        ls = js.Zoom(max_trials=max_trials)
        for name, t0 in OUT_OF_TRIALS_CASES:
            run = run_1d(ls, FUNCTIONS_1D[name], t0, "float64")
            outcomes.add(_out_of_trials_outcome(run, max_trials - 1))
    assert outcomes >= {"no step", "last trial", "re-evaluated best"}, outcomes


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "search,name", [("zoom", "steep"), ("backtracking", "steep"), ("backtracking", "quadratic")]
)
def test_no_sufficient_decrease_within_max_steps_gives_no_step(search, name, dtype):
    """From t0 = 1e3 with three trials judged (Zoom's max_trials = 4 leaves room for the
    re-evaluation of a best trial, Backtracking's 3 does not), no trial has sufficient
    decrease (-t + 1e6 t^4 needs t <= 0.01, and Zoom's trials shrink by at most 10x;
    (t - 1)^2 needs t < 2, Backtracking tries 1e3, 500, 250): no step, no success, and no
    extra evaluation."""
    fn = STEEP if name == "steep" else FUNCTIONS_1D["quadratic"]
    ls = js.Zoom(max_trials=4) if search == "zoom" else js.Backtracking(max_trials=3)
    run = run_1d(ls, fn, 1e3, dtype)
    check(run, ls, 1e3, fn.np)
    for i in range(run.n):  # the premise
        assert not check_point(run, i, fn.np, ls.c1, None)[0], run.trials
    assert run.step == 0 and not run.success and run.n == 3


@pytest.mark.parametrize(
    "make,match",
    [
        pytest.param(lambda: js.Zoom(c1=0.0), r"\bc1 must", id="zoom-c1=0"),
        pytest.param(lambda: js.Zoom(c1=0.5, c2=0.4), r"\bc2 must", id="zoom-c2<c1"),
        pytest.param(lambda: js.Zoom(c2=1.0), r"\bc2 must", id="zoom-c2=1"),
        pytest.param(lambda: js.Zoom(max_trials=0), r"\bmax_trials must", id="zoom-max_trials=0"),
        pytest.param(lambda: js.Backtracking(shrink=1.5), r"\bshrink must", id="bt-shrink=1.5"),
        pytest.param(lambda: js.Backtracking(c1=1.0), r"\bc1 must", id="bt-c1=1"),
    ],
)
def test_constructor_validation(make, match):
    with pytest.raises(ValueError, match=match):
        make()
