"""`run(..., history=True / callback= / verbose= / progress=)`: per-step records, checked
against a loop of `step` calls that computes the same quantities from the state."""

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js
from jaxsearch import _history

FIELDS = ("step", "value", "grad_norm", "step_size", "num_fun_evals", "step_evals")


def rosenbrock(x, scale):
    return (1 - x[0]) ** 2 + scale * (x[1] - x[0] ** 2) ** 2


X0 = jnp.array([-1.2, 1.0])
SCALE = jnp.asarray(100.0)


@pytest.fixture(scope="module")
def solver():
    return js.Solver(max_steps=200)


@pytest.fixture(scope="module")
def result(solver):
    return solver.run(rosenbrock, X0, SCALE, history=True)


def stepped_records(solver, x0, scale):
    """The records, computed outside the run: f and its gradient at x0 (step 0, one
    evaluation), then the state after each `step` (whose first evaluates f at x0 too)."""
    params, state = x0, solver.init(x0)
    value, grad = jax.value_and_grad(rosenbrock)(x0, scale)
    rows = [
        dict(
            step=0,
            value=float(value),
            grad_norm=float(jnp.max(jnp.abs(grad))),
            step_size=0.0,
            num_fun_evals=1,
            step_evals=1,
        )
    ]
    while int(state.status) == js.Status.RUNNING and int(state.num_steps) < solver.max_steps:
        before = max(int(state.num_fun_evals), 1)  # f at x0 is step 0's
        params, state = solver.step(rosenbrock, params, state, scale)
        rows.append(
            dict(
                step=int(state.num_steps),
                value=float(state.value),
                grad_norm=float(jnp.max(jnp.abs(state.grad))),
                step_size=float(state.step_size),
                num_fun_evals=int(state.num_fun_evals),
                step_evals=int(state.num_fun_evals) - before,
            )
        )
    return rows


def test_history_matches_a_step_loop(solver, result):
    history = result.history.to_numpy()
    rows = stepped_records(solver, X0, SCALE)
    assert int(result.history.length) == int(result.num_steps) + 1 == len(rows) > 10
    for name in FIELDS:
        expected = np.array([row[name] for row in rows])
        np.testing.assert_allclose(history[name], expected, rtol=1e-6, err_msg=name)
    assert history["value"][-1] == float(result.value)
    assert history["num_fun_evals"][-1] == int(result.num_fun_evals)
    assert history["step_evals"].sum() == int(result.num_fun_evals)
    # Unused rows stay NaN or -1.
    n = int(result.history.length)
    assert np.all(np.isnan(np.asarray(result.history.value)[n:]))
    assert np.all(np.asarray(result.history.num_fun_evals)[n:] == -1)


def test_step_size_is_the_step_taken():
    """With steepest descent, x_new = x - t g, so the state's step_size is (x - x_new) / g."""
    solver = js.Solver(js.Gradient(), js.Backtracking())
    x = jnp.array([0.5, 0.5])
    state = solver.init(x)
    for _ in range(3):
        new, state_new = solver.step(rosenbrock, x, state, SCALE)
        if int(state.num_steps) > 0:  # the first step evaluates the gradient at x first
            t = (x - new) / state.grad
            np.testing.assert_allclose(t, float(state_new.step_size), rtol=1e-5)
        x, state = new, state_new


def test_history_under_jit_and_vmap(solver, result):
    jitted = jax.jit(lambda x, s: solver.run(rosenbrock, x, s, history=True))(X0, SCALE)
    for name in FIELDS:
        np.testing.assert_array_equal(
            getattr(jitted.history, name), getattr(result.history, name), err_msg=name
        )
    # A batch of problems of different difficulty: each keeps its own rows.
    scales = jnp.array([1.0, 10.0, 100.0])
    x0s = jnp.array([[-1.2, 1.0], [0.5, 0.5], [2.0, 2.0]])
    batched = jax.vmap(lambda x, s: solver.run(rosenbrock, x, s, history=True))(x0s, scales)
    lengths = set()
    for i in range(3):
        alone = solver.run(rosenbrock, x0s[i], scales[i], history=True).history.to_numpy()
        mine = jax.tree.map(lambda a, i=i: a[i], batched.history).to_numpy()
        assert len(mine["step"]) == int(batched.num_steps[i]) + 1
        lengths.add(len(mine["step"]))
        for name in FIELDS:
            np.testing.assert_allclose(mine[name], alone[name], rtol=1e-5, err_msg=name)
    assert len(lengths) == 3
    with pytest.raises(ValueError, match="index it first"):
        batched.history.to_numpy()


def test_callback_streams_the_history(solver, result):
    records = []
    solver.run(rosenbrock, X0, SCALE, callback=records.append)
    jax.effects_barrier()
    history = result.history.to_numpy()
    assert len(records) == len(history["step"])
    for name in FIELDS:
        np.testing.assert_allclose([r[name] for r in records], history[name], err_msg=name)
        # as docs/history.md says: each field a 0-d NumPy array, in the history's dtype
        for record in records:
            assert type(record[name]) is np.ndarray and record[name].shape == (), name
            assert record[name].dtype == history[name].dtype, name


