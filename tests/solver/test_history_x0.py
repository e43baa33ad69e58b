"""x0 as step 0 of what a run records (`history=True`, `callback=`, `verbose=`, `progress=`):
its row holds f(x0) and the gradient's norm there, checked against Rosenbrock's closed form;
a run that converges at x0 has that row alone; step 1's `step_evals` are its search's alone;
under `jax.vmap`, in `batched_run` and `step` (through `stop_when`, which sees the records),
and across a resumed run, whose start is the last row of the run it resumes."""

import contextlib
import io

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js

FIELDS = (
    "step",
    "value",
    "grad_norm",
    "step_size",
    "num_fun_evals",
    "step_evals",
    "num_grad_evals",
    "num_replaced",
    "search_end",
)
DTYPES = [jnp.float32, jnp.float64]
X0 = [-1.2, 1.0]
SCALE = 100.0


def rosenbrock(x, scale):
    return (1 - x[0]) ** 2 + scale * (x[1] - x[0] ** 2) ** 2


def closed_form(x, scale):
    """Rosenbrock's f and gradient at x, in float64 NumPy."""
    x0, x1 = np.asarray(x, np.float64)
    scale = float(scale)
    value = (1 - x0) ** 2 + scale * (x1 - x0**2) ** 2
    grad = np.array([-2 * (1 - x0) - 4 * scale * x0 * (x1 - x0**2), 2 * scale * (x1 - x0**2)])
    return value, grad


def rtol(dtype) -> float:
    return 1e-6 if dtype == jnp.float32 else 1e-13


class Collect:
    """One callback for every run (its identity is part of the compile key)."""

    def __init__(self):
        self.records = []

    def __call__(self, record):
        self.records.append(record)


COLLECT = Collect()


class FakeBar:
    """Stands in for `tqdm.auto.tqdm`: the bars opened, their totals and where each ended."""

    opened: list["FakeBar"] = []

    def __init__(self, total, **kwargs):
        self.total, self.n, self.closed = total, 0, False
        FakeBar.opened.append(self)

    def update(self, k):
        assert k >= 0
        self.n += k

    def set_postfix(self, refresh=True, **kwargs):
        pass

    def close(self):
        self.closed = True


def reported(run):
    """`run()` with its records collected, its printed lines and its bars (tqdm stubbed)."""
    COLLECT.records, FakeBar.opened = [], []
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out):
        patch.setattr("tqdm.auto.tqdm", FakeBar)
        result = run()
        jax.effects_barrier()
    return result, list(COLLECT.records), out.getvalue().splitlines(), list(FakeBar.opened)


def every_report(solver, x0, scale):
    """One run with history, callback, verbose and progress at once."""
    return reported(
        lambda: solver.run(
            rosenbrock, x0, scale, history=True, callback=COLLECT, verbose=True, progress=True
        )
    )


@pytest.fixture(scope="module", params=DTYPES, ids=lambda d: jnp.dtype(d).name)
def dtype(request):
    return request.param


@pytest.fixture(scope="module")
def solver():
    return js.Solver(max_steps=60)


@pytest.fixture(scope="module")
def from_x0(solver, dtype):
    with jax.enable_x64(dtype == jnp.float64):
        return every_report(solver, jnp.array(X0, dtype), jnp.asarray(SCALE, dtype))


@pytest.fixture(scope="module")
def at_minimum(solver, dtype):
    """The same compiled run, from Rosenbrock's minimiser, where the gradient is exactly 0."""
    with jax.enable_x64(dtype == jnp.float64):
        return every_report(solver, jnp.ones(2, dtype), jnp.asarray(SCALE, dtype))


def test_the_first_row_is_x0(solver, from_x0, dtype):
    result, _, _, _ = from_x0
    rows = result.history.to_numpy()
    n = int(result.num_steps)
    assert result.history.step.shape == (solver.max_steps + 1,)
    assert int(result.history.length) == n + 1 and 10 < n < solver.max_steps
    np.testing.assert_array_equal(rows["step"], np.arange(n + 1))
    value, grad = closed_form(np.asarray(X0, np.dtype(dtype)), SCALE)
    assert rows["value"][0] == pytest.approx(value, rel=rtol(dtype))
    assert rows["grad_norm"][0] == pytest.approx(np.max(np.abs(grad)), rel=rtol(dtype))
    assert rows["step_size"][0] == 0
    assert rows["num_fun_evals"][0] == rows["step_evals"][0] == rows["num_grad_evals"][0] == 1
    assert rows["num_replaced"][0] == 0
    assert rows["search_end"][0] == js.SearchEnd.NOT_SEARCHED
    # Each evaluation in one row: step 1's are its search's alone.
    assert rows["step_evals"].sum() == int(result.num_fun_evals) == rows["num_fun_evals"][-1]
    np.testing.assert_array_equal(rows["step_evals"][1:], np.diff(rows["num_fun_evals"]))
    assert rows["value"][-1] == float(result.value)


def test_callback_verbose_and_progress_start_at_x0(solver, from_x0):
    result, records, lines, bars = from_x0
    rows = result.history.to_numpy()
    n = int(result.num_steps)
    assert [int(r["step"]) for r in records] == list(range(n + 1))  # step 0 once
    for name in FIELDS:
        assert np.array([r[name] for r in records]).tobytes() == rows[name].tobytes(), name
    assert len(lines) == n + 1 and lines[0].split()[:2] == ["step", "0"]
    assert int(lines[0].split()[-1]) == 1  # one evaluation so far
    (bar,) = bars
    assert bar.total == solver.max_steps and bar.n == n and bar.closed


