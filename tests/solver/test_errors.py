"""Bad inputs are rejected before any computation, with an error that names the argument and
the fix.

Each case is one bad input, with the exception type and a message fragment that names the
argument and the fix. The test run type-checks jaxsearch's annotations (jaxtyping + beartype,
with PEP 484's numeric tower: an int is a valid float), so a value of the wrong Python type
may fail there first, with a TypeError that names the parameter and the expected type.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsearch as js

X0 = jnp.zeros(2, jnp.float32)


def counted(fn, calls):
    """fn with a host-side counter of its executions (a trace alone does not count)."""

    def wrapped(x, *args):
        jax.debug.callback(lambda: calls.append(1))
        return fn(x, *args)

    return wrapped


def assert_raises(call, exc_type, *fragments):
    """`call()` raises `exc_type` with every fragment (regex) in its message."""
    with pytest.raises(Exception) as info:
        call()
    error = info.value
    assert isinstance(error, exc_type), f"raised {type(error).__name__}: {error}"
    message = str(error)
    for fragment in fragments:
        assert re.search(fragment, message), f"{fragment!r} not in {message!r}"


# ------------------------------------------------------------------------ objective outputs

_SUM = jnp.sum
BAD_OUTPUTS = {
    "non-scalar": (lambda x: x, {}, [r"fn must return a scalar", r"shape \(2,\)"]),
    "integer": (
        lambda x: jnp.sum(x).astype(jnp.int32),
        {},
        [r"fn must return a real floating scalar", r"int32", r"astype"],
    ),
    "python-int": (lambda x: 3, {}, [r"fn must return a real floating scalar", r"astype"]),
    "complex": (
        lambda x: jnp.sum(x).astype(jnp.complex64),
        {},
        [r"fn must return a real floating scalar", r"complex64", r"astype"],
    ),
    "tuple-without-has_aux": (
        lambda x: (jnp.sum(x), x),
        {},
        [r"has_aux=False", r"has_aux=True"],
    ),
    "list-without-has_aux": (
        lambda x: [jnp.sum(x), x],
        {},
        [r"has_aux=False", r"has_aux=True"],
    ),
    "scalar-with-has_aux": (
        _SUM,
        {"has_aux": True},
        [
            r"pair \(value, aux\) when has_aux=True; it returned a scalar of dtype float32",
            r"has_aux=False",
        ],
    ),
    "triple-with-has_aux": (
        lambda x: (jnp.sum(x), x, x),
        {"has_aux": True},
        [r"pair \(value, aux\) when has_aux=True; it returned a tuple of 3 elements"],
    ),
}


@pytest.mark.parametrize("case", list(BAD_OUTPUTS))
def test_bad_output_run(case):
    fn, kwargs, fragments = BAD_OUTPUTS[case]
    calls = []
    assert_raises(lambda: js.Solver(**kwargs).run(counted(fn, calls), X0), TypeError, *fragments)
    jax.effects_barrier()
    assert calls == [], "fn was executed before the error"


@pytest.mark.parametrize("case", list(BAD_OUTPUTS))
def test_bad_output_init(case):
    fn, kwargs, fragments = BAD_OUTPUTS[case]
    calls = []
    assert_raises(
        lambda: js.Solver(**kwargs).init(X0, fn=counted(fn, calls)), TypeError, *fragments
    )
    jax.effects_barrier()
    assert calls == []


def test_bad_output_step():
    """`step` checks fn's output too, at trace time."""
    calls = []
    solver = js.Solver()
    state = solver.init(X0)
    assert_raises(
        lambda: solver.step(counted(lambda x: x, calls), X0, state),
        TypeError,
        r"fn must return a scalar",
    )
    jax.effects_barrier()
    assert calls == []


def test_has_aux_init_needs_fn():
    assert_raises(lambda: js.Solver(has_aux=True).init(X0), TypeError, r"has_aux=True", r"fn=")


# ----------------------------------------------------------------------------------- params