def test_callback_sees_float64_under_a_scoped_x64(solver):
    """Under `with jax.enable_x64(True)` the callback gets the run's float64 values bit for
    bit, though it may run on a thread where x64 is off (a bare `jax.debug.callback` would
    hand it float32 there). Three runs, since which thread calls back varies."""
    with jax.enable_x64(True):
        x0 = jnp.array([-1.2, 1.0])
        scale = jnp.asarray(100.0)
        for _ in range(3):
            records = []
            result = solver.run(rosenbrock, x0, scale, callback=records.append)
            jax.effects_barrier()
            assert len(records) == int(result.num_steps) + 1  # x0 and each step
            assert all(r["value"].dtype == np.float64 for r in records)
            last, state = records[-1], result.state
            assert last["value"].tobytes() == np.asarray(state.value).tobytes()
            assert last["step_size"].tobytes() == np.asarray(state.step_size).tobytes()
            assert int(last["num_fun_evals"]) == int(state.num_fun_evals)


def test_callback_must_be_callable(solver):
    with pytest.raises(TypeError, match="callback must be callable"):
        solver.run(rosenbrock, X0, SCALE, callback=3)


def test_verbose_prints_one_line_per_step(solver, result, capsys):
    solver.run(rosenbrock, X0, SCALE, verbose=True)
    jax.effects_barrier()
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == int(result.num_steps) + 1  # x0, then each step
    first, last = lines[0].split(), lines[-1].split()
    assert first[:2] == ["step", "0"] and last[1] == str(int(result.num_steps))
    assert float(last[3]) == pytest.approx(float(result.value), rel=1e-5)
    assert int(last[-1]) == int(result.num_fun_evals)


@pytest.mark.parametrize("max_steps", [5, 200])
def test_progress_bar_closes_when_the_run_stops(max_steps, capsys):
    """Stopped by max_steps or early by convergence, the bar reaches the last step and closes."""
    solver = js.Solver(max_steps=max_steps)
    result = solver.run(rosenbrock, X0, SCALE, progress=True)
    jax.effects_barrier()
    assert _history._bar is None  # closed
    err = capsys.readouterr().err
    steps = int(result.num_steps)
    assert f"{steps}/{max_steps}" in err
    assert (steps == max_steps) == (max_steps == 5)


def test_progress_without_tqdm_says_what_to_install(solver, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    with pytest.raises(ImportError, match="pip install tqdm"):
        solver.run(rosenbrock, X0, SCALE, progress=True)


def test_history_compiles_once(solver, compiles):
    x0s = [jnp.array([-1.0, 1.5]), jnp.array([0.0, 2.0])]
    scale = jnp.asarray(50.0)
    compiles.reset()
    for x0 in x0s:
        jax.block_until_ready(solver.run(rosenbrock, x0, scale, history=True))
    assert compiles.count == 1


def _history_limit() -> int:
    """The documented limit: a quarter of the device's memory, or 2 GiB where JAX reports none."""
    stats = jax.local_devices()[0].memory_stats() or {}
    return stats["bytes_limit"] // 4 if stats.get("bytes_limit") else 2 * 2**30


def test_a_history_too_large_is_refused_before_it_is_allocated():
    """max_steps = 2**31 - 2 keeps max_steps + 1 rows (x0 and each step) of 36 bytes (six
    int32 counts, three float32 values) and the int32 length, far more than the limit:
    refused while the run is traced (only lowered here: nothing is allocated, with the fix
    or without), with the size in bytes and what to do instead."""
    steps = 2**31 - 2
    size = (steps + 1) * (6 * 4 + 3 * 4) + 4
    assert size > _history_limit()
    solver = js.Solver(max_steps=steps)
    run = jax.jit(lambda x: solver.run(rosenbrock, x, SCALE, history=True))
    with pytest.raises(ValueError, match=r"history=True") as info:
        run.lower(X0)
    message = str(info.value)
    for fragment in (f"{size} bytes", f"{_history_limit()} bytes", "max_steps", "callback="):
        assert fragment in message, message


def test_the_history_limit_is_a_quarter_of_the_device_s_memory(monkeypatch):
    """Where JAX reports the device's memory, the limit is a quarter of it."""

    class Device:
        def memory_stats(self):
            return {"bytes_limit": 16 * 2**30}

    monkeypatch.setattr(_history.jax, "local_devices", lambda: [Device()])
    _history.check_history_size(1, 4 * 2**30)  # a quarter: allowed
    with pytest.raises(ValueError, match=r"a quarter of the device's 16 GiB"):
        _history.check_history_size(1, 4 * 2**30 + 1)
