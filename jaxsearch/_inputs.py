"""Checks of what a user hands the solver: its parts, params, fn, dtypes, `throw`, and a
state's fit."""

import reprlib

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np

from ._adjoint import AbstractAdjoint, ImplicitAdjoint
from ._box import GRADIENT_NORMS
from ._direction import LBFGS, AbstractDirection, AbstractLeastSquares
from ._linesearch import AbstractInitialStep, AbstractLineSearch, InitialQuadratic
from ._misc import as_int, check_count, check_setting, leaves
from ._pairing import default_tolerances, searches
from ._state import SolverState


def _is_number(leaf) -> bool:
    return isinstance(leaf, int | float | complex) and not isinstance(leaf, bool)


def check_no_numbers(params) -> None:
    """Raise for a Python number among params' leaves outside Equinox modules: not an array, it
    would be held fixed silently. A module's non-array fields are static configuration; a NumPy
    scalar is an array, and is optimised."""
    if isinstance(params, list | tuple) and params and all(map(_is_number, params)):
        given = reprlib.repr(params)
        dtype = "" if any(isinstance(x, float | complex) for x in params) else ", jnp.float32"
        raise TypeError(
            f"params must be a pytree of floating arrays, got a {type(params).__name__} of "
            f"Python numbers ({given}), which jaxsearch cannot optimise: only array leaves "
            f"change. Pass one array: jnp.asarray({given}{dtype})."
        )
    found = jtu.tree_flatten_with_path(params, is_leaf=lambda x: isinstance(x, eqx.Module))[0]
    for path, leaf in found:
        if _is_number(leaf):
            where = f"params{jtu.keystr(path)}"
            raise TypeError(
                f"params must be a pytree of floating arrays: {where} is a Python "
                f"{type(leaf).__name__} ({leaf!r}), which jaxsearch cannot optimise: only array "
                f"leaves change. Pass jnp.asarray({leaf!r}) to optimise it, or pass it through "
                "`args` to hold it fixed."
            )


def check_params(params) -> None:
    """What `partition` checks, for `run` and `step` before fn is traced (fn would otherwise fail
    first on a Python number); quick where every leaf is a floating array."""
    found = leaves(params)
    if not found or not all(eqx.is_inexact_array(leaf) for leaf in found):
        partition(params)


def partition(params):
    """(params' floating array leaves, the rest), after checking there is something to optimise and
    nothing held fixed silently."""
    check_no_numbers(params)
    diff, static = eqx.partition(params, eqx.is_inexact_array)
    for path, leaf in jtu.tree_flatten_with_path(static)[0]:
        if isinstance(leaf, jax.Array | np.ndarray) and not jnp.issubdtype(leaf.dtype, jnp.inexact):
            where = f"params{jtu.keystr(path)}"
            raise TypeError(
                f"{where} is an array of dtype {leaf.dtype}, which jaxsearch cannot optimise: "
                "only floating arrays change. Pass it through `args` to hold it fixed, or "
                f"cast it (`{where}.astype(jnp.float32)`) to optimise it."
            )
    if not leaves(diff):
        raise TypeError("params has no floating array leaves: there is nothing to optimise.")
    for path, leaf in jtu.tree_flatten_with_path(diff)[0]:
        if jnp.issubdtype(leaf.dtype, jnp.complexfloating):
            raise TypeError(
                f"params{jtu.keystr(path)} is a complex array ({leaf.dtype}): `Solver.run`, "
                "`step` and `init` optimise complex params (as pairs of reals), but this "
                "entry point takes real floating arrays only. Pass the real and imaginary "
                "parts as real leaves."
            )
    return diff, static


def _spelled(part) -> str:
    """How a user writes `part` (an instance or a class): `js.Zoom()`, `MySearch()`."""
    cls = part if isinstance(part, type) else type(part)
    prefix = "js." if cls.__module__.startswith("jaxsearch") else ""
    return f"{prefix}{cls.__name__}()"


