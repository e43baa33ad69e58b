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
import jaxsearch.internal as jsi

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


SGD_SLS = js.Solver(js.Gradient(), js.StochasticArmijo(batches_per_epoch=20))
SGD_SLS_OPTAX = SGD_SLS.as_optax()


@eqx.filter_jit
def plain_step(solver, params, state, xb, yb):
    """One step on (xb, yb), with no `reevaluate`."""
    return solver.step(loss, params, state, xb, yb)


@jax.jit
def optax_update_given(params, opt_state, xb, yb):
    """An update of `SGD_SLS_OPTAX` given f and its gradient on (xb, yb), as optax's
    line-search contract passes them."""
    value, grad = jax.value_and_grad(loss)(params, xb, yb)
    updates, opt_state = SGD_SLS_OPTAX.update(
        grad, opt_state, params, value=value, grad=grad, value_fn=loss, xb=xb, yb=yb
    )
    return optax.apply_updates(params, updates), opt_state


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
    params = make_params(seed=3)
    opt_state = SGD_SLS_OPTAX.init(params)
    batches = make_batches(40, seed=3)
    update = optax_update_given  # f and its gradient on the batch, as optax passes them
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
    return direction.compute(state, jsi.DirectionInfo(None, grad, jnp.float32))


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


# ------------------------------------------------- against the reference (Vaswani et al.)


def _least_squares_batches(num, size, dim, seed, noise=0.0):
    """Mini-batches (A_b, b_b) of an interpolating least-squares problem (noise 0: b = A x*)."""
    rng = np.random.default_rng(seed)
    x_star = rng.normal(size=dim)
    out = []
    for _ in range(num):
        a = rng.normal(size=(size, dim)) * np.linspace(0.5, 2.0, dim)
        out.append((a, a @ x_star + noise * rng.normal(size=size)))
    return out


def _batch_least_squares(x, a, b):
    r = a @ x - b
    return 0.5 * jnp.mean(r * r)


def reference_sls(x0, batches, *, batches_per_epoch, reset, precondition_b2=None, c=0.1):
    """SGD with Armijo line search, transcribed from Vaswani et al. 2019 (algorithms 1 and 2,
    beta = 0.9, gamma = 2, eta_max = 1) in NumPy float64, with the gradient in closed form.
    With `precondition_b2`, AdaSLS of Vaswani et al. 2020 (Adam's second moment with decay
    b2 and eps 1e-8, no momentum): trials x - t D^-1 g, Armijo f - c t g' D^-1 g. Returns the
    iterates and step sizes; raises if a search fails (the reference then moves by 1e-6 g)."""
    x, step, nu = np.array(x0, np.float64), 1.0, np.zeros_like(x0)
    iterates, sizes = [], []
    for k, (a, b) in enumerate(batches):

        def f(z, a=a, b=b):
            r = a @ z - b
            return 0.5 * np.mean(r * r)

        g = a.T @ (a @ x - b) / a.shape[0]
        if precondition_b2 is None:
            d = -g
        else:
            nu = precondition_b2 * nu + (1 - precondition_b2) * g * g
            d = -g / (np.sqrt(nu / (1 - precondition_b2 ** (k + 1))) + 1e-8)
        if k > 0:  # algorithm 2: option 0 keeps the step, 1 grows it, 2 resets it to eta_max
            step = {"keep": step, "grow": step * 2.0 ** (1 / batches_per_epoch), "init": 1.0}[reset]
        f0, slope = f(x), g @ d
        for _ in range(100):
            if f(x + step * d) <= f0 + c * step * slope:
                break
            step *= 0.9
        else:
            raise AssertionError("the reference's search failed")
        x = x + step * d
        iterates.append(x)
        sizes.append(step)
    return np.array(iterates), np.array(sizes)


