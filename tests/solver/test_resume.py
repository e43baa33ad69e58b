"""Resumed runs (`Result.state`, `run(..., state=...)`, docs/training-loops.md): a run cut
into two continues as if it had not stopped (params, value, counts and history, bit for bit
in float32 and float64; in float16 and bfloat16, whose two programs may round differently,
the second half goes on from the first's counters and best point); a state that does not
belong where it is resumed (another point, other data) is taken as after `reevaluate`; a
state of another solver is an error that names the leaf. (That a resumed run compiles
nothing more is checked in tests/compile/test_compile_run.py.)"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js

from ..helpers import SEARCHES, pairs

# A run donates the state it starts from (its own copy): every buffer must be usable.
pytestmark = pytest.mark.filterwarnings("error:Some donated buffers were not usable")


def chain(x, a):
    """An extended Rosenbrock function in x's dtype, scaled by a."""
    x = x.astype(jnp.float32) if x.dtype in (jnp.float16, jnp.bfloat16) else x
    return jnp.sum(a * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def start(dtype):
    return jnp.asarray(np.tile([-1.2, 1.0], 4), dtype)


def halves(search, steps, dtype, **run_settings):
    """One run of 2 `steps` steps, and two runs of `steps` steps, the second resumed."""
    a = jnp.asarray(100.0, jnp.float64 if dtype == jnp.float64 else jnp.float32)
    settings = dict(gtol=0.0, ftol=0.0)
    whole = js.Solver(js.LBFGS(), search, max_steps=2 * steps, **settings)
    half = js.Solver(js.LBFGS(), search, max_steps=steps, **settings)
    x0 = start(dtype)
    one = whole.run(chain, x0, a, **run_settings)
    first = half.run(chain, x0, a, **run_settings)
    second = half.run(chain, first.iterate, a, state=first.state, **run_settings)
    return one, first, second


def same_bits(a, b) -> bool:
    return all(
        bool(jnp.array_equal(x, y, equal_nan=True))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


# In float64 every search the registry (tests/helpers.py) pairs with L-BFGS; two in float32.
RESUMED = [search for _, search in pairs(["LBFGS"])]
CELLS = [("Zoom", False), ("HagerZhang", False)] + [(search, True) for search in RESUMED]


@pytest.mark.parametrize(
    "search,x64", CELLS, ids=[f"{s}-{'float64' if x else 'float32'}" for s, x in CELLS]
)
def test_two_halves_are_one_run(search, x64):
    with jax.enable_x64(x64):
        dtype = jnp.float64 if x64 else jnp.float32
        one, first, second = halves(SEARCHES[search](), 12, dtype, history=True)
        assert int(first.num_steps) == 12 and int(second.num_steps) == 24
        for name in ("params", "value", "grad", "status", "num_steps", "num_fun_evals"):
            assert same_bits(getattr(one, name), getattr(second, name)), name
        assert same_bits(one.state, second.state)
        # The second half's rows go on from the first's: steps 13 to 24, evaluations counted
        # from the start of the first half.
        rows = [r.history.to_numpy() for r in (one, first, second)]
        assert list(rows[2]["step"]) == list(range(13, 25))
        for name in rows[0]:
            assert np.array_equal(
                rows[0][name], np.concatenate([rows[1][name], rows[2][name]]), equal_nan=True
            ), name


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16], ids=["float16", "bfloat16"])
def test_low_precision_second_half_goes_on(dtype):
    _, first, second = halves(js.Zoom(), 10, dtype)
    assert second.params.dtype == dtype and second.state.grad.dtype == dtype
    assert int(second.num_steps) > int(first.num_steps)  # counters go on
    assert int(second.num_fun_evals) > int(first.num_fun_evals)
    # The best point goes on too: the second half never returns a point worse than the first.
    assert float(second.value) <= float(first.value)
    value = chain(second.params, jnp.asarray(100.0, jnp.float32))  # a program of its own
    assert np.isclose(float(second.value), float(value), rtol=1e-6)


def test_with_bounds():
    with jax.enable_x64(True):
        bounds = (jnp.full(8, -0.5), jnp.full(8, 0.8))
        one, first, second = halves(None, 6, jnp.float64, bounds=bounds)
        assert same_bits(one.params, second.params)
        assert int(one.num_fun_evals) == int(second.num_fun_evals)
        assert bool(jnp.all((second.params >= -0.5) & (second.params <= 0.8)))


