"""A state that does not fit the solver and params is refused, by `run(state=...)`, `step`
and the optax `update` alike, with one message that names the leaf, what it is and what this
solver and params give (one check, `_state.check_state`, while the call is traced: nothing
at run time)."""

import jax
import jax.numpy as jnp
import optax
import pytest

import jaxsearch as js
from jaxsearch import _pipeline


def quadratic(x):
    return jnp.sum((x.astype(jnp.float32) - 1.0) ** 2)


SOLVER = js.Solver(js.LBFGS(memory_size=4), max_steps=5)


def _step(solver, params, state):
    return solver.step(quadratic, params, state)


def _jitted_step(solver, params, state):
    return jax.jit(lambda p, s: solver.step(quadratic, p, s))(params, state)


def _run(solver, params, state):
    return solver.run(quadratic, params, state=state)


def _optax_update(solver, params, state):
    opt = solver.as_optax()
    optax_state = opt.init(jnp.zeros(3))._replace(solver=state)  # the solver's part replaced
    grad = jax.grad(quadratic)(params)
    return opt.update(grad, optax_state, params, value_fn=quadratic)


CALLS = {"step": _step, "jitted step": _jitted_step, "run": _run, "optax": _optax_update}

# (the mistake, the params passed, the state passed, what the message must say)
MISTAKES = {
    "bfloat16 params, float32 state": (
        lambda: jnp.zeros(3, jnp.bfloat16),
        lambda: SOLVER.init(jnp.zeros(3)),
        r"state\.grad is float32\[3\] where this solver and params give bfloat16\[3\]",
    ),
    "params of shape (4,), state for (3,)": (
        lambda: jnp.zeros(4),
        lambda: SOLVER.init(jnp.zeros(3)),
        r"state\.grad is float32\[3\] where this solver and params give float32\[4\]",
    ),
    "BFGS state, L-BFGS solver": (
        lambda: jnp.zeros(3),
        lambda: js.Solver(js.BFGS()).init(jnp.zeros(3)),
        r"state\.direction is a BFGSState where this solver and params give an? \w*LBFGSState",
    ),
    "memory size": (
        lambda: jnp.zeros(3),
        lambda: js.Solver(js.LBFGS(memory_size=7)).init(jnp.zeros(3)),
        r"state\.direction\.\w+ is float32\[7, 3\] where this solver and params give "
        r"float32\[4, 3\]",
    ),
}


@pytest.mark.parametrize("call", list(CALLS))
@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_a_state_that_does_not_fit_names_its_leaf(call, mistake):
    params, state, message = MISTAKES[mistake]
    with pytest.raises(TypeError, match=message):
        CALLS[call](SOLVER, params(), state())


@pytest.mark.parametrize("call", list(CALLS))
@pytest.mark.parametrize("made, given", [("compact", "two_loop"), ("two_loop", "compact")])
def test_a_state_of_the_other_lbfgs_form_names_the_form(call, made, given):
    """An L-BFGS state of one form given to a solver of the other (as where `form="auto"`
    chose another form, on another backend): the message names the setting that made it."""
    state = js.Solver(js.LBFGS(memory_size=4, form=made)).init(jnp.zeros(3))
    solver = js.Solver(js.LBFGS(memory_size=4, form=given), max_steps=5)
    message = rf'was made by js\.LBFGS\(form="{made}"\): pass it to resume'
    with pytest.raises(TypeError, match=message):
        CALLS[call](solver, jnp.zeros(3), state)


def test_a_missing_state_is_named():
    """`step(fn, x, None)`. (The suite's runtime type checks refuse None at `Solver.step`'s
    annotation; a user's call reaches the compiled step, tried here directly, and from a
    user's interpreter in test_messages.py.)"""
    x = jnp.zeros(3)
    with pytest.raises(TypeError, match=r"state must be a SolverState .* got NoneType"):
        _pipeline.step(SOLVER, quadratic, x, None, (), None)
    with pytest.raises(TypeError, match=r"state must be a SolverState .* got NoneType"):
        jax.jit(lambda p: _pipeline.step(SOLVER, quadratic, p, None, (), None))(x)


def test_the_optax_update_names_a_state_that_is_not_its_own():
    opt = SOLVER.as_optax()
    x = jnp.zeros(3)
    with pytest.raises(TypeError, match=r"state must be the state of this transformation"):
        opt.update(jax.grad(quadratic)(x), SOLVER.init(x), x, value_fn=quadratic)


def test_a_value_dtype_of_its_own_fits():
    """A state whose value dtype differs from the params' (value_dtype at init) is checked
    against init's state with that value dtype: it fits, in step, run and the optax update."""
    x = jnp.zeros(3, jnp.bfloat16)
    state = SOLVER.init(x, value_dtype=jnp.float32)
    params, after = SOLVER.step(quadratic, x, state)
    assert after.value.dtype == jnp.float32 and params.dtype == jnp.bfloat16
    SOLVER.run(quadratic, x, state=state)
    opt = SOLVER.as_optax()
    opt.update(jax.grad(quadratic)(x), opt.init(x), x, value_fn=quadratic)


def test_a_state_of_another_return_best_setting():
    state = js.Solver(return_best=False).init(jnp.zeros(3))
    with pytest.raises(TypeError, match=r"structure differs.*state\.best is None where"):
        js.Solver().step(quadratic, jnp.zeros(3), state)


def test_weak_params_and_a_state_from_init_fit():
    """Weakly typed params (jnp.full) with init's strongly typed state: no error."""
    x = jnp.full(3, 0.5)
    state = SOLVER.init(x)
    params, _ = SOLVER.step(quadratic, x, state)
    assert params.weak_type


def test_the_optax_loop_compiles_once_and_checks_at_trace_time(compiles):
    """The optax update is one compiled program: eager updates compile nothing after the
    first, and the check runs only while it is traced."""
    opt = SOLVER.as_optax()
    x = jnp.zeros(3)
    state = opt.init(x)
    value, grad = jax.value_and_grad(quadratic)(x)
    updates, state = opt.update(grad, state, x, value=value, grad=grad, value_fn=quadratic)
    x = optax.apply_updates(x, updates)
    compiles.reset()
    for _ in range(3):
        value, grad = state.value, state.grad
        updates, state = opt.update(grad, state, x, value=value, grad=grad, value_fn=quadratic)
        x = optax.apply_updates(x, updates)
    assert compiles.count == 0
