"""Property-based tests (hypothesis): invariants of `Solver.step` on random problems.

Every direction x line search (FixedStep only with Gradient) is driven step by step on random
SPD quadratics f(x, A, b) = 0.5 x'Ax - b'x (A = Q diag(eigs) Q', condition number in [1, 1e6],
scale over several orders of magnitude), and on every step:

1. f does not increase (beyond the rounding error of f in the problem's dtype);
2. the accepted step satisfies the search's own acceptance test, judged in float64 NumPy at
   the points the step produced (Armijo; strong Wolfe when Zoom / MoreThuente report success;
   Hager-Zhang's T1 or T2 test);
3. the state's leaf shapes, dtypes and weak types never change;
4. params stay finite.

Compile time is the constraint: A and b go through `args` with shapes from a few buckets, so
each (direction, search, dtype, n) compiles one program and every hypothesis example reuses it.
The solvers are module-level objects. Whether a search reported success is not in the
`SolverState`, so the line search is wrapped in `Recorded`, which delegates everything to it
and keeps the finished search's `success` (and its value scale C_k) in its state.

Profiles (tests/helpers.py): "ci" (the default: few examples, derandomized) and "fuzz" (2000
examples per test), selected by the environment variable HYPOTHESIS_PROFILE (`nox -s fuzz`).
"""

import zlib
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import jaxsearch as js
from jaxsearch._linesearch._conditions import value_tolerance

from ..helpers import DIRECTIONS, FUZZ, PROFILE_SETTINGS, SEARCHES, pairs, solver

# ------------------------------------------------------------------- recording wrapper


class Record(eqx.Module):
    success: jax.Array  # the last search's `success`
    C: jax.Array  # its value scale C_k (0 for searches without one)
    approx: jax.Array  # Hager-Zhang: T2 was allowed (approximate mode, or switched)


class Recorded(js.AbstractLineSearch):
    """`inner`, unchanged, with the finished search's `success` kept in the state."""

    inner: js.AbstractLineSearch
    evaluates_each_step: ClassVar[bool] = False
    monotone: ClassVar[bool] = False  # the solver keeps the best point apart

    def allowance(self, state):
        return 0.0

    @property  # type: ignore[misc]
    def max_step_size(self) -> float:  # type: ignore[override]
        return self.inner.max_step_size

    @property
    def max_trials(self) -> int:
        return self.inner.max_trials

    def init(self, dtype):
        zero = jnp.zeros((), dtype)
        false = jnp.array(False)
        return self.inner.init(dtype), Record(false, zero, false)

    def start(self, state, phi0, dphi0, guess, min_step, scaled=None, max_step=None):
        return self.inner.start(state[0], phi0, dphi0, guess, min_step, scaled, max_step)

    def update(self, search, t, phi, dphi):
        return self.inner.update(search, t, phi, dphi)

    def finish(self, state, search):
        scale = getattr(search, "scale", None)
        C = state[1].C if scale is None else scale.C.astype(state[1].C.dtype)
        approx = jnp.asarray(getattr(search, "approx", False)) | jnp.asarray(
            getattr(search, "switched", False)
        )
        return self.inner.finish(state[0], search), Record(search.success, C, approx)


# ------------------------------------------------------------------------ the problems


def quadratic(x, A, b):
    return 0.5 * (x @ (A @ x)) - b @ x


BUCKETS = (1, 2, 7, 50)
LEARNING_RATE = 1e-4  # FixedStep: the largest eigenvalue is at most 1e3, so lr L <= 0.1
NUM_STEPS = 25

PAIRS = pairs()  # the whole registry (tests/helpers.py), FixedStep only with Gradient


def make_search(search: str) -> js.AbstractLineSearch:
    """The registry's search, but FixedStep at this file's LEARNING_RATE."""
    return js.FixedStep(LEARNING_RATE) if search == "FixedStep" else SEARCHES[search]()


# gtol = ftol = 0: the runs go on into the rounding regime near the minimiser, until a search
# stalls or fails, which exercises the searches' rounding safeguards.
SOLVERS = {
    (d, s): js.Solver(
        DIRECTIONS[d](), Recorded(make_search(s)), gtol=0.0, ftol=0.0, max_steps=10_000
    )
    for d, s in PAIRS
}
DTYPES = {"float32": jnp.float32, "float64": jnp.float64}


def _ci_bucket(*key) -> tuple:
    """Under "ci", one n bucket per test case (rotating over the cases, so the suite covers all
    of them with one compile per case); under "fuzz", every bucket."""
    if FUZZ:
        return BUCKETS
    return (BUCKETS[zlib.crc32(repr(key).encode()) % len(BUCKETS)],)


