"""Test problems and helpers shared by the test files. Each objective is module level, so
its identity (part of the compile key) is stable across tests."""

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize

from jaxsearch._host import host_call

ROSENBROCK_START = (-1.2, 1.0)


def inf_norm(tree) -> float:
    return max(float(jnp.max(jnp.abs(x))) for x in jax.tree.leaves(tree))


def avals(tree):
    """The tree structure, and (shape, dtype, weak_type) of every leaf."""
    leaves, treedef = jax.tree.flatten(tree)
    return treedef, [(x.shape, x.dtype, x.aval.weak_type) for x in leaves]


def scipy_minimize(fn, x0, args=(), *, method, **options):
    """`scipy.optimize.minimize` on fn(x, *args) with its jitted value and gradient (call it
    under `jax.enable_x64(True)` for a float64 reference)."""
    value_and_grad = jax.jit(jax.value_and_grad(fn))

    def f(x):
        value, grad = value_and_grad(jnp.asarray(x), *args)
        return float(value), np.asarray(grad)

    return scipy.optimize.minimize(
        f, np.asarray(x0, np.float64), jac=True, method=method, options=options
    )


def rosenbrock(x):
    """Extended Rosenbrock; minimum 0 at all ones. Classic start (-1.2, 1)."""
    return jnp.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def rosenbrock_f32(x):
    """Rosenbrock evaluated in float32 whatever the dtype of x (low-precision params,
    float32 arithmetic)."""
    return rosenbrock(x.astype(jnp.float32))


def rosenbrock_tree(p):
    """Rosenbrock on {"a": x[:1], "b": (x[1:],)}, to compare with the flat run."""
    x = jnp.concatenate([p["a"], p["b"][0]])
    return rosenbrock(x)


def quadratic(x, a, b):
    """0.5 x'Ax - b'x; minimiser A^{-1} b for SPD A."""
    return 0.5 * x @ (a @ x) - b @ x


def spd_quadratic_data(n=50, cond=100.0, seed=0, dtype=np.float64):
    """A random SPD matrix with condition number `cond`, a right-hand side, and the solution."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    eig = np.logspace(0, np.log10(cond), n)
    a = (q * eig) @ q.T
    a = (a + a.T) / 2
    b = rng.standard_normal(n)
    return a.astype(dtype), b.astype(dtype), np.linalg.solve(a, b).astype(dtype)


def logistic(w, x, y, lam):
    """L2-regularised logistic regression: mean log(1 + exp(-y x'w)) + lam/2 |w|^2, y in {-1, 1}."""
    margins = y * (x @ w)
    return jnp.mean(jnp.logaddexp(jnp.zeros((), margins.dtype), -margins)) + 0.5 * lam * (w @ w)


def logistic_data(n=200, d=10, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    w_true = rng.standard_normal(d)
    y = np.where(x @ w_true + 0.5 * rng.standard_normal(n) > 0, 1.0, -1.0)
    return x.astype(dtype), y.astype(dtype)


# A device array made without a compile (`jnp.array` of a list compiles a conversion), so that
# importing this module compiles nothing (tests/scale/test_accelerator_tier.py).
QUADRATIC_WEIGHTS = jax.device_put(np.array([1.0, 3.0, 10.0], np.float32))


def weighted_quadratic(x, weights):
    """sum weights (x - 2)^2; minimum 0 at x = 2."""
    return jnp.sum(weights * (x - 2.0) ** 2)


def nan_away_from(x, center):
    """The weighted quadratic (the first len(x) of QUADRATIC_WEIGHTS), finite only at `center`
    itself: every trial point that differs from it is NaN."""
    value = weighted_quadratic(x, QUADRATIC_WEIGHTS[: x.shape[0]])
    return jnp.where(jnp.all(x == center), value, jnp.nan)


# Regression data, 30 samples of 5 features: targets B for ridge regression and 0/1 labels for
# a logistic fit (derivatives of a solution with respect to args, solver/test_implicit.py).
_REGRESSION_RNG = np.random.default_rng(0)
REGRESSION_A = _REGRESSION_RNG.normal(size=(30, 5))
REGRESSION_B = REGRESSION_A @ _REGRESSION_RNG.normal(size=5) + 0.1 * _REGRESSION_RNG.normal(size=30)
REGRESSION_LABELS = (
    _REGRESSION_RNG.uniform(size=30) < 1 / (1 + np.exp(-REGRESSION_A @ np.ones(5)))
).astype(np.float64)


def ridge(w, a, b, penalty):
    return 0.5 * jnp.sum((a @ w - b) ** 2) + 0.5 * penalty * jnp.sum(w**2)


def ridge_closed_form(a, b, penalty):
    return jnp.linalg.solve(a.T @ a + penalty * jnp.eye(a.shape[1]), a.T @ b)


def regression_solution(solver, fn, data, penalty):
    """The params `solver.run` reaches on fn(w, *data, penalty) from w = 0 (5 features)."""
    return solver.run(fn, jnp.zeros(5), *data, penalty).params


class EvaluationLog:
    """`fn(x, *args)`, with every evaluation inside a compiled program reported to the host:
    the point, f and the gradient with respect to x, bit for bit as that program computed
    them (a custom VJP computes the gradient in its forward pass and reports it with the point
    and the value; args get no derivative). Under `jax.vmap` each record holds the batch.

    With it a test checks that what a solver returns comes from one evaluation without
    evaluating fn again in a second, separately compiled program, which may round otherwise
    in float16 and bfloat16 (on a CPU with native half-precision arithmetic, say)."""

    def __init__(self, fn):
        self.fn = fn
        self.records: list[tuple] = []

        @jax.custom_vjp
        def logged(x, *args):
            return fn(x, *args)

        def forward(x, *args):
            value, grad = jax.value_and_grad(fn)(x, *args)
            host_call(self._record, x, value, grad)
            return value, (grad, args)

        def backward(saved, cotangent):
            grad, args = saved
            scaled = jax.tree.map(lambda g: cotangent.astype(g.dtype) * g, grad)
            return (scaled, *jax.tree.map(jnp.zeros_like, args))

        logged.defvjp(forward, backward)
        self._logged = logged

    def __call__(self, x, *args):
        return self._logged(x, *args)

    def _record(self, x, value, grad):
        self.records.append(jax.tree.map(np.asarray, (x, value, grad)))

    def assert_evaluated(self, params, value, grad):
        """Fail unless (params, value, grad) is, bit for bit, one recorded evaluation."""
        jax.effects_barrier()  # debug callbacks may still be running when the result is ready
        key = _bits(params)
        at = [(v, g) for x, v, g in self.records if _bits(x) == key]
        assert at, f"params {params} were never evaluated"
        assert any(_bits(v) == _bits(value) and _bits(g) == _bits(grad) for v, g in at), (
            f"value {value} / grad {grad} do not belong to params {params}: {at}"
        )

    @property
    def first_value(self):
        """f at the first point evaluated (x0 in a run)."""
        jax.effects_barrier()
        return self.records[0][1]


def _bits(tree) -> tuple:
    """A pytree's leaves as (dtype, shape, bytes): equal exactly when bitwise equal."""
    arrays = [np.asarray(x) for x in jax.tree.leaves(tree)]
    return tuple((x.dtype.str, x.shape, x.tobytes()) for x in arrays)
