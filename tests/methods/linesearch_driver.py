"""The line-search tests' driver: one jitted program per (line search, objective) that
evaluates phi(t) = f(x + t d) and phi'(t) once per `lax.while_loop` iteration, exactly as the
solver does, and records every trial (`Run`); and the independent float64 checks of the
points a search accepted (problems: tests/methods/linesearch_problems.py).

Problems are array arguments of the driver, so each search configuration compiles once per
dtype."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import jaxsearch as js

from .linesearch_problems import ND_CASES, Fn1d, phi_1d

DTYPES = ["float32", "float64"]


def cast(value, dtype):
    return jnp.asarray(value).astype(dtype)


def eps_of(dtype_name: str) -> float:
    return float(np.finfo(np.dtype(dtype_name)).eps)


def precision(dtype_name: str):
    """Context for work in `dtype_name`: float64 needs the (global) x64 switch."""
    return jax.enable_x64(dtype_name == "float64")


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


@functools.cache
def run_nd(ls, name: str, dtype_name: str, guess: float = 1.0) -> Run:
    case = ND_CASES[name]
    with precision(dtype_name):
        x, d, args = case.arrays(dtype_name)
        out = driver(ls, case.jax_fn)(
            jnp.asarray(x), jnp.asarray(d), cast(guess, dtype_name), tuple(map(jnp.asarray, args))
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


def armijo_strictly(run: Run, i: int, true_phi, c1: float) -> bool:
    """Armijo holds at trial i with a margin larger than the rounding allowance."""
    t = float(run.trials[i])
    p0, g0 = true_phi(0.0)
    pt, gt = true_phi(t)
    if not (np.isfinite(pt) and np.isfinite(gt)):  # a non-finite slope is rejected too
        return False
    allowance = abs(run.phi0 - p0) + abs(run.values[i] - pt) + c1 * t * abs(run.dphi0 - g0)
    allowance += 4 * run.eps * (abs(p0) + abs(pt) + c1 * t * abs(g0))
    return bool(pt < p0 + c1 * t * g0 - allowance)
