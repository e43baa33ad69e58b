"""Statuses and messages a person can read: a status prints as its name (a batch's too), a
run's message names the one cause that ended it, and the solver's constructor names the fix
for a class given for an instance or for swapped arguments."""

import json
import pathlib
import pydoc
import re
import subprocess
import sys
import textwrap

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js

# ------------------------------------------------------------------------------- Status


@pytest.mark.parametrize("status", list(js.Status), ids=lambda s: s.name)
def test_a_status_prints_as_its_name(status):
    assert str(status) == status.name
    assert f"{status}" == status.name
    assert f"{status:>20}" == f"{status.name:>20}"
    assert f"{status:d}" == str(int(status))  # a numeric format still formats the code
    assert status == int(status)  # still an int


def test_status_of_a_result_prints_its_name(capsys):
    result = js.Solver().run(lambda x: jnp.sum((x - 1.0) ** 2), jnp.zeros(3))
    print(js.Status(result.status))
    assert capsys.readouterr().out == "CONVERGED_GTOL\n"


def test_status_of_a_batch_prints_the_names(capsys):
    """Under vmap, `js.Status(result.status)` is an array of members (one per problem) that
    prints their names and compares elementwise."""

    def fn(x):
        return jnp.sum(jnp.log(x) ** 2)  # not finite from x0 <= 0

    x0 = jnp.array([[2.0, 3.0], [-1.0, 1.0]])
    result = jax.vmap(js.Solver().run, in_axes=(None, 0))(fn, x0)
    statuses = js.Status(result.status)
    assert isinstance(statuses, js.StatusArray) and statuses.shape == (2,)
    assert list(statuses) == [js.Status.CONVERGED_GTOL, js.Status.NONFINITE]
    np.testing.assert_array_equal(statuses == js.Status.NONFINITE, [False, True])
    print(statuses)
    assert capsys.readouterr().out == "[CONVERGED_GTOL NONFINITE]\n"
    assert repr(statuses) == "StatusArray([CONVERGED_GTOL, NONFINITE])"
    nested = js.Status(np.array([[1, 6], [3, 5]], np.int32))
    assert str(nested) == "[[CONVERGED_GTOL STALLED]\n [MAX_STEPS NONFINITE]]"


def test_status_of_arrays_and_codes():
    assert js.Status(jnp.array(6, jnp.int32)) is js.Status.STALLED
    assert js.Status(np.int32(1)) is js.Status.CONVERGED_GTOL
    assert js.Status(2) is js.Status.CONVERGED_FTOL
    assert js.Status["MAX_STEPS"] is js.Status.MAX_STEPS
    with pytest.raises(ValueError):
        js.Status(99)


def test_status_inside_jit_says_what_to_do():
    with pytest.raises(TypeError, match=r"compare the status with the members"):
        jax.jit(lambda s: js.Status(s))(jnp.array(1, jnp.int32))


# ------------------------------------------------------------------------------ messages

# A phrase that only the message of each cause holds.
CAUSE_PHRASES = {
    "rounded away": "the last step changed no parameter",
    "below resolution": "gave up below the resolution",
    "no progress": "for stall_steps steps",
    "gtol above best": "gtol was met only above the lowest f seen",
    "x0": "x0 is not finite",
    "f": "Stopped: f is not finite at x0",
    "gradient": "the gradient of f is not finite at x0",
}


def assert_names_only(message: str, cause: str):
    assert CAUSE_PHRASES[cause] in message, message
    for other, phrase in CAUSE_PHRASES.items():
        if other != cause:
            assert phrase not in message, (other, message)
    assert len(message) < 150, message


def _sum(x):
    return jnp.sum(x)


def _abs(x):
    return jnp.sum(jnp.abs(x))


