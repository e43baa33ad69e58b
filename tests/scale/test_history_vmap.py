"""`run(..., callback= / verbose= / progress=)` under `jax.vmap`: each problem's own records,
from its x0 (step 0), tagged with its index in the batch, exactly the rows of its `history`;
nothing after a problem ends, no step above `max_steps`, one progress bar for the batch."""

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


def f(x, c):
    weights = jnp.arange(1.0, 4.0, dtype=x.dtype) ** 4
    return jnp.sum((x - c) ** 2 * weights) + jnp.sum(x**4)


def centres(dtype):
    """Two problems of different lengths (13 and 27 steps in float32 with max_steps=50)."""
    return jnp.stack([jnp.ones(3, dtype), 30 * jnp.ones(3, dtype)])


class FakeBar:
    """Stands in for `tqdm.auto.tqdm`: counts the bars opened and where each ended."""

    opened: list["FakeBar"] = []

    def __init__(self, total, **kwargs):
        self.total, self.n, self.closed, self.postfix = total, 0, False, {}
        FakeBar.opened.append(self)

    def update(self, k):
        assert k >= 0
        self.n += k

    def set_postfix(self, refresh=True, **kwargs):
        self.postfix = kwargs

    def close(self):
        self.closed = True


@contextlib.contextmanager
def x64(dtype):
    with jax.enable_x64(dtype == jnp.float64):
        yield


def batched_run(solver, x0, c, nested=False):
    """One batched run with every report at once: history, callback, verbose (its printed
    lines) and progress (the bars opened, tqdm stubbed)."""
    records = []

    def run(x, c):
        return solver.run(
            f, x, c, history=True, callback=records.append, verbose=True, progress=True
        )

    batched = jax.vmap(jax.vmap(run)) if nested else jax.vmap(run)
    out = io.StringIO()
    FakeBar.opened = []
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out):
        patch.setattr("tqdm.auto.tqdm", FakeBar)
        result = batched(x0, c)
        jax.effects_barrier()
    return result, records, out.getvalue().splitlines(), list(FakeBar.opened)


@pytest.fixture(scope="module", params=DTYPES, ids=lambda d: jnp.dtype(d).name)
def dtype(request):
    return request.param


@pytest.fixture(scope="module")
def two_lengths(dtype):
    with x64(dtype):
        c = centres(dtype)
        solver = js.Solver(max_steps=50)
        return solver, c, *batched_run(solver, jnp.zeros((2, 3), dtype), c)


def by_problem(records):
    grouped = {}
    for record in records:
        grouped.setdefault(record["batch_index"], []).append(record)
    return grouped


def check_records_are_the_history(result, records, batch_shape):
    """Each problem's records, in order, are the used rows of its history, bit for bit."""
    grouped = by_problem(records)
    assert len(records) == int(np.sum(result.num_steps + 1))  # x0 and each step
    indices = list(np.ndindex(batch_shape))
    expected_keys = [i[0] for i in indices] if len(batch_shape) == 1 else indices
    assert sorted(grouped) == sorted(expected_keys)
    for index in expected_keys:
        mine = grouped[index]
        rows = jax.tree.map(lambda a, index=index: a[index], result.history).to_numpy()
        n = int(result.num_steps[index])
        assert n < int(result.history.step.shape[-1])  # never above max_steps
        assert [int(r["step"]) for r in mine] == list(range(n + 1))
        for name in FIELDS:
            got = [r[name] for r in mine]
            assert all(isinstance(g, np.ndarray) and g.shape == () for g in got), name
            assert all(g.dtype == rows[name].dtype for g in got), name
            assert np.array(got).tobytes() == rows[name].tobytes(), name
        assert set(mine[0]) == {*FIELDS, "batch_index"}