def test_under_vmap():
    a = jnp.asarray(100.0, jnp.float32)
    x0s = jnp.stack([start(jnp.float32), start(jnp.float32) * 0.5])
    half = js.Solver(js.LBFGS(), max_steps=8, gtol=0.0, ftol=0.0)
    whole = js.Solver(js.LBFGS(), max_steps=16, gtol=0.0, ftol=0.0)
    one = jax.vmap(lambda x: whole.run(chain, x, a))(x0s)
    first = jax.vmap(lambda x: half.run(chain, x, a))(x0s)
    kept = jax.tree.map(np.asarray, first.state)
    second = jax.vmap(lambda x, s: half.run(chain, x, a, state=s))(first.iterate, first.state)
    assert same_bits(first.state, kept)  # the caller's state is not donated under vmap
    assert same_bits(one.params, second.params)
    assert same_bits(one.num_fun_evals, second.num_fun_evals)


def bowl(x, c):
    return jnp.sum((x - c) ** 2)


def test_max_steps_at_the_int32_limit():
    """max_steps = 2**31 - 1, the largest count, from a state that has taken steps: the run's
    last step count is kept within int32 (no overflow), and it goes on to the minimiser c,
    alone and under vmap."""
    c = jnp.array([1.0, -2.0, 3.0])
    first = js.Solver(max_steps=1, gtol=0.0, ftol=0.0).run(bowl, jnp.zeros(3), c)
    assert first.status == js.Status.MAX_STEPS
    longest = js.Solver(max_steps=2**31 - 1, gtol=1e-6)
    second = longest.run(bowl, first.iterate, c, state=first.state)
    assert bool(second.success), second.message
    np.testing.assert_allclose(second.params, c, atol=1e-5)
    twice = jax.tree.map(lambda a: jnp.stack([a, a]), (first.iterate, first.state))
    batch = jax.vmap(lambda x, s: longest.run(bowl, x, c, state=s))(*twice)
    assert bool(jnp.all(batch.success)), batch.message
    np.testing.assert_allclose(batch.params, jnp.stack([c, c]), atol=1e-5)


def test_inside_jit_and_with_throw():
    """A resumed run inside the caller's jit, and on the path `throw` takes (equinox's jit)."""
    a = jnp.asarray(100.0, jnp.float32)
    half = js.Solver(js.LBFGS(), max_steps=8, gtol=0.0, ftol=0.0, throw="failures")
    whole = js.Solver(js.LBFGS(), max_steps=16, gtol=0.0, ftol=0.0, throw="failures")
    first = half.run(chain, start(jnp.float32), a)
    second = half.run(chain, first.iterate, a, state=first.state)
    jitted = jax.jit(lambda x, s: half.run(chain, x, a, state=s))(first.iterate, first.state)
    one = whole.run(chain, start(jnp.float32), a)
    assert same_bits(one.params, second.params)
    # The caller's program is another program, which XLA may round differently.
    assert jnp.allclose(jitted.params, one.params, rtol=1e-4, atol=1e-6)
    assert int(jitted.num_steps) == 16


def test_caller_keeps_its_state():
    """The run consumes a copy of the state it is given (it donates its buffers), never the
    caller's, which can resume again."""
    a = jnp.asarray(100.0, jnp.float32)
    solver = js.Solver(js.LBFGS(), max_steps=5, gtol=0.0, ftol=0.0)
    first = solver.run(chain, start(jnp.float32), a)
    kept = jax.tree.map(np.asarray, first.state)
    second = solver.run(chain, first.iterate, a, state=first.state)
    again = solver.run(chain, first.iterate, a, state=first.state)
    assert same_bits(first.state, kept)
    assert same_bits(second.params, again.params)


def test_resumed_from_a_converged_state_stays():
    solver = js.Solver(js.LBFGS(), gtol=1e-4, ftol=0.0)
    a = jnp.asarray(100.0, jnp.float32)
    done = solver.run(chain, start(jnp.float32), a)
    assert done.status == js.Status.CONVERGED_GTOL
    again = solver.run(chain, done.iterate, a, state=done.state)
    assert again.status == js.Status.CONVERGED_GTOL
    # No step, and the evaluation that checks the state's f at x is not counted.
    assert int(again.num_steps) == int(done.num_steps)
    assert int(again.num_fun_evals) == int(done.num_fun_evals)
    assert same_bits(again.params, done.params)


def quadratic(x, a):
    return jnp.sum(a * x**2)


