"""L-BFGS's compact form (`LBFGS(form="compact")`) computes the two-loop recursion's direction
with no loop over the memory."""

import dataclasses
import functools
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js
import jaxsearch.internal as jsi
from jaxsearch._direction import _lbfgs

from ..helpers import LEAN, TIGHT, compute, explicit_lbfgs_direction, random_pair
from ..problems import (
    REGRESSION_A,
    REGRESSION_B,
    regression_solution,
    ridge,
    ridge_closed_form,
    rosenbrock,
)
from ..program_inspection import all_eqns, control_flow, lbfgs_memory_copies, run_jaxpr

COMPACT = js.LBFGS(memory_size=5, form="compact")


@pytest.mark.parametrize("order", ["follows", "replaced", "several"])
@pytest.mark.parametrize("num_pairs", [1, 3, 8])
def test_compact_matches_explicit_recursion(num_pairs, order):
    """`follows`: a `compute` after each `update` at g + y, as in a solver, each bringing S'Y
    and Y'Y up to date from the products with the gradients (no pass over the memory);
    `replaced`: at unrelated gradients, each after `gradient_replaced` (the products with y);
    `several`: one `compute` after all the pairs, which rebuilds S'Y and Y'Y. A pair with
    negative curvature in the middle is skipped."""
    rng = np.random.default_rng(num_pairs)
    n = 6
    with jax.enable_x64(True):
        state = COMPACT.init(jnp.zeros(n), jnp.float64)
        pairs = [random_pair(rng, n) for _ in range(num_pairs)]
        pairs.insert(num_pairs // 2, (np.ones(n), -np.ones(n)))
        g = rng.standard_normal(n)
        if order != "several":
            _, _, state = compute(COMPACT, state, jnp.asarray(g), jnp.float64)
        for s, y in pairs:
            state = COMPACT.update(state, jnp.asarray(s), jnp.asarray(y), jnp.float64)
            g = g + y if order == "follows" else rng.standard_normal(n)
            if order == "replaced":
                state = COMPACT.gradient_replaced(state)
            if order != "several":
                d, scaled, state = compute(COMPACT, state, jnp.asarray(g), jnp.float64)
        if order == "several":
            d, scaled, state = compute(COMPACT, state, jnp.asarray(g), jnp.float64)
        kept = [pair for pair in pairs if pair[0] @ pair[1] > 0][-COMPACT.memory_size :]
        assert bool(scaled)
        np.testing.assert_allclose(d, explicit_lbfgs_direction(kept, g), rtol=1e-10)


def _matrices_are_the_memorys(state, rtol=1e-10) -> bool:
    """Whether S'Y's upper triangle (the pairs in the order they were stored) and Y'Y are the
    products of the vectors the memory holds."""
    m, count = state.s.shape[0], int(state.count)
    order = (int(state.head) - count + np.arange(count)) % m
    s, y = (np.asarray(b, np.float64)[order] for b in (state.s, state.y))
    upper = np.triu_indices(count)
    s_dot_y = np.asarray(state.s_dot_y)[order][:, order]
    y_dot_y = np.asarray(state.y_dot_y)[order][:, order]
    close = lambda a, b: np.allclose(a, b, rtol=rtol, atol=rtol * 1e-2)  # noqa: E731
    return close(s_dot_y[upper], (s @ y.T)[upper]) and close(y_dot_y, y @ y.T)


def test_compact_products_with_y_come_from_the_gradients():
    """Where the gradients follow the pairs, S'Y's upper triangle and Y'Y are those of the
    memory; where a gradient is replaced without `gradient_replaced`, they are not, since they
    come from the gradients' products (which is why the solver calls it)."""
    rng = np.random.default_rng(7)
    n, m = 6, COMPACT.memory_size
    with jax.enable_x64(True):

        def matrices_right(tell: bool, replace: bool) -> bool:
            state = COMPACT.init(jnp.zeros(n), jnp.float64)
            g = rng.standard_normal(n)
            _, _, state = compute(COMPACT, state, jnp.asarray(g), jnp.float64)
            for k in range(m + 2):
                s, y = random_pair(rng, n)
                state = COMPACT.update(state, jnp.asarray(s), jnp.asarray(y), jnp.float64)
                g = g + y
                if replace and k == m:  # that pair stays in the memory
                    g = rng.standard_normal(n)
                    if tell:
                        state = COMPACT.gradient_replaced(state)
                _, _, state = compute(COMPACT, state, jnp.asarray(g), jnp.float64)
            return _matrices_are_the_memorys(state)

        assert matrices_right(tell=False, replace=False)
        assert matrices_right(tell=True, replace=True)
        assert not matrices_right(tell=False, replace=True)


def test_compact_in_16_bits_takes_the_products_with_y():
    """bfloat16 gradients following the pairs: y = g_new - g rounded to bfloat16 is not the
    difference of the products with the gradients (accumulated in float32), so S'Y and Y'Y
    come from the products with the stored y, and are those of the memory to float32's
    rounding (the state keeps no products with the gradient)."""
    rng = np.random.default_rng(5)
    n = 64
    bf16 = lambda v: jnp.asarray(v, jnp.bfloat16)  # noqa: E731
    state = COMPACT.init(jnp.zeros(n, jnp.bfloat16), jnp.float32)
    g = bf16(rng.standard_normal(n))
    _, _, state = compute(COMPACT, state, g, jnp.float32)
    for _ in range(COMPACT.memory_size + 1):
        s, step = random_pair(rng, n)
        g_new = bf16(g.astype(jnp.float32) + jnp.asarray(step, jnp.float32))
        state = COMPACT.update(state, bf16(s), g_new - g, jnp.float32)
        g = g_new
        _, _, state = compute(COMPACT, state, g, jnp.float32)
    assert state.follows is None
    assert _matrices_are_the_memorys(state, rtol=1e-5)


def _shifted_bowl(x, target):
    return 0.5 * jnp.sum(jnp.linspace(1.0, 9.0, x.size, dtype=x.dtype) * (x - target) ** 2)


def _direction_after_one_more_compute(direction, state):
    """The direction's state once the solver's next `compute` (at the state's gradient) has
    folded the last step's pair in."""
    info = jsi.DirectionInfo(None, state.grad, state.lowest_grad_norm.dtype)
    return direction.compute(state.direction, info)[2]


def test_solver_says_when_it_replaces_the_gradient():
    """A training loop on new data at every step, through `reevaluate` and `step`, and through
    the optax transformation given f and its gradient on the new data: the compact form's
    S'Y and Y'Y stay those of its memory (the solver calls `gradient_replaced`)."""
    direction = js.LBFGS(memory_size=3, form="compact")
    solver = js.Solver(direction, js.Zoom(), gtol=0.0, ftol=0.0)
    rng = np.random.default_rng(3)
    with jax.enable_x64(True):
        targets = [jnp.asarray(1 + 0.1 * rng.standard_normal(6)) for _ in range(8)]
        x = jnp.zeros(6)
        state = solver.init(x, fn=_shifted_bowl, args=(targets[0],))
        step = jax.jit(
            lambda x, st, t: solver.step(_shifted_bowl, x, solver.reevaluate(st), t),
            compiler_options=LEAN,
        )
        for target in targets:
            x, state = step(x, state, target)
        assert int(state.direction.count) == 3
        assert _matrices_are_the_memorys(_direction_after_one_more_compute(direction, state))

        opt = solver.as_optax()
        value_and_grad = jax.value_and_grad(_shifted_bowl)

        @functools.partial(jax.jit, compiler_options=LEAN)
        def update(x, opt_state, target):
            value, grad = value_and_grad(x, target)
            updates, opt_state = opt.update(
                grad, opt_state, x, value=value, grad=grad, value_fn=_shifted_bowl, target=target
            )
            return x + updates, opt_state

        x, opt_state = jnp.zeros(6), opt.init(jnp.zeros(6))
        for target in targets:
            x, opt_state = update(x, opt_state, target)
        kept = dataclasses.replace(opt_state.solver, grad=opt_state.grad)
        assert int(kept.direction.count) == 3
        assert _matrices_are_the_memorys(_direction_after_one_more_compute(direction, kept))


def test_compact_after_reset_is_scaled_steepest_descent():
    """With no pair (after a reset), both forms give -gamma g, gamma from the newest pair."""
    rng = np.random.default_rng(0)
    s, y = (jnp.asarray(v, jnp.float32) for v in random_pair(rng, 4))
    g = jnp.asarray(rng.standard_normal(4), jnp.float32)
    for form in ("compact", "two_loop"):
        direction = js.LBFGS(memory_size=3, form=form)
        state = direction.update(direction.init(g, jnp.float32), s, y, jnp.float32)
        d, scaled, _ = compute(direction, direction.reset(state), g, jnp.float32)
        assert not bool(scaled)
        np.testing.assert_allclose(d, -state.gamma * g, rtol=1e-6)


def test_forms_take_the_same_steps_in_float64():
    """In float64 the solver with either form takes the same steps on Rosenbrock (the two
    compute one matrix, rounded differently)."""
    with jax.enable_x64(True):
        x0 = jnp.array([-1.2, 1.0, -1.2, 1.0])
        two_loop = js.Solver(js.LBFGS(form="two_loop"), js.Zoom()).run(rosenbrock, x0)
        compact = js.Solver(js.LBFGS(form="compact"), js.Zoom()).run(rosenbrock, x0)
        assert int(compact.num_steps) == int(two_loop.num_steps)
        assert int(compact.num_fun_evals) == int(two_loop.num_fun_evals)
        np.testing.assert_allclose(compact.params, two_loop.params, rtol=1e-8)


def test_either_forms_memory_gives_l_bfgs_b_the_same_steps():
    """With bounds the direction is L-BFGS-B's from the memory, whichever form's state holds
    it: in float64 the same steps, evaluations and end point (two programs: to rounding)."""
    with jax.enable_x64(True):
        x0 = jnp.asarray(np.tile([-1.2, 1.0], 4))
        box = (jnp.full(8, -0.5), jnp.full(8, 0.8))
        runs = [
            js.Solver(js.LBFGS(form=form)).run(rosenbrock, jnp.clip(x0, *box), bounds=box)
            for form in ("two_loop", "compact")
        ]
    assert [type(r.state.direction).__name__ for r in runs] == [
        "TwoLoopLBFGSState",
        "CompactLBFGSState",
    ]
    assert int(runs[0].state.num_steps) == int(runs[1].state.num_steps)
    assert int(runs[0].state.num_fun_evals) == int(runs[1].state.num_fun_evals)
    assert bool(runs[0].success) and bool(runs[1].success)
    np.testing.assert_allclose(runs[1].params, runs[0].params, rtol=1e-12)


def scaled_quadratic(x):
    """sum_i c_i (x_i - 1)^2 with c from 1 to 20: minimum 0 at x = 1."""
    c = jnp.linspace(1.0, 20.0, x.size, dtype=x.dtype)
    return jnp.sum(c * (x - 1) ** 2)


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16, jnp.float32])
def test_compact_in_low_precision_reaches_the_minimiser(dtype):
    """Memory in the params' dtype, products accumulated in float32: the minimiser of a
    quadratic to the resolution of the dtype."""
    solver = js.Solver(js.LBFGS(form="compact"), gtol=0.0, ftol=0.0, max_steps=100)
    result = solver.run(scaled_quadratic, jnp.zeros(8, dtype))
    assert result.params.dtype == dtype
    resolution = float(jnp.finfo(dtype).eps)
    np.testing.assert_allclose(np.asarray(result.params, np.float32), 1.0, atol=8 * resolution)


