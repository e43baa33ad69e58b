"""`compiler_options` of `run`, "auto"'s choice by the estimated cost of a run (the compile
wing's pricing, read through its test seam, `jaxsearch._compile.seam`), and `js.jit`, which
compiles a training step with the options `step` gets. Structure only (which options reach
the compiler, how many compiles, what the cost counter counts): the timings are in
benchmarks/studies/compile_options.py."""

import contextlib
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js
from jaxsearch._compile import seam

on_cpu = pytest.mark.skipif(jax.default_backend() != "cpu", reason="lean options are CPU's")
LEAN = seam.LEAN_ITEMS


def bowl(x):
    return jnp.sum((x - 1.0) ** 2)


def network_loss(model, x, y):
    return jnp.mean((jax.vmap(model)(x) - y) ** 2)


def network_problem(points: int, dtype=jnp.float32):
    key_model, key_data = jax.random.split(jax.random.key(0))
    model = eqx.nn.MLP(2, 1, 16, 2, activation=jnp.tanh, key=key_model, dtype=dtype)
    x = jax.random.normal(key_data, (points, 2), dtype)
    return model, x, jnp.sin(x[:, :1])


@pytest.fixture
def compiled_as():
    """The options of every program compiled or reused, in order."""
    with seam.dispatches("name", "options") as seen:
        yield seen


@pytest.fixture
def filter_jits():
    """The `compiler_options` of every jit (`jax.jit` or `eqx.filter_jit`) that `js.jit`
    builds (of a function defined in this module)."""
    with seam.jits("compiler_options", of_module=__name__) as seen:
        yield seen


# ----------------------------------------------------------------------------- the counter


def test_work_counts_a_network_layer_exactly():
    """tanh(A x + b), summed: one matrix-vector product of 2 m n flops, m tanh, and the add and
    the sum over m elements each."""
    m, n = 7, 5

    def layer(x, a, b):
        return jnp.sum(jnp.tanh(a @ x + b))

    jaxpr = jax.make_jaxpr(layer)(jnp.ones(n), jnp.ones((m, n)), jnp.ones(m)).jaxpr
    assert seam.work(jaxpr) == seam.Work(elementwise=2 * m, transcendental=m, dot_flops=2 * m * n)


def test_work_counts_a_scan_once_per_trip_and_nested_jits():
    def body(carry, _):
        return jnp.exp(carry), None

    def repeated(x):
        return jnp.sum(jax.jit(lambda x: jax.lax.scan(body, x, None, length=6)[0])(x))

    counted = seam.work(jax.make_jaxpr(repeated)(jnp.ones(4)).jaxpr)
    assert counted.transcendental == 6 * 4
    assert counted.elementwise == 4  # the sum


def test_lean_extra_seconds_is_the_documented_sum():
    counted = seam.Work(elementwise=1000, transcendental=100, dot_flops=10_000)
    expected = 1e-9 * (
        seam.EXTRA_NS_PER_ELEMENTWISE * 1000
        + seam.EXTRA_NS_PER_TRANSCENDENTAL * 100
        + seam.EXTRA_NS_PER_DOT_FLOP * 10_000
        + seam.EXTRA_NS_PER_PARAMETER * 50
    )
    assert seam.lean_extra_per_work(counted, 50) == pytest.approx(expected, rel=1e-12)


# ----------------------------------------------------------------------------- "auto"


@on_cpu
def test_auto_prices_the_run_by_its_steps_and_its_objective():
    """A cheap objective is lean at any budget; a network's loss is lean for a short run and
    keeps XLA's defaults for a long one, or on more data; the price is `max_steps` steps of
    `EVALUATIONS_PER_STEP` evaluations of fn, each as the wing's cost counter estimates it."""
    model, x, y = network_problem(256)
    per_evaluation = seam.lean_extra_seconds(js.Solver(max_steps=1), network_loss, model, (x, y))
    per_evaluation /= seam.EVALUATIONS_PER_STEP
    assert per_evaluation > 0
    affordable = int(seam.LEAN_SAVES_SECONDS / (seam.EVALUATIONS_PER_STEP * per_evaluation))
    short, long = js.Solver(max_steps=affordable), js.Solver(max_steps=affordable + 1)
    assert seam.auto_options(short, network_loss, model, (x, y)) == LEAN
    assert seam.auto_options(long, network_loss, model, (x, y)) is None
    model, x, y = network_problem(4096)  # 16 times the points: 16 times the price
    assert seam.auto_options(short, network_loss, model, (x, y)) is None
    assert seam.auto_options(js.Solver(max_steps=10**6), bowl, jnp.zeros(10), ()) == LEAN