BAD_PARAMS = {
    "int-leaf": (
        {"w": X0, "n": jnp.array(3)},
        [r"params\['n'\] is an array of dtype int32", r"args", r"params\['n'\]\.astype"],
    ),
    "numpy-int-leaf": (
        {"w": X0, "n": np.array([1, 2])},
        [r"params\['n'\] is an array of dtype int", r"args"],
    ),
    "int-only": (jnp.array([1, 2]), [r"params is an array of dtype int32", r"args"]),
    "bool-leaf": (
        {"w": X0, "mask": jnp.array([True, False])},
        [r"params\['mask'\] is an array of dtype bool", r"args"],
    ),
    "empty-dict": ({}, [r"params has no floating array leaves", r"nothing to optimise"]),
    "none": (None, [r"params has no floating array leaves"]),
    # A Python number beside arrays would be held fixed, silently: it is named instead.
    "python-float-in-dict": (
        {"a": 0.0, "w": X0},
        [r"params\['a'\] is a Python float \(0\.0\)", r"jnp\.asarray\(0\.0\)", r"args"],
    ),
    "python-int-in-list": ([X0, 3], [r"params\[1\] is a Python int", r"jnp\.asarray\(3\)"]),
    "python-float-in-tuple": (
        (X0, 2.5),
        [r"params\[1\] is a Python float \(2\.5\)", r"jnp\.asarray"],
    ),
}

PYTHON_FLOAT = pytest.param(
    1.5,
    [r"params", r"(jnp\.asarray|jnp\.array)"],
    id="python-float",
)


def _loss(p, *args):
    return sum(
        (jnp.sum(jnp.abs(v) ** 2).astype(jnp.float32) for v in jax.tree.leaves(p)),
        jnp.float32(0),
    )


@pytest.mark.parametrize(
    "params,fragments",
    [pytest.param(*BAD_PARAMS[k], id=k) for k in BAD_PARAMS] + [PYTHON_FLOAT],
)
def test_bad_params_run(params, fragments):
    calls = []
    assert_raises(lambda: js.Solver().run(counted(_loss, calls), params), TypeError, *fragments)
    jax.effects_barrier()
    assert calls == []


@pytest.mark.parametrize(
    "params,fragments",
    [pytest.param(*BAD_PARAMS[k], id=k) for k in BAD_PARAMS] + [PYTHON_FLOAT],
)
def test_bad_params_init(params, fragments):
    assert_raises(lambda: js.Solver().init(params), TypeError, *fragments)


LIST_OF_FLOATS = (
    [1.0, 2.0],
    [
        r"params must be a pytree of floating arrays",
        r"a list of Python numbers",
        r"jnp\.asarray\(\[1\.0, 2\.0\]\)",
    ],
)
BEFORE_FN = {**BAD_PARAMS, "list-of-floats": LIST_OF_FLOATS}


@pytest.mark.parametrize("where", ["run", "init", "step"])
@pytest.mark.parametrize("params,fragments", [pytest.param(*BEFORE_FN[k], id=k) for k in BEFORE_FN])
def test_bad_params_before_fn_is_traced(where, params, fragments):
    """params are checked before fn is traced: fn, written for an array, would fail first on
    a list of numbers (`[1.0, 2.0] - 1`)."""
    traced = []

    def fn(x):
        traced.append(1)
        return jnp.sum((x - 1) ** 2)

    solver = js.Solver()
    calls = {
        "run": lambda: solver.run(fn, params),
        "init": lambda: solver.init(params, fn=fn),
        "step": lambda: solver.step(fn, params, solver.init(X0)),
    }
    assert_raises(calls[where], TypeError, *fragments)
    assert traced == []


def test_bad_params_step():
    solver = js.Solver()
    state = solver.init(X0)
    assert_raises(
        lambda: solver.step(_loss, {"w": X0, "n": jnp.array(3)}, state),
        TypeError,
        r"params\['n'\] is an array of dtype int32",
        r"args",
    )


# ------------------------------------------------------------------------------ value_dtype


