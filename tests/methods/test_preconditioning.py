"""A preconditioner P (an approximation of the inverse Hessian) for L-BFGS and nonlinear CG:
the step counts the condition numbers predict, the identity changing nothing, the kinds of P,
dtypes, vmap, one compile for two diagonals, and what is refused."""

import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
import pytest

import jaxsearch as js
import jaxsearch.internal as jsi
from jaxsearch.testing import check_direction

from ..helpers import spread_diagonal

N = 1000  # the ill-conditioned quadratic: eigenvalues evenly spaced in [1, KAPPA]
KAPPA = 1e4
KAPPA_PRECONDITIONED = 1e2  # of P^(1/2) A P^(1/2) with P = diag(c / a) below


def quadratic(x, a):
    """0.5 x'diag(a)x - sum(x), minimised at 1 / a (per leaf for a pytree; the value in
    float32, or float64 where a leaf is)."""

    def term(xi, ai):
        xi, ai = xi.astype(jnp.float32), ai.astype(jnp.float32)
        return 0.5 * jnp.sum(ai * xi * xi) - jnp.sum(xi)

    if isinstance(x, jax.Array) and x.dtype == jnp.float64:
        return 0.5 * jnp.sum(a * x * x) - jnp.sum(x)
    return sum(jax.tree.leaves(jax.tree.map(term, x, a)))


def chebyshev_steps(kappa: float, reduction: float) -> float:
    """The steps after which linear CG's bound |e_k|_A <= 2 ((sqrt(k) - 1) / (sqrt(k) + 1))^k
    |e_0|_A (Nocedal & Wright, eq. 5.36) reaches `reduction` = |e_k|_A / |e_0|_A."""
    root = np.sqrt(kappa)
    return np.log(2 / reduction) / np.log((root + 1) / (root - 1))


KINDS = {"LBFGS": js.LBFGS, "NonlinearCG": js.NonlinearCG}
TIGHT = dict(gtol=1e-6, ftol=0.0, max_steps=5000)


def test_cg_steps_fall_by_the_square_root_of_the_condition_number(compiles):
    """On a quadratic (where nonlinear CG with a near-exact line search is linear CG), a
    preconditioner that takes the condition number from 1e4 to 1e2 divides the steps by
    sqrt(1e4 / 1e2) = 10 (+-20%), and each run takes the steps of the Chebyshev bound for the
    A-norm error it reached (+-20%): 788 and 78 steps measured. P = A^-1 (condition number 1)
    takes 2 steps, with the program compiled for the first diagonal."""
    with jax.enable_x64(True):
        a = jnp.linspace(1.0, KAPPA, N)
        p = jnp.linspace(1.0, KAPPA_PRECONDITIONED, N) / a
        x0 = jnp.zeros(N)
        steps = {}
        for kappa, preconditioner in [(KAPPA, None), (KAPPA_PRECONDITIONED, p)]:
            solver = js.Solver(js.NonlinearCG(preconditioner=preconditioner), **TIGHT)
            result = solver.run(quadratic, x0, a)
            assert bool(result.success)
            error = result.params - 1 / a
            reduction = float(jnp.sqrt(jnp.sum(a * error**2)) / jnp.sqrt(jnp.sum(1 / a)))
            steps[kappa] = int(result.num_steps)
            assert 0.8 <= steps[kappa] / chebyshev_steps(kappa, reduction) <= 1.2
        ratio = steps[KAPPA] / steps[KAPPA_PRECONDITIONED]
        assert 0.8 * 10 <= ratio <= 1.2 * 10, steps

        compiles.reset()
        exact = js.Solver(js.NonlinearCG(preconditioner=1 / a), **TIGHT).run(quadratic, x0, a)
        assert int(exact.num_steps) <= 2 and bool(exact.success)
        assert compiles.count == 0  # another diagonal, the same program