STALLS = {
    # d = -1 from 1.5: the rate is above the line's resolution spacing/4 = 2^-25 but x - t
    # rounds back to 1.5 (t < spacing/2): the step is taken and changes nothing.
    "rounded away": (
        lambda **kw: js.Solver(js.Gradient(), js.FixedStep(1.5 * 2.0**-25), **kw),
        _sum,
        jnp.full(2, 1.5, jnp.float32),
    ),
    # A cap below the line's resolution ends every search at its start, with no step.
    "below resolution": (
        lambda **kw: js.Solver(js.Gradient(), js.Backtracking(max_step_size=1e-30), **kw),
        _sum,
        jnp.full(2, 1.5, jnp.float32),
    ),
    # Fixed steps of 2^-10 on sum |x| from 2^-11 jump between x and -x: no progress.
    "no progress": (
        lambda **kw: js.Solver(js.Gradient(), js.FixedStep(2.0**-10), stall_steps=3, **kw),
        _abs,
        jnp.full(2, 2.0**-11, jnp.float32),
    ),
}


@pytest.mark.parametrize("cause", list(STALLS))
def test_a_stalled_run_says_its_cause(cause):
    solver, fn, x0 = STALLS[cause]
    result = solver().run(fn, x0)
    assert js.Status(result.status) is js.Status.STALLED
    assert_names_only(result.message, cause)


def test_gtol_met_only_above_the_best_point_is_named():
    """The run's status STALLED where its last step met gtol (`returned_status`): read from
    the state's status, CONVERGED_GTOL."""
    result = js.Solver().run(lambda x: jnp.sum((x - 1.0) ** 2), jnp.zeros(3))
    assert int(result.state.status) == js.Status.CONVERGED_GTOL
    stalled = eqx.tree_at(lambda r: r.status, result, jnp.array(js.Status.STALLED, jnp.int32))
    assert_names_only(stalled.message, "gtol above best")


NONFINITE = {
    "x0": (lambda x: jnp.sum(x**2), jnp.array([jnp.nan, 1.0])),
    "f": (lambda x: jnp.sum(jnp.log(x)), jnp.array([-1.0, 1.0])),
    "gradient": (lambda x: jnp.sum(jnp.sqrt(jnp.abs(x))), jnp.array([0.0, 1.0])),
}


@pytest.mark.parametrize("cause", list(NONFINITE))
def test_a_nonfinite_run_says_what_was_not_finite(cause):
    fn, x0 = NONFINITE[cause]
    result = js.Solver().run(fn, x0)
    assert js.Status(result.status) is js.Status.NONFINITE
    assert_names_only(result.message, cause)


def test_a_batch_s_messages_each_name_their_cause():
    solver, fn, _ = STALLS["no progress"]
    x0 = jnp.stack([jnp.full(2, 2.0**-11, jnp.float32), jnp.full(2, jnp.nan, jnp.float32)])
    result = jax.vmap(solver().run, in_axes=(None, 0))(fn, x0)
    first, second = result.message
    assert_names_only(first, "no progress")
    assert_names_only(second, "x0")


@pytest.mark.parametrize("cause", ["no progress", "rounded away"])
def test_throw_names_the_cause(cause):
    solver, fn, x0 = STALLS[cause]
    with pytest.raises(eqx.EquinoxRuntimeError, match=CAUSE_PHRASES[cause]):
        solver(throw="failures").run(fn, x0)


def test_a_step_that_throws_names_params():
    solver = js.Solver(throw=True)
    x = jnp.array([jnp.nan, 1.0])
    with pytest.raises(eqx.EquinoxRuntimeError, match=r"NONFINITE\. .*params is not finite"):
        solver.step(lambda x: jnp.sum(x**2), x, solver.init(x))


# ------------------------------------------------------------------------- constructors
# Under the suite's jaxtyping+beartype hook (pyproject's addopts) an argument of the wrong
# type fails its annotation first; a user's import has no hook, so the library's own
# messages are read from a fresh interpreter.

