"""Zoom on convex quadratics in float64: whatever its first trial, a Wolfe search must not fail.

A strong Wolfe search on a convex quadratic always has an acceptable step, and the cubic
through a bracket's ends is then phi itself, whose minimiser is exact: Zoom must find it
wherever the first trial lies, however far past the minimiser (issue 33, item 8). Each
direction of the registry runs with `Zoom()` on a batch of random quadratics (one compiled,
vmapped run per direction); every run must end converged (checked against the closed-form
minimiser), at its step budget for the directions that are slow on ill-conditioned problems,
or stalled where f has no precision left.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js

from ..helpers import DIRECTIONS

N = 5  # problems of dimension k <= N live in R^N: see `_problems`
BATCH = 60
MAX_STEPS = 300
RELATIVE_GTOL = 1e-9  # gtol of each run, relative to its |grad f(x0)|_inf
# Steepest descent, nonlinear CG, Adam's diagonal scaling and Barzilai-Borwein steps under a
# monotone search need far more than MAX_STEPS steps at condition 1e6.
SLOW = {
    "Gradient",
    "NonlinearCG",
    "NonlinearCG-preconditioned",
    "Preconditioned",
    "BarzilaiBorwein",
}


def quadratic(x, A, c, s, o):
    """s ((x - c)' A (x - c) / 2 + o): minimiser c, minimum s o."""
    r = x - c
    return s * (0.5 * (r @ (A @ r)) + o)


def _problems(seed: int) -> dict[str, np.ndarray]:
    """BATCH random convex quadratics, float64 numpy arrays with a leading batch axis.

    Problem i has dimension k = 1 + i % N: its Hessian is a random SPD k x k block (condition
    number 10^U(0, 6), eigenvalues log-uniform between 1 and it) padded with the identity, and
    its start x0 equals c outside the block, where the gradient is then exactly 0, so no
    direction moves those coordinates. f is scaled by 10^U(-8, 8), shifted by 0 or
    +-10^U(-3, 3) times its initial excess over the minimum (a large shift puts the last
    decreases inside f's rounding error), and c has scale 10^U(-3, 3). Half the starts lie
    at a random distance 10^U(-3, 3); the other half at a distance 1 + delta (delta =
    10^U(-12, -2)) along an eigenvector, the pattern of issue 33, item 8 (f = x^2 - 1 from
    x0 = 1.0001): the solver's unit-length first step lands delta from c, and the next first
    trial (Nocedal & Wright eq. 3.60) overshoots the minimiser by about 1 / delta^2."""
    rng = np.random.default_rng(seed)
    fields = {name: [] for name in ("x0", "A", "c", "s", "o")}
    for i in range(BATCH):
        k = 1 + i % N
        kappa = 10 ** rng.uniform(0, 6)
        eigenvalues = 10 ** rng.uniform(0, np.log10(kappa), k)
        eigenvalues[0], eigenvalues[-1] = 1.0, kappa if k > 1 else eigenvalues[-1]
        Q, _ = np.linalg.qr(rng.standard_normal((k, k)))
        A = np.eye(N)
        A[:k, :k] = (Q * eigenvalues) @ Q.T
        A = (A + A.T) / 2
        c = rng.standard_normal(N) * 10 ** rng.uniform(-3, 3)
        x0 = c.copy()
        if i % 2:
            x0[:k] += rng.standard_normal(k) * 10 ** rng.uniform(-3, 3)
        else:
            delta = 10 ** rng.uniform(-12, -2)
            x0[:k] += Q[:, rng.integers(k)] * (1 + delta) * rng.choice([-1.0, 1.0])
        excess = 0.5 * (x0 - c) @ A @ (x0 - c)
        shift = rng.choice([0.0, 1.0, -1.0]) * 10 ** rng.uniform(-3, 3) * excess
        for name, value in zip(fields, (x0, A, c, 10 ** rng.uniform(-8, 8), shift), strict=True):
            fields[name].append(value)
    return {name: np.array(values) for name, values in fields.items()}


@functools.cache
def _batched_run(direction: str):
    """The vmapped run of `direction` + `Zoom()` over problems and their gtol (compiled once)."""

    def one(x0, A, c, s, o, gtol):
        solver = js.Solver(
            DIRECTIONS[direction](), js.Zoom(), gtol=gtol, ftol=0.0, max_steps=MAX_STEPS
        )
        return solver.run(quadratic, x0, A, c, s, o)

    return jax.jit(jax.vmap(one))


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_zoom_never_fails_on_a_convex_quadratic(direction, seed):
    """No run ends LINESEARCH_FAILED or NONFINITE. Each converges (gtol = 1e-9 |grad f(x0)|_inf,
    the minimiser then within the bound gtol gives), or ends at MAX_STEPS (steepest descent and
    CG only), or STALLED where f has no precision left: its excess over the minimum, computed
    from the returned x, is within Zoom's rounding allowance (epsilon = 1e-6 in float64) of
    |f*| = |s o|, where values are lost in rounding and the searches compare slopes instead."""
    p = _problems(seed)
    with jax.enable_x64(True):
        arrays = [jnp.asarray(p[name]) for name in ("x0", "A", "c", "s", "o")]
        g0 = jax.vmap(jax.grad(quadratic))(*arrays)
        gtol = RELATIVE_GTOL * np.max(np.abs(np.asarray(g0)), axis=1)
        r = jax.device_get(_batched_run(direction)(*arrays, jnp.asarray(gtol)))
    bad = []
    for i, status in enumerate(js.Status(int(v)) for v in r.status):
        x0, x, A, c = p["x0"][i], np.asarray(r.params[i]), p["A"][i], p["c"][i]
        scale, minimum = p["s"][i], p["s"][i] * p["o"][i]
        excess = scale * 0.5 * (x - c) @ A @ (x - c)
        assert excess < scale * 0.5 * (x0 - c) @ A @ (x0 - c), (i, status.name)
        if status == js.Status.CONVERGED_GTOL:
            # |s A (x - c)|_inf <= gtol and A's least eigenvalue is 1.
            bound = np.sqrt(N) * gtol[i] / scale + 4 * np.finfo(np.float64).eps * np.max(np.abs(c))
            assert np.max(np.abs(x - c)) <= bound * (1 + 1e-6), i
        elif not (
            (status == js.Status.MAX_STEPS and direction in SLOW)
            or (status == js.Status.STALLED and excess <= 1e-6 * abs(minimum))
        ):
            bad.append((i, status.name, excess, minimum))
    assert not bad, (
        f"{len(bad)} of {BATCH} runs end otherwise (index, status, excess, f*): {bad[:8]}"
    )


def test_gradient_zoom_converges_on_issue_quadratic():
    """Issue 33, item 8: f(x) = x^2 - 1 from x0 = 1.0001 in float64. The unit-length first
    step lands at x = 1e-4; the next first trial, N&W eq. 3.60, is about 5e7 where the
    minimiser is at 0.5. Zoom must take the exact interpolated step there (it used to bisect
    [0, 5e7] until its 25 trials ran out and end LINESEARCH_FAILED at |g| = 2e-4)."""
    solver = js.Solver(js.Gradient(), gtol=1e-11, ftol=0)
    assert isinstance(solver.linesearch, js.Zoom)
    with jax.enable_x64(True):
        r = solver.run(lambda x: jnp.sum(x**2) - 1, jnp.array([1.0001]))
    assert r.status == js.Status.CONVERGED_GTOL, js.Status(int(r.status)).name
    assert abs(float(r.params[0])) <= 0.5e-11  # the minimiser is 0, where |f'| = 2 |x|
    assert float(r.value) == -1.0
    # Two steps: the unit-length first step (1 evaluation after f(x0)), then 5e7 and 0.5.
    assert int(r.num_steps) == 2 and int(r.num_fun_evals) == 4
