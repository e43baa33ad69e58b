"""New closures over the same computation share one compile (the compile wing's stand-ins, read
through its test seam, `jaxsearch._compile.seam`): a library that builds its loss as a new
closure for every fit compiles the solver once. Closures that compute something else (other
captured arrays, other constants, another custom rule) do not share, and each gets its own
answer."""

import os
import subprocess
import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js
from jaxsearch._compile import seam
from jaxsearch._objective import Objective

from ..helpers import solver


def scalar(fn) -> Objective:
    """fn as a solver of a scalar f without aux takes it."""
    return Objective(fn, False, Objective.SCALAR)


DTYPES = [jnp.float16, jnp.bfloat16, jnp.float32, jnp.float64]


def _glm_data(dtype):
    rng = np.random.default_rng(0)
    features = jnp.asarray(rng.normal(size=(30, 3)) * 0.3, dtype)
    counts = jnp.asarray(rng.poisson(2.0, size=(30,)), dtype)
    return features, counts


def _poisson_loss(features, counts, ridge):
    """A new closure on every call, as a wrapping library builds one per fit."""

    def loss(params):
        eta = features @ params["w"] + params["b"]
        return jnp.mean(jnp.exp(eta) - counts * eta) + ridge / 2 * jnp.sum(params["w"] ** 2)

    return loss


def _fits(fn_for_fit, params, solver_, compiles, times=3):
    """`times` runs, each with a new fn; the compiles of each and its result."""
    counts, results = [], []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(times):
            compiles.reset()
            results.append(solver_.run(fn_for_fit(i), params))
            counts.append(compiles.count)
    retraces = [w for w in caught if issubclass(w.category, js.RetraceWarning)]
    return counts, results, retraces


