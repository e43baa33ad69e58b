"""`Solver.as_optax()` in optax's documented L-BFGS loops, against `optax.lbfgs()` (issues 6
and 16)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxsearch as js

from ..problems import rosenbrock

SOLVER = js.Solver(js.LBFGS(), js.Zoom())
# gtol=ftol=0: the loop's own criterion decides when to stop, as it does for optax.lbfgs().
LOOP_SOLVER = js.Solver(js.LBFGS(), js.Zoom(), gtol=0.0, ftol=0.0)


# optax's L-BFGS solver loop, copied verbatim (do not edit or reformat) from optax's docs,
# "L-BFGS" example, section "L-BFGS solver": examples/lbfgs.ipynb in google-deepmind/optax as
# of v0.2.8 (the installed version), https://optax.readthedocs.io/en/latest/_collections/
# examples/lbfgs.html. Its stopping rule finds `count` and `grad` in the state by name.
# fmt: off
def run_opt(init_params, fun, opt, max_iter, tol):
  value_and_grad_fun = optax.value_and_grad_from_state(fun)

  def step(carry):
    params, state = carry
    value, grad = value_and_grad_fun(params, state=state)
    updates, state = opt.update(
        grad, state, params, value=value, grad=grad, value_fn=fun
    )
    params = optax.apply_updates(params, updates)
    return params, state

  def continuing_criterion(carry):
    _, state = carry
    iter_num = optax.tree.get(state, 'count')
    grad = optax.tree.get(state, 'grad')
    err = optax.tree.norm(grad)
    return (iter_num == 0) | ((iter_num < max_iter) & (err >= tol))

  init_carry = (init_params, opt.init(init_params))
  final_params, final_state = jax.lax.while_loop(
      continuing_criterion, step, init_carry
  )
  return final_params, final_state
# fmt: on


def _documented_loop(opt, fn, params, steps, **extra_args):
    """A Python loop over a jitted step, like the example in optax.lbfgs's docstring."""
    value_and_grad = optax.value_and_grad_from_state(fn)

    @jax.jit
    def step(params, state):
        value, grad = value_and_grad(params, state=state, **extra_args)
        updates, state = opt.update(
            grad, state, params, value=value, grad=grad, value_fn=fn, **extra_args
        )
        return optax.apply_updates(params, updates), state

    state = opt.init(params)
    for _ in range(steps):
        params, state = step(params, state)
    return params, state


def test_documented_loop_both_ways():
    """The same loop with optax.lbfgs() and with jaxsearch: both reach the minimiser of
    Rosenbrock in float64, and f in the state is f at the params."""
    with jax.enable_x64(True):
        x0 = jnp.array([-1.2, 1.0])
        ours, state = _documented_loop(SOLVER.as_optax(), rosenbrock, x0, 60)
        with jax.numpy_dtype_promotion("standard"):  # optax.lbfgs mixes int32 and int64
            theirs, _ = _documented_loop(optax.lbfgs(), rosenbrock, x0, 60)
        np.testing.assert_allclose(np.asarray(ours), 1.0, atol=1e-6)
        np.testing.assert_allclose(np.asarray(theirs), 1.0, atol=1e-6)
        assert float(optax.tree.get(state, "value")) == pytest.approx(float(rosenbrock(ours)))


def test_value_and_grad_from_state_reuses_the_cache():
    """After the first update, value_and_grad_from_state takes f and grad from the state:
    f is evaluated only by the solver's line search."""
    calls = []

    def fn(x):
        jax.debug.callback(lambda: calls.append(1))
        return rosenbrock(x)

    opt = SOLVER.as_optax()
    value_and_grad = optax.value_and_grad_from_state(fn)
    params, state = jnp.array([-1.2, 1.0]), opt.init(jnp.array([-1.2, 1.0]))
    for _ in range(5):
        value, grad = value_and_grad(params, state=state)
        jax.effects_barrier()
        before = len(calls)
        updates, state = opt.update(grad, state, params, value=value, grad=grad, value_fn=fn)
        params = optax.apply_updates(params, updates)
        jax.effects_barrier()
        assert float(state.value) == pytest.approx(float(rosenbrock(params)), rel=1e-6)
        assert len(calls) >= before + 1  # the search evaluated fn at least once
        after_update = len(calls)
        cached, _ = value_and_grad(params, state=state)
        jax.effects_barrier()
        assert len(calls) == after_update  # taken from the state, not evaluated
        assert float(cached) == float(state.value)


def test_compiles_once(compiles):
    """A jitted documented step compiles once over many iterations, and eager updates
    compile nothing after the first."""
    x0 = jnp.array([-1.2, 1.0])
    opt = SOLVER.as_optax()
    opt.init(x0)  # init's own program, compiled once (earlier tests may have done it)
    compiles.reset()
    _documented_loop(opt, rosenbrock, x0, 8)
    assert compiles.count == 1
    params, state = x0, opt.init(x0)
    value, grad = jax.value_and_grad(rosenbrock)(params)
    for i in range(4):
        if i == 1:
            compiles.reset()
        updates, state = opt.update(
            grad,
            state,
            params,
            value=state.value if i else value,
            grad=state.grad if i else grad,
            value_fn=rosenbrock,
        )
        params = optax.apply_updates(params, updates)
    assert compiles.count == 0


