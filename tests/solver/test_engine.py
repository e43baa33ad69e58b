"""The compiled engine: one loop iteration per evaluation of fn, control flow only at step
boundaries, and the stopping rules as a pure function."""

import jax
import jax.numpy as jnp
import pytest

import jaxsearch as js

from ..helpers import pairs, solver
from ..problems import rosenbrock
from ..program_inspection import (
    all_eqns,
    cond_branches,
    control_flow,
    lbfgs_memory_copies,
    loop_body_kernels,
    run_jaxpr,
)


@pytest.mark.program_shape
@pytest.mark.parametrize("direction,search", pairs())
def test_run_is_one_loop_with_one_cond_per_evaluation(direction, search):
    """`run` compiles to one while loop; its body evaluates fn and has one cond at its top (the
    step boundary), so an evaluation inside a line search costs two host round trips (the
    loop's predicate and that cond). All other control flow is nested in the boundary."""
    found = control_flow(run_jaxpr(solver(direction, search)))
    assert [name for name, depth in found if depth == 0] == ["while"]
    assert [name for name, depth in found if depth == 1] == ["cond"]
    assert len(found) <= 7, found


@pytest.mark.program_shape
def test_default_run_structure_is_exact():
    """The default solver's whole program: one while loop, three conds (the boundary; in it, the
    choice between f at x0 and a step's end, and the start of the next step) and the two
    passes of L-BFGS's two-loop recursion (`fori_loop`s of m trips, in the next step's
    start). The direction memory's update is no branch: it is masked, written in place."""
    found = control_flow(run_jaxpr(js.Solver()))
    assert sorted(found) == [
        ("cond", 1),
        ("cond", 2),
        ("cond", 2),
        ("scan", 3),
        ("scan", 3),
        ("while", 0),
    ]


@pytest.mark.program_shape
def test_f_at_x_is_one_branch_whether_fresh_or_resumed():
    """The boundary chooses between f at x and a step's end: a resumed run's check of f at x
    is the same branch as a fresh evaluation there, not a third (which cost the program about
    20 fusions of its own; benchmarks/HISTORY.md, round 5)."""
    assert cond_branches(run_jaxpr(js.Solver())) == [2, 2, 2]


@pytest.mark.program_shape
def test_bounded_run_nests_the_cauchy_loop_in_the_boundary():
    """With bounds, L-BFGS-B's Cauchy-point walk is a loop, run only at a step's start."""
    found = control_flow(run_jaxpr(js.Solver(), bounds=(-1.0, 1.0)))
    assert [name for name, depth in found if depth <= 1] == ["while", "cond"]
    assert ("while", 3) in found


@pytest.mark.program_shape
@pytest.mark.parametrize("search", ["Zoom", "MoreThuente", "HagerZhang"])
def test_the_search_state_is_updated_in_few_kernels(search):
    """The search's scalars are carried packed, at most 8 to a buffer, so XLA:CPU computes
    each buffer's update in one kernel and passes a buffer on in one copy (it fuses no more
    than 8 operands into a concatenation, and runs no multi-output fusion). Carried one array
    per scalar, the loop's body had 81, 81 and 75 kernels and copies (L-BFGS, 2-D Rosenbrock);
    packed, 60, 59 and 56, and the 2-D Rosenbrock run 1.70 to 1.99 times optax's loop's
    wall against 2.31 to 2.46 (benchmarks/studies/engine.py, "small")."""
    assert loop_body_kernels(js.Solver(js.LBFGS(), getattr(js, search)())) <= 66


def _loop_concatenations(jaxpr) -> int:
    """The concatenations in the body of the largest while loop of `jaxpr` (the run's)."""
    whiles = [e for e in all_eqns(jaxpr) if e.primitive.name == "while"]
    loop = max(whiles, key=lambda e: sum(1 for _ in all_eqns(e.params["body_jaxpr"].jaxpr)))
    body = loop.params["body_jaxpr"].jaxpr
    return sum(1 for e in all_eqns(body) if e.primitive.name == "concatenate")