def _kind(part) -> str | None:
    """ "direction" or "line search" for an instance or a subclass of either; else None."""
    for base, kind in ((AbstractDirection, "direction"), (AbstractLineSearch, "line search")):
        if isinstance(part, base) or (isinstance(part, type) and issubclass(part, base)):
            return kind
    return None


def check_instance(name: str, part, base: type) -> None:
    """Raise for a class given where an instance of `base` is expected, naming the call."""
    if isinstance(part, type) and issubclass(part, base):
        raise TypeError(
            f"Solver: {name} is the class {part.__name__}, not an instance of it: did you "
            f"mean `{_spelled(part)}`?"
        )


def check_parts(direction, linesearch) -> None:
    """Raise unless `direction` is a direction and `linesearch` a line search (or None), naming the
    likely mistake: swapped, misplaced, or a class."""
    first, second = _kind(direction), _kind(linesearch)
    if first == "line search" and second == "direction":
        raise TypeError(
            "Solver(direction, linesearch): the arguments are swapped; write "
            f"js.Solver({_spelled(linesearch)}, {_spelled(direction)})."
        )
    if first == "line search":
        raise TypeError(
            f"Solver's first argument is the direction, got the line search "
            f"{_spelled(direction)}: write js.Solver(js.LBFGS(), {_spelled(direction)}), or "
            f"js.Solver(linesearch={_spelled(direction)}) for the default direction."
        )
    if second == "direction":
        raise TypeError(
            f"Solver's second argument is the line search, got the direction "
            f"{_spelled(linesearch)}: write js.Solver({_spelled(linesearch)}) for its default "
            "line search, or js.Solver(direction, linesearch)."
        )
    check_instance("direction", direction, AbstractDirection)
    if not isinstance(direction, AbstractDirection):
        raise TypeError(f"direction must be an AbstractDirection, got {type(direction).__name__}.")
    if linesearch is not None:
        check_instance("linesearch", linesearch, AbstractLineSearch)
        if not isinstance(linesearch, AbstractLineSearch):
            raise TypeError(
                f"linesearch must be an AbstractLineSearch, got {type(linesearch).__name__}."
            )


def check_fn(fn) -> None:
    if not callable(fn):
        raise TypeError(
            "fn must be callable, a function fn(params, *args) returning a scalar; "
            f"got {type(fn).__name__}."
        )


def floating_dtype(dtype, what: str):
    """`dtype` canonicalised, after checking that it is a real floating dtype."""
    dtype = jax.dtypes.canonicalize_dtype(dtype)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(f"{what} must be a real floating dtype, got {dtype}.")
    return dtype


def throw_setting(throw) -> bool | str:
    """`throw` as stored: a bool, or "failures" (raise on failures, not on `MAX_STEPS`)."""
    if isinstance(throw, bool):
        return throw
    if isinstance(throw, str) and throw == "failures":
        return throw
    raise ValueError(f'Solver: throw must be True, False or "failures", got {throw!r}.')


def check_is_state(state) -> None:
    """Raise unless `state` is a `SolverState` (a state is refused before it is looked into)."""
    if not isinstance(state, SolverState):
        raise TypeError(
            "state must be a SolverState (`solver.init(params)`'s, the one `step` returned, "
            f"or `result.state`), got {type(state).__name__}."
        )


def check_fits(given, expected, what: str) -> None:
    """Raise a TypeError naming the first node of `given` that differs from `expected` (a pytree of
    `jax.ShapeDtypeStruct`): a leaf's shape or dtype, or a node's type or children. A node whose
    class has a `made_by` string (L-BFGS's states) is said to be made by that setting."""
    problem = misfit(given, expected, what)
    if problem is not None:
        raise TypeError(problem)