@pytest.mark.parametrize("reset", ["keep", "grow", "init"])
@pytest.mark.parametrize("preconditioned", [False, True])
def test_steps_are_the_reference_algorithms(reset, preconditioned):
    """SLS + Gradient is Vaswani et al. 2019's SGD + Armijo and SLS + Preconditioned(b1=0) is
    Vaswani et al. 2020's AdaSLS (Adam's preconditioner, no momentum), step for step, in
    float64 with no rounding allowance (epsilon = 0), for each reset option."""
    dim, steps = 5, 30
    batches = _least_squares_batches(steps, 8, dim, seed=11)
    x0 = np.zeros(dim)
    b2 = 0.99
    direction = js.Preconditioned(b1=0.0, b2=b2) if preconditioned else js.Gradient()
    search = js.StochasticArmijo(batches_per_epoch=10, reset=reset, epsilon=0)
    solver = js.Solver(direction, search, gtol=0.0)
    expected_x, expected_t = reference_sls(
        x0,
        batches,
        batches_per_epoch=10,
        reset=reset,
        precondition_b2=b2 if preconditioned else None,
    )
    with jax.enable_x64(True):
        x = jnp.asarray(x0)
        state = solver.init(x, value_dtype=jnp.float64)
        step = eqx.filter_jit(solver.step)
        got_x, got_t = [], []
        for a, b in batches:
            x, state = step(_batch_least_squares, x, state, jnp.asarray(a), jnp.asarray(b))
            got_x.append(np.asarray(x))
            got_t.append(float(state.step_size))
    np.testing.assert_allclose(got_t, expected_t, rtol=1e-10)
    np.testing.assert_allclose(np.array(got_x), expected_x, rtol=1e-8, atol=1e-12)


# ---------------------------------------------------------------- each step on its own batch


def test_a_step_evaluates_f_and_its_gradient_on_its_own_batch():
    """Without `reevaluate`, each step starts from f and its gradient at its params on the
    batch in its args: the new params are x - t grad f_batch(x), with the gradient computed
    here by `jax.value_and_grad`, and the step satisfies Armijo on that batch."""
    params = make_params(seed=7)
    state = SGD_SLS.init(params, value_dtype=jnp.float32)
    for xb, yb in make_batches(4, seed=7):
        before = int(state.num_fun_evals)
        new, state = plain_step(SGD_SLS, params, state, xb, yb)
        value, grad = jax.value_and_grad(loss)(params, xb, yb)
        t = float(state.step_size)
        assert t > 0
        for n, p, g in zip(*map(jax.tree.leaves, (new, params, grad)), strict=True):
            np.testing.assert_allclose(n, p - t * g, rtol=1e-5, atol=1e-7)
        assert armijo_holds(params, new, xb, yb, 0.1)
        # f at params on the new batch, then the trials (at least one)
        assert int(state.num_fun_evals) - before >= 2
        params = new


def test_reevaluate_costs_nothing_more_with_a_stochastic_search():
    """`reevaluate` before a step (as loops written for earlier versions do) changes neither
    the steps nor the count of evaluations."""
    batches = make_batches(5, seed=8)
    runs = []
    for fn in (plain_step, train_step):
        params = make_params(seed=8)
        state = SGD_SLS.init(params, value_dtype=jnp.float32)
        for xb, yb in batches:
            params, state = fn(SGD_SLS, params, state, xb, yb)
        runs.append((params, int(state.num_fun_evals)))
    assert runs[0][1] == runs[1][1]
    for a, b in zip(*(jax.tree.leaves(r[0]) for r in runs), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)  # two programs' rounding


def test_optax_loop_with_value_and_grad_from_state_evaluates_each_batch():
    """optax's documented loop, `value_and_grad_from_state` included: after an update of a
    stochastic search the state holds no value (inf), so the loop evaluates f and its
    gradient on the next batch, and every step satisfies Armijo on its own batch."""
    value_and_grad = optax.value_and_grad_from_state(loss)
    params = make_params(seed=9)
    opt_state = SGD_SLS_OPTAX.init(params)

    @jax.jit
    def update(params, opt_state, xb, yb):
        value, grad = value_and_grad(params, xb, yb, state=opt_state)
        updates, opt_state = SGD_SLS_OPTAX.update(
            grad, opt_state, params, value=value, grad=grad, value_fn=loss, xb=xb, yb=yb
        )
        return optax.apply_updates(params, updates), opt_state

    for xb, yb in make_batches(6, seed=9):
        new, opt_state = update(params, opt_state, xb, yb)
        assert np.isinf(float(opt_state.value))
        assert armijo_holds(params, new, xb, yb, 0.1, slack=1e-4)
        assert float(opt_state.solver.step_size) > 0
        params = new


def test_optax_update_given_value_and_grad_does_not_evaluate_them_again():
    """Given f and its gradient on the update's batch, an update of a stochastic search takes
    the same step as one that evaluates them itself, with one evaluation fewer."""

    @jax.jit
    def evaluated(params, opt_state, xb, yb):
        updates, opt_state = SGD_SLS_OPTAX.update(
            None, opt_state, params, value_fn=loss, xb=xb, yb=yb
        )
        return optax.apply_updates(params, updates), opt_state

    batches = make_batches(5, seed=12)
    ends = []
    for update in (optax_update_given, evaluated):
        params = make_params(seed=12)
        opt_state = SGD_SLS_OPTAX.init(params)
        for xb, yb in batches:
            params, opt_state = update(params, opt_state, xb, yb)
        ends.append((params, int(opt_state.solver.num_fun_evals)))
    assert ends[1][1] == ends[0][1] + len(batches)
    for a, b in zip(*(jax.tree.leaves(e[0]) for e in ends), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)  # two programs' rounding


