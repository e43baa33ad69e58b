"""Mini-batch training: `StochasticArmijo` (SLS, Vaswani et al. 2019) and the Adam-like
`Preconditioned` direction.

- every accepted step satisfies the Armijo condition on its own batch, checked here from f and
  its gradient computed by the test on that batch;
- the reset rule: the first trial is the previous accepted step times growth, capped;
- a jitted training step with a new batch each call compiles once; `as_optax` works;
- steps in float32, bfloat16, float16 and float64 keep every dtype;
- settings are checked, with the class named;
- the direction's moments and step match optax's Adam and AMSGrad.
"""

import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import HealthCheck, given, settings

import jaxsearch as js

NUM_CLASSES = 3
BATCH = 32


def loss(params, xb, yb):
    """Softmax cross-entropy of a linear classifier, evaluated in at least float32."""
    w, b = params["w"], params["b"]
    acc = jnp.float64 if w.dtype == jnp.float64 else jnp.float32
    logits = (xb.astype(w.dtype) @ w + b).astype(acc)
    labels = jax.nn.one_hot(yb, NUM_CLASSES, dtype=acc)
    return -jnp.mean(jnp.sum(labels * jax.nn.log_softmax(logits), axis=-1))


def quadratic(x, shift):
    """0.5 |x - shift|^2: with d = -grad, a trial t passes Armijo (c1) iff t <= 2 (1 - c1)."""
    r = x - shift
    return 0.5 * jnp.sum(r * r)


def make_params(dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(2, NUM_CLASSES)) * 0.1
    return {"w": jnp.asarray(w.astype(dtype)), "b": jnp.zeros(NUM_CLASSES, dtype)}


def make_batches(num, seed=0, dtype=np.float32):
    """Batches of a three-class Gaussian mixture, as NumPy arrays (no compile to make them)."""
    rng = np.random.default_rng(seed)
    centres = np.array([[2.0, 0.0], [-1.0, 1.7], [-1.0, -1.7]])
    out = []
    for _ in range(num):
        y = rng.integers(0, NUM_CLASSES, BATCH)
        x = centres[y] + rng.normal(size=(BATCH, 2))
        out.append((x.astype(dtype), y.astype(np.int32)))
    return out


@eqx.filter_jit
def train_step(solver, params, state, xb, yb):
    """One SLS step on (xb, yb): f and its gradient are evaluated anew on this batch."""
    return solver.step(loss, params, solver.reevaluate(state), xb, yb)


@jax.jit
def _armijo_terms(params, new, xb, yb):
    """f(x), f(new) and <grad f(x), new - x> on the batch."""
    f0, g = jax.value_and_grad(loss)(params, xb, yb)
    slope = sum(
        jnp.vdot(gi, ni - pi)
        for gi, ni, pi in zip(*map(jax.tree.leaves, (g, new, params)), strict=True)
    )
    return f0, loss(new, xb, yb), slope


def armijo_holds(params, new, xb, yb, c1, slack=1e-6):
    """f(new) <= f(x) + c1 <grad f(x), new - x> on the batch (new - x = t d), from f and its
    gradient computed here, in float64."""
    with jax.enable_x64(True):
        to64 = lambda a: np.asarray(a, np.float64)  # noqa: E731
        f0, f1, slope = map(float, _armijo_terms(*jax.tree.map(to64, (params, new, xb)), yb))
    return f1 <= f0 + c1 * slope + slack * (1 + abs(f0))


# ---------------------------------------------------------------------- the Armijo condition


def _f32(value):
    return jnp.asarray(value, jnp.float32)


def sls(b1=0.9, b2=0.999, c1=0.1, shrink=0.9, init_step=1.0):
    """The SLS solver of these tests. Its numeric settings are arrays (dynamic leaves), so
    every value shares one compiled step: the tests below reuse it."""
    direction = js.Preconditioned(b1=_f32(b1), b2=_f32(b2))
    search = js.StochasticArmijo(
        c1=_f32(c1),
        shrink=_f32(shrink),
        init_step=_f32(init_step),
        batches_per_epoch=20,
        max_trials=60,
        epsilon=0,
    )
    return js.Solver(direction, search)