def misfit(given, expected, what: str) -> str | None:
    """What `check_fits` would say of `given` against `expected`; None where it fits."""
    given_leaves, given_tree = jtu.tree_flatten_with_path(given)
    expected_leaves, expected_tree = jtu.tree_flatten_with_path(expected)
    # (jaxlib types the treedefs PyTreeDef | None, which mypy will not compare)
    if given_tree != expected_tree:  # type: ignore[operator]
        found = _structure_misfit(given, expected, ())
        if found is None:  # the same nodes and keys, other static fields
            given_paths = {jtu.keystr(path) for path, _ in given_leaves}
            expected_paths = {jtu.keystr(path) for path, _ in expected_leaves}
            missing = sorted(expected_paths - given_paths)
            extra = sorted(given_paths - expected_paths)
            where = f"(missing {missing[:3]}, unexpected {extra[:3]})"
        else:
            path, node, want = found
            keys = type(node) is type(want)  # then their children differ: name them
            where = f"({what}{jtu.keystr(path)} is {_describe(node, keys)} where this solver "
            where += f"and params give {_describe(want, keys)})"
            made_by = getattr(type(node), "made_by", None)  # the setting that makes such a node
            if not keys and made_by is not None:
                where += f"; that {type(node).__name__} was made by {made_by}: pass it to resume"
        return (
            f"{what} does not fit this solver and params: its structure differs from the "
            f"state `init` gives {where}. A state belongs to one solver's settings "
            "(direction, memory size, line search, return_best, bounds or not) and to params "
            "of one structure."
        )
    for (path, leaf), (_, want) in zip(given_leaves, expected_leaves, strict=True):
        shape, dtype = jnp.shape(leaf), jnp.result_type(leaf)
        if shape != want.shape or dtype != want.dtype:
            return (
                f"{what}{jtu.keystr(path)} is {dtype}{list(shape)} where this solver and "
                f"params give {want.dtype}{list(want.shape)}: the state belongs to another "
                "solver or problem (memory size, params' shapes or dtypes, value dtype)."
            )
    return None


def _is_leaf(node) -> bool:
    return node is None or jtu.treedef_is_leaf(jtu.tree_structure(node))


def _children(node) -> list:
    """(key, child) for each child of a pytree node; a None child is listed too."""
    return [
        (path[0], child)
        for path, child in jtu.tree_flatten_with_path(node, is_leaf=lambda x: x is not node)[0]
    ]


def _structure_misfit(given, expected, path: tuple):
    """(path, given, expected) of the first node, depth first, whose type or children's keys differ;
    None where none."""
    given_leaf, expected_leaf = _is_leaf(given), _is_leaf(expected)
    if given_leaf and expected_leaf:
        return (path, given, expected) if (given is None) != (expected is None) else None
    if given_leaf or expected_leaf or type(given) is not type(expected):
        return path, given, expected
    given_children, expected_children = _children(given), _children(expected)
    if [k for k, _ in given_children] != [k for k, _ in expected_children]:
        return path, given, expected
    for (key, child), (_, want) in zip(given_children, expected_children, strict=True):
        found = _structure_misfit(child, want, (*path, key))
        if found is not None:
            return found
    return None


def _describe(node, keys: bool) -> str:
    """A node in words: None, dtype[shape] for an array, else its type (with `keys`, its children's
    keys)."""
    if node is None:
        return "None"
    if hasattr(node, "shape") and hasattr(node, "dtype"):
        return f"{node.dtype}{list(node.shape)}"
    name = type(node).__name__
    article = "an" if name[0].lower() in "aeiou" else "a"
    if not keys:
        return f"{article} {name}"
    children = [jtu.keystr((key,)) for key, _ in _children(node)]
    return f"{article} {name} with {children}"


def tolerance(name: str, value):
    """`Solver`'s `gtol` or `ftol`, checked non-negative: a 0-d array as given, else a float."""
    check_setting("Solver", name, value, lambda v: v >= 0, "be non-negative")
    return value if eqx.is_array(value) else float(value)


