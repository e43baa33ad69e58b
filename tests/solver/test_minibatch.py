"""L-BFGS on mini-batches, `step` + `reevaluate` (issue 51, item 4): each step's curvature
pair comes from its own batch, and `js.InitialDecaying` with `js.Backtracking` averages the
batches where a unit step on each goes to that batch's minimiser
(`benchmarks/studies/minibatch_lbfgs.py` measures it on a Poisson GLM against optax)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js

SAMPLES, FEATURES, BATCH, STEPS = 2000, 5, 50, 60
RNG = np.random.default_rng(0)
A = RNG.standard_normal((SAMPLES, FEATURES))
B = A @ RNG.standard_normal(FEATURES) + RNG.standard_normal(SAMPLES)  # noise of variance 1
ORDER = np.concatenate([RNG.permutation(SAMPLES) for _ in range(2)])[: STEPS * BATCH]
ORDER = ORDER.reshape(STEPS, BATCH)
X_STAR = np.linalg.lstsq(A, B, rcond=None)[0]


def f(x, a, b):
    return 0.5 * jnp.mean((a @ x - b) ** 2)


def full_f(x) -> float:
    x = np.asarray(x, np.float64)
    return 0.5 * np.mean((A @ x - B) ** 2)


def grad_on(idx, x):
    """The gradient of the batch `idx`'s f at x, in NumPy float64."""
    a, b = A[idx], B[idx]
    return a.T @ (a @ np.asarray(x, np.float64) - b) / len(idx)


@js.jit
def update(solver, x, state, a, b):
    """One update of the client's loop: `step` on a batch, then `reevaluate`."""
    x, state = solver.step(f, x, state, a, b)
    return x, solver.reevaluate(state)


DEFAULT = js.Solver(js.LBFGS(form="two_loop"))  # js.Solver() on a CPU, for 5 params
SOLVERS = {
    "default": DEFAULT,
    "decaying": js.Solver(js.LBFGS(), js.Backtracking(), initial_step=js.InitialDecaying()),
    "decaying zoom": js.Solver(js.LBFGS(), js.Zoom(), initial_step=js.InitialDecaying()),
}


@pytest.fixture(scope="module", params=["float32", "float64"])
def loops(request):
    """dtype, and for each solver: the params after each of the STEPS updates, the state
    after the second and the last."""
    dtype = request.param
    found = {}
    with jax.enable_x64(dtype == "float64"):
        a, b = jnp.asarray(A, dtype), jnp.asarray(B, dtype)
        for name, solver in SOLVERS.items():
            x = jnp.zeros(FEATURES, dtype)
            state = solver.init(x)
            points, states = [x], []
            for k in range(STEPS):
                x, state = update(solver, x, state, a[ORDER[k]], b[ORDER[k]])
                points.append(x)
                states.append(state)
            found[name] = (points, states[1], states[-1])
    return dtype, found


def test_the_pair_of_a_step_after_reevaluate_is_of_its_own_batch(loops):
    """After `reevaluate`, a step's pair is s = x_2 - x_1 and y = grad f_B(x_2) - grad
    f_B(x_1), both gradients on the step's batch B (NumPy's), not on the batch before."""
    dtype, found = loops
    (_, x1, x2, *_), memory = found["default"][0], found["default"][1].direction
    newest = (int(memory.head) - 1) % memory.rho.shape[0]
    assert int(memory.count) == 2
    s, y = np.asarray(memory.s[newest]), np.asarray(memory.y[newest])
    rtol = 1e-10 if dtype == "float64" else 2e-4
    batch = ORDER[1]
    np.testing.assert_allclose(s, np.asarray(x2, np.float64) - np.asarray(x1), rtol=rtol)
    same = grad_on(batch, x2) - grad_on(batch, x1)
    np.testing.assert_allclose(y, same, rtol=rtol, atol=rtol * np.abs(same).max())
    across = grad_on(batch, x2) - grad_on(ORDER[0], x1)  # what optax's loop pairs
    assert np.abs(across - same).max() > 100 * rtol * np.abs(same).max()


def test_a_decaying_gain_averages_the_batches(loops):
    """60 batches of 50 from a least-squares problem with unit noise (excess f - f* of one
    batch's minimiser: about FEATURES / (2 BATCH) = 0.05). With the default (L-BFGS, Zoom)
    every step goes near its batch's minimiser; `InitialDecaying()` with `Backtracking`
    averages them, as a gain 1/k does (about 0.05 / 60); with `Zoom` the search lengthens
    its short trials again and keeps part of the default's excess."""
    dtype, found = loops
    f_star = full_f(X_STAR)
    excess = {name: full_f(points[-1]) - f_star for name, (points, _, _) in found.items()}
    points, _, state = found["decaying"]
    assert points[-1].dtype == jnp.dtype(dtype)
    assert float(state.initial_step) == STEPS  # every step moved, counted by the rule
    assert excess["decaying"] < 2e-3
    assert excess["default"] > 10 * excess["decaying"]
    assert excess["decaying zoom"] > 5 * excess["decaying"]