@st.composite
def spd_problems(draw, buckets):
    n = draw(st.sampled_from(buckets))
    seed = draw(st.integers(0, 2**32 - 1))
    log_cond = draw(st.floats(0.0, 6.0))
    log_scale = draw(st.floats(-3.0, 3.0))  # the largest eigenvalue
    log_xstar = draw(st.floats(-2.0, 2.0))
    log_dist = draw(st.floats(-3.0, 2.0))
    rng = np.random.default_rng(seed)
    Q, R = np.linalg.qr(rng.standard_normal((n, n)))
    Q = Q * np.sign(np.diag(R))
    eigs = 10.0 ** (log_scale - np.linspace(0.0, log_cond, n))
    A = (Q * eigs) @ Q.T
    A = 0.5 * (A + A.T)
    xstar = 10.0**log_xstar * rng.standard_normal(n)
    b = A @ xstar
    x0 = xstar + 10.0**log_dist * rng.standard_normal(n)
    return A, b, x0


# -------------------------------------------------------------------------- invariants


def signature(tree) -> dict:
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return {
        jax.tree_util.keystr(path): (x.shape, jnp.dtype(x.dtype).name, jax.typeof(x).weak_type)
        for path, x in flat
    }


class Judge:
    """f, its gradient and their rounding errors in the problem's dtype, in float64 NumPy."""

    def __init__(self, A, b, eps):
        self.A, self.b, self.absA, self.absb = A, b, np.abs(A), np.abs(b)
        self.k = 8.0 * (A.shape[0] + 4) * eps  # a generous bound for sums of n terms
        self.eps = eps

    def f(self, x):
        return 0.5 * x @ self.A @ x - self.b @ x

    def g(self, x):
        return self.A @ x - self.b

    def f_err(self, x):
        ax = np.abs(x)
        return self.k * (0.5 * ax @ self.absA @ ax + self.absb @ ax) + 1e-300

    def slope_err(self, x, s):
        """Rounding error of g(x)'s in the problem's dtype."""
        return self.k * ((self.absA @ np.abs(x) + self.absb) @ np.abs(s))

    def tolerances(self, x, xn, s):
        """(value tolerance, slope tolerance) for conditions between x and xn = x + s: rounding
        of f and of the slopes, and of x + t d to xn (s differs from t d by eps |xn|)."""
        g0, g1 = self.g(x), self.g(xn)
        round_s = self.eps * (np.abs(g0) + np.abs(g1)) @ (np.abs(x) + np.abs(xn))
        slope = self.slope_err(x, s) + self.slope_err(xn, s) + round_s
        return self.f_err(x) + self.f_err(xn) + slope, slope