def check_adjoint(adjoint):
    """`Solver`'s `adjoint`, `js.ImplicitAdjoint()` for None, checked to be an adjoint."""
    adjoint = ImplicitAdjoint() if adjoint is None else adjoint
    check_instance("adjoint", adjoint, AbstractAdjoint)
    if not isinstance(adjoint, AbstractAdjoint):
        raise TypeError(
            "adjoint must be an AbstractAdjoint, js.ImplicitAdjoint() or js.UnrolledAdjoint(), "
            f"got {type(adjoint).__name__}."
        )
    return adjoint


def check_own_gradient(direction, value_and_grad) -> bool:
    """`Solver`'s `value_and_grad`, a bool, refused with a least-squares direction (it needs the
    residuals' Jacobian)."""
    if not isinstance(value_and_grad, bool | np.bool_):
        raise TypeError(f"Solver: value_and_grad must be True or False, got {value_and_grad!r}.")
    if value_and_grad and isinstance(direction, AbstractLeastSquares):
        raise TypeError(
            f"Solver: {_spelled(direction)} cannot take value_and_grad=True: a least-squares "
            "direction's fn returns residuals, and it differentiates them itself (their "
            "Jacobian). Use a direction for a scalar objective (js.LBFGS(), js.BFGS(), ...) "
            "with fn returning (value, grad), or return residuals with value_and_grad=False."
        )
    return bool(value_and_grad)


def solver_settings(
    direction,
    linesearch,
    initial_step,
    *,
    gtol,
    gtol_norm,
    ftol,
    xtol,
    max_steps,
    max_evals,
    stall_steps,
    stop_when,
    return_best,
    has_aux,
    value_and_grad,
    throw,
    adjoint,
) -> dict:
    """`Solver`'s fields from its arguments: defaults filled in (`js.LBFGS()`, the direction's own
    line searches, `gtol` and `ftol`, `js.InitialQuadratic()`, `js.ImplicitAdjoint()`), every
    setting checked, counts as ints and flags as bools."""
    direction = LBFGS() if direction is None else direction
    initial_step = InitialQuadratic() if initial_step is None else initial_step
    if not isinstance(initial_step, AbstractInitialStep):
        raise TypeError(
            "initial_step must be a js.AbstractInitialStep (e.g. js.InitialStatic(1.0)), "
            f"got {type(initial_step).__name__}."
        )
    check_parts(direction, linesearch)
    linesearch, bounded_linesearch = searches(direction, linesearch)
    default_gtol, default_ftol = default_tolerances(direction)
    gtol = default_gtol if gtol is None else gtol
    ftol = default_ftol if ftol is None else ftol
    tolerances = {
        name: tolerance(name, v) for name, v in (("gtol", gtol), ("ftol", ftol), ("xtol", xtol))
    }
    counts = dict(max_steps=max_steps, stall_steps=stall_steps, max_evals=max_evals)
    counts = {name: None if count is None else as_int(count) for name, count in counts.items()}
    for name, count in counts.items():
        if name != "max_evals" or count is not None:  # max_evals=None: no budget
            check_count("Solver", name, count)
    if not (isinstance(gtol_norm, str) and gtol_norm in GRADIENT_NORMS):
        raise ValueError(
            f"Solver: gtol_norm must be one of {', '.join(map(repr, GRADIENT_NORMS))} (the "
            f"infinity norm or the Euclidean norm of the gradient), got {gtol_norm!r}."
        )
    if stop_when is not None and not callable(stop_when):
        raise TypeError(f"stop_when must be callable, got {type(stop_when).__name__}.")
    return (
        dict(
            direction=direction,
            linesearch=linesearch,
            bounded_linesearch=bounded_linesearch,
            initial_step=initial_step,
            gtol_norm=gtol_norm,
            stop_when=stop_when,
            return_best=bool(return_best),
            has_aux=bool(has_aux),
            value_and_grad=check_own_gradient(direction, value_and_grad),
            throw=throw_setting(throw),
            adjoint=check_adjoint(adjoint),
        )
        | tolerances
        | counts
    )