@pytest.mark.program_shape
def test_compact_run_has_no_loop_over_the_memory():
    """The compact form's whole `run`: one while loop and conds only, no scan; an evaluation
    inside a line search still costs the loop's predicate and the boundary's cond."""
    found = control_flow(run_jaxpr(js.Solver(js.LBFGS(form="compact"))))
    assert sorted(found) == [
        ("cond", 1),
        ("cond", 2),
        ("cond", 2),
        ("cond", 3),  # S'Y and Y'Y rebuilt after several pairs without a `compute`
        ("while", 0),
    ]


def _products_reading(jaxpr, sources: dict) -> dict:
    """How many `dot_general`s at the top of `jaxpr` (outside its conds) read each named
    input, directly or through a dtype conversion."""
    origin = {var: name for name, var in sources.items()}
    counts = dict.fromkeys(sources, 0)
    for eqn in jaxpr.eqns:
        names = [origin[v] for v in eqn.invars if not hasattr(v, "val") and v in origin]
        if eqn.primitive.name == "convert_element_type" and names:
            origin[eqn.outvars[0]] = names[0]
        elif eqn.primitive.name == "dot_general":
            for name in names:
                counts[name] += 1
    return counts


@pytest.mark.program_shape
def test_compact_reads_each_buffer_by_as_many_products():
    """Outside its branches (taken only after `gradient_replaced`, or after several pairs with
    no `compute` between them), the compact form reads each buffer twice: its product with g,
    and the product back. S'y and Y'y of the newest pair come from those with g, on every
    backend."""
    direction = js.LBFGS(memory_size=5, form="compact")
    grad = jnp.ones(64, jnp.float32)
    state = direction.init(grad, jnp.float32)
    info = lambda g: jsi.DirectionInfo(None, g, jnp.float32)  # noqa: E731
    closed = jax.make_jaxpr(lambda st, g: direction.compute(st, info(g))[0])(state, grad)
    leaves = jax.tree.leaves((state, grad))
    s_index = next(i for i, x in enumerate(leaves) if x is state.s)
    y_index = next(i for i, x in enumerate(leaves) if x is state.y)
    invars = closed.jaxpr.invars
    counts = _products_reading(closed.jaxpr, {"s": invars[s_index], "y": invars[y_index]})
    assert counts == {"s": 2, "y": 2}