def _quadratic(w, data, target):
    return jnp.mean((data @ w - target) ** 2)


def test_extra_args_reach_value_fn():
    rng = np.random.default_rng(0)
    data = jnp.asarray(rng.standard_normal((20, 3)), jnp.float32)
    target = data @ jnp.array([1.0, -2.0, 0.5])
    params, _ = _documented_loop(
        SOLVER.as_optax(), _quadratic, jnp.zeros(3), 20, data=data, target=target
    )
    np.testing.assert_allclose(np.asarray(params), [1.0, -2.0, 0.5], atol=1e-4)


def test_equinox_model():
    """An eqx.nn.MLP as params (it has non-array leaves): updates are None there, and
    eqx.apply_updates applies them."""
    key = jax.random.PRNGKey(0)
    model = eqx.nn.MLP(2, 1, 8, 1, key=key)
    x = jax.random.normal(key, (32, 2))
    y = jnp.sin(x[:, :1])

    def loss(m, x, y):
        return jnp.mean((jax.vmap(m)(x) - y) ** 2)

    opt = SOLVER.as_optax()
    state = opt.init(eqx.filter(model, eqx.is_inexact_array))
    first = float(loss(model, x, y))

    @eqx.filter_jit
    def step(model, state):
        value, grad = eqx.filter_value_and_grad(loss)(model, x, y)
        updates, state = opt.update(
            grad, state, model, value=value, grad=grad, value_fn=loss, x=x, y=y
        )
        return eqx.apply_updates(model, updates), state

    for _ in range(10):
        model, state = step(model, state)
    assert float(loss(model, x, y)) < 0.5 * first


def test_update_needs_params_and_value_fn():
    opt = SOLVER.as_optax()
    state = opt.init(jnp.zeros(2))
    with pytest.raises(ValueError, match="value_fn"):
        opt.update(jnp.zeros(2), state, jnp.zeros(2))


def _paths(state, key):
    return [
        jax.tree_util.keystr(path)
        for path, _ in optax.tree_utils.tree_get_all_with_path(state, key)
    ]


@pytest.mark.parametrize(
    "solver",
    [
        js.Solver(js.LBFGS()),
        js.Solver(js.BFGS()),
        js.Solver(js.NonlinearCG()),
        js.Solver(js.NewtonCG()),
        js.Solver(js.Gradient(), js.Backtracking()),
        js.Solver(js.Gradient(), js.FixedStep(0.1)),
        js.Solver(js.LBFGS(), js.MoreThuente()),
        js.Solver(js.LBFGS(), js.HagerZhang()),
    ],
    ids=lambda s: f"{type(s.direction).__name__}-{type(s.linesearch).__name__}",
)
def test_tree_get_finds_each_key_once(solver):
    """optax.tree.get matches NamedTuple fields and dict keys anywhere in the state and
    raises on two matches: `count`, `value` and `grad` are each found once, in OptaxState
    (the Equinox modules inside, e.g. L-BFGS's own `count`, are not matched)."""
    state = solver.as_optax().init({"a": jnp.zeros(2), "b": (jnp.zeros(3),)})
    for key in ("count", "value", "grad"):
        assert _paths(state, key) == [f"OptaxState.{key}"]
        assert optax.tree.get(state, key) is getattr(state, key)
    assert state.count.dtype == jnp.int32 and not state.count.aval.weak_type


def test_count_counts_every_update():
    """`count` grows on every update, also one that takes no step (params at a minimiser:
    the solver does not search, num_steps stays 0), so optax's loop, which runs while
    count == 0, ends; it saturates instead of wrapping around."""

    def fn(x):
        return jnp.sum((x - 1.0) ** 2)

    opt = SOLVER.as_optax()
    params = jnp.ones(3)
    state = opt.init(params)
    assert int(state.count) == 0
    for i in range(1, 3):
        value, grad = optax.value_and_grad_from_state(fn)(params, state=state)
        updates, state = opt.update(grad, state, params, value=value, grad=grad, value_fn=fn)
        params = optax.apply_updates(params, updates)
        assert int(state.count) == i
    assert int(state.solver.num_steps) == 0
    np.testing.assert_array_equal(np.asarray(params), 1.0)
    top = jnp.array(jnp.iinfo(jnp.int32).max, jnp.int32)
    _, state = opt.update(grad, state._replace(count=top), params, value_fn=fn)
    assert int(state.count) == int(top)