def _poisson_loss_of(params, features, counts):
    eta = features @ params["w"] + params["b"]
    return jnp.mean(jnp.exp(eta) - counts * eta) + 0.1 / 2 * jnp.sum(params["w"] ** 2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_new_closures_over_the_same_computation_compile_once(dtype, compiles):
    gtol = {jnp.float16: 1e-2, jnp.bfloat16: 1e-2, jnp.float32: 1e-5}.get(dtype, 1e-8)
    with jax.enable_x64(dtype == jnp.float64):
        features, counts = _glm_data(dtype)
        params = {"w": jnp.zeros(3, dtype), "b": jnp.zeros((), dtype)}
        method = js.Solver(max_steps=50, gtol=gtol)
        per_fit, results, retraces = _fits(
            lambda _: _poisson_loss(features, counts, 0.1), params, method, compiles
        )
        assert per_fit[0] >= 1 and per_fit[1:] == [0, 0]
        assert retraces == []
        first = results[0]
        for result in results[1:]:  # the same program on the same inputs
            assert int(result.num_fun_evals) == int(first.num_fun_evals)
            np.testing.assert_array_equal(result.params["w"], first.params["w"])
    # and the answer is the computation's: a float64 run on the same data
    with jax.enable_x64(True):
        f64 = {"w": jnp.zeros(3, jnp.float64), "b": jnp.zeros((), jnp.float64)}
        data = (features.astype(jnp.float64), counts.astype(jnp.float64))
        reference = js.Solver(gtol=1e-10).run(_poisson_loss_of, f64, *data)
    tolerance = {jnp.float16: 0.05, jnp.bfloat16: 0.1}.get(dtype, 1e-4)
    np.testing.assert_allclose(
        np.asarray(first.params["w"], np.float64), reference.params["w"], atol=tolerance
    )


def test_closures_over_other_data_compile_again_with_their_own_answers(compiles):
    method = js.Solver(max_steps=50, gtol=1e-6)
    centres = [jnp.full((2,), c) for c in (1.0, 2.0, 3.0)]
    per_fit, results, _ = _fits(
        lambda i: lambda x: jnp.sum((x - centres[i]) ** 2), jnp.zeros(2), method, compiles
    )
    assert all(count >= 1 for count in per_fit)
    for centre, result in zip(centres, results, strict=True):
        np.testing.assert_allclose(result.params, centre, rtol=1e-5)


def test_closures_over_other_python_numbers_compile_again(compiles):
    """A captured Python number is a literal of the jaxpr: 0.1 and 0.2 are two programs."""
    method = js.Solver(max_steps=50, gtol=1e-6)
    scales = [1.0, 2.0, 4.0]
    per_fit, results, _ = _fits(
        lambda i: lambda x: jnp.sum((scales[i] * x - 1.0) ** 2), jnp.zeros(2), method, compiles
    )
    assert all(count >= 1 for count in per_fit)
    for scale, result in zip(scales, results, strict=True):
        np.testing.assert_allclose(result.params, 1.0 / scale, rtol=1e-5)


def _scaled_gradient_identity(factor):
    """An identity whose custom_jvp scales the tangent by `factor`: new closures with the same
    primal computation and another rule."""

    @jax.custom_jvp
    def identity(x):
        return x

    @identity.defjvp
    def rule(primals, tangents):
        return primals[0], factor * tangents[0]

    return identity


def test_custom_rules_are_compared_not_just_the_primal(compiles):
    """Two objectives whose value is the same but whose custom_jvp rules differ give other
    gradients: they must not share a program."""
    method = js.Solver(js.Gradient(), js.FixedStep(0.25), max_steps=1, gtol=0.0)

    def objective(factor):
        identity = _scaled_gradient_identity(factor)
        return lambda x: jnp.sum(identity(x) ** 2)

    one = method.run(objective(1.0), jnp.ones(2))
    two = method.run(objective(2.0), jnp.ones(2))
    # x - 0.25 * factor * 2x
    np.testing.assert_allclose(one.params, 0.5)
    np.testing.assert_allclose(two.params, 0.0)


def test_library_functions_with_custom_rules_share(compiles):
    """relu and softplus are custom_jvp functions, with a rule traced anew per closure."""
    method = js.Solver(max_steps=20, gtol=1e-4)
    target = jnp.array([0.5, -0.25, 1.0])

    def fit(_):
        return lambda x: jnp.sum(jax.nn.softplus(x) + jax.nn.relu(x) - target * x)

    per_fit, _, retraces = _fits(fit, jnp.zeros(3), method, compiles)
    assert per_fit[1:] == [0, 0] and retraces == []


def test_hessian_vector_products_share_and_are_right(compiles):
    """Newton-CG differentiates fn twice; new closures share its program too."""
    method = solver("NewtonCG", "Zoom", max_steps=20, gtol=1e-8)
    a = jnp.array([[3.0, 1.0], [1.0, 2.0]])
    b = jnp.array([1.0, -1.0])
    per_fit, results, _ = _fits(
        lambda _: lambda x: 0.5 * x @ a @ x - b @ x, jnp.zeros(2), method, compiles
    )
    assert per_fit[1:] == [0, 0]
    np.testing.assert_allclose(results[-1].params, jnp.linalg.solve(a, b), rtol=1e-5)


def test_a_callback_keeps_one_compile_per_object(compiles):
    """A callback's effect is each closure's own: nothing to compare, so fn is its own key."""
    method = js.Solver(max_steps=5, gtol=1e-3)
    seen = []

    def fit(_):
        def fn(x):
            value = jnp.sum(x**2)
            jax.debug.callback(seen.append, value)
            return value

        return fn

    fn = fit(0)
    assert seam.by_computation(scalar(fn), jnp.ones(2), ()) is fn
    per_fit, results, _ = _fits(fit, jnp.ones(2), method, compiles, times=2)
    assert all(count >= 1 for count in per_fit)
    assert all(r.status == js.Status.CONVERGED_GTOL for r in results)
    assert len(seen) >= 2


def test_step_shares_for_new_closures(compiles):
    method = js.Solver(max_steps=20, gtol=1e-4)
    centre = jnp.array([1.0, -2.0])
    x = jnp.zeros(2)
    state = method.init(x)
    counts = []
    for _ in range(3):
        compiles.reset()
        x, state = method.step(lambda p: jnp.sum((p - centre) ** 2), x, state)
        counts.append(compiles.count)
    assert counts[1:] == [0, 0]
    np.testing.assert_allclose(x, centre, rtol=1e-4)


def _vmapped_fits(fit, method, compiles, *batched, times=3):
    """`times` runs of `jax.vmap(method.run)`, each with fit(i)'s new fn; the compiles of
    each and its result."""
    counts, results = [], []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(times):
            compiles.reset()
            results.append(jax.vmap(lambda x, *a, i=i: method.run(fit(i), x, *a))(*batched))
            counts.append(compiles.count)
    retraces = [w for w in caught if issubclass(w.category, js.RetraceWarning)]
    return counts, results, retraces


def test_vmapped_runs_share_for_new_closures(compiles):
    """An eager `jax.vmap` of `run` (ten models at once, as a wrapping library fits them):
    new closures over the same computation compile once, and each problem of the batch gets
    its own answer, the closed form's."""
    method = js.Solver(max_steps=50, gtol=1e-6)
    scale = jnp.array([1.0, 2.0, 3.0])  # captured: a constant of the jaxpr, equal bit for bit
    centres = jnp.arange(12.0).reshape(4, 3)

    def fit(_):
        return lambda x, centre: jnp.sum(scale * (x - centre) ** 2)

    per_fit, results, retraces = _vmapped_fits(fit, method, compiles, jnp.zeros((4, 3)), centres)
    assert per_fit[0] >= 1 and per_fit[1:] == [0, 0]
    assert retraces == []
    for result in results:
        np.testing.assert_allclose(result.params, centres, rtol=1e-5)
        assert (result.status == js.Status.CONVERGED_GTOL).all()


def test_vmapped_closures_over_other_data_keep_their_own_answers(compiles):
    """Under vmap, closures over other arrays compile again, and closures over the batch's
    own (traced) values are never shared: each gets its own answer."""
    method = js.Solver(max_steps=50, gtol=1e-6)
    offsets = [jnp.full((3,), c) for c in (0.0, 10.0)]
    centres = jnp.arange(12.0).reshape(4, 3)
    per_fit, results, _ = _vmapped_fits(
        lambda i: lambda x, centre: jnp.sum((x - centre - offsets[i]) ** 2),
        method,
        compiles,
        jnp.zeros((4, 3)),
        centres,
        times=2,
    )
    assert all(count >= 1 for count in per_fit)
    for offset, result in zip(offsets, results, strict=True):
        np.testing.assert_allclose(result.params, centres + offset, rtol=1e-5)
    # fn closes over the batched centre itself: a tracer, compared to nothing
    for shift in (0.0, 1.0):
        result = jax.vmap(
            lambda x, centre, shift=shift: method.run(
                lambda y: jnp.sum((y - centre - shift) ** 2), x
            )
        )(jnp.zeros((4, 3)), centres)
        np.testing.assert_allclose(result.params, centres + shift, rtol=1e-5)


def test_vmapped_steps_share_for_new_closures(compiles):
    method = js.Solver(max_steps=20, gtol=1e-4)
    centres = jnp.array([[1.0, -2.0], [3.0, 0.5]])
    x = jnp.zeros((2, 2))
    state = jax.vmap(method.init)(x)
    counts = []
    for _ in range(4):
        compiles.reset()
        x, state = jax.vmap(
            lambda p, s, c: method.step(lambda q, c: jnp.sum((q - c) ** 2), p, s, c)
        )(x, state, centres)
        counts.append(compiles.count)
    assert counts[1:] == [0, 0, 0]
    np.testing.assert_allclose(x, centres, rtol=1e-4)


def test_equality_is_by_bits():
    """-0.0 and 0.0 (and two NaNs) compare by their bits, as they compute differently."""
    x = jnp.ones(2)
    keys = [
        seam.by_computation(scalar(lambda p, c=c: jnp.sum(p / c)), x, ()) for c in (0.0, -0.0, 0.0)
    ]
    assert keys[0] == keys[2] and keys[0] != keys[1]
    weights = [jnp.array([1.0, 2.0]), jnp.array([1.0, 2.0]), jnp.array([1.0, 3.0])]
    keys = [seam.by_computation(scalar(lambda p, w=w: jnp.sum(w * p**2)), x, ()) for w in weights]
    assert keys[0] == keys[1] and hash(keys[0]) == hash(keys[1]) and keys[0] != keys[2]
    # other argument types: another key
    assert seam.by_computation(
        scalar(lambda p: jnp.sum(p**2)), jnp.ones(3), ()
    ) != seam.by_computation(scalar(lambda p: jnp.sum(p**2)), jnp.ones(2), ())


_LOWER_TWICE = """
import jax, jax.numpy as jnp
import jaxsearch as js
method = js.Solver(max_steps=5)
def lowered():
    fn = lambda x: jnp.sum(x**2)
    return jax.jit(lambda x: method.run(fn, x).params).lower(jnp.ones(3)).as_text()
assert jax.device_count() == 1
print(lowered() == lowered())
"""


def test_the_same_run_lowers_to_the_same_module():
    """Lowered twice (inside a caller's jit, with a new closure each time), a run is the same
    module text on one device, so JAX's persistent compilation cache finds it within the
    process too: no per-lowering numbering there, such as `shard_alike`'s groups. (In a
    process of its own: the suite's workers have 8 CPU devices, see
    tests/scale/test_sharding.py.)"""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    done = subprocess.run(
        [sys.executable, "-c", _LOWER_TWICE], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