@pytest.mark.program_shape
def test_a_vmapped_run_carries_the_search_unpacked():
    """Under `jax.vmap` the search's scalars are vectors and the loop's branches become
    selects, which XLA:CPU compiles far slower on packed buffers (the vmapped GLM of
    benchmarks/suite/fresh_fit.py: 8.4 s packed against 5.9 s): there the loop packs nothing."""
    solver = js.Solver()
    single = jax.make_jaxpr(lambda x: solver.run(rosenbrock, x).params)(jnp.zeros(2))
    batched = jax.make_jaxpr(jax.vmap(lambda x: solver.run(rosenbrock, x).params))(
        jnp.zeros((3, 2))
    )
    assert _loop_concatenations(batched.jaxpr) < _loop_concatenations(single.jaxpr)


@pytest.mark.program_shape
def test_memory_is_written_in_place():
    """The memory update is masked at the top of the loop's body, not inside the boundary's
    cond: there, next to the next direction's reads of it, XLA copied the whole memory at
    every step boundary (twice the memory, 54 n-vectors against 33 for n = 1e5, m = 10)."""
    assert lbfgs_memory_copies(1000) == []


@pytest.mark.program_shape
@pytest.mark.parametrize("memory_size", [3, 10])
def test_step_end_copies_no_vector_out_of_the_boundary(memory_size):
    """The new iterate, its gradient and the best point's vectors are taken by in-place selects
    at the top of the loop's body (`_transitions.take_vectors`), not inside the boundary's cond: a
    carried vector that a cond reads and returns changed gets a buffer of its own there and
    is copied back into the carry (benchmarks/HISTORY.md, round 11). XLA's memory
    analysis of `run` (the compact form: n >= 5000 on a CPU) counts the temporaries in n-vectors:
    15.3 at m = 3 with the selects, 17.1 with them inside the cond. At m = 10, 29.3: the
    rebuild of S'Y and Y'Y as a broadcast product and a sum kept an m x m x n product (126;
    21.1 at m = 3), `_memory_products`."""
    n = 20_000
    solver = js.Solver(js.LBFGS(memory_size=memory_size))
    x0 = jnp.zeros(n, jnp.float32)
    compiled = jax.jit(lambda x: solver.run(rosenbrock, x).params).lower(x0).compile()
    temporaries = compiled.memory_analysis().temp_size_in_bytes / (4 * n)
    assert temporaries < 2 * memory_size + 10


@pytest.mark.program_shape
def test_history_adds_no_control_flow():
    solver = js.Solver()
    assert control_flow(run_jaxpr(solver, history=True)) == control_flow(run_jaxpr(solver))


def test_search_that_ends_as_it_starts_costs_no_counted_evaluation():
    """A static cap below the line's resolution ends every search at its start: the run takes
    no step and counts only f at x0, as before the engine evaluated once per iteration."""
    solver = js.Solver(js.Gradient(), js.Backtracking(max_step_size=1e-30))
    result = solver.run(rosenbrock, jnp.array([-1.2, 1.0], jnp.float32))
    assert int(result.num_fun_evals) == 1
    assert int(result.num_steps) == 1
    assert int(result.status) == js.Status.STALLED