@pytest.mark.program_shape
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_compact_bookkeeping_writes_no_small_matrix_by_index(dtype):
    """S'Y and Y'Y take the newest pair's column (and row), and `update` its own s'y and y'y,
    by selects on index masks, and `compute` takes its coefficients back to the slots by a
    gather, not by scatters or dynamic updates: XLA compiles each of those as a kernel of its
    own, and selects and gathers fuse (188 fusions -> 166 in the compact form's run at
    n = 1000; benchmarks/HISTORY.md, round 11). float32 takes the products with
    y from those with g, bfloat16 by products with the newest y: both fold a column in."""
    m, n = 4, 7
    direction = js.LBFGS(memory_size=m, form="compact")
    params = jnp.ones(n, dtype)
    state = direction.init(params, jnp.float32)

    def compute_then_update(st, g, s, y):
        st = direction.update(st, s, y, jnp.float32)
        return direction.compute(st, jsi.DirectionInfo(None, g, jnp.float32))

    jaxpr = jax.make_jaxpr(compute_then_update)(state, params, params, params).jaxpr
    writes = [
        eqn
        for eqn in all_eqns(jaxpr)
        if eqn.primitive.name in ("scatter", "dynamic_update_slice")
        and eqn.outvars[0].aval.shape == (m, m)
    ]
    assert writes == []
    # Nor are the coefficients taken back from the pairs' order to the slots by a scatter
    # (`compute` alone: `update` writes rho, an (m,) vector, in place by index).
    info = jsi.DirectionInfo(None, params, jnp.float32)
    alone = jax.make_jaxpr(lambda st: direction.compute(st, info))(state).jaxpr
    assert not any(eqn.primitive.name == "scatter" for eqn in all_eqns(alone))
    assert any(
        eqn.outvars[0].aval.shape == (m, n)
        for eqn in all_eqns(jaxpr)
        if eqn.primitive.name == "scatter"
    )  # the memory's own write: found by the walk