def test_state_of_another_point_or_data_is_evaluated_anew():
    """Fixed steps too long for this quadratic climb, so the run returns x0, its best point,
    not its last iterate. Resumed from that point (not the state's) or with new data, the run
    evaluates f where it starts, as after `reevaluate`: one more evaluation, and the value
    it returns is f at its params with the data it was given."""
    solver = js.Solver(js.Gradient(), js.FixedStep(1.5), max_steps=3, gtol=0.0, ftol=0.0)
    x0, a = jnp.asarray([1.0, -2.0]), jnp.asarray(1.0)
    first = solver.run(quadratic, x0, a)
    assert same_bits(first.params, x0) and not same_bits(first.iterate, x0)
    from_best = solver.run(quadratic, first.params, a, state=first.state)
    assert int(from_best.num_fun_evals) == int(first.num_fun_evals) + 1 + 3
    assert int(from_best.num_steps) == 6
    assert same_bits(from_best.params, x0)  # from x0 the same climb again: x0 stays best

    b = jnp.asarray(0.1)  # new data: a step of 1.5 now descends
    new_data = solver.run(quadratic, first.iterate, b, state=first.state)
    assert int(new_data.num_fun_evals) == int(first.num_fun_evals) + 1 + 3
    assert float(new_data.value) == float(quadratic(new_data.params, b))
    assert float(new_data.value) < float(quadratic(first.iterate, b))


def test_result_state_continues_step_by_step():
    """`step` from a run's state and iterate goes on where the run stopped."""
    with jax.enable_x64(True):
        a = jnp.asarray(100.0)
        solver = js.Solver(js.LBFGS(), max_steps=6, gtol=0.0, ftol=0.0)
        first = solver.run(chain, start(jnp.float64), a)
        params, state = solver.step(chain, first.iterate, first.state, a)
        seven = js.Solver(js.LBFGS(), max_steps=7, gtol=0.0, ftol=0.0)
        one = seven.run(chain, start(jnp.float64), a)
        assert int(state.num_steps) == 7
        assert int(state.num_fun_evals) == int(one.num_fun_evals)
        assert jnp.allclose(params, one.iterate, rtol=1e-12, atol=0)


def test_progress_and_verbose_count_the_run_s_own_steps(capsys):
    solver = js.Solver(js.LBFGS(), max_steps=3, gtol=0.0, ftol=0.0)
    a = jnp.asarray(100.0, jnp.float32)
    first = solver.run(chain, start(jnp.float32), a)
    jax.block_until_ready(solver.run(chain, first.iterate, a, state=first.state, verbose=True))
    steps = [int(line.split()[1]) for line in capsys.readouterr().out.splitlines()]
    assert steps == [4, 5, 6]


def test_a_state_that_does_not_fit_is_an_error():
    a = jnp.asarray(100.0, jnp.float32)
    x0 = start(jnp.float32)
    first = js.Solver(js.LBFGS(memory_size=5), max_steps=2).run(chain, x0, a)
    with pytest.raises(TypeError, match=r"state\.direction.*float32\[10, 8\]"):
        js.Solver(js.LBFGS(memory_size=10), max_steps=2).run(chain, x0, a, state=first.state)
    with pytest.raises(TypeError, match="structure differs"):
        js.Solver(js.LBFGS(memory_size=5), max_steps=2, return_best=False).run(
            chain, x0, a, state=first.state
        )
    with pytest.raises(TypeError, match=r"state\.grad"):
        js.Solver(js.LBFGS(memory_size=5), max_steps=2).run(
            chain, jnp.zeros(6), a, state=first.state
        )
    with pytest.raises(TypeError, match="value dtype"):
        js.Solver(js.LBFGS(memory_size=5), max_steps=2).run(
            chain, x0, a, state=first.state, value_dtype=jnp.bfloat16
        )
    with pytest.raises(TypeError, match="SolverState"):
        js.Solver(js.LBFGS(memory_size=5), max_steps=2).run(chain, x0, a, state={"x": 1})


def test_state_from_a_checkpoint_resumes(tmp_path):
    """(iterate, state) through `eqx.tree_serialise_leaves` and back into init's template."""
    a = jnp.asarray(100.0, jnp.float32)
    solver = js.Solver(js.LBFGS(), max_steps=6, gtol=0.0, ftol=0.0)
    first = solver.run(chain, start(jnp.float32), a)
    path = tmp_path / "run.eqx"
    eqx.tree_serialise_leaves(path, (first.iterate, first.state))
    template = (start(jnp.float32), solver.init(start(jnp.float32), fn=chain, args=(a,)))
    iterate, state = eqx.tree_deserialise_leaves(path, template)
    loaded = solver.run(chain, iterate, a, state=state)
    direct = solver.run(chain, first.iterate, a, state=first.state)
    assert same_bits(loaded, direct)