@on_cpu
def test_run_compiles_with_the_options_it_is_given(compiled_as):
    solver = js.Solver(max_steps=20)
    x0 = jnp.zeros(3)
    given = {"xla_backend_optimization_level": 1}
    results = [
        solver.run(bowl, x0, compiler_options=options)
        for options in ("auto", None, given, seam.LEAN_OPTIONS)
    ]
    assert compiled_as == [
        ("fresh_state", LEAN),  # the fresh state, kept for the next runs
        ("compiled_run", LEAN),
        ("compiled_run", None),
        ("compiled_run", tuple(given.items())),
        ("compiled_run", LEAN),
    ]
    for result in results:
        assert result.status == js.Status.CONVERGED_GTOL
        np.testing.assert_allclose(result.params, np.ones(3), rtol=1e-6)


@on_cpu
def test_an_expensive_run_rents_or_keeps_the_defaults_and_its_state_program_is_lean(
    compiled_as, rent_for
):
    """A budget of steps over `lean_steps`: a plain run rents lean steps first (the bowl
    ends within them); one that cannot be cut in two (a budget of evaluations) is priced at
    `HORIZON` steps, whatever its `max_steps`."""
    x0 = jnp.zeros(3)
    rent_for(seam.HORIZON - 1, bowl, x0)
    result = js.Solver(max_steps=10**4).run(bowl, x0)
    assert result.status == js.Status.CONVERGED_GTOL
    result = js.Solver(max_steps=10**4, max_evals=10**5).run(bowl, x0)
    assert result.status == js.Status.CONVERGED_GTOL
    rent_for(seam.HORIZON, bowl, x0)
    js.Solver(max_steps=10**4, max_evals=10**5).run(bowl, x0)
    assert compiled_as == [
        ("fresh_state", LEAN),  # evaluates no fn
        ("compiled_run", LEAN),
        ("fresh_state", LEAN),
        ("compiled_run", None),
        ("fresh_state", LEAN),
        ("compiled_run", LEAN),
    ]


def rosenbrock(x):
    return 100.0 * (x[1] - x[0] ** 2) ** 2 + (1.0 - x[0]) ** 2


@pytest.fixture
def rent_for():
    """Make "auto" price a run so that `lean_steps` is `steps` for `fn` (the saving scaled)."""

    def rent(steps, fn, x0, args=()):
        per_step = seam.lean_extra_seconds(js.Solver(max_steps=1), fn, x0, args)
        saving = (steps + 0.5) * per_step
        hooks.enter_context(seam.options(saving=saving))
        assert seam.lean_steps(fn, x0, args) == steps

    with contextlib.ExitStack() as hooks:
        yield rent


@on_cpu
def test_lean_steps_are_those_priced_below_the_saving():
    x0 = jnp.zeros(10**4, jnp.float32)
    per_step = seam.lean_extra_seconds(js.Solver(max_steps=1), bowl, x0, ())
    assert seam.lean_steps(bowl, x0, ()) == int(seam.LEAN_SAVES_SECONDS / per_step)
    batched = []
    four = jnp.zeros((4, 10**4), jnp.float32)
    jax.vmap(lambda x: batched.append(seam.lean_steps(bowl, x, ())) or x)(four)
    jax.jit(jax.vmap(lambda x: batched.append(seam.lean_steps(bowl, x, ())) or x))(four)
    # an eager vmap prices its 4 problems; inside a jit, nothing is compiled lean
    assert batched == [int(seam.LEAN_SAVES_SECONDS / (4 * per_step)), 0]