def test_lbfgs_with_the_exact_inverse_diagonal_takes_two_steps(compiles):
    """With P = A^-1 the first direction is Newton's: 2 steps against 542 without; P with
    the condition number 1e2 left, 82 (with the program compiled for the first diagonal)."""
    with jax.enable_x64(True):
        a = jnp.linspace(1.0, KAPPA, N)
        x0 = jnp.zeros(N)
        without = js.Solver(js.LBFGS(), **TIGHT).run(quadratic, x0, a)
        exact = js.Solver(js.LBFGS(preconditioner=1 / a), **TIGHT).run(quadratic, x0, a)
        compiles.reset()
        p = jnp.linspace(1.0, KAPPA_PRECONDITIONED, N) / a
        partial = js.Solver(js.LBFGS(preconditioner=p), **TIGHT).run(quadratic, x0, a)
        assert compiles.count == 0
    assert all(bool(r.success) for r in (without, exact, partial))
    assert int(exact.num_steps) <= 2
    assert 5 * int(partial.num_steps) <= int(without.num_steps)


def rosenbrock(x):
    return jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


@pytest.mark.parametrize(
    "make",
    [
        lambda p: js.LBFGS(preconditioner=p, form="two_loop"),
        lambda p: js.NonlinearCG(preconditioner=p),
    ],
    ids=["LBFGS", "NonlinearCG"],
)
def test_the_identity_changes_no_iterate_of_a_run(make):
    """P = I as a diagonal of ones: a float64 run (Rosenbrock in 10-D: its history of values
    and gradient norms, the final point, the evaluations) equal bit for bit to the run with no
    preconditioner."""
    with jax.enable_x64(True):
        x0 = jnp.linspace(-1.2, 1.0, 10)
        runs = [
            js.Solver(make(p), gtol=1e-10, ftol=0.0, max_steps=60).run(rosenbrock, x0, history=True)
            for p in (None, jnp.ones(10))
        ]
    plain, identity = (jax.device_get(r) for r in runs)
    assert int(plain.num_steps) == int(identity.num_steps) > 10
    np.testing.assert_array_equal(plain.params, identity.params)
    np.testing.assert_array_equal(plain.history.value, identity.history.value)
    np.testing.assert_array_equal(plain.history.grad_norm, identity.history.grad_norm)
    assert int(plain.num_fun_evals) == int(identity.num_fun_evals)


STEPS = 5


@eqx.filter_jit
def directions(direction, a, x0):
    """The directions of `STEPS` steps from x0 on `quadratic` (A = diag(a), of x0's dtype),
    each with the exact step along d, through `compute` and `update` as the solver calls
    them."""
    dtype = x0.dtype

    def grad(x):
        return a * x - 1

    state = direction.init(x0, dtype)
    x, ds = x0, []
    for _ in range(STEPS):
        g = grad(x)
        d, _, state, _ = direction.compute(state, jsi.DirectionInfo(x, g, dtype))
        t = -jnp.vdot(g, d) / jnp.vdot(d, a * d)
        x_new = x + t * d
        state = direction.update(state, x_new - x, grad(x_new) - g, dtype)
        x, ds = x_new, [*ds, d]
    return jnp.stack(ds)


CG_METHODS = ["fletcher-reeves", "polak-ribiere", "hestenes-stiefel", "dai-yuan", "hager-zhang"]
MAKERS = {"LBFGS": lambda p: js.LBFGS(memory_size=3, preconditioner=p)} | {
    f"NonlinearCG-{m}": lambda p, m=m: js.NonlinearCG(method=m, preconditioner=p)
    for m in CG_METHODS
}


@pytest.mark.parametrize("name", list(MAKERS))
def test_the_identity_changes_no_direction(name):
    """Every CG rule and L-BFGS, P = I as a diagonal of ones: the directions of five steps in
    float64 equal bit for bit to those with no preconditioner."""
    with jax.enable_x64(True):
        a = jnp.linspace(1.0, 50.0, 12)
        x0 = jnp.linspace(-1.0, 2.0, 12)
        plain = directions(MAKERS[name](None), a, x0)
        identity = directions(MAKERS[name](jnp.ones(12)), a, x0)
    np.testing.assert_array_equal(plain, identity)