@pytest.fixture(scope="module")
def batches():
    return make_batches(30, seed=1)


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    b1=st.sampled_from([0.0, 0.9]),
    b2=st.sampled_from([0.99, 0.999]),
    c1=st.floats(0.01, 0.5),
    shrink=st.floats(0.3, 0.95),
    init_step=st.floats(0.01, 100.0),
    seed=st.integers(0, 2**16),
)
def test_every_accepted_step_is_armijo_on_its_batch(batches, b1, b2, c1, shrink, init_step, seed):
    solver = sls(b1, b2, c1, shrink, init_step)
    params = make_params(seed=seed)
    state = solver.init(params, value_dtype=jnp.float32)
    taken = 0
    for xb, yb in batches[:10]:
        new, state = train_step(solver, params, state, xb, yb)
        if float(state.step_size) > 0:
            taken += 1
            assert armijo_holds(params, new, xb, yb, c1)
        else:  # no step: params unchanged
            assert all(jax.tree.leaves(jax.tree.map(jnp.array_equal, new, params)))
        params = new
    assert taken >= 8


# --------------------------------------------------------------------------- the reset rule


def test_first_trial_is_init_step_then_grown_previous_step_capped():
    ls = js.StochasticArmijo(gamma=4.0, batches_per_epoch=2, init_step=0.3, max_step_size=5.0)
    assert ls.growth == pytest.approx(2.0)
    dtype = jnp.float32
    state = ls.init(dtype)
    phi0, dphi0, one, zero = (jnp.asarray(v, dtype) for v in (1.0, -1.0, 1.0, 0.0))
    search = ls.start(state, phi0, dphi0, one, zero)  # the solver's guess (1) is ignored
    assert float(search.trial) == pytest.approx(0.3)
    for accepted, expected in ((0.3, 0.6), (2.0, 4.0), (3.0, 5.0)):
        done = eqx.tree_at(
            lambda s: (s.step, s.done), search, (jnp.asarray(accepted, dtype), jnp.array(True))
        )
        state = ls.finish(state, done)
        search = ls.start(state, phi0, dphi0, one, zero)
        assert float(search.trial) == pytest.approx(expected)
    # A search that takes no step keeps the previous accepted step.
    failed = eqx.tree_at(
        lambda s: (s.step, s.done), search, (jnp.asarray(0.0, dtype), jnp.array(True))
    )
    assert float(ls.finish(state, failed).prev_step) == pytest.approx(3.0)
    # A dynamic cap below the grown step caps the first trial too.
    capped = ls.start(state, phi0, dphi0, one, zero, max_step=jnp.asarray(1.5, dtype))
    assert float(capped.trial) == pytest.approx(1.5)


def test_steps_grow_by_growth_until_the_cap_when_every_first_trial_passes():
    # On 0.5 |x - s|^2 along -grad, Armijo with c1 = 0.1 holds for every t <= 1.8: each step
    # takes its first trial, previous step * 2, up to max_step_size = 0.5.
    ls = js.StochasticArmijo(batches_per_epoch=1, init_step=1e-3, max_step_size=0.5)
    solver = js.Solver(js.Gradient(), ls, gtol=0.0)
    rng = np.random.default_rng(0)
    shifts = [rng.normal(size=4).astype(np.float32) for _ in range(12)]
    x = jnp.zeros(4, jnp.float32)
    state = solver.init(x, value_dtype=jnp.float32)
    step = eqx.filter_jit(
        lambda x, state, s: solver.step(quadratic, x, solver.reevaluate(state), s)
    )
    sizes, evals = [], []
    for s in shifts:
        before = int(state.num_fun_evals)
        x, state = step(x, state, s)
        sizes.append(float(state.step_size))
        evals.append(int(state.num_fun_evals) - before)
    expected = [min(1e-3 * 2.0**k, 0.5) for k in range(len(shifts))]
    np.testing.assert_allclose(sizes, expected, rtol=1e-6)
    assert evals == [2] * len(shifts)  # f at x on the new batch, then the one trial