# ------------------------------------------------------------------ a failed search recovers


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_a_failed_search_carries_its_shrunk_step_and_the_next_step_recovers(dtype):
    """f = 1e5 |x - s|^2 / 2 with every default: along -grad, Armijo (c1 = 0.1) holds iff
    t <= 2 (1 - c1) / 1e5 = 1.8e-5. The first search fails after 100 trials from 1 (no step);
    as in the reference, its shrunk step 0.9^100 is carried forward, so the second search
    starts at 0.9^100 2^(1/500), takes 4 more shrinks and moves; the loss then falls. (In
    bfloat16, whose f rounds at 3 digits, the step accepted may differ from that.)"""
    solver = js.Solver(js.Gradient(), js.StochasticArmijo())

    def f(x, s):
        return 1e5 * jnp.sum((x - s) ** 2) / 2

    with jax.enable_x64(dtype == "float64"):
        s = jnp.asarray([1.0, -2.0, 0.5], dtype)
        x0 = jnp.zeros(3, dtype)
        state = solver.init(x0)
        step = eqx.filter_jit(lambda x, state: solver.step(f, x, state, s))
        x, state = step(x0, state)
        assert js.Status(int(state.status)) == js.Status.LINESEARCH_FAILED
        assert np.array_equal(x, x0)
        x, state = step(x, state)
        assert js.Status(int(state.status)) == js.Status.RUNNING
        if dtype != "bfloat16":
            expected = 0.9**104 * 2 ** (1 / 500)
            np.testing.assert_allclose(float(state.step_size), expected, rtol=1e-5)
        assert x.dtype == x0.dtype and not np.array_equal(x, x0)
        losses = [float(f(x0, s)), float(f(x, s))]
        for _ in range(4):
            x, state = step(x, state)
            losses.append(float(f(x, s)))
    assert all(b < a for a, b in zip(losses, losses[1:], strict=False)), losses
    assert losses[-1] < 0.2 * losses[0], losses


# ----------------------------------------------------------------------- the reset options


@pytest.mark.parametrize(
    "reset,expected", [("keep", [0.3, 2.0, 40.0]), ("grow", [0.6, 4.0, 80.0]), ("init", [0.5] * 3)]
)
def test_reset_options_set_the_first_trial(reset, expected):
    """The paper's options (Vaswani et al. 2019, algorithm 2): 0 "keep" the previous step,
    1 "grow" it by gamma^(b/n), 2 start each search at eta_max ("init": `init_step`). No cap
    by default (the reference has none): a grown step passes 10."""
    ls = js.StochasticArmijo(gamma=4.0, batches_per_epoch=2, init_step=0.5, reset=reset)
    dtype = jnp.float32
    state = ls.init(dtype)
    phi0, dphi0, one, zero = (jnp.asarray(v, dtype) for v in (1.0, -1.0, 1.0, 0.0))
    search = ls.start(state, phi0, dphi0, one, zero)
    assert float(search.trial) == pytest.approx(0.5)
    for accepted, first in zip((0.3, 2.0, 40.0), expected, strict=True):
        done = eqx.tree_at(
            lambda s: (s.step, s.done), search, (jnp.asarray(accepted, dtype), jnp.array(True))
        )
        state = ls.finish(state, done)
        search = ls.start(state, phi0, dphi0, one, zero)
        assert float(search.trial) == pytest.approx(first)


def test_reset_must_be_one_of_the_named_options():
    with pytest.raises(ValueError, match="StochasticArmijo: reset must be one of"):
        js.StochasticArmijo(reset="max")


def test_steps_grow_past_ten_on_a_flat_objective():
    """On 1e-3 |x - s|^2 / 2 Armijo holds up to t = 1800: with no cap the step doubles every
    step (gamma = 2, one batch per epoch) from 1 to 2^10 in 11 steps."""
    solver = js.Solver(js.Gradient(), js.StochasticArmijo(batches_per_epoch=1), gtol=0.0)

    def f(x, s):
        return 1e-3 * jnp.sum((x - s) ** 2) / 2

    x = jnp.zeros(2, jnp.float32)
    state = solver.init(x, value_dtype=jnp.float32)
    step = eqx.filter_jit(lambda x, state, s: solver.step(f, x, state, s))
    rng = np.random.default_rng(3)
    for _ in range(11):
        x, state = step(x, state, jnp.asarray(rng.normal(size=2), jnp.float32))
    assert float(state.step_size) == pytest.approx(2.0**10)