def test_a_large_state_is_donated_never_the_callers():
    """A state of 1 MiB or more is donated to the run (its buffers become the loop's and
    the result's), a resumed run's as a copy: the caller's stays valid."""
    from jaxsearch._compile import seam

    n = 20_000  # L-BFGS's memory alone: 2 * 10 * n float32 numbers, 1.6 MB
    x0 = jnp.asarray(np.tile([-1.2, 1.0], n // 2), jnp.float32)
    a = jnp.asarray(100.0, jnp.float32)
    solver = js.Solver(js.LBFGS(), max_steps=3, gtol=0.0, ftol=0.0)
    with seam.dispatches() as dispatched:
        first = solver.run(chain, x0, a)
        second = solver.run(chain, first.iterate, a, state=first.state)
    given = [d.arguments[-1] for d in dispatched if d.name == "compiled_run" and d.donate]
    assert len(given) == 2
    assert all(leaf.is_deleted() for leaf in jax.tree.leaves(given[1]))  # the copy, donated
    assert given[1] is not first.state
    assert not any(leaf.is_deleted() for leaf in jax.tree.leaves(first.state))
    whole = js.Solver(js.LBFGS(), max_steps=6, gtol=0.0, ftol=0.0).run(chain, x0, a)
    assert same_bits(whole.params, second.params)


@pytest.mark.program_shape
def test_a_caller_s_jit_that_returns_params_only_drops_the_state():
    """docs/training-loops.md: inside the caller's jit, returning `result.params` alone leaves
    the state out of the program's outputs."""
    a = jnp.asarray(100.0, jnp.float32)
    x0 = start(jnp.float32)
    solver = js.Solver(js.LBFGS(), max_steps=3)
    params_only = jax.jit(lambda x: solver.run(chain, x, a).params).lower(x0).compile()
    whole = jax.jit(lambda x: solver.run(chain, x, a)).lower(x0).compile()
    assert params_only.memory_analysis().output_size_in_bytes == x0.nbytes
    assert whole.memory_analysis().output_size_in_bytes > 20 * x0.nbytes  # with the memory


def test_state_at_params_hands_over_the_best_point():
    """Where a run returns an earlier, better point, `state_at_params` goes on from it: the
    next step evaluates f at params first (as after `reevaluate`, bit for bit), and carries
    the run's status; handing on `state` (the last iterate's) with params does the same, as a
    step given params that are not its state's, and counts it (`num_foreign_params`)."""
    solver = js.Solver(js.Gradient(), js.FixedStep(1.5), max_steps=3, gtol=0.0, ftol=0.0)
    x0, a = jnp.asarray([1.0, -2.0]), jnp.asarray(1.0)
    first = solver.run(quadratic, x0, a)
    assert same_bits(first.params, x0) and not same_bits(first.iterate, x0)
    handed = first.state_at_params
    assert int(handed.status) == js.Status.MAX_STEPS == int(first.status)
    assert int(first.state.status) == js.Status.RUNNING  # the last step's
    params, state = solver.step(quadratic, first.params, handed, a)
    again, _ = solver.step(quadratic, first.params, solver.reevaluate(first.state), a)
    assert same_bits(params, again)
    np.testing.assert_array_equal(params, x0 - 1.5 * 2 * x0)  # -grad f(x0), not the iterate's
    assert int(state.num_fun_evals) == int(first.num_fun_evals) + 2
    assert int(state.num_foreign_params) == 0
    mixed, mixed_state = solver.step(quadratic, first.params, first.state, a)
    assert same_bits(mixed, params)
    assert int(mixed_state.num_foreign_params) == 1


def test_state_at_params_of_the_last_iterate_is_its_state():
    """Where params is the last iterate, the state goes on as it is (no evaluation more), with
    the run's status; under vmap, per problem."""
    with jax.enable_x64(True):
        a = jnp.asarray(100.0)
        solver = js.Solver(js.LBFGS(), max_steps=6, gtol=0.0, ftol=0.0)
        first = solver.run(chain, start(jnp.float64), a)
        assert same_bits(first.params, first.iterate)
        handed = first.state_at_params
        assert int(handed.status) == js.Status.MAX_STEPS
        assert same_bits(eqx.tree_at(lambda s: s.status, handed, first.state.status), first.state)
        by_params = solver.step(chain, first.params, handed, a)
        by_iterate = solver.step(chain, first.iterate, first.state, a)
        assert same_bits(by_params, by_iterate)

    fixed = js.Solver(js.Gradient(), js.FixedStep(1.5), max_steps=3, gtol=0.0, ftol=0.0)
    starts = jnp.asarray([[1.0, -2.0], [0.0, 0.0]])  # climbs (returns x0); at the minimiser
    batch = jax.vmap(lambda x: fixed.run(quadratic, x, jnp.asarray(1.0)))(starts)
    np.testing.assert_array_equal(batch.state_at_params.has_eval, [False, True])
    np.testing.assert_array_equal(batch.state_at_params.status, batch.status)