USER_MISTAKES = {
    "class": (
        "js.Solver(js.LBFGS)",
        r"direction is the class LBFGS.*did you mean `js\.LBFGS\(\)`\?",
    ),
    "search class": (
        "js.Solver(js.LBFGS(), js.Zoom)",
        r"linesearch is the class Zoom.*did you mean `js\.Zoom\(\)`\?",
    ),
    "adjoint class": (
        "js.Solver(adjoint=js.UnrolledAdjoint)",
        r"adjoint is the class UnrolledAdjoint.*did you mean `js\.UnrolledAdjoint\(\)`\?",
    ),
    "swapped": (
        "js.Solver(js.Zoom(), js.LBFGS())",
        r"the arguments are swapped; write js\.Solver\(js\.LBFGS\(\), js\.Zoom\(\)\)",
    ),
    "search first": (
        "js.Solver(js.Zoom())",
        r"first argument is the direction, got the line search js\.Zoom\(\)",
    ),
    "two directions": (
        "js.Solver(js.LBFGS(), js.BFGS())",
        r"second argument is the line search, got the direction js\.BFGS\(\)",
    ),
    "step without a state": (
        "js.Solver().step(lambda x: jnp.sum(x**2), jnp.zeros(3), None)",
        r"state must be a SolverState .* got NoneType",
    ),
    "optax update with a solver state": (
        "js.Solver().as_optax().update(jnp.zeros(3), js.Solver().init(jnp.zeros(3)), "
        "jnp.zeros(3), value_fn=lambda x: jnp.sum(x**2))",
        r"state must be the state of this transformation .* got SolverState",
    ),
}


@pytest.fixture(scope="module")
def user_errors():
    """The error each mistake raises in a fresh interpreter, with no type-check hook."""
    script = "\n".join(
        [
            "import json, jax.numpy as jnp, jaxsearch as js",
            "errors = {}",
            *(
                f"try:\n    {code}\nexcept Exception as e:\n"
                f"    errors[{name!r}] = type(e).__name__ + ': ' + str(e)"
                for name, (code, _) in USER_MISTAKES.items()
            ),
            "print(json.dumps(errors))",
        ]
    )
    root = pathlib.Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=root, check=True
    )
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("mistake", list(USER_MISTAKES))
def test_a_user_s_mistake_names_the_fix(user_errors, mistake):
    _, message = USER_MISTAKES[mistake]
    assert mistake in user_errors, "no error"
    assert re.search(rf"^TypeError: .*{message}", user_errors[mistake]), user_errors[mistake]


# --------------------------------------------------------------------------- help(Solver)


def test_help_starts_with_what_a_user_needs():
    """`help(js.Solver)`: the defaults, the two ways to call it and an example come first."""
    text = pydoc.render_doc(js.Solver, renderer=pydoc.plaintext)
    doc = js.Solver.__doc__
    assert doc.startswith("Minimise f(params, *args)")
    summary = doc[: doc.index("**Arguments**")]
    for needed in ("js.LBFGS()", "js.Zoom()", "solver.run(fn, x0, *args)", "solver.init(params)"):
        assert needed in summary, needed
    assert "solver.step(fn, params, state" in summary and "```python" in summary
    assert text.index("Minimise f(params, *args)") < text.index("**The best point.**")


def test_help_points_to_no_private_module():
    docs = [js.Solver.__doc__] + [
        getattr(js.Solver, name).__doc__
        for name in dir(js.Solver)
        if not name.startswith("_") and callable(getattr(js.Solver, name))
    ]
    for doc in filter(None, docs):
        assert "jaxsearch._" not in doc and "`_" not in doc, doc


def test_help_s_example_prints_what_it_says(capsys):
    doc = js.Solver.__doc__
    code = textwrap.dedent(doc[doc.index("```python") + len("```python") : doc.index("```\n")])
    exec(compile(code, "Solver docstring", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "True [1. 1. 1. 1.]"
    assert printed[1].startswith("Converged")