@pytest.mark.parametrize(
    "backend, small", [("cpu", "two_loop"), ("tpu", "two_loop"), ("gpu", "compact")]
)
def test_auto_form(monkeypatch, backend, small):
    """The two-loop recursion for small params on a CPU or a TPU, else the compact form (the
    backend "auto" reads is simulated)."""
    from jaxsearch._direction._lbfgs import COMPACT_FROM

    _auto_reads(monkeypatch, backend)
    assert js.LBFGS().form_in_use(COMPACT_FROM - 1) == small
    assert js.LBFGS().form_in_use(COMPACT_FROM) == "compact"
    assert js.LBFGS(form="compact").form_in_use(1) == "compact"
    assert js.LBFGS(form="two_loop").form_in_use(10**9) == "two_loop"


@pytest.mark.parametrize(
    "direction, size, compact",
    [
        (js.LBFGS(form="two_loop"), 10**4, False),
        (js.LBFGS(form="compact"), 3, True),
        (js.LBFGS(), 3, jax.default_backend() == "gpu"),
        (js.LBFGS(), 10**4, True),
    ],
)
def test_only_the_compact_form_keeps_s_dot_y(direction, size, compact):
    """S'Y, Y'Y, their pending count and the products with the last gradient are in the state
    only where the compact form reads them: the two-loop recursion's state (and a run's loop
    carry and outputs) go without."""
    state = direction.init(jnp.zeros(size), jnp.float32)
    kept = [getattr(state, name, None) for name in ("s_dot_y", "y_dot_y", "pending")]
    assert all(leaf is not None for leaf in kept) if compact else kept == [None] * 3
    by_differences = compact  # float32: on every backend
    with_grad = [getattr(state, name, None) for name in ("s_dot_grad", "y_dot_grad", "follows")]
    present = [leaf is not None for leaf in with_grad]
    assert present == [by_differences] * 3
    pairs = [tuple(map(jnp.asarray, random_pair(np.random.default_rng(k), size))) for k in (0, 1)]
    after = direction.update(state, *pairs[0], jnp.float32)
    for accept in (True, False):
        after = direction.update(after, *pairs[1], jnp.float32, accept)
        reset = direction.reset(after)
        for tree in (after, reset, direction.gradient_replaced(after)):
            assert jax.tree.structure(tree) == jax.tree.structure(state)
        assert int(reset.count) == 0 and int(reset.head) == 0