# ------------------------------------------------------------------- compiles, optax, dtypes


def _avals(tree):
    return jax.tree.map(
        lambda a: (a.shape, a.dtype, getattr(jax.typeof(a), "weak_type", False)), tree
    )


def test_training_step_compiles_once_over_new_batches(compiles):
    solver = sls()
    batches = make_batches(25, seed=2)
    params = make_params()
    state = jax.block_until_ready(solver.init(params, value_dtype=jnp.float32))
    before = (_avals(params), _avals(state))
    compiles.reset()
    params, state = jax.block_until_ready(train_step(solver, params, state, *batches[0]))
    first = compiles.count  # 0 where another test of this module compiled it already
    compiles.reset()
    for xb, yb in batches[1:]:
        params, state = train_step(solver, params, state, xb, yb)
    jax.block_until_ready((params, state))
    assert (first, compiles.count) in ((1, 0), (0, 0))
    assert int(state.num_steps) == len(batches)
    assert (_avals(params), _avals(state)) == before  # float32: every dtype kept


def test_as_optax_trains_on_mini_batches():
    solver = js.Solver(js.Gradient(), js.StochasticArmijo(batches_per_epoch=20))
    opt = solver.as_optax()
    params = make_params(seed=3)
    opt_state = opt.init(params)
    batches = make_batches(40, seed=3)

    @jax.jit
    def update(params, opt_state, xb, yb):
        # f and its gradient on this batch, as optax's line-search contract passes them.
        value, grad = jax.value_and_grad(loss)(params, xb, yb)
        updates, opt_state = opt.update(
            grad, opt_state, params, value=value, grad=grad, value_fn=loss, xb=xb, yb=yb
        )
        return optax.apply_updates(params, updates), opt_state

    x_all = np.concatenate([b[0] for b in batches])
    y_all = np.concatenate([b[1] for b in batches])
    start = float(loss(params, x_all, y_all))
    for xb, yb in batches:
        new, opt_state = update(params, opt_state, xb, yb)
        assert armijo_holds(params, new, xb, yb, 0.1, slack=1e-4)  # epsilon's allowance
        params = new
    assert int(opt_state.count) == len(batches)
    assert float(loss(params, x_all, y_all)) < 0.5 * start


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float64"])  # float32: above
def test_steps_keep_dtypes(dtype):
    sls_solver = sls()
    with jax.enable_x64(dtype == "float64"):
        np_dtype = jnp.dtype(dtype)
        params = make_params(np_dtype)
        value_dtype = jnp.float64 if dtype == "float64" else jnp.float32
        state = sls_solver.init(params, value_dtype=value_dtype)
        before = (_avals(params), _avals(state))
        first = float(loss(params, *make_batches(1, seed=9)[0]))
        for xb, yb in make_batches(
            8, seed=4, dtype=np.float64 if dtype == "float64" else np.float32
        ):
            params, state = train_step(sls_solver, params, state, xb, yb)
        assert (_avals(params), _avals(state)) == before
        assert state.direction.mu["w"].dtype == (np_dtype if dtype == "float64" else jnp.float32)
        assert int(state.num_steps) == 8
        assert float(state.step_size) > 0
        assert float(loss(params, *make_batches(1, seed=9)[0])) < first


# ---------------------------------------------------------------------------- settings


@pytest.mark.parametrize(
    "kwargs,name",
    [
        (dict(c1=0.0), "c1"),
        (dict(c1=1.0), "c1"),
        (dict(shrink=1.0), "shrink"),
        (dict(gamma=0.5), "gamma"),
        (dict(init_step=0.0), "init_step"),
        (dict(batches_per_epoch=0), "batches_per_epoch"),
        (dict(max_step_size=-1.0), "max_step_size"),
        (dict(max_trials=0), "max_trials"),
        (dict(epsilon=-1.0), "epsilon"),
    ],
)
def test_stochastic_armijo_settings_are_checked(kwargs, name):
    with pytest.raises(ValueError, match=f"StochasticArmijo: {name} must"):
        js.StochasticArmijo(**kwargs)


