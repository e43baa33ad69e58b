"""`Result.success` is a boolean array that works under `jit` and `vmap`; `message` is text
read on the host (a list of messages for a batch); the counts are read from the state, so a
compiled run returns no array twice."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js
from jaxsearch._packing import PACKED_SIZE, pack


def bowl(x, c):
    return jnp.sum((x - c) ** 2)


SOLVER = js.Solver(max_steps=50)
CONVERGED = js.Status.CONVERGED_GTOL.message
OUT_OF_STEPS = js.Status.MAX_STEPS.message


def test_success_under_jit():
    success = jax.jit(lambda x: SOLVER.run(bowl, x, jnp.ones(3)).success)(jnp.zeros(3))
    assert success.dtype == jnp.bool_ and success.shape == ()
    assert bool(success)


def test_success_in_traced_code():
    """success steers traced code: where(success, params, x0)."""

    @jax.jit
    def params_if_converged(x0, c):
        result = js.Solver(max_steps=1, gtol=1e-12).run(bowl, x0, c)
        return jnp.where(result.success, result.params, x0), result.success

    params, success = params_if_converged(jnp.zeros(3), jnp.array([1.0, 2.0, 3.0]))
    assert not bool(success)
    assert jnp.array_equal(params, jnp.zeros(3))


def test_success_and_messages_under_vmap():
    """One problem of the batch runs out of steps (start far away, one step allowed)."""
    solver = js.Solver(js.Gradient(), js.FixedStep(0.1), max_steps=3, gtol=1e-3)
    starts = jnp.array([[1.0, 1.0], [30.0, -30.0]])
    result = jax.vmap(lambda x: solver.run(bowl, x, jnp.ones(2)))(starts)
    assert result.success.shape == (2,)
    statuses = [js.Status(int(s)) for s in result.status]
    assert statuses == [js.Status.CONVERGED_GTOL, js.Status.MAX_STEPS]
    assert result.success.tolist() == [True, False]
    assert result.message == [CONVERGED, OUT_OF_STEPS]


def test_messages_of_two_batch_axes():
    inner = jax.vmap(lambda x: SOLVER.run(bowl, x, jnp.ones(3)))
    result = jax.vmap(inner)(jnp.zeros((2, 2, 3)))
    assert result.success.shape == (2, 2)
    assert result.message == [[CONVERGED, CONVERGED], [CONVERGED, CONVERGED]]


def test_message_inside_jit_says_what_to_use():
    with pytest.raises(TypeError, match=r"status.*success"):
        jax.jit(lambda x: SOLVER.run(bowl, x, jnp.ones(3)).message)(jnp.zeros(3))


def test_unbatched_result_is_unchanged():
    result = SOLVER.run(bowl, jnp.zeros(3), jnp.ones(3))
    assert result.message == CONVERGED
    assert bool(result.success) is True
    assert result.success  # usable as a Python condition when concrete


@pytest.mark.parametrize(
    "solver",
    [SOLVER, js.Solver(linesearch=js.Backtracking()), js.Solver(js.LBFGS(), return_best=False)],
    ids=["default", "backtracking", "last-iterate"],
)
def test_run_returns_no_array_twice(solver):
    """Each output of a compiled run costs the caller a microsecond or two on the host:
    `num_steps` and `num_fun_evals` are the state's, not second copies of them, and the
    state's small leaves come out packed, one buffer per dtype (`PACKED_SIZE`). The run's
    outputs are those buffers, the state's larger leaves, params, value, grad, status and
    the iterate; `result.state` unpacks them bit for bit, with every leaf's aval."""
    result = jax.jit(lambda x: solver.run(bowl, x, jnp.ones(3)))(jnp.zeros(3))
    eager = solver.run(bowl, jnp.zeros(3), jnp.ones(3))
    own = [result.params, result.value, result.grad, result.status, result.iterate]
    state_leaves = jax.tree.leaves(result.state)
    small = [leaf for leaf in state_leaves if leaf.size < PACKED_SIZE]
    dtypes = {leaf.dtype for leaf in small}
    large = len(state_leaves) - len(small)
    assert len(small) > 10 and len(dtypes) <= 3
    assert len(jax.tree.leaves(result)) == len(jax.tree.leaves(own)) + len(dtypes) + large
    assert jax.tree.structure(result.state) == jax.tree.structure(solver.init(jnp.zeros(3)))
    for unpacked, alone in zip(state_leaves, jax.tree.leaves(eager.state), strict=True):
        assert jax.typeof(unpacked) == jax.typeof(alone)
        assert np.array_equal(np.asarray(unpacked), np.asarray(alone))
    assert result.state is result.state  # unpacked once
    assert result.num_steps is result.state.num_steps
    assert result.num_fun_evals is result.state.num_fun_evals
    assert int(result.num_steps) > 0 and int(result.num_fun_evals) > int(result.num_steps)