@pytest.mark.parametrize(
    "dtype",
    [jnp.int32, jnp.bool_, jnp.complex64, "int32", np.dtype("complex64")],
    ids=["int32", "bool", "complex64", "str-int32", "np-complex64"],
)
@pytest.mark.parametrize("where", ["init", "run"])
def test_bad_value_dtype(dtype, where):
    name = jnp.dtype(dtype).name
    solver = js.Solver()
    calls = []
    if where == "init":
        call = lambda: solver.init(X0, value_dtype=dtype)
    else:
        call = lambda: solver.run(counted(jnp.sum, calls), X0, value_dtype=dtype)
    assert_raises(call, TypeError, r"value_dtype must be a real floating dtype", name)
    jax.effects_barrier()
    assert calls == []


# ------------------------------------------------------------------------- hyperparameters

OUTSIDE_UNIT = [0, 1, -0.1, 1.5, 0.0, 1.0]

HYPER = [
    # (id, constructor, exception, fragments)
    *[
        (f"Zoom-c1={v}", lambda v=v: js.Zoom(c1=v), ValueError, [r"Zoom: c1 must lie in \(0, 1\)"])
        for v in OUTSIDE_UNIT
    ],
    *[
        (
            f"Backtracking-c1={v}",
            lambda v=v: js.Backtracking(c1=v),
            ValueError,
            [r"Backtracking: c1 must lie in \(0, 1\)"],
        )
        for v in OUTSIDE_UNIT
    ],
    *[
        (
            f"MoreThuente-ftol={v}",
            lambda v=v: js.MoreThuente(ftol=v),
            ValueError,
            [r"MoreThuente: ftol must lie in \(0, 1\)"],
        )
        for v in OUTSIDE_UNIT
    ],
    *[
        (
            f"HagerZhang-delta={v}",
            lambda v=v: js.HagerZhang(delta=v),
            ValueError,
            [r"HagerZhang: delta must lie in \(0, 0\.5\)"],
        )
        for v in [*OUTSIDE_UNIT, 0.5]
    ],
    ("Zoom-nan-c1", lambda: js.Zoom(c1=float("nan")), ValueError, [r"Zoom: c1 must lie"]),
    # curvature constant vs sufficient-decrease constant
    (
        "Zoom-c2<c1",
        lambda: js.Zoom(c1=0.5, c2=0.4),
        ValueError,
        [r"Zoom: c2 must lie in \(c1, 1\)"],
    ),
    (
        "Zoom-c2=c1",
        lambda: js.Zoom(c1=0.5, c2=0.5),
        ValueError,
        [r"Zoom: c2 must lie in \(c1, 1\)"],
    ),
    ("Zoom-c2=1", lambda: js.Zoom(c2=1.0), ValueError, [r"Zoom: c2 must lie in \(c1, 1\)"]),
    (
        "MoreThuente-gtol<ftol",
        lambda: js.MoreThuente(ftol=0.5, gtol=0.4),
        ValueError,
        [r"MoreThuente: gtol must lie in \[ftol, 1\)"],
    ),
    (
        "MoreThuente-gtol=1",
        lambda: js.MoreThuente(gtol=1.0),
        ValueError,
        [r"MoreThuente: gtol must lie in \[ftol, 1\)"],
    ),
    (
        "HagerZhang-sigma<delta",
        lambda: js.HagerZhang(delta=0.3, sigma=0.2),
        ValueError,
        [r"HagerZhang: sigma must lie in \[delta, 1\)"],
    ),
    (
        "HagerZhang-sigma=1",
        lambda: js.HagerZhang(sigma=1.0),
        ValueError,
        [r"HagerZhang: sigma must lie in \[delta, 1\)"],
    ),
    *[
        (
            f"Backtracking-shrink={v}",
            lambda v=v: js.Backtracking(shrink=v),
            ValueError,
            [r"Backtracking: shrink must lie in \(0, 1\)"],
        )
        for v in OUTSIDE_UNIT
    ],
    *[
        (
            f"FixedStep-learning_rate={v}",
            lambda v=v: js.FixedStep(learning_rate=v),
            ValueError,
            [r"FixedStep: learning_rate must be positive"],
        )
        for v in [0, 0.0, -1e-3, float("nan")]
    ],
    *[
        (
            f"LBFGS-memory_size={v!r}",
            lambda v=v: js.LBFGS(memory_size=v),
            ValueError,
            [r"LBFGS: memory_size must be an integer >= 1"],
        )
        for v in [0, -1]
    ],
    *[
        (
            f"Solver-max_steps={v!r}",
            lambda v=v: js.Solver(max_steps=v),
            ValueError,
            [r"max_steps must be an integer >= 1"],
        )
        for v in [0, -1]
    ],
    ("Solver-gtol<0", lambda: js.Solver(gtol=-1e-5), ValueError, [r"gtol must be non-negative"]),
    ("Solver-ftol<0", lambda: js.Solver(ftol=-1.0), ValueError, [r"ftol must be non-negative"]),
    (
        "Solver-gtol-nan",
        lambda: js.Solver(gtol=float("nan")),
        ValueError,
        [r"gtol must be non-negative"],
    ),
    (
        "NonlinearCG-method",
        lambda: js.NonlinearCG(method="bogus"),
        ValueError,
        [r"NonlinearCG: unknown method 'bogus'", r"valid methods are .*'polak-ribiere'"],
    ),
    (
        "NonlinearCG-restart_threshold=0",
        lambda: js.NonlinearCG(restart_threshold=0.0),
        ValueError,
        [r"NonlinearCG: restart_threshold must be positive or None"],
    ),
    *[
        (
            f"NonlinearCG-eta={v}",
            lambda v=v: js.NonlinearCG(eta=v),
            ValueError,
            [r"NonlinearCG: eta must be positive"],
        )
        for v in [0.0, -1.0]
    ],
    (
        "NewtonCG-forcing=str",
        lambda: js.NewtonCG(forcing="cubic"),
        ValueError,
        [r"NewtonCG: forcing must be 'sqrt', 'linear' or a float in \(0, 1\)"],
    ),
    *[
        (
            f"NewtonCG-forcing={v}",
            lambda v=v: js.NewtonCG(forcing=v),
            ValueError,
            [r"NewtonCG: a constant forcing must lie in \(0, 1\)"],
        )
        for v in [0.0, 1.0, -0.5]
    ],
    *[
        (
            f"NewtonCG-eta_max={v}",
            lambda v=v: js.NewtonCG(eta_max=v),
            ValueError,
            [r"NewtonCG: eta_max must lie in \(0, 1\)"],
        )
        for v in [0.0, 1.0]
    ],
    *[
        (
            f"NewtonCG-max_cg_steps={v!r}",
            lambda v=v: js.NewtonCG(max_cg_steps=v),
            ValueError,
            [r"NewtonCG: max_cg_steps must be an integer >= 1"],
        )
        for v in [0, -3]
    ],
    *[
        (
            f"Newton-beta={v}",
            lambda v=v: js.Newton(beta=v),
            ValueError,
            [r"Newton: beta must lie in \(0, 1\)"],
        )
        for v in [0.0, 1.0, -1e-3]
    ],
    (
        "BFGS-curvature_eps<0",
        lambda: js.BFGS(curvature_eps=-1.0),
        ValueError,
        [r"BFGS: curvature_eps must be non-negative"],
    ),
    # Counts beyond int32 (the solver's counters): refused when built, not by an
    # OverflowError when a run starts.
    *[
        (
            f"{owner}-{name}=2**31",
            lambda make=make: make(2**31),
            ValueError,
            [rf"{owner}: {name} must be at most 2\*\*31 - 1 = 2147483647", r"int32"],
        )
        for owner, name, make in [
            ("Solver", "max_steps", lambda v: js.Solver(max_steps=v)),
            ("Solver", "max_evals", lambda v: js.Solver(max_evals=v)),
            ("Solver", "stall_steps", lambda v: js.Solver(stall_steps=v)),
            ("LBFGS", "memory_size", lambda v: js.LBFGS(memory_size=v)),
            ("Zoom", "max_trials", lambda v: js.Zoom(max_trials=v)),
            ("NewtonCG", "max_cg_steps", lambda v: js.NewtonCG(max_cg_steps=v)),
            ("ImplicitAdjoint", "max_cg_steps", lambda v: js.ImplicitAdjoint(max_cg_steps=v)),
            ("UnrolledAdjoint", "checkpoints", lambda v: js.UnrolledAdjoint(checkpoints=v)),
        ]
    ],
]