@pytest.mark.program_shape
@pytest.mark.parametrize("direction", ["LBFGS", "LBFGS-compact", "NewtonCG"])
def test_step_and_run_trace_the_direction_once(direction, monkeypatch):
    """The next direction is built at one place in each program: `step` prepares it at the top
    of the iteration that needs it, not both before the loop and at the step boundary (twice
    the direction's code to compile, and twice its bytes in XLA's cost analysis)."""
    s = solver(direction, "Zoom")
    kind = type(s.direction)
    calls = []
    original = kind.compute

    def counted(self, state, info):
        calls.append(1)
        return original(self, state, info)

    x0 = jnp.full(3, 0.5, jnp.float32)
    state = s.init(x0, fn=rosenbrock)
    monkeypatch.setattr(kind, "compute", counted)
    jax.make_jaxpr(lambda p, st: s.step(rosenbrock, p, st))(x0, state)
    assert len(calls) == 1, f"step traced {kind.__name__}.compute {len(calls)} times"
    calls.clear()
    jax.make_jaxpr(lambda p: s.run(rosenbrock, p).params)(x0)
    assert len(calls) == 1, f"run traced {kind.__name__}.compute {len(calls)} times"


def vector_eqns(solver, primitive: str, n: int = 7) -> list:
    """The equations of `primitive` in the jaxpr of `run` from an x0 of n elements whose
    operands are all n-vectors."""
    jaxpr = jax.make_jaxpr(lambda x: solver.run(rosenbrock, x).params)(
        jnp.zeros(n, jnp.float32)
    ).jaxpr
    return [
        eqn
        for eqn in all_eqns(jaxpr)
        if eqn.primitive.name == primitive
        and all(getattr(v.aval, "shape", None) == (n,) for v in eqn.invars)
    ]


@pytest.mark.program_shape
def test_the_trial_is_compared_with_x_once():
    """Whether a trial left x where it was is one comparison per iteration, read by the
    masked memory update and by the step's end (which compared the new iterate with x again,
    a second pass over both vectors per step). The other comparison of n-vectors is a resumed
    run's check of the gradient at x."""
    assert len(vector_eqns(js.Solver(), "eq")) == 2


@pytest.mark.program_shape
def test_steepest_descent_slope_is_taken_from_the_gradient():
    """The steepest-descent fallback's slope is -<g, g>, which is <g, -g> to the bit, so that
    -g is left to the select that takes it (a vector of its own, 2 n-vectors of traffic per
    step, when the slope was taken as <g, -g>). With a box the projected gradient is the
    direction, and its slope is taken as before."""

    def negation_of_other(eqn, defining):
        a, b = eqn.invars
        for x, y in ((a, b), (b, a)):
            source = defining.get(x)
            while source is not None and source.primitive.name in (
                "convert_element_type",
                "reshape",
            ):
                source = defining.get(source.invars[0])
            if source is not None and source.primitive.name == "neg" and source.invars[0] is y:
                return True
        return False

    for options in ({}, {"bounds": (-1.0, 2.0)}):
        run = lambda x, options=options: js.Solver().run(rosenbrock, x, **options).params  # noqa: E731
        jaxpr = jax.make_jaxpr(run)(jnp.zeros(7, jnp.float32)).jaxpr
        eqns = list(all_eqns(jaxpr))
        defining = {out: eqn for eqn in eqns for out in eqn.outvars}
        dots = [e for e in eqns if e.primitive.name == "dot_general" and len(e.invars) == 2]
        assert not any(negation_of_other(e, defining) for e in dots), options


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_negated_squared_norm_is_the_slope_along_minus_g_to_the_bit(dtype):
    """The claim `prepare` rests on: -<g, g> equals <g, -g> bit for bit (negation is exact and
    round-to-nearest is symmetric), for a pytree of leaves of several sizes."""
    from jaxsearch._misc import tree_dot

    with jax.enable_x64(dtype == "float64"):
        keys = jax.random.split(jax.random.key(0), 3)
        for scale in (1e-20, 1.0, 1e15):
            g = {
                "a": scale * jax.random.normal(keys[0], (1000,), dtype),
                "b": jax.random.normal(keys[1], (7, 3), dtype),
            }
            minus_g = jax.tree.map(jnp.negative, g)
            left = -tree_dot(g, g, jnp.dtype(dtype))
            right = tree_dot(g, minus_g, jnp.dtype(dtype))
            assert left.tobytes() == right.tobytes(), (scale, float(left), float(right))