@pytest.mark.program_shape
def test_default_run_of_large_params_has_no_loop_over_the_memory():
    """The default solver on params of 5000 elements in two leaves: no scan in its run."""
    params = {"a": jnp.zeros(3000), "b": jnp.zeros((20, 100))}

    def f(p):
        return jnp.sum(p["a"] ** 2) + jnp.sum(p["b"] ** 2)

    found = control_flow(jax.make_jaxpr(lambda p: js.Solver().run(f, p).params)(params).jaxpr)
    assert not any(name == "scan" for name, _ in found), found


def _resumed_rosenbrock(x):  # a function of its own: no program compiled elsewhere is reused
    return rosenbrock(x)


def _auto_reads(monkeypatch, backend: str) -> None:
    """`LBFGS(form="auto")` reads `backend` as jax's default backend (nothing else does)."""
    monkeypatch.setattr(_lbfgs, "jax", types.SimpleNamespace(default_backend=lambda: backend))


@pytest.mark.parametrize(
    "made_on, resumed_on, form", [("gpu", "cpu", "compact"), ("cpu", "gpu", "two_loop")]
)
def test_a_state_resumes_in_the_form_it_was_made_with(monkeypatch, made_on, resumed_on, form):
    """`form="auto"` picks the form once, in `init` (small params: the compact form on a GPU,
    the two-loop recursion on a CPU), and the state's class records it. Resumed where "auto"
    would pick the other form, the state is refused with the setting to pass; with it, the
    run goes on bit for bit as an uninterrupted run in that form (float64). The backend
    that "auto" reads is simulated, and the caches cleared as a new process would have them."""
    classes = {
        "compact": js._direction.CompactLBFGSState,
        "two_loop": js._direction.TwoLoopLBFGSState,
    }
    settings = dict(gtol=0.0, ftol=0.0)
    with jax.enable_x64(True):
        x0 = jnp.asarray(np.tile([-1.2, 1.0], 3))
        _auto_reads(monkeypatch, made_on)
        first = js.Solver(js.LBFGS(memory_size=6), js.Zoom(), max_steps=6, **settings).run(
            _resumed_rosenbrock, x0
        )
        assert type(first.state.direction) is classes[form]
        jax.clear_caches()
        _auto_reads(monkeypatch, resumed_on)
        auto = js.Solver(js.LBFGS(memory_size=6), js.Zoom(), max_steps=6, **settings)
        assert type(auto.init(x0).direction) is not classes[form]
        with pytest.raises(TypeError, match=rf'made by js\.LBFGS\(form="{form}"\): pass it'):
            auto.run(_resumed_rosenbrock, first.iterate, state=first.state)
        given = js.LBFGS(memory_size=6, form=form)
        second = js.Solver(given, js.Zoom(), max_steps=6, **settings).run(
            _resumed_rosenbrock, first.iterate, state=first.state
        )
        whole = js.Solver(given, js.Zoom(), max_steps=12, **settings).run(_resumed_rosenbrock, x0)
    assert int(second.state.num_steps) == int(whole.state.num_steps) == 12
    assert int(second.state.num_fun_evals) == int(whole.state.num_fun_evals)
    assert np.array_equal(second.params, whole.params)
    assert np.array_equal(second.value, whole.value)