@on_cpu
def test_a_long_run_rents_lean_steps_then_resumes_under_the_defaults(compiled_as, rent_for):
    """Rosenbrock takes about 35 steps: the first 5 are compiled lean, the rest with XLA's
    defaults, resumed from the lean part's state, as the two calls made by hand do."""
    with jax.enable_x64(True):
        x0 = jnp.array([-1.2, 1.0], jnp.float64)
        rent_for(5, rosenbrock, x0)
        solver = js.Solver(gtol=1e-9, ftol=0.0, max_steps=100)
        result = solver.run(rosenbrock, x0)
        assert compiled_as == [
            ("fresh_state", LEAN),
            ("compiled_run", LEAN),
            ("compiled_run", None),
        ]
        assert result.status == js.Status.CONVERGED_GTOL and result.num_steps > 5
        np.testing.assert_allclose(result.params, [1.0, 1.0], rtol=1e-8)
        lean = js.Solver(gtol=1e-9, ftol=0.0, max_steps=5).run(
            rosenbrock, x0, compiler_options=seam.LEAN_OPTIONS
        )
        assert lean.status == js.Status.MAX_STEPS
        rest = js.Solver(gtol=1e-9, ftol=0.0, max_steps=95).run(
            rosenbrock, lean.iterate, state=lean.state, compiler_options=None
        )
        for got, expected in zip(jax.tree.leaves(result), jax.tree.leaves(rest), strict=True):
            np.testing.assert_array_equal(got, expected)
        # the whole run in one program: the same status and a close answer
        whole = solver.run(rosenbrock, x0, compiler_options=None)
        assert whole.status == result.status
        assert abs(int(whole.num_steps) - int(result.num_steps)) <= 2
        np.testing.assert_allclose(result.params, whole.params, rtol=1e-8)


@on_cpu
def test_an_eagerly_vmapped_run_rents_each_problem_at_its_own_step(compiled_as, rent_for):
    """Under an eager `jax.vmap` jax compiles the batched program at the top level, with the
    options asked for: "auto" prices the batch as its problems times one's and cuts every
    problem at the same step number. A problem that ended in the lean part keeps its result
    (here x0 = (1, 1), converged at once); the others resume under the defaults. A vmapped
    run cut into calls (the second's problems standing at steps 3 and 0) compiles as the
    whole does and ends where it ends, bit for bit."""
    with jax.enable_x64(True):
        starts = jnp.array([[-1.2, 1.0], [1.0, 1.0], [-0.5, 0.8], [0.3, -0.2]], jnp.float64)
        rent_for(4 * 5 + 1, rosenbrock, starts[0])  # 5 lean steps for the batch of 4
        solver = js.Solver(gtol=1e-9, ftol=0.0, max_steps=100)
        whole = jax.vmap(lambda x: solver.run(rosenbrock, x))(starts)
        assert compiled_as == [
            ("fresh_state", LEAN),
            ("compiled_run", LEAN),
            ("compiled_run", None),
        ]
        assert [js.Status(int(s)) for s in whole.status] == [js.Status.CONVERGED_GTOL] * 4
        assert int(whole.num_steps[1]) == 0 and min(np.asarray(whole.num_steps)[[0, 2, 3]]) > 5
        np.testing.assert_allclose(whole.params, np.ones((4, 2)), rtol=1e-8)
        # by hand: 5 steps lean for every problem, then the others resumed under the defaults
        first = js.Solver(gtol=1e-9, ftol=0.0, max_steps=5)
        lean = jax.vmap(lambda x: first.run(rosenbrock, x, compiler_options=seam.LEAN_OPTIONS))(
            starts
        )
        assert [int(s) for s in lean.num_steps] == [5, 0, 5, 5]
        rest = js.Solver(gtol=1e-9, ftol=0.0, max_steps=95)
        later = jax.vmap(
            lambda x, state: rest.run(rosenbrock, x, state=state, compiler_options=None)
        )(lean.iterate, lean.state)
        for got, expected in zip(jax.tree.leaves(whole), jax.tree.leaves(later), strict=True):
            np.testing.assert_array_equal(np.delete(got, 1, 0), np.delete(expected, 1, 0))
        for got, expected in zip(jax.tree.leaves(whole), jax.tree.leaves(lean), strict=True):
            np.testing.assert_array_equal(got[1], expected[1])
        # cut into calls of 3 and 97 steps
        del compiled_as[:]
        three = js.Solver(gtol=1e-9, ftol=0.0, max_steps=3)
        head = jax.vmap(lambda x: three.run(rosenbrock, x))(starts)
        tail_solver = js.Solver(gtol=1e-9, ftol=0.0, max_steps=97)
        tail = jax.vmap(lambda x, state: tail_solver.run(rosenbrock, x, state=state))(
            head.iterate, head.state
        )
        assert compiled_as == [
            ("fresh_state", LEAN),
            ("compiled_run", LEAN),
            ("compiled_run", LEAN),
            ("compiled_run", None),
        ]
        for got, expected in zip(jax.tree.leaves(tail), jax.tree.leaves(whole), strict=True):
            np.testing.assert_array_equal(got, expected)


