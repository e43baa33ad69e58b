"""How `run` and `step` called outside a trace are compiled (the compile wing's rules, seen
through its test seam, `jaxsearch._compile.seam`): small
problems on a CPU with XLA's lean options, others with its defaults, and every program with
the defaults where a jaxlib refuses an option."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js
from jaxsearch._compile import seam

from ..problems import rosenbrock

on_cpu = pytest.mark.skipif(jax.default_backend() != "cpu", reason="lean options are CPU's")


def chain(x, a):
    return jnp.sum(a * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


@pytest.fixture
def compiled_as():
    """The `lean` flag of every program compiled or reused, in order."""
    with seam.dispatches("name", "lean") as dispatched:
        yield dispatched


@on_cpu
def test_lean_at_the_top_level_or_under_an_eager_vmap_only():
    small = jnp.zeros(1000, jnp.float32)
    assert seam.lean_eligible()
    inside = []
    jax.jit(lambda x: inside.append(seam.lean_eligible((x,))) or x)(small)
    jax.vmap(lambda x: inside.append(seam.lean_eligible((x,))) or x)(small[:4])
    jax.jit(jax.vmap(lambda x: inside.append(seam.lean_eligible((x,))) or x))(small[:4])
    # jax takes compile options at the top level only, where an eager vmap compiles too
    assert inside == [False, True, False]


@on_cpu
def test_run_and_step_compile_lean_where_priced_below_the_saving(compiled_as):
    solver = js.Solver(js.LBFGS(), max_steps=5, gtol=0.0, ftol=0.0)
    a = jnp.asarray(100.0, jnp.float32)
    small = jnp.asarray(np.tile([-1.2, 1.0], 5), jnp.float32)
    large = jnp.asarray(np.tile([-1.2, 1.0], 1 << 17), jnp.float32)  # 1 MiB
    solver.run(chain, small, a)
    solver.run(chain, small, 100.0)  # the filtered path
    state = solver.init(small, fn=chain, args=(a,))
    solver.step(chain, small, state, a)
    assert compiled_as == [
        ("fresh_state", True),
        ("compiled_run", True),
        ("fresh_state", True),
        ("compiled_run", True),
        ("take_step", True),
    ]
    compiled_as.clear()
    solver.run(chain, large, a)  # 1 MiB, 5 steps: priced below the saving
    assert compiled_as == [("fresh_state", True), ("compiled_run", True)]
    compiled_as.clear()
    # a run that cannot be cut in two (a budget of evaluations) is priced at HORIZON steps:
    # the defaults here, but for the fresh state's program, which evaluates no fn
    bowl = jnp.asarray(0.0, jnp.float32)  # a = 0: a separable quadratic, solved in a step or two
    larger = jnp.asarray(np.tile([-1.2, 1.0], 1 << 19), jnp.float32)  # 4 MiB
    assert seam.lean_steps(chain, larger, (bowl,)) < seam.HORIZON
    js.Solver(js.LBFGS(), max_steps=10**6, max_evals=10**6).run(chain, larger, bowl)
    assert compiled_as == [("fresh_state", True), ("compiled_run", False)]
    compiled_as.clear()
    jax.jit(lambda x: solver.run(chain, x, a).params)(small)
    assert [lean for _, lean in compiled_as] == [False, False]


@on_cpu
def test_lean_and_default_programs_find_the_same_minimiser():
    """Two programs of one run, lean and default: each converges to Rosenbrock's minimiser in
    float64 (their roundings may differ, so they are compared with a reference, not bit for
    bit)."""
    with jax.enable_x64(True):
        solver = js.Solver(js.LBFGS(), gtol=1e-10, ftol=0.0)
        x0 = jnp.array([-1.2, 1.0], jnp.float64)
        lean = solver.run(rosenbrock, x0)
        default = jax.jit(lambda x: solver.run(rosenbrock, x))(x0)
        for result in (lean, default):
            assert result.status == js.Status.CONVERGED_GTOL
            np.testing.assert_allclose(result.params, [1.0, 1.0], rtol=1e-9)


@on_cpu
def test_a_refused_option_falls_back_to_the_defaults(compiled_as):
    """A jaxlib without one of the options: the call compiles with the defaults, and so does
    every later one (no program with the bogus option outlives the hook)."""
    bogus = {"xla_no_such_option_in_any_jaxlib": True}
    with seam.options(lean=bogus, supported=True):
        solver = js.Solver(js.LBFGS(), max_steps=50)
        result = solver.run(rosenbrock, jnp.array([-1.2, 1.0], jnp.float32))
        assert result.success
        assert not seam.lean_supported()
        assert compiled_as == [
            ("fresh_state", True),
            ("fresh_state", False),
            ("compiled_run", False),
        ]