def test_callback_delivers_each_problems_own_steps(two_lengths, dtype):
    solver, c, result, records, _, _ = two_lengths
    lengths = [int(n) for n in result.num_steps]
    assert lengths[0] != lengths[1]  # 13 and 27 in float32 here
    check_records_are_the_history(result, records, (2,))
    # the records of each problem are those of the problem run alone
    with x64(dtype):
        for i in range(2):
            alone = []
            single = solver.run(f, jnp.zeros(3, dtype), c[i], callback=alone.append)
            jax.effects_barrier()
            assert len(alone) == int(single.num_steps) + 1 == lengths[i] + 1
            mine = by_problem(records)[i]
            for name in FIELDS:
                np.testing.assert_allclose(
                    [r[name] for r in mine], [r[name] for r in alone], rtol=1e-5, err_msg=name
                )


def test_verbose_prints_one_line_per_step_of_each_problem(two_lengths):
    _, _, result, records, lines, _ = two_lengths
    assert len(lines) == len(records) == int(np.sum(result.num_steps + 1))
    for line, record in zip(lines, records, strict=True):
        words = line.split()
        assert words[:4] == ["problem", str(record["batch_index"]), "step", str(record["step"])]
        assert float(words[5]) == pytest.approx(float(record["value"]), rel=1e-6)
        assert int(words[-1]) == int(record["num_fun_evals"])


def test_progress_shows_one_bar_for_the_batch(two_lengths):
    solver, _, result, _, _, bars = two_lengths
    assert len(bars) == 1
    (bar,) = bars
    assert bar.closed
    assert bar.total == solver.max_steps
    assert bar.n == int(np.max(result.num_steps))  # the steps of the longest problem
    assert bar.postfix == {"ended": "2/2"}


def test_a_batch_that_hits_max_steps(dtype):
    """Both problems stop at step 4, at different loop iterations: no step 5 arrives."""
    with x64(dtype):
        solver = js.Solver(max_steps=4)
        result, records, lines, bars = batched_run(solver, jnp.zeros((2, 3), dtype), centres(dtype))
    assert [int(n) for n in result.num_steps] == [4, 4]
    assert [int(s) for s in result.status] == [js.Status.MAX_STEPS] * 2
    check_records_are_the_history(result, records, (2,))
    assert max(int(r["step"]) for r in records) == 4
    assert len(lines) == 10  # steps 0 to 4 of each
    assert len(bars) == 1 and bars[0].closed and bars[0].n == 4


def test_nested_vmap(dtype):
    """Under vmap of vmap the index is a tuple (outer, inner), as the result's axes."""
    with x64(dtype):
        solver = js.Solver(max_steps=10)
        c = jnp.stack([centres(dtype), centres(dtype)[::-1] / 3])
        result, records, lines, bars = batched_run(
            solver, jnp.zeros((2, 2, 3), dtype), c, nested=True
        )
    lengths = [int(n) for n in result.num_steps.ravel()]
    assert 10 in lengths and min(lengths) < 10  # some hit max_steps, not all
    check_records_are_the_history(result, records, (2, 2))
    assert len(lines) == len(records)
    assert [line.split()[1] for line in lines] == [
        "{},{}".format(*r["batch_index"]) for r in records
    ]
    assert len(bars) == 1 and bars[0].closed and bars[0].postfix == {"ended": "4/4"}


def test_an_unbatched_run_is_unchanged():
    """One record for x0 and one per step, the fields alone (no batch index), as 0-d arrays."""
    solver = js.Solver(max_steps=50)
    records = []
    result = solver.run(f, jnp.zeros(3), jnp.ones(3), history=True, callback=records.append)
    jax.effects_barrier()
    rows = result.history.to_numpy()
    assert len(records) == int(result.num_steps) + 1 == 14
    for name in FIELDS:
        assert np.array([r[name] for r in records]).tobytes() == rows[name].tobytes(), name
    assert all(set(r) == set(FIELDS) and r["value"].shape == () for r in records)
    # A vmap whose batched input does not reach the run: one problem, reported once.
    records.clear()
    jax.vmap(
        lambda _: solver.run(f, jnp.zeros(3), jnp.ones(3), history=True, callback=records.append)
    )(jnp.arange(3))
    jax.effects_barrier()
    assert len(records) == 14 and all(set(r) == set(FIELDS) for r in records)