@on_cpu
def test_a_run_that_ends_within_its_lean_steps_compiles_nothing_else(compiled_as, rent_for):
    x0 = jnp.zeros(3)
    rent_for(5, bowl, x0)
    result = js.Solver(max_steps=100).run(bowl, x0)
    assert result.status == js.Status.CONVERGED_GTOL
    assert compiled_as == [("fresh_state", LEAN), ("compiled_run", LEAN)]


@on_cpu
@pytest.mark.parametrize(
    "solver, report",
    [
        (js.Solver(max_steps=100, max_evals=1000), {}),
        (js.Solver(max_steps=100), {"history": True}),
        (js.Solver(max_steps=100), {"callback": lambda info: None}),
    ],
    ids=["max_evals", "history", "callback"],
)
def test_runs_that_cannot_be_split_do_not_rent(compiled_as, rent_for, solver, report):
    x0 = jnp.zeros(3)
    rent_for(5, bowl, x0)
    solver.run(bowl, x0, **report)
    assert [options for _, options in compiled_as] == [LEAN, None]


@on_cpu
def test_a_run_that_throws_rents_and_raises_at_its_end(compiled_as, rent_for):
    """`throw=True`: the lean part raises on failures only (its end at its steps is not the
    run's); the run's own end at `max_steps` raises."""
    with jax.enable_x64(True):
        x0 = jnp.array([-1.2, 1.0], jnp.float64)
        rent_for(5, rosenbrock, x0)
        with pytest.raises(Exception, match="MAX_STEPS"):
            js.Solver(gtol=1e-12, ftol=0.0, max_steps=12, throw=True).run(rosenbrock, x0)
        assert [options for _, options in compiled_as] == [LEAN, LEAN, None]


@on_cpu
def test_a_run_cut_into_calls_compiles_as_the_whole(compiled_as, rent_for):
    """Lean or not goes by the step's number from a fresh state: a run resumed in calls of 3
    steps takes the lean options for its first 5 steps and the defaults after, as the whole
    run does, and ends where it ends, bit for bit."""
    with jax.enable_x64(True):
        x0 = jnp.array([-1.2, 1.0], jnp.float64)
        rent_for(5, rosenbrock, x0)
        whole = js.Solver(gtol=0.0, ftol=0.0, max_steps=12).run(rosenbrock, x0)
        compiled_as.clear()
        part = js.Solver(gtol=0.0, ftol=0.0, max_steps=3)
        result = part.run(rosenbrock, x0)
        for _ in range(3):
            result = part.run(rosenbrock, result.iterate, state=result.state)
        # the fresh state; steps 0-2 lean; 3-4 lean, 5 default; 6-8 and 9-11 default
        assert [options for _, options in compiled_as] == [LEAN, LEAN, LEAN, None, None, None]
        assert int(result.num_steps) == int(whole.num_steps) == 12
        for got, expected in zip(jax.tree.leaves(result), jax.tree.leaves(whole), strict=True):
            np.testing.assert_array_equal(got, expected)


def test_a_bad_setting_and_options_inside_a_trace_are_refused():
    solver = js.Solver(max_steps=5)
    with pytest.raises(TypeError, match='"auto", None'):
        solver.run(bowl, jnp.zeros(3), compiler_options="lean")
    with pytest.raises(ValueError, match="top level"):
        jax.jit(lambda x: solver.run(bowl, x, compiler_options={"a": 1}).params)(jnp.zeros(3))
    inside = jax.jit(lambda x: solver.run(bowl, x, compiler_options=None).params)(jnp.zeros(3))
    assert inside.shape == (3,)


# ----------------------------------------------------------------------------- js.jit


def _training_step(solver):
    def train_step(model, state, x, y):
        return solver.step(network_loss, model, state, x, y)

    return train_step