# --------------------------------------------------------------- the default direction descends


def test_the_default_direction_reaches_the_least_squares_minimiser():
    """`Solver(js.Preconditioned())` (its default search: `StochasticArmijo`) on a full-batch
    least-squares problem reaches the closed-form minimiser (NumPy's lstsq in float64) within
    100 steps, in fewer steps than `Gradient()` takes."""
    rng = np.random.default_rng(0)
    a = (rng.normal(size=(64, 6)) * np.linspace(0.3, 3.0, 6)).astype(np.float32)
    b = (a @ rng.normal(size=6) + 0.3 * rng.normal(size=64)).astype(np.float32)
    x_star = np.linalg.lstsq(a.astype(np.float64), b.astype(np.float64), rcond=None)[0]
    x0 = jnp.zeros(6, jnp.float32)
    result = js.Solver(js.Preconditioned(), max_steps=100).run(_batch_least_squares, x0, a, b)
    assert js.Status(int(result.status)) == js.Status.CONVERGED_GTOL
    np.testing.assert_allclose(result.params, x_star, atol=1e-4)
    gradient = js.Solver(js.Gradient(), js.StochasticArmijo(), max_steps=1000)
    reference = gradient.run(_batch_least_squares, x0, a, b)
    assert int(result.num_steps) < int(reference.num_steps)


MLP_DIM, MLP_CLASSES, MLP_HIDDEN = 10, 10, 32


def _mixture(num, seed):
    """Ten classes, each two Gaussian clusters in 10-d, separated enough to be learnt."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(MLP_CLASSES, 2, MLP_DIM)) * 2.5
    y = rng.integers(0, MLP_CLASSES, num)
    x = centres[y, rng.integers(0, 2, num)] + rng.normal(size=(num, MLP_DIM))
    return x.astype(np.float32), y.astype(np.int32)


def _mlp_loss(params, x, y):
    (w1, b1), (w2, b2) = params
    logits = jnp.tanh(x @ w1 + b1) @ w2 + b2
    labels = jax.nn.one_hot(y, MLP_CLASSES, dtype=logits.dtype)
    return -jnp.mean(jnp.sum(labels * jax.nn.log_softmax(logits), axis=-1))


def _mlp_init(seed):
    rng = np.random.default_rng(seed)
    sizes = ((MLP_DIM, MLP_HIDDEN), (MLP_HIDDEN, MLP_CLASSES))
    return [
        (jnp.asarray(rng.normal(size=s) * np.sqrt(2 / sum(s)), jnp.float32), jnp.zeros(s[1]))
        for s in sizes
    ]


def test_the_default_direction_descends_on_mini_batches():
    """An MLP 10-32-10 on 512 points in batches of 32, 6 epochs, the same start and batches:
    with `Preconditioned()` (and SLS, its default search) the training loss after every epoch
    is below that after the first, and ends below 0.05 and within 3x of `Gradient()`'s + 0.01.
    (`Preconditioned(b1=0.9)`, the default before, which searches along its momentum,
    climbed here: 0.66 after epoch 1, 1.65 after epoch 4.)"""
    x_all, y_all = _mixture(512, seed=1)
    batches_per_epoch, seed = 512 // 32, 0
    order = np.random.default_rng(seed + 10)
    epochs = [order.permutation(512).reshape(batches_per_epoch, 32) for _ in range(6)]
    losses = {}
    for name, direction in (("default", js.Preconditioned()), ("gradient", js.Gradient())):
        solver = js.Solver(direction, js.StochasticArmijo(batches_per_epoch=batches_per_epoch))

        @eqx.filter_jit
        def epoch(params, state, xs, ys, solver=solver):
            def body(carry, batch):
                return solver.step(_mlp_loss, *carry, *batch), None

            return jax.lax.scan(body, (params, state), (xs, ys))[0]

        params = _mlp_init(seed)
        state = solver.init(params, value_dtype=jnp.float32)
        losses[name] = []
        for idx in epochs:
            params, state = epoch(params, state, x_all[idx], y_all[idx])
            losses[name].append(float(_mlp_loss(params, x_all, y_all)))
    default = losses["default"]
    assert max(default[1:]) < default[0], default
    assert default[-1] < 0.05, default
    assert default[-1] < 3 * losses["gradient"][-1] + 0.01, losses