def test_bad_form_is_refused():
    with pytest.raises(ValueError, match="form must be one of"):
        js.LBFGS(form="dense")


def test_compact_unrolled_derivative_matches_closed_form():
    """Reverse mode through the compact form's products and substitutions (UnrolledAdjoint)."""
    solver = js.Solver(js.LBFGS(form="compact"), **TIGHT, adjoint=js.UnrolledAdjoint())
    with jax.enable_x64(True):
        data, penalty = (jnp.asarray(REGRESSION_A), jnp.asarray(REGRESSION_B)), jnp.asarray(0.7)
        expected = jax.jacfwd(ridge_closed_form, argnums=2)(*data, penalty)
        solved = lambda p: regression_solution(solver, ridge, data, p)  # noqa: E731
        # One program with the lean options: a third shorter a compile than eager jacrev's.
        reverse = jax.jit(jax.jacrev(solved), compiler_options=LEAN)(penalty)
        assert np.max(np.abs(reverse - expected)) <= 1e-10 * np.max(np.abs(expected))


def test_compact_vmapped_run_equals_one_at_a_time():
    solver = js.Solver(js.LBFGS(form="compact"), gtol=1e-10, ftol=0.0)
    with jax.enable_x64(True):
        x0s = jnp.array([[-1.2, 1.0], [2.0, -1.5], [0.5, 0.5]])
        batched = jax.jit(jax.vmap(lambda x: solver.run(rosenbrock, x)), compiler_options=LEAN)(x0s)
        for i, x0 in enumerate(x0s):
            single = solver.run(rosenbrock, x0)
            assert int(batched.num_steps[i]) == int(single.num_steps)
            np.testing.assert_allclose(batched.params[i], single.params, rtol=1e-10)


@pytest.mark.program_shape
def test_compact_memory_is_written_in_place():
    """No copy of an (m, n) memory buffer in the compact form's compiled run (its products
    read the buffers the masked update writes in place)."""
    assert lbfgs_memory_copies(1000, form="compact") == []