@on_cpu
def test_js_jit_passes_the_options_step_chooses(compiled_as, filter_jits):
    """For a cheap training step, `js.jit` compiles with the lean options, as `step` called
    directly does; for an expensive one (a long budget), with XLA's defaults, as "auto"
    chooses for `step` (`test_programs.py` checks that `step` compiles with that choice)."""
    model, x, y = network_problem(64)
    for max_steps, expected in ((10, LEAN), (10**6, None)):
        solver = js.Solver(max_steps=max_steps)
        state = solver.init(model, value_dtype=jnp.float32)
        filter_jits.clear()
        js.jit(_training_step(solver))(model, state, x, y)
        assert filter_jits == [None if expected is None else dict(expected)]
        assert seam.auto_options(solver, network_loss, model, (x, y)) == expected
    compiled_as.clear()
    solver = js.Solver(max_steps=10)
    solver.step(network_loss, model, solver.init(model, value_dtype=jnp.float32), x, y)
    assert compiled_as == [("take_step", LEAN)]


@on_cpu
def test_js_jit_compiles_once_per_dtype_setting(compiles):
    """Repeated calls reuse the compiled step; a new dtype setting compiles once more; the
    training step is traced twice for each (once priced, with the solver's step left out)."""
    solver = js.Solver(max_steps=50)
    traces = []

    def train_step(model, state, x, y):
        traces.append(jax.typeof(x).dtype)
        return solver.step(network_loss, model, state, x, y)

    jitted = js.jit(train_step)
    for dtype in (jnp.float32, jnp.bfloat16):
        model, x, y = network_problem(32, dtype)
        state = solver.init(model, value_dtype=jnp.float32)
        batches = [(x + i, y) for i in range(3)]
        jax.block_until_ready((state, batches))
        compiles.reset()
        for xb, yb in batches:
            model, state = jitted(model, state, xb, yb)
        jax.block_until_ready(state)
        assert compiles.count == 1
        assert int(state.num_steps) == 3
    assert traces == [jnp.float32] * 2 + [jnp.bfloat16] * 2


def test_js_jit_without_lean_options_is_one_filter_jit(compiles, filter_jits):
    """Where the lean options do not apply (a GPU or a TPU, simulated here), `js.jit` is
    `eqx.filter_jit` with XLA's defaults: the training step traced once (no pricing trace),
    one program compiled, reused by the next calls (issue 48: never slower than
    `eqx.filter_jit` on any backend)."""
    with seam.options(supported=False):
        solver = js.Solver(max_steps=50)
        traces = []

        def train_step(model, state, x, y):
            traces.append(None)
            return solver.step(network_loss, model, state, x, y)

        model, x, y = network_problem(32)
        state = solver.init(model, value_dtype=jnp.float32)
        batches = [x + i for i in range(3)]
        jax.block_until_ready((model, state, batches))
        jitted = js.jit(train_step)
        compiles.reset()
        for batch in batches:
            model, state = jitted(model, state, batch, y)
        jax.block_until_ready(state)
        assert (len(traces), compiles.count, filter_jits) == (1, 1, [None])


@pytest.fixture
def dispatches():
    """For every jit `js.jit` builds: True where by `jax.jit`, False by `eqx.filter_jit`."""
    with seam.jits("arrays") as seen:
        yield seen


def test_js_jit_on_arrays_is_jax_jit(dispatches, compiles):
    """A training step on arrays alone (params a dict of arrays) is dispatched by `jax.jit`
    (jax's C++ dispatch, no Equinox partition per call): one compile over three steps, and
    the steps of `eqx.filter_jit` to float32 rounding."""
    solver = js.Solver(max_steps=50)
    params = {"w": jnp.linspace(-1.0, 1.0, 6, dtype=jnp.float32)}
    targets = jnp.arange(6, dtype=jnp.float32)

    def loss(p, t):
        return jnp.sum((jnp.sin(p["w"]) - t / 6) ** 2)

    def train_step(p, state, t):
        return solver.step(loss, p, state, t)

    stepped = {}
    for name, jitted in (("js", js.jit(train_step)), ("eqx", eqx.filter_jit(train_step))):
        p, state = params, solver.init(params, value_dtype=jnp.float32)
        jax.block_until_ready(state)
        compiles.reset()
        for _ in range(3):
            p, state = jitted(p, state, targets)
        assert compiles.count == 1
        stepped[name] = p["w"]
    assert dispatches == [True]
    np.testing.assert_allclose(stepped["js"], stepped["eqx"], rtol=1e-5, atol=1e-6)