def _hyper_param(case):
    return pytest.param(*case[1:], id=case[0])


@pytest.mark.parametrize("make,exc,fragments", [_hyper_param(case) for case in HYPER])
def test_bad_hyperparameter(make, exc, fragments):
    assert_raises(make, exc, *fragments)


# -------------------------------------------------------------- wrong types, wrong slots
# Under the test suite's jaxtyping+beartype hook, a value of the wrong Python type is caught
# by the annotation (jaxtyping.TypeCheckError, a TypeError naming the parameter and the
# expected type) before the library's own check (a ValueError or TypeError with its own
# message) runs; either names the argument and what it must be.

NON_INTEGERS = [2.5, 3.0, "5"]

WRONG_TYPES = [
    *[
        pytest.param(
            lambda v=v: js.LBFGS(memory_size=v),
            r"memory_size",
            r"int",
            id=f"LBFGS-memory_size={v!r}",
        )
        for v in NON_INTEGERS
    ],
    pytest.param(
        lambda: js.LBFGS(memory_size=True),
        r"memory_size",
        r"int",
        id="LBFGS-memory_size=True",
    ),
    *[
        pytest.param(
            lambda v=v: js.Solver(max_steps=v), r"max_steps", r"int", id=f"Solver-max_steps={v!r}"
        )
        for v in NON_INTEGERS
    ],
    pytest.param(
        lambda: js.Solver(max_steps=True),
        r"max_steps",
        r"int",
        id="Solver-max_steps=True",
    ),
    *[
        pytest.param(
            lambda cls=cls: cls(max_steps=2.5),
            r"max_steps",
            r"int",
            id=f"{cls.__name__}-max_steps=2.5",
        )
        for cls in (js.Zoom, js.Backtracking, js.MoreThuente, js.HagerZhang)
    ],
    *[
        pytest.param(
            lambda cls=cls: cls(max_steps=True),
            r"max_steps",
            r"int",
            id=f"{cls.__name__}-max_steps=True",
        )
        for cls in (js.Zoom, js.Backtracking, js.MoreThuente, js.HagerZhang)
    ],
    pytest.param(
        lambda: js.NewtonCG(max_cg_steps=2.5),
        r"max_cg_steps",
        r"int",
        id="NewtonCG-max_cg_steps=2.5",
    ),
    pytest.param(
        lambda: js.NewtonCG(max_cg_steps=True),
        r"max_cg_steps",
        r"int",
        id="NewtonCG-max_cg_steps=True",
    ),
    pytest.param(
        lambda: js.NewtonCG(forcing=True), r"forcing", r"float", id="NewtonCG-forcing=True"
    ),
    pytest.param(lambda: js.Solver(gtol="1e-5"), r"gtol", r"float", id="Solver-gtol=str"),
    pytest.param(
        lambda: js.LBFGS(memory_dtype=jnp.int32),
        r"memory_dtype",
        r"floating",
        id="LBFGS-memory_dtype=int32",
    ),
    pytest.param(
        lambda: js.LBFGS(memory_dtype="bogus"),
        r"memory_dtype",
        r"floating",
        id="LBFGS-memory_dtype=bogus",
    ),
    # a component in the wrong slot
    pytest.param(
        lambda: js.Solver(js.Zoom()), r"direction", r"AbstractDirection", id="Solver(Zoom())"
    ),
    pytest.param(
        lambda: js.Solver(js.Zoom(), js.LBFGS()),
        r"direction",
        r"AbstractDirection",
        id="Solver(Zoom(), LBFGS())",
    ),
    pytest.param(
        lambda: js.Solver(adjoint="implicit"), r"adjoint", r"AbstractAdjoint", id="adjoint=str"
    ),
    pytest.param(
        lambda: js.Solver(js.LBFGS(), js.LBFGS()),
        r"linesearch",
        r"AbstractLineSearch",
        id="Solver(LBFGS(), LBFGS())",
    ),
    pytest.param(
        lambda: js.Solver(js.LBFGS), r"direction", r"AbstractDirection", id="Solver(LBFGS-class)"
    ),
    pytest.param(
        lambda: js.Solver(js.LBFGS(), js.Zoom),
        r"linesearch",
        r"AbstractLineSearch",
        id="Solver(Zoom-class)",
    ),
    pytest.param(
        lambda: js.Solver("lbfgs"), r"direction", r"AbstractDirection", id="Solver('lbfgs')"
    ),
]


