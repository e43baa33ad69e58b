"""Complex parameters: a real f of complex z = x + iy minimised as a function of the pairs (x, y)
(`jaxsearch/_complex.py`), through `run`, `step` and `init`, with mixed real and complex
pytrees, complex64 and complex128, under `jit` and `vmap`; the gradient convention; what is
refused."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js

from ..helpers import DIRECTIONS, LEAN, SEARCHES

M, N = 6, 3
_RNG = np.random.default_rng(37)
A = _RNG.standard_normal((M, N)) + 1j * _RNG.standard_normal((M, N))
B = _RNG.standard_normal(M) + 1j * _RNG.standard_normal(M)
LSTSQ = np.linalg.lstsq(A, B, rcond=None)[0]  # complex128, the reference solution


def squared_residual(z, a, b):
    """|a z - b|^2, a real function of complex z (data a, b through args)."""
    r = a @ z - b
    return jnp.sum(r.real**2 + r.imag**2)


def residuals(z, a, b):
    """a z - b as real pairs: the residuals a least-squares direction takes."""
    r = a @ z - b
    return jnp.stack([r.real, r.imag])


def mixed(params, a, b):
    """|a z - b|^2 + |w - 1|^2 over {"w": real, "z": complex}, with aux."""
    w = params["w"]
    value = squared_residual(params["z"], a, b) + jnp.sum((w - 1) ** 2)
    return value, {"norm_z": jnp.sqrt(jnp.sum(jnp.abs(params["z"]) ** 2))}


def data(dtype):
    return jnp.asarray(A, dtype), jnp.asarray(B, dtype)


# ------------------------------------------------------------------- least squares, by pair

# The required pairs, every other search (a fixed step of 0.02 < 2 / L, L = 48 the largest
# eigenvalue of f's Hessian 2 A^H A as a real map), and each other kind of direction of the
# registry with its default search (forms and variants of one kind aside: L-BFGS's compact
# form, the self-scaled BFGS and Broyden, which see the same real arrays).
PAIRS = [
    ("LBFGS", "Zoom"),
    ("NonlinearCG", "HagerZhang"),
    ("BFGS", "MoreThuente"),
    ("Gradient", "Backtracking"),
    ("LBFGS", "NonmonotoneArmijo"),
    ("Gradient", "StochasticArmijo"),
    ("Gradient", "FixedStep"),
    ("NewtonCG", None),
    ("Newton", None),
    ("Preconditioned", None),
    ("BarzilaiBorwein", None),
]


def make_search(name):
    return None if name is None else js.FixedStep(0.02) if name == "FixedStep" else SEARCHES[name]()


def test_every_direction_reaches_lstsq_complex64():
    """min |A z - b|^2 over complex64 z reaches numpy's `lstsq` solution (to 1e-4, with the
    default gtol 1e-5) with every kind of direction and every line search, and with a least-squares
    direction (Gauss-Newton on the real pairs (Re r, Im r)); compiled together under one
    `jax.jit` (a run inside a caller's jit) to compile once for the lot."""
    solvers = [js.Solver(DIRECTIONS[d](), make_search(s)) for d, s in PAIRS]
    gauss_newton = js.Solver(js.GaussNewton())

    def runs(z0, a, b):
        found = [solver.run(squared_residual, z0, a, b) for solver in solvers]
        return found + [gauss_newton.run(residuals, z0, a, b)]

    results = jax.jit(runs, compiler_options=LEAN)(
        jnp.zeros(N, jnp.complex64), *data(jnp.complex64)
    )
    for (direction, search), result in zip([*PAIRS, ("GaussNewton", None)], results, strict=True):
        # a fixed step ends where a step no longer lowers f in float32 (STALLED)
        assert bool(result.success) or search == "FixedStep", (direction, search, result.message)
        assert result.params.dtype == jnp.complex64 and result.grad.dtype == jnp.complex64
        assert result.value.dtype == jnp.float32  # f of complex64 params: float32
        assert result.state.grad.dtype == jnp.float32 and result.state.grad.shape == (N, 2)
        error = np.max(np.abs(np.asarray(result.params) - LSTSQ))
        assert error <= 1e-4, (direction, search, error)


@pytest.mark.parametrize("direction,search", [(js.LBFGS, js.Zoom), (js.NonlinearCG, js.HagerZhang)])
def test_least_squares_reaches_lstsq_complex128(direction, search):
    """The same in complex128 (under x64), run to rounding: to 1e-8, values in float64."""
    with jax.enable_x64(True):
        solver = js.Solver(direction(), search(), gtol=1e-10, ftol=0.0)
        z0 = jnp.zeros(N, jnp.complex128)
        result = solver.run(squared_residual, z0, *data(jnp.complex128), compiler_options=LEAN)
        assert bool(result.success), result.message
        assert result.params.dtype == jnp.complex128 and result.grad.dtype == jnp.complex128
        assert result.value.dtype == jnp.float64 and result.state.grad.dtype == jnp.float64
        error = np.max(np.abs(np.asarray(result.params) - LSTSQ))
        assert error <= 1e-8, error


def test_complex_residuals_refused():
    def complex_residuals(z, a, b):
        return a @ z - b

    with pytest.raises(TypeError, match=r"complex64.*jnp\.stack\(\[r\.real, r\.imag\]\)"):
        js.Solver(js.GaussNewton()).run(
            complex_residuals, jnp.zeros(N, jnp.complex64), *data(jnp.complex64)
        )


# ------------------------------------------------------------------------- the convention


def test_gradient_convention():
    """`result.grad` is df/dx + i df/dy (compared with `jax.grad` of f as a function of the
    real pair (x, y)): the conjugate of `jax.grad(f)(z)`; and the state's gradient is its
    real view, (df/dx, df/dy) on a last axis, from the same evaluation."""
    a, b = data(jnp.complex64)
    z0 = jnp.asarray(LSTSQ + 0.3 - 0.2j, jnp.complex64)
    result = js.Solver(max_steps=1).run(squared_residual, z0, a, b, compiler_options=LEAN)
    z = result.params
    assert not np.array_equal(z, z0)  # it moved: the gradient is of the point it returns

    def of_pair(x, y):
        return squared_residual(jax.lax.complex(x, y), a, b)

    dx, dy = jax.grad(of_pair, argnums=(0, 1))(z.real, z.imag)
    np.testing.assert_allclose(result.grad, jax.lax.complex(dx, dy), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        result.grad, jnp.conj(jax.grad(squared_residual)(z, a, b)), rtol=1e-5, atol=1e-5
    )
    state = result.state  # the run ended at `params` (a monotone search): one evaluation
    assert np.array_equal(result.iterate, z)
    assert np.array_equal(jax.lax.complex(state.grad[..., 0], state.grad[..., 1]), result.grad)
    # -grad descends: a small step along it lowers f
    lower = squared_residual(z - 1e-3 * result.grad, a, b)
    assert float(lower) < float(result.value)


# ------------------------------------------------------------ mixed pytree, aux, step, vmap


@pytest.fixture(scope="module")
def solver():
    return js.Solver(has_aux=True)


def test_mixed_pytree_with_aux(solver):
    a, b = data(jnp.complex64)
    x0 = {"w": jnp.zeros(2, jnp.float32), "z": jnp.zeros(N, jnp.complex64)}
    result = solver.run(mixed, x0, a, b, compiler_options=LEAN)
    assert bool(result.success), result.message
    assert jax.tree.map(lambda x: x.dtype, result.params) == jax.tree.map(lambda x: x.dtype, x0)
    assert result.grad["w"].dtype == jnp.float32 and result.grad["z"].dtype == jnp.complex64
    np.testing.assert_allclose(result.params["w"], 1.0, atol=1e-4)
    assert np.max(np.abs(np.asarray(result.params["z"]) - LSTSQ)) <= 1e-4
    expected = np.sqrt(np.sum(np.abs(np.asarray(result.params["z"])) ** 2))
    np.testing.assert_allclose(result.aux["norm_z"], expected, rtol=1e-6)


def test_jitted_step_loop(solver, compiles):
    a, b = data(jnp.complex64)
    params = {"w": jnp.zeros(2, jnp.float32), "z": jnp.zeros(N, jnp.complex64)}
    state = solver.init(params, fn=mixed, args=(a, b))
    assert state.grad["z"].shape == (N, 2) and state.grad["z"].dtype == jnp.float32

    @js.jit
    def train_step(params, state, a, b):
        return solver.step(mixed, params, state, a, b)

    params, state = train_step(params, state, a, b)
    compiles.reset()
    for _ in range(25):
        params, state = train_step(params, state, a, b)
    assert compiles.count == 0  # one compile for every step
    assert params["z"].dtype == jnp.complex64 and params["w"].dtype == jnp.float32
    assert int(state.status) in {int(s) for s in js.Status if s.name.startswith("CONVERGED")}
    assert np.max(np.abs(np.asarray(params["z"]) - LSTSQ)) <= 1e-4


def test_step_keeps_weak_complex_avals():
    solver = js.Solver()
    z = jnp.asarray(1 + 1j)  # weakly typed complex64
    state = solver.init(z)
    new, _ = solver.step(lambda z: jnp.real(z) ** 2 + (jnp.imag(z) - 2) ** 2, z, state)
    assert jax.typeof(new) == jax.typeof(z)


def test_vmap_over_z0():
    a, b = data(jnp.complex64)
    z0 = jnp.asarray([[0, 0, 0], [1 + 1j, -2j, 3]], jnp.complex64)
    solver = js.Solver()
    result = jax.vmap(lambda z: solver.run(squared_residual, z, a, b))(z0)
    assert result.params.shape == (2, N) and result.params.dtype == jnp.complex64
    assert np.all(np.asarray(result.success))
    assert np.max(np.abs(np.asarray(result.params) - LSTSQ)) <= 1e-4


def test_resume(compiles):
    """A run's state (the real view's) resumes with complex params: `run(fn, result.iterate,
    state=result.state)` goes on, in the program the first run compiled."""
    a, b = data(jnp.complex64)
    solver = js.Solver(js.NonlinearCG(), max_steps=2, gtol=0.0, ftol=0.0)
    first = solver.run(squared_residual, jnp.zeros(N, jnp.complex64), a, b)
    compiles.reset()
    second = solver.run(squared_residual, first.iterate, a, b, state=first.state)
    assert compiles.count == 0
    assert int(second.num_steps) == 4 and second.params.dtype == jnp.complex64
    assert float(second.value) < float(first.value)


# ---------------------------------------------------------------------------- compile once


def shifted_norm(z, c):
    """|z - c|^2, for the compile count alone (its identity is part of the compile key)."""
    d = z - c
    return jnp.sum(d.real**2 + d.imag**2)


def test_compiles_once_for_new_values(compiles):
    solver = js.Solver()
    rng = np.random.default_rng(0)

    def values():
        return tuple(
            jnp.asarray(rng.standard_normal(4) + 1j * rng.standard_normal(4), jnp.complex64)
            for _ in range(2)
        )

    z0, c = values()
    result = solver.run(shifted_norm, z0, c)
    state = solver.init(z0)
    solver.step(shifted_norm, z0, state, c)
    compiles.reset()
    for _ in range(2):
        z0, c = values()
        result = solver.run(shifted_norm, z0, c)
        np.testing.assert_allclose(result.params, c, atol=1e-5)
        state = solver.init(z0)
        solver.step(shifted_norm, z0, state, c)
    assert compiles.count == 0


def test_gtol_on_the_real_view():
    """gtol bounds the largest |df/dx| and |df/dy|, not |df/dx + i df/dy|: at a start where
    each part of the gradient is 0.9 gtol and its modulus 1.27 gtol, a run has converged."""
    c = jnp.zeros(4, jnp.complex64)
    z0 = jnp.full(4, 0.45e-5 * (1 + 1j), jnp.complex64)  # gradient 2 z0: parts 0.9e-5
    result = js.Solver().run(shifted_norm, z0, c)  # gtol 1e-5
    assert np.max(np.abs(np.asarray(result.grad))) > 1e-5
    assert result.status == js.Status.CONVERGED_GTOL and int(result.num_steps) == 0


# -------------------------------------------------------------------------------- refused


def test_bounds_refused():
    solver = js.Solver()
    z0 = jnp.zeros(2, jnp.complex64)
    message = r"bounds cannot constrain complex params"
    with pytest.raises(TypeError, match=message):
        solver.run(shifted_norm, z0, z0, bounds=(-1.0, 1.0))
    with pytest.raises(TypeError, match=message):
        solver.init(z0, bounds=(-1.0, 1.0))
    state = solver.init(z0)
    with pytest.raises(TypeError, match=message):
        solver.step(shifted_norm, z0, state, z0, bounds=(-1.0, 1.0))


def test_own_gradient_refused():
    solver = js.Solver(value_and_grad=True)
    z0 = jnp.zeros(2, jnp.complex64)
    with pytest.raises(TypeError, match=r"value_and_grad=True\) does not take complex params"):
        solver.run(lambda z: jax.value_and_grad(shifted_norm)(z, z0), z0)


def test_optax_refuses_complex():
    pytest.importorskip("optax")
    transformation = js.Solver().as_optax()
    z0 = jnp.zeros(2, jnp.complex64)
    with pytest.raises(TypeError, match=r"params is a complex array \(complex64\)"):
        transformation.init(z0)


@pytest.mark.filterwarnings("ignore:Complex support in Optimistix")
def test_optimistix_refuses_complex():
    optx = pytest.importorskip("optimistix")
    z0 = jnp.zeros(2, jnp.complex64)
    with pytest.raises(TypeError, match=r"params is a complex array \(complex64\)"):
        optx.minimise(shifted_norm, js.Solver().as_optimistix(), z0, z0)