def test_js_jit_falls_back_to_filter_jit_where_jax_jit_cannot(dispatches):
    """A Python number in the arguments, an output that is not an array, a fun that holds
    arrays itself (an Equinox module, whose arrays `eqx.filter_jit` passes in), or an
    `eqx.nn` model as an argument (docs/training-loops.md) go by `eqx.filter_jit`, with its
    results."""
    x = jnp.arange(3.0)
    assert np.array_equal(js.jit(lambda v, n: v * n)(x, 2), 2 * x)
    assert dispatches == [False]
    dispatches.clear()
    doubled, label = js.jit(lambda v: (2 * v, "doubled"))(x)
    assert label == "doubled" and np.array_equal(doubled, 2 * x)
    assert dispatches == [True, False]  # the first trace found the string
    dispatches.clear()
    scale = eqx.nn.Linear(3, 3, key=jax.random.key(0))
    np.testing.assert_allclose(js.jit(scale)(x), scale(x), rtol=1e-6)
    assert dispatches == [False]
    dispatches.clear()  # an eqx.nn model as an argument holds its activation function
    model = eqx.nn.MLP(3, 1, 4, 1, activation=jnp.tanh, key=jax.random.key(1))
    np.testing.assert_allclose(js.jit(lambda m, v: m(v))(model, x), model(x), rtol=1e-6)
    assert dispatches == [False]


@on_cpu
def test_js_jit_with_options_given_and_without_a_solver(filter_jits):
    given = {"xla_backend_optimization_level": 1}
    doubled = js.jit(compiler_options=given)(lambda x: 2 * x)
    assert float(doubled(jnp.asarray(2.0))) == 4.0
    plain = js.jit(lambda x: 3 * x)  # no solver in it: nothing to price, XLA's defaults
    assert float(plain(jnp.asarray(2.0))) == 6.0
    assert filter_jits == [given, None]


@on_cpu
def test_js_jit_under_a_vmap_or_a_jit_leaves_the_options_to_them():
    solver = js.Solver(max_steps=5)

    @js.jit
    def fit(x0):
        return solver.run(bowl, x0).params

    batched = jax.vmap(fit)(jnp.zeros((2, 3)))
    np.testing.assert_allclose(batched, np.ones((2, 3)), rtol=1e-6)
    np.testing.assert_allclose(jax.jit(fit)(jnp.zeros(3)), np.ones(3), rtol=1e-6)
    with pytest.raises(ValueError, match="top level"):
        jax.jit(js.jit(compiler_options={"a": 1})(lambda x: x))(jnp.zeros(3))


@on_cpu
def test_a_vmapped_solver_call_inside_js_jit_is_priced_per_problem(filter_jits):
    """Under `jax.vmap` inside `js.jit` (which compiles the batch with its options), a solver
    call is priced as its problems times one problem's: a small batch compiles lean, one
    priced above the saving keeps XLA's defaults, and then the pricing trace stops at that
    call (what follows it is traced once, by the compile)."""
    solver = js.Solver(max_steps=10**6)
    one = seam.lean_extra_seconds(solver, bowl, jnp.zeros(3), ())
    above = math.ceil(seam.LEAN_SAVES_SECONDS / one) + 1
    after = []

    @js.jit
    def fits(x0s):
        params = jax.vmap(lambda x0: solver.run(bowl, x0).params)(x0s)
        after.append(x0s.shape[0])
        return params

    for problems, expected in ((2, LEAN), (above, None)):
        filter_jits.clear()
        got = fits(jnp.zeros((problems, 3)))
        np.testing.assert_allclose(got, np.ones((problems, 3)), rtol=1e-6)
        assert filter_jits == [None if expected is None else dict(expected)]
    assert after == [2, 2, above]  # priced and compiled; compiled only


@on_cpu
def test_js_jit_falls_back_where_a_lean_option_is_refused():
    bogus = {"xla_no_such_option_in_any_jaxlib": True}
    with seam.options(lean=bogus, supported=True):
        _refused_in_js_jit()


def _refused_in_js_jit():
    solver = js.Solver(max_steps=5)
    model, x, y = network_problem(16)
    state = solver.init(model, value_dtype=jnp.float32)
    _, state = js.jit(_training_step(solver))(model, state, x, y)
    assert int(state.num_steps) == 1
    assert not seam.lean_supported()