@pytest.mark.parametrize("name", ["LBFGS", "NonlinearCG-hager-zhang"])
def test_a_callable_and_a_lineax_operator_are_the_diagonal(name):
    """The three kinds of P, the same diagonal: the same directions to rounding (float64),
    and not those without P."""
    with jax.enable_x64(True):
        a = jnp.linspace(1.0, 50.0, 12)
        x0 = jnp.linspace(-1.0, 2.0, 12)
        p = jnp.linspace(1.0, 10.0, 12) / a
        kinds = [p, lambda v: v * p, lx.DiagonalLinearOperator(p)]
        each = [directions(MAKERS[name](k), a, x0) for k in kinds]
        plain = directions(MAKERS[name](None), a, x0)
    for d in each[1:]:
        np.testing.assert_allclose(d, each[0], rtol=1e-12, atol=1e-15)
    assert not np.allclose(plain[1:], each[0][1:])


SETTINGS = dict(gtol=1e-2, max_steps=20)


def bowl_data(x0):
    """a (condition number 1e2, in each leaf's dtype) and the exact inverse diagonal in
    float32."""
    a = jax.tree.map(lambda x: jnp.linspace(1.0, 100.0, x.size, dtype=x.dtype), x0)
    return a, jax.tree.map(lambda ai: 1 / ai.astype(jnp.float32), a)


@pytest.mark.parametrize("kind", list(KINDS))
def test_mixed_dtypes(kind):
    """Params a pytree of a bfloat16 and a float32 leaf, P a float32 diagonal: each leaf
    comes back in its dtype, at the minimiser to its precision, in a few steps.
    (`check_direction`, below, covers float16, bfloat16, float32, float64 and mixed params.)"""
    x0 = {"a": jnp.zeros(4, jnp.bfloat16), "b": jnp.zeros(4, jnp.float32)}
    a, p = bowl_data(x0)
    result = js.Solver(KINDS[kind](preconditioner=p), **SETTINGS).run(quadratic, x0, a)
    assert jax.tree.map(lambda x: x.dtype, result.params) == jax.tree.map(lambda x: x.dtype, x0)
    assert int(result.num_steps) <= 3  # 10 and 11 steps without P
    for x, ai in zip(jax.tree.leaves(result.params), jax.tree.leaves(a), strict=True):
        exact = 1 / np.asarray(ai, np.float64)
        rtol = 2e-3 if x.dtype == jnp.float32 else 2e-2
        np.testing.assert_allclose(np.asarray(x, np.float64), exact, rtol=rtol)


@pytest.mark.parametrize("kind", list(KINDS))
def test_vmap_over_starts_and_diagonals(kind):
    """Under `jax.vmap` over (start, diagonal) pairs, the solver built inside the mapped
    function: each lane the run on its own."""
    x0 = jnp.zeros(8, jnp.float32)
    a, p = bowl_data(x0)
    starts = jnp.stack([x0, x0 + 1, x0 - 1])
    diagonals = jnp.stack([p, 2 * p, jnp.ones_like(p)])

    def run(start, diagonal):
        return js.Solver(KINDS[kind](preconditioner=diagonal), **SETTINGS).run(quadratic, start, a)

    mapped = jax.vmap(run)(starts, diagonals)
    for i in range(3):
        alone = run(starts[i], diagonals[i])
        np.testing.assert_allclose(mapped.params[i], alone.params, rtol=1e-5, atol=1e-6)
        assert int(mapped.num_steps[i]) == int(alone.num_steps)


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_direction_contract(kind):
    """`check_direction` (params of several shapes and dtypes) with a callable P."""
    check_direction(KINDS[kind](preconditioner=spread_diagonal))


class Scaled(eqx.Module):
    """P = scale * I, a callable module whose array is a dynamic leaf."""

    scale: jax.Array

    def __call__(self, v):
        return jax.tree.map(lambda x: x * self.scale.astype(x.dtype), v)