def check_step(name, judge, search, x, xn, before, after, dtype, step):
    """Invariants 1 and 2 for one step from x to xn; `before`, `after` the states."""
    where = f"{name}, step {step}"
    s = xn - x
    moved = bool(np.any(s != 0))
    t = float(after.step_size)
    if not moved:
        return
    assert t > 0, f"{where}: params moved with step_size {t}"
    f0, f1 = judge.f(x), judge.f(xn)
    g0, g1 = judge.g(x), judge.g(xn)
    dphi0, dphi1 = g0 @ s, g1 @ s  # t phi'(0), t phi'(t)
    ftol_, stol = judge.tolerances(x, xn, s)
    info = (
        f"{where}: t={t:.6g} f0={f0!r} f1={f1!r} t*dphi0={dphi0!r} t*dphi1={dphi1!r} "
        f"value tol={ftol_:.3g} slope tol={stol:.3g} status={int(after.status)} "
        f"success={bool(after.linesearch[1].success)}"
    )
    # Zhang & Hager's reference value C_k (f0 at the first search), with its own rounding.
    reference, reference_tol = f0, 0.0
    if search == "NonmonotoneArmijo":
        kept = before.linesearch[0]
        if float(kept.Q) > 0:
            reference = float(kept.C)
            reference_tol = 4 * float(jnp.finfo(kept.C.dtype).eps) * abs(reference)
    # 1. f does not increase: exactly (float64, at the produced points), and as the state has it.
    # A nonmonotone search bounds it by C_k instead.
    if search not in ("FixedStep", "HagerZhang"):
        assert f1 <= reference + ftol_ + reference_tol, f"f increased: {info}"
    if bool(before.has_eval):
        value_tol = judge.f_err(x) + judge.f_err(xn)
        if search == "HagerZhang":  # its approximate Wolfe test allows a rise of epsilon C_k
            value_tol += value_tolerance(None, after.value.dtype) * float(after.linesearch[1].C)
        if search == "NonmonotoneArmijo":
            value_tol += max(reference - float(before.value), 0.0) + reference_tol
        assert float(after.value) <= float(before.value) + value_tol, (
            f"state.value increased {float(before.value)!r} -> {float(after.value)!r}: {info}"
        )
    success = bool(after.linesearch[1].success)
    status = js.Status(int(after.status))
    assert status not in (js.Status.LINESEARCH_FAILED, js.Status.STALLED), info
    # 2. the search's own acceptance test.
    armijo = lambda c1: f1 <= f0 + c1 * dphi0 + ftol_  # noqa: E731
    strong_wolfe = lambda c2: abs(dphi1) <= c2 * abs(dphi0) + stol  # noqa: E731
    if search == "Backtracking":
        assert success, info
        assert armijo(1e-4), f"Armijo fails: {info}"
    elif search in ("Zoom", "MoreThuente"):
        c1, c2 = (1e-4, 0.9) if search == "Zoom" else (1e-3, 0.9)
        assert armijo(c1), f"Armijo fails: {info}"
        if success:
            assert strong_wolfe(c2), f"strong Wolfe fails after a successful search: {info}"
    elif search == "HagerZhang":
        delta, sigma = 0.1, 0.9
        epsilon = max(1e-6, float(jnp.finfo(dtype).eps) ** 0.5)
        bound = f0 + epsilon * float(after.linesearch[1].C) + ftol_
        approx = bool(after.linesearch[1].approx)
        curvature = dphi1 >= sigma * dphi0 - stol
        t1 = armijo(delta) and curvature
        t2 = approx and f1 <= bound and (2 * delta - 1) * dphi0 + stol >= dphi1 and curvature
        if success:
            assert t1 or t2, f"neither T1 nor T2 holds after a successful search: {info}"
        else:  # the fallback: the lowest trial with (approximate) sufficient decrease
            assert armijo(delta) or (approx and f1 <= bound), f"fallback step: {info}"
    elif search == "NonmonotoneArmijo":  # Zhang & Hager (2004): Armijo against C_k
        assert success, info
        assert f1 <= reference + 1e-4 * dphi0 + ftol_ + reference_tol, f"C_k test fails: {info}"
    elif search == "FixedStep":
        assert success, info
        np.testing.assert_allclose(t, LEARNING_RATE, rtol=1e-6)
        # lr times the largest eigenvalue <= 0.1: gradient descent decreases f.
        assert f1 <= f0 + ftol_, f"f increased: {info}"


def drive(solver, name, search, fn, x, args, judge_fn, dtype, value_dtype=None):
    """Step from x for NUM_STEPS steps or until the status is not RUNNING; check every step."""
    state = solver.init(x, value_dtype)
    sig = signature(state)
    for k in range(NUM_STEPS):
        xn, after = solver.step(fn, x, state, *args)
        assert signature(after) == sig, f"{name}, step {k}: state signature changed"
        assert signature(xn) == signature(x), f"{name}, step {k}: params signature changed"
        assert all(bool(jnp.all(jnp.isfinite(leaf))) for leaf in jax.tree.leaves(xn)), (
            f"{name}, step {k}: non-finite params"
        )
        judge_fn(k, x, xn, state, after)
        x, state = xn, after
        if int(state.status) != js.Status.RUNNING:
            break
    return state


# ------------------------------------------------------------------------------- tests


def _quadratic_case(direction, search, dtype_name):
    key = (direction, search, dtype_name)

    @PROFILE_SETTINGS
    @given(problem=spd_problems(_ci_bucket(*key)))
    def run(problem):
        A, b, x0 = problem
        dtype = DTYPES[dtype_name]
        with jax.enable_x64(dtype_name == "float64"):
            A_, b_, x_ = (jnp.asarray(v, dtype) for v in (A, b, x0))
            judge = Judge(A, b, float(jnp.finfo(dtype).eps))
            name = f"{direction}+{search} {dtype_name} n={len(b)}"

            def judge_fn(k, x, xn, before, after):
                x64 = np.asarray(x, np.float64)
                xn64 = np.asarray(xn, np.float64)
                check_step(name, judge, search, x64, xn64, before, after, dtype, k)

            drive(
                SOLVERS[direction, search], name, search, quadratic, x_, (A_, b_), judge_fn, dtype
            )

    return run