@pytest.mark.parametrize(
    "kwargs,name", [(dict(b1=1.0), "b1"), (dict(b2=-0.1), "b2"), (dict(eps=-1.0), "eps")]
)
def test_preconditioned_settings_are_checked(kwargs, name):
    with pytest.raises(ValueError, match=f"Preconditioned: {name} must"):
        js.Preconditioned(**kwargs)


def test_preconditioned_pairs_with_stochastic_armijo():
    assert js.Solver(js.Preconditioned()).linesearch == js.StochasticArmijo()


# ------------------------------------------------------------------ the moments, against optax


def _gradients(num, seed=5):
    rng = np.random.default_rng(seed)
    return [
        {
            "w": jnp.asarray(
                rng.normal(size=(2, 3)).astype(np.float32) * 10.0 ** rng.integers(-3, 3)
            ),
            "b": jnp.asarray(rng.normal(size=3).astype(np.float32)),
        }
        for _ in range(num)
    ]


def _compute(direction, state, grad):
    return direction.compute(state, js.DirectionInfo(None, grad, jnp.float32))


@pytest.mark.parametrize("amsgrad", [False, True])
def test_moments_and_direction_match_optax(amsgrad):
    b1, b2, eps = 0.8, 0.95, 1e-6
    direction = js.Preconditioned(b1=b1, b2=b2, eps=eps, amsgrad=amsgrad)
    grads = _gradients(12)
    state = direction.init(grads[0], jnp.float32)
    if amsgrad:
        reference = optax.scale_by_amsgrad(b1=b1, b2=b2, eps=eps)
    else:
        reference = optax.scale_by_adam(b1=b1, b2=b2, eps=eps)
    ref_state = reference.init(grads[0])
    for g in grads:
        d, scaled, state, _ = _compute(direction, state, g)
        with jax.numpy_dtype_promotion("standard"):  # optax's bias correction needs it
            updates, ref_state = reference.update(g, ref_state)
        assert not bool(scaled)
        for ours, theirs in (
            (state.mu, ref_state.mu),
            (state.nu, ref_state.nu),
            (d, jax.tree.map(jnp.negative, updates)),
        ):
            for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
                np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=1e-30)
        if amsgrad:
            for a, b in zip(
                jax.tree.leaves(state.nu_max), jax.tree.leaves(ref_state.nu_max), strict=True
            ):
                np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5)
        assert int(state.count_nu) == int(ref_state.count)
    # `update` records nothing: the moments take the gradient in `compute`.
    assert direction.update(state, grads[0], grads[1], jnp.float32, accept=jnp.array(True)) is state


def test_reset_forgets_the_first_moment_and_keeps_the_second():
    direction = js.Preconditioned(b1=0.9, b2=0.999, eps=1e-8)
    grads = _gradients(6, seed=6)
    state = direction.init(grads[0], jnp.float32)
    for g in grads[:-1]:
        _, _, state, _ = _compute(direction, state, g)
    state = direction.reset(state)
    assert int(state.count_mu) == 0 and int(state.count_nu) == len(grads) - 1
    g = grads[-1]
    d, _, after, _ = _compute(direction, state, g)
    # With m forgotten, m_hat = g: d = -g / (sqrt(v_hat) + eps), a descent direction.
    reference = optax.scale_by_adam(b1=0.9, b2=0.999, eps=1e-8)
    ref_state = reference.init(g)
    with jax.numpy_dtype_promotion("standard"):  # optax's bias correction needs it
        for gi in grads:
            _, ref_state = reference.update(gi, ref_state)
    count = len(grads)
    for di, gi, vi in zip(*map(jax.tree.leaves, (d, g, ref_state.nu)), strict=True):
        v_hat = np.asarray(vi) / (1 - 0.999**count)
        np.testing.assert_allclose(
            np.asarray(di), -np.asarray(gi) / (np.sqrt(v_hat) + 1e-8), rtol=2e-5
        )
    dot = sum(
        float(jnp.vdot(a, b)) for a, b in zip(jax.tree.leaves(d), jax.tree.leaves(g), strict=True)
    )
    assert dot < 0