def test_a_module_preconditioner_steps_inside_a_jitted_step(compiles):
    """`init` / `step` inside the user's jitted step with a callable module as P: the first
    step is along -P g (a unit fixed step), and a new scale compiles nothing."""
    a = jnp.linspace(1.0, 10.0, 4)
    x0 = jnp.ones(4)

    def solver(scale):
        return js.Solver(js.NonlinearCG(preconditioner=Scaled(scale)), js.FixedStep(1.0))

    @eqx.filter_jit
    def train_step(params, state, scale):
        return solver(scale).step(quadratic, params, state, a)

    state = solver(jnp.asarray(0.1)).init(x0)
    x1, _ = train_step(x0, state, jnp.asarray(0.1))
    compiles.reset()
    x2, _ = train_step(x0, state, jnp.asarray(0.01))
    jax.block_until_ready(x2)
    assert compiles.count == 0
    g = a * x0 - 1
    np.testing.assert_allclose(x1, x0 - 0.1 * g, rtol=1e-6)
    np.testing.assert_allclose(x2, x0 - 0.01 * g, rtol=1e-6)


def test_auto_takes_the_two_loop_form():
    direction = js.LBFGS(preconditioner=spread_diagonal)
    assert direction.form_in_use(10**7) == "two_loop"
    assert js.LBFGS().form_in_use(10**7) == "compact"


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize(
    "preconditioner, error, words",
    [
        (jnp.array([1.0, 0.0]), ValueError, "positive and finite"),
        (jnp.array([1.0, -2.0]), ValueError, "positive and finite"),
        (jnp.array([1.0, jnp.inf]), ValueError, "positive and finite"),
        (jnp.array([1, 2]), TypeError, "floating arrays"),
        ({"a": 1.0}, TypeError, "floating arrays"),
        ({}, ValueError, "at least one leaf"),
    ],
    ids=["zero", "negative", "inf", "integer", "python-float", "empty"],
)
def test_bad_diagonals_are_refused_when_built(kind, preconditioner, error, words):
    with pytest.raises(error, match=f"{kind}: .*{words}"):
        KINDS[kind](preconditioner=preconditioner)


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_diagonal_of_another_structure_is_refused_at_init(kind):
    solver = js.Solver(KINDS[kind](preconditioner=jnp.ones(3)))
    with pytest.raises(ValueError, match=f"{kind}: a diagonal preconditioner must have the"):
        solver.init(jnp.zeros(4))
    with pytest.raises(ValueError, match="structure and shapes of params"):
        solver.init({"a": jnp.zeros(3)})


def test_a_non_symmetric_lineax_operator_is_refused():
    operator = lx.MatrixLinearOperator(jnp.array([[1.0, 2.0], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="LBFGS: a lineax preconditioner must be symmetric"):
        js.LBFGS(preconditioner=operator)


def test_the_compact_form_and_bounds_refuse_a_preconditioner():
    with pytest.raises(ValueError, match='LBFGS: form="compact" takes no preconditioner'):
        js.LBFGS(form="compact", preconditioner=spread_diagonal)
    solver = js.Solver(js.LBFGS(preconditioner=spread_diagonal))
    with pytest.raises(ValueError, match="LBFGS: a preconditioner is not supported with bounds"):
        solver.run(quadratic, jnp.zeros(3), jnp.ones(3), bounds=(jnp.zeros(3), jnp.ones(3)))


def test_the_first_direction_is_minus_p_g_worked_in_at_least_float32():
    """Before any pair (L-BFGS's gamma is 1) and on CG's first call, d = -P g; a callable P
    is called with bfloat16 leaves widened to float32, and d comes back in bfloat16."""
    seen = []

    def halve(v):
        seen.append(v.dtype)
        return v * 0.5

    g = jnp.array([1.0, -2.0, 4.0], jnp.bfloat16)
    for make in KINDS.values():
        direction = make(preconditioner=halve)
        state = direction.init(g, jnp.float32)
        d, _, _, _ = direction.compute(state, jsi.DirectionInfo(g, g, jnp.float32))
        assert d.dtype == jnp.bfloat16
        np.testing.assert_array_equal(np.asarray(d, np.float32), [-0.5, 1.0, -2.0])
    assert seen and set(seen) == {jnp.dtype(jnp.float32)}