@pytest.mark.parametrize("dtype_name", list(DTYPES))
@pytest.mark.parametrize(("direction", "search"), PAIRS, ids=[f"{d}-{s}" for d, s in PAIRS])
def test_quadratic_invariants(direction, search, dtype_name):
    _quadratic_case(direction, search, dtype_name)()


# ------------------------------------------------------------------- mixed-dtype pytree


def mixed_objective(params, scale_w, centre_w, scale_v, centre_v, coupling):
    """A separable quadratic in float32 of a float32 leaf and a bfloat16 leaf, plus a coupling
    term; minimum 0 at the centres."""
    w = params["w"] - centre_w
    v = params["v"]["u"].astype(jnp.float32) - centre_v
    return (
        0.5 * jnp.sum(scale_w * w**2)
        + 0.5 * jnp.sum(scale_v * v**2)
        + 0.5 * coupling * (jnp.sum(w) * jnp.sum(v)) ** 2
    )


MIXED_PAIRS = [
    ("Gradient", "Backtracking"),
    ("LBFGS", "Zoom"),
    ("BFGS", "MoreThuente"),
    ("NonlinearCG", "HagerZhang"),
    ("NewtonCG", "Zoom"),
    ("LBFGS", "HagerZhang"),
]
MIXED_SOLVERS = {pair: solver(*pair, gtol=0.0, ftol=0.0) for pair in MIXED_PAIRS}


@st.composite
def mixed_problems(draw):
    seed = draw(st.integers(0, 2**32 - 1))
    log_scale = draw(st.floats(-3.0, 3.0))
    log_spread = draw(st.floats(0.0, 4.0))
    log_x = draw(st.floats(-2.0, 2.0))
    coupling = draw(st.floats(0.0, 1.0))
    rng = np.random.default_rng(seed)
    scale_w = 10.0 ** (log_scale - log_spread * rng.random(5))
    scale_v = 10.0 ** (log_scale - log_spread * rng.random(3))
    centre_w = 10.0**log_x * rng.standard_normal(5)
    centre_v = 10.0**log_x * rng.standard_normal(3)
    w0 = centre_w + 10.0**log_x * rng.standard_normal(5)
    v0 = centre_v + 10.0**log_x * rng.standard_normal(3)
    args = (scale_w, centre_w, scale_v, centre_v, np.array(coupling * 10.0**log_scale))
    return args, w0, v0


@pytest.mark.parametrize("check_decrease", [False, True], ids=["state", "decrease"])
@pytest.mark.parametrize(
    ("direction", "search"), MIXED_PAIRS, ids=[f"{d}-{s}" for d, s in MIXED_PAIRS]
)
def test_mixed_pytree_invariants(direction, search, check_decrease):
    """Invariants 3 and 4 on a dict of a float32 and a bfloat16 leaf (value_dtype float32);
    with `check_decrease`, also that f (state.value) does not increase beyond the searches'
    rounding allowance epsilon C_k (`Result`'s contract): near the bfloat16 resolution of the
    params, x + t d rounds off the line, and where the change of f is lost in rounding the
    searches judge a step by its slope (Hager & Zhang 2005, section 4)."""

    @PROFILE_SETTINGS
    @given(problem=mixed_problems())
    def run(problem):
        args, w0, v0 = problem
        args = tuple(jnp.asarray(a, jnp.float32) for a in args)
        params = {"w": jnp.asarray(w0, jnp.float32), "v": {"u": jnp.asarray(v0, jnp.bfloat16)}}
        name = f"{direction}+{search} mixed"

        def judge_fn(k, x, xn, before, after):
            if check_decrease and bool(before.has_eval):
                f0, f1 = float(before.value), float(after.value)
                # f is a float32 sum of 8 + 1 terms: its rounding error is ~ 16 eps f.
                tol = 64 * float(jnp.finfo(jnp.float32).eps) * max(abs(f0), abs(f1))
                scale = after.linesearch  # ValueScale, or a state that holds one
                scale = getattr(scale, "scale", scale)
                allowance = value_tolerance(None, jnp.float32) * float(scale.C)
                assert f1 <= f0 + allowance + tol, (
                    f"{name}, step {k}: f increased {f0!r} -> {f1!r} (allowance {allowance!r})"
                )

        state = drive(
            MIXED_SOLVERS[direction, search],
            name,
            search,
            mixed_objective,
            params,
            args,
            judge_fn,
            jnp.float32,
            value_dtype=jnp.float32,
        )
        assert state.value.dtype == jnp.float32

    run()
