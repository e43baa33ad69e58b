"""What a new user runs into first, said by jaxsearch in its own words: reverse-mode
differentiation of one `Solver.step` (whose loop JAX cannot transpose under the default
adjoint) names the step and what to do instead, while forward mode goes through as before."""

import re

import jax
import jax.numpy as jnp
import pytest

import jaxsearch as js


def bowl(x, a):
    return jnp.sum((x - a) ** 2)


X0 = jnp.zeros(3)
A = jnp.asarray(1.0)


def stepped(solver):
    """The params after one step from X0, as a function of a."""
    state = solver.init(X0)
    return lambda a: solver.step(bowl, X0, state, a)[0]


@pytest.mark.parametrize(
    "differentiate",
    [
        pytest.param(lambda f: jax.grad(lambda a: jnp.sum(f(a)))(A), id="grad"),
        pytest.param(lambda f: jax.jit(jax.jacrev(f))(A), id="jit-jacrev"),
    ],
)
def test_reverse_mode_through_a_step_names_the_step(differentiate):
    with pytest.raises(RuntimeError) as info:
        differentiate(stepped(js.Solver()))
    message = str(info.value)
    for fragment in (
        r"Solver\.step cannot be differentiated in reverse mode",
        r"js\.ImplicitAdjoint\(\)",
        r"differentiate Solver\.run",
        r"adjoint=js\.UnrolledAdjoint\(\)",
        r"forward mode \(jax\.jvp",
    ):
        assert re.search(fragment, message), message
    assert len(message) < 800


def test_forward_mode_through_a_step_is_reverse_mode_through_the_unrolled_one():
    """Both differentiate the iterations the step ran: the default solver's jvp equals the
    gradient of the same step with `js.UnrolledAdjoint()`, which reverse mode goes through."""
    _, tangent = jax.jvp(stepped(js.Solver()), (A,), (jnp.ones_like(A),))
    gradient = jax.jacrev(stepped(js.Solver(adjoint=js.UnrolledAdjoint())))(A)
    assert jnp.allclose(tangent, gradient, rtol=1e-5)
    assert jnp.all(jnp.isfinite(tangent)) and jnp.any(tangent != 0)