def test_a_run_that_converges_at_x0_has_one_row(solver, at_minimum):
    result, records, lines, bars = at_minimum
    assert int(result.status) == js.Status.CONVERGED_GTOL and int(result.num_steps) == 0
    rows = result.history.to_numpy()
    assert int(result.history.length) == 1
    assert list(rows["step"]) == [0] and list(rows["value"]) == [0.0]
    assert list(rows["grad_norm"]) == [0.0] and list(rows["num_fun_evals"]) == [1]
    assert [int(r["step"]) for r in records] == [0]
    assert len(lines) == 1
    # The bar opens at x0 and closes there: its one record is the run's last.
    (bar,) = bars
    assert bar.total == solver.max_steps and bar.n == 0 and bar.closed


def test_under_vmap_each_problem_starts_at_its_x0(solver, dtype):
    with jax.enable_x64(dtype == jnp.float64):
        x0s = jnp.array([X0, [1.0, 1.0], [0.5, 0.5]], dtype)
        scales = jnp.array([SCALE, SCALE, 10.0], dtype)

        def run(x, s):
            return solver.run(rosenbrock, x, s, history=True, callback=COLLECT)

        batch, records, _, _ = reported(lambda: jax.vmap(run)(x0s, scales))
    lengths = np.asarray(batch.history.length)
    np.testing.assert_array_equal(lengths, np.asarray(batch.num_steps) + 1)
    assert lengths[1] == 1  # converged at x0
    for i in range(3):
        rows = jax.tree.map(lambda a, i=i: a[i], batch.history).to_numpy()
        value, grad = closed_form(np.asarray(x0s[i]), float(scales[i]))
        assert rows["value"][0] == pytest.approx(value, rel=rtol(dtype), abs=1e-30)
        norm = np.max(np.abs(grad))
        assert rows["grad_norm"][0] == pytest.approx(norm, rel=rtol(dtype), abs=1e-30)
        assert rows["step_evals"].sum() == int(batch.num_fun_evals[i])
        mine = [r for r in records if r["batch_index"] == i]
        assert [int(r["step"]) for r in mine] == list(range(lengths[i]))
        assert np.array([r["value"] for r in mine]).tobytes() == rows["value"].tobytes()


def search_alone(record):
    """True at step 1 only, where its `step_evals` leave out f at x0 (step 0's)."""
    return record["step_evals"] == record["num_fun_evals"] - 1


def test_step_evals_leave_f_at_x0_out_in_every_mode(dtype):
    """`stop_when` sees the records history keeps: in `run`, under `jax.vmap`, in
    `batched_run` and in a loop of `step`, step 1's evaluations are its search's alone."""
    solver = js.Solver(max_steps=20, stop_when=search_alone)
    with jax.enable_x64(dtype == jnp.float64):
        x0s = jnp.array([X0, [0.5, 0.5]], dtype)
        scale = jnp.asarray(SCALE, dtype)
        plain = solver.run(rosenbrock, x0s[0], scale)
        mapped = jax.vmap(lambda x: solver.run(rosenbrock, x, scale))(x0s)
        pooled = js.batched_run(solver, rosenbrock, x0s, jnp.full(2, SCALE, dtype))
        params, state = x0s[0], solver.init(x0s[0])
        params, state = solver.step(rosenbrock, params, state, scale)
    assert int(plain.status) == js.Status.STOPPED and int(plain.num_steps) == 1
    for batch in (mapped, pooled):
        np.testing.assert_array_equal(batch.status, [js.Status.STOPPED] * 2)
        np.testing.assert_array_equal(batch.num_steps, [1, 1])
    np.testing.assert_array_equal(pooled.num_fun_evals, mapped.num_fun_evals)
    assert int(state.status) == js.Status.STOPPED


def test_a_resumed_run_does_not_record_its_start_again(dtype):
    half = js.Solver(max_steps=8)
    with jax.enable_x64(dtype == jnp.float64):
        x0, scale = jnp.array(X0, dtype), jnp.asarray(SCALE, dtype)
        first = half.run(rosenbrock, x0, scale, history=True)
        second = half.run(rosenbrock, first.iterate, scale, state=first.state, history=True)
        # New data at the resumed start: fn's evaluation there is counted, a row of its own.
        other = half.run(rosenbrock, first.iterate, 2 * scale, state=first.state, history=True)
    rows = [r.history.to_numpy() for r in (first, second, other)]
    steps = np.concatenate([rows[0]["step"], rows[1]["step"]])
    np.testing.assert_array_equal(steps, np.arange(17))  # strictly increasing, no repeat
    total = rows[0]["step_evals"].sum() + rows[1]["step_evals"].sum()
    assert total == int(second.num_fun_evals)
    new = rows[2]
    assert new["step"][0] == 8 and new["step_evals"][0] == 1 and new["step_size"][0] == 0
    assert new["search_end"][0] == js.SearchEnd.NOT_SEARCHED
    value, _ = closed_form(np.asarray(first.iterate), 2 * SCALE)
    assert new["value"][0] == pytest.approx(value, rel=rtol(dtype))
    np.testing.assert_array_equal(new["step"], np.arange(8, 8 + len(new["step"])))
    assert new["step_evals"].sum() == int(other.num_fun_evals) - int(first.num_fun_evals)