def test_a_packed_state_unpacks_under_vmap_and_resumes():
    """A batched run's packed buffers carry the batch axis in front; `result.state` unpacks
    each leaf with it, and a batched resumed run from it goes on as the unbatched one."""

    def chain(x, c):
        return jnp.sum(100 * c * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)

    x0s = jnp.stack([jnp.zeros(3), jnp.full(3, -1.5)])
    solver = js.Solver(max_steps=2, gtol=0.0, ftol=0.0)
    batched = jax.vmap(lambda x: solver.run(chain, x, jnp.asarray(1.0)))(x0s)
    assert batched.state.num_steps.shape == (2,)
    assert batched.state.direction.s.shape[0] == 2
    again = jax.vmap(lambda x, s: solver.run(chain, x, jnp.asarray(1.0), state=s))(
        batched.iterate, batched.state
    )
    for i in range(2):
        first = solver.run(chain, x0s[i], jnp.asarray(1.0))
        alone = solver.run(chain, first.iterate, jnp.asarray(1.0), state=first.state)
        assert int(again.num_steps[i]) == int(alone.num_steps) == 4
        assert np.allclose(again.params[i], alone.params)


def test_a_state_of_tracers_packed_into_no_buffer_is_not_kept_unpacked():
    """`unpack` keeps its leaves only for a state of concrete arrays; a traced state that
    packs nothing (all its leaves kept) is unpacked anew, and keeps its pytree structure."""

    def traced(x):
        state = pack({"a": x, "b": x + 1}, which=lambda leaf: False)
        structure = jax.tree.structure(state)
        state.unpack()
        assert "_unpacked" not in vars(state)
        assert jax.tree.structure(state) == structure
        return x

    jax.jit(traced)(jnp.ones(()))


# ---------------------------------------------------------------------------------- repr


def test_repr_of_a_run_reads_its_fields():
    """A few lines, each value the field's own: the status by name, success, the message,
    value, the counts and the history's length."""
    result = js.Solver(max_steps=2, gtol=0.0, ftol=0.0).run(
        bowl, jnp.zeros(3), jnp.array([1.0, 2.0, 30.0]), history=True
    )
    text = repr(result)
    assert str(result) == text and len(text.splitlines()) <= 4
    for part in (
        f"status={js.Status(result.status).name}",
        f"success={bool(result.success)}",
        f"message={result.message!r}",
        f"num_steps={int(result.num_steps)}",
        f"num_fun_evals={int(result.num_fun_evals)}",
        f"history=kept, length={int(result.history.length)}",
    ):
        assert part in text, (part, text)
    shown = re.search(r"value=(\S+),", text).group(1)  # as NumPy prints it: exact
    assert np.asarray(shown, result.value.dtype) == np.asarray(result.value)
    assert "history=None" in repr(SOLVER.run(bowl, jnp.zeros(3), jnp.ones(3)))


def test_repr_of_a_batch_counts_its_statuses():
    solver = js.Solver(js.Gradient(), js.FixedStep(0.1), max_steps=3, gtol=1e-3)
    starts = jnp.array([[1.0, 1.0], [30.0, -30.0], [1.0, 1.0]])
    result = jax.vmap(lambda x: solver.run(bowl, x, jnp.ones(2)))(starts)
    text = repr(result)
    codes, counts = np.unique(np.asarray(result.status), return_counts=True)
    each = ", ".join(f"{n} {js.Status(int(c)).name}" for c, n in zip(codes, counts, strict=True))
    assert each == "2 CONVERGED_GTOL, 1 MAX_STEPS"
    assert f"batch of 3: {each}" in text
    steps = re.search(r"num_steps=\[([\d ]+)\]", text).group(1)
    assert [int(n) for n in steps.split()] == result.num_steps.tolist()
    assert len(text.splitlines()) <= 4


def test_repr_inside_jit_and_vmap_shows_shapes_and_adds_nothing():
    """Printed while traced, a result shows dtypes and shapes, and adds no operation to the
    program (the state is not unpacked for it)."""
    shown = []

    def run(x, show):
        result = SOLVER.run(bowl, x, jnp.ones(3))
        if show:
            shown.append(repr(result))
        return result.value

    plain = jax.make_jaxpr(lambda x: run(x, False))(jnp.zeros(3))
    printed = jax.make_jaxpr(lambda x: run(x, True))(jnp.zeros(3))
    assert len(printed.eqns) == len(plain.eqns)
    jax.vmap(lambda x: run(x, True))(jnp.zeros((2, 3)))
    for text in shown:
        assert text.startswith("Result(traced: status=int32[], value=float32[]"), text