@pytest.mark.parametrize("make,name,fix", WRONG_TYPES)
def test_wrong_type(make, name, fix):
    assert_raises(make, (TypeError, ValueError), name, fix)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: js.Solver(gtol=0, ftol=0), id="Solver-gtol=0-ftol=0"),
        pytest.param(lambda: js.FixedStep(learning_rate=1), id="FixedStep-learning_rate=1"),
        pytest.param(lambda: js.Backtracking(growth=2), id="Backtracking-growth=2"),
        pytest.param(lambda: js.Zoom(max_step_size=10), id="Zoom-max_step_size=10"),
    ],
)
def test_int_for_float_is_accepted(make):
    make()


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: js.Solver(max_steps=np.int64(5)), id="Solver-max_steps"),
        pytest.param(lambda: js.LBFGS(memory_size=np.int64(5)), id="LBFGS-memory_size"),
    ],
)
def test_numpy_integer_is_accepted(make):
    make()


# ------------------------------------------------- out-of-range values the library lets by

SILENT = [
    pytest.param(
        lambda: js.FixedStep(learning_rate=float("inf")),
        r"learning_rate",
        id="FixedStep-learning_rate=inf",
    ),
    pytest.param(
        lambda: js.Backtracking(growth=float("nan")),
        r"growth",
        id="Backtracking-growth=nan",
    ),
    pytest.param(
        lambda: js.Zoom(xtol=float("nan")),
        r"xtol",
        id="Zoom-xtol=nan",
    ),
    pytest.param(
        lambda: js.LBFGS(curvature_eps=float("nan")),
        r"curvature_eps",
        id="LBFGS-curvature_eps=nan",
    ),
    pytest.param(
        lambda: js.BFGS(curvature_eps=float("nan")), r"curvature_eps", id="BFGS-curvature_eps=nan"
    ),
    pytest.param(
        lambda: js.NonlinearCG(restart_threshold=float("nan")),
        r"restart_threshold",
        id="NonlinearCG-restart_threshold=nan",
    ),
    pytest.param(lambda: js.NewtonCG(eta_max=float("nan")), r"eta_max", id="NewtonCG-eta_max=nan"),
    pytest.param(
        lambda: js.Backtracking(growth=0.5), r"growth must be >= 1", id="Backtracking-growth<1"
    ),
    pytest.param(
        lambda: js.Zoom(safeguard=0.5), r"safeguard must lie in \(0, 0\.5\)", id="Zoom-safeguard"
    ),
]


@pytest.mark.parametrize("make,fragment", SILENT)
def test_out_of_range_rejected(make, fragment):
    assert_raises(make, ValueError, fragment)


# --------------------------------------------------------------------------- run arguments


def test_callback_not_callable():
    assert_raises(
        lambda: js.Solver().run(jnp.sum, X0, callback=3), TypeError, r"callback must be callable"
    )


@pytest.mark.parametrize("where", ["run", "init"])
def test_fn_not_callable(where):
    solver = js.Solver()
    call = (lambda: solver.run(3, X0)) if where == "run" else (lambda: solver.init(X0, fn=3))
    assert_raises(call, TypeError, r"fn must be callable")


NO_HOOK_SCRIPT = """
import jaxsearch as js
try:
    js.Solver(gtol="1e-5")
except Exception as e:
    print(type(e).__name__ + ": " + str(e))
"""


def test_gtol_wrong_type_without_type_hook():
    """What a user sees: the suite's jaxtyping hook is off in a fresh interpreter."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", NO_HOOK_SCRIPT], capture_output=True, text=True, timeout=60
    ).stdout
    assert out.startswith("TypeError") and "gtol" in out, out