def test_run_opt_rosenbrock_float64():
    """optax's while_loop solver with jaxsearch in place of optax.lbfgs(): stopped by its
    gradient-norm tolerance, at the minimiser of Rosenbrock (all ones), where optax.lbfgs()
    in the same loop ends too; f and grad in the state are those at the final params."""
    with jax.enable_x64(True):
        x0, tol = jnp.zeros((8,)), 1e-8
        ours, state = run_opt(x0, rosenbrock, LOOP_SOLVER.as_optax(), max_iter=100, tol=tol)
        with jax.numpy_dtype_promotion("standard"):  # optax.lbfgs mixes int32 and int64
            theirs, _ = run_opt(x0, rosenbrock, optax.lbfgs(), max_iter=100, tol=tol)
        assert ours.dtype == jnp.float64
        assert 0 < int(optax.tree.get(state, "count")) < 100
        assert float(optax.tree.norm(optax.tree.get(state, "grad"))) < tol
        np.testing.assert_allclose(np.asarray(ours), 1.0, atol=1e-7)
        np.testing.assert_allclose(np.asarray(theirs), 1.0, atol=1e-7)
        np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), atol=1e-7)
        value, grad = jax.value_and_grad(rosenbrock)(ours)
        assert float(state.value) == pytest.approx(float(value), rel=1e-12, abs=1e-20)
        np.testing.assert_allclose(np.asarray(state.grad), np.asarray(grad), rtol=1e-9, atol=1e-14)


def test_run_opt_compiles_once(compiles):
    """optax's loop under jit compiles once, and new initial params of the same shape reuse
    it. Called eagerly, as optax's docs call it, it makes new closures per call, so each call
    traces and compiles its while_loop anew, and only that (once, as for optax.lbfgs())."""
    opt = LOOP_SOLVER.as_optax()
    solve = jax.jit(run_opt, static_argnums=(1, 2, 3, 4))
    x0, x1 = jnp.zeros((8,)), jnp.full((8,), 0.5, jnp.float32)  # strongly typed
    compiles.reset()
    solve(x0, rosenbrock, opt, 100, 1e-3)
    assert compiles.count == 1
    compiles.reset()
    second, second_state = solve(x1, rosenbrock, opt, 100, 1e-3)
    assert compiles.count == 0
    run_opt(x0, rosenbrock, opt, max_iter=100, tol=1e-3)
    compiles.reset()
    eager, eager_state = run_opt(x1, rosenbrock, opt, max_iter=100, tol=1e-3)
    assert compiles.count == 1
    # The eager and the jitted loop are two programs, which need not agree bit for bit; each
    # stopped at |g| < tol, so to first order each is within tol / lambda_min(H(x*)) of the
    # minimiser x* = 1; the factor 2 covers the second-order term and float32's rounding of
    # g, both far below tol here.
    with jax.enable_x64(True):
        hessian = jax.hessian(rosenbrock)(jnp.ones(8, jnp.float64))
    bound = 2 * 1e-3 / np.linalg.eigvalsh(np.asarray(hessian)).min()
    for params, state in ((eager, eager_state), (second, second_state)):
        assert int(optax.tree.get(state, "count")) < 100  # stopped by tol
        assert np.linalg.norm(np.asarray(params, np.float64) - 1.0) <= bound


def _mlp_regression():
    kx, km = jax.random.split(jax.random.PRNGKey(0))
    x = jax.random.normal(kx, (64, 2))
    y = jnp.sin(x[:, :1]) * jnp.cos(x[:, 1:])
    return eqx.nn.MLP(2, 1, 16, 1, activation=jnp.tanh, key=km), x, y


def test_equinox_model_run_opt():
    """An Equinox model in optax's loop, by docs/optax.md's recipe. As it is, the model
    cannot be the params: its activations are function leaves, and value_and_grad_from_state
    passes params as an operand of lax.cond, which takes only arrays (optax's code, not ours).
    So partition it into its floating arrays and the rest, and optimise the arrays with a
    loss over eqx.combine(params, static). It fits as well as optax.lbfgs() in the loop."""
    model, x, y = _mlp_regression()

    def loss(model):
        return jnp.mean((jax.vmap(model)(x) - y) ** 2)

    with pytest.raises(TypeError, match="not a valid JAX type"):
        optax.value_and_grad_from_state(loss)(model, state=SOLVER.as_optax().init(model))

    params, static = eqx.partition(model, eqx.is_inexact_array)

    def fun(params):
        return loss(eqx.combine(params, static))

    first = float(fun(params))
    ours, state = run_opt(params, fun, SOLVER.as_optax(), max_iter=100, tol=1e-4)
    theirs, _ = run_opt(params, fun, optax.lbfgs(), max_iter=100, tol=1e-4)
    assert float(fun(theirs)) < 2e-3 * first
    assert float(fun(ours)) < 2 * float(fun(theirs))
    assert float(state.value) == pytest.approx(float(fun(ours)), rel=1e-5)
    fitted = eqx.combine(ours, static)  # the model, with the fitted weights
    assert fitted.activation is jnp.tanh
    assert float(loss(fitted)) == float(fun(ours))
