"""`minimize`: scipy.optimize.minimize's interface, its methods mapped onto Solvers."""

import dataclasses
import inspect
import math
import operator
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from ._direction import BFGS, LBFGS, NewtonCG, NonlinearCG
from ._linesearch import MoreThuente, Zoom
from ._minimize_result import STOPPED_BY_CALLBACK, MinimizeResult
from ._pairing import SCIPY_FTOL as _FTOL  # L-BFGS-B's ftol
from ._solver import Solver
from ._status import Status

_AUTO = object()  # maxiter's default: 200 times the number of variables

# Each method's options with scipy's defaults (scipy 1.17).
DEFAULTS: dict[str, dict] = {
    "L-BFGS-B": dict(maxcor=10, ftol=_FTOL, gtol=1e-5, maxfun=15000, maxiter=15000, maxls=20),
    "BFGS": dict(gtol=1e-5, norm=math.inf, maxiter=_AUTO, xrtol=0.0, c1=1e-4, c2=0.9),
    "CG": dict(gtol=1e-5, norm=math.inf, maxiter=_AUTO, c1=1e-4, c2=0.4),
    "Newton-CG": dict(xtol=1e-5, maxiter=_AUTO, c1=1e-4, c2=0.9),
}
# Options scipy takes that change nothing here: finite differences (the gradient is jax's, exact)
# and printing.
IGNORED: dict[str, tuple[str, ...]] = {
    "L-BFGS-B": ("eps", "finite_diff_rel_step", "workers", "disp", "iprint"),
    "BFGS": ("eps", "finite_diff_rel_step", "workers", "disp"),
    "CG": ("eps", "finite_diff_rel_step", "workers", "disp"),
    "Newton-CG": ("eps", "workers", "disp"),
}
# The option scipy's `tol` sets, per method (`options.setdefault`).
TOL_SETS = {
    "L-BFGS-B": ("ftol", "gtol"),
    "BFGS": ("gtol",),
    "CG": ("gtol",),
    "Newton-CG": ("xtol",),
}
_LEAST_SQUARES = ("lm", "trf", "dogbox")
_FINITE_DIFFERENCES = ("2-point", "3-point", "cs")


def minimize(
    fun: Callable,
    x0,
    args=(),
    method: str = "L-BFGS-B",
    jac=None,
    hess=None,
    hessp=None,
    bounds=None,
    constraints=(),
    tol: float | None = None,
    callback: Callable | None = None,
    options: dict | None = None,
) -> MinimizeResult:
    """Minimise `fun(x, *args)` from `x0` as `scipy.optimize.minimize` does, by a
    `js.Solver`: scipy's arguments, option names and result fields (docs/coming-from-scipy.md).

    ```python
    import jax.numpy as jnp
    import jaxsearch as js


    def rosen(x):
        return jnp.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


    res = js.minimize(rosen, jnp.array([-1.2, 1.0]), bounds=[(-2, 0.8), (None, None)])
    print(res.success, res.status, res.x[0] == 0.8)  # True 0 True (the bound is active)
    ```

    **Methods** (case-insensitive; `"L-BFGS-B"` by default, where scipy's default is BFGS
    without bounds), each one `Solver`:

    - `"L-BFGS-B"`: `Solver(js.LBFGS(memory_size=maxcor), js.MoreThuente(max_trials=maxls
      + 1), gtol=gtol, ftol=ftol, max_steps=maxiter, max_evals=maxfun)`, L-BFGS-B's line
      search (dcsrch), with `bounds` its Cauchy point and subspace step. Options `maxcor`
      (10), `ftol` (2.22e-9) on (f_k - f_{k+1}) / max(|f_k|, |f_{k+1}|, 1), `gtol` (1e-5) on
      the projected gradient's largest entry, `maxiter` (15000), `maxfun` (15000; a budget
      that cuts a search off, where scipy checks it between iterations), `maxls` (20; one
      more trial counts a failed search's re-evaluation).
    - `"BFGS"`: `Solver(js.BFGS(), js.Zoom(c1=c1, c2=c2), gtol=gtol, gtol_norm=norm,
      ftol=0, max_steps=maxiter)`. Options `gtol` (1e-5) on the gradient's `norm` (inf or
      2), `maxiter`, `c1` (1e-4), `c2` (0.9), `xrtol` (0 only: `js.Solver(xtol=...)` tests
      the step's largest entry instead), `return_all`.
    - `"CG"`: as BFGS with `js.NonlinearCG("polak-ribiere", restart_threshold=None)`, PR+
      (scipy's; a non-descent direction is replaced by -g here), `c2` 0.4 as scipy's.
    - `"Newton-CG"`: `Solver(js.NewtonCG(), js.Zoom(c1=c1, c2=c2), gtol=0, ftol=0,
      xtol=xtol, max_steps=maxiter)`, Hessian-vector products by autodiff. It stops where
      the largest |x_{k+1} - x_k| is at most `xtol` (1e-5), which implies scipy's mean test;
      the inner CG uses 2-norms (scipy's 1-norms) and `NewtonCG`'s cap (scipy's 20n).

    `maxiter` defaults to 200 times x0's size for the last three. `tol` sets what scipy's
    sets: `ftol` and `gtol` for L-BFGS-B, `gtol` for BFGS and CG, `xtol` for Newton-CG (an
    explicit option wins). `eps`, `finite_diff_rel_step`, `workers`, `disp` and `iprint`
    are accepted and change nothing; any other unknown option raises a ValueError. For
    least squares use `js.Solver(js.LevenbergMarquardt())` or `js.Solver(js.GaussNewton())`
    on fn's residuals (`method="lm"` or `"trf"` raises a ValueError saying so); other scipy
    methods are refused.

    **Arguments.**

    - `fun(x, *args)`: a scalar, JAX-traceable; `args` a tuple (or one value) passed through,
      its Python numbers static (a new value compiles anew: pass arrays).
    - `x0`: an array (a list or tuple is one, as scipy's array_like; an integer one becomes the
      default floating dtype) or a pytree of floating arrays; its dtype is the run's.
    - `jac`: None or False (jax's gradient; so are `"2-point"`, `"3-point"` and `"cs"`), True
      (fun returns `(f, g)`: `Solver(value_and_grad=True)`), or a callable `jac(x, *args)`.
    - `bounds` (L-BFGS-B only): one `(lo, hi)` pair per entry of x0, None for no bound, or a
      `scipy.optimize.Bounds` (anything with `lb` and `ub`); x0 is projected into the box.
    - `hess`, `hessp` and `constraints` are refused with a ValueError naming the alternative.
    - `callback(intermediate_result)`: called after each iteration with a `MinimizeResult`
      (`x` the new iterate, `fun` f there; a callback whose one parameter has another name
      gets x, scipy's legacy form); `StopIteration` ends the run with status 99. A callback
      (or `return_all`) runs one step per call (`Solver.run` resumed with `state=`, the same
      steps), so inside `jax.jit` or `jax.vmap` it raises a TypeError (use
      `Solver.run(callback=...)` there).

    Without a callback, `minimize` is one `Solver.run`: compiled once per method, options,
    fun and x0's shapes and dtypes, usable inside `jax.jit` and under `jax.vmap`. Returns a
    `js.MinimizeResult`.
    """
    method = _method(method)
    _refuse_unsupported(method, hess, hessp, constraints)
    settings = _options(method, options, tol)
    if not isinstance(args, tuple):
        args = (args,)
    if isinstance(x0, list | tuple):  # scipy's array_like
        x0 = np.asarray(x0)
    x0 = jax.tree.map(_floating, x0)
    n = sum(math.prod(jnp.shape(leaf)) for leaf in jax.tree.leaves(x0))
    if settings.get("maxiter", None) is _AUTO:
        settings["maxiter"] = 200 * n
    box = None if bounds is None else _box(bounds, x0, method)
    fn, own_gradient = _objective(fun, jac)
    return_all = bool(settings.pop("return_all", False))
    solver = _method_solver(method, settings, own_gradient, settings["maxiter"])
    if callback is None and not return_all:
        return MinimizeResult.of(solver.run(fn, x0, *args, bounds=box), method)
    if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves((x0, args))):
        raise TypeError(
            "js.minimize(callback=...) and return_all call Python after each iteration, "
            "with concrete values: inside jax.jit or jax.vmap drop them, or use "
            "js.Solver(...).run(fn, x0, callback=...), whose callback gets each step's "
            "record (f, gradient norm, counts; not x)."
        )
    one_step = _method_solver(method, settings, own_gradient, 1)
    return _step_by_step(one_step, fn, x0, args, box, method, settings, callback, return_all)


def _method(method) -> str:
    """scipy's spelling of `method` (any case), or a ValueError naming what to use."""
    if not isinstance(method, str):
        raise TypeError(f"method must be a string (one of {', '.join(DEFAULTS)}), got {method!r}.")
    for name in DEFAULTS:
        if method.lower() == name.lower():
            return name
    if method.lower() in _LEAST_SQUARES:
        raise ValueError(
            f"method={method!r} is one of scipy.optimize.least_squares's: in jaxsearch, "
            "least squares is a Solver with a least-squares direction, fn returning the "
            "residuals: js.Solver(js.LevenbergMarquardt()).run(residuals, x0) (scipy's 'lm') "
            "or js.Solver(js.GaussNewton()) (docs/coming-from-scipy.md)."
        )
    raise ValueError(
        f"Unknown method {method!r}: js.minimize has {', '.join(DEFAULTS)} (any case). "
        "jaxsearch runs line-search methods only; for derivative-free, trust-region or "
        "constrained methods use scipy.optimize.minimize itself."
    )


def _refuse_unsupported(method: str, hess, hessp, constraints) -> None:
    if hess is not None or hessp is not None:
        raise ValueError(
            f"js.minimize takes no hess or hessp: method='Newton-CG' computes Hessian-vector "
            f"products of fun by autodiff (the method here is {method!r}); for a Hessian of "
            "your own use scipy.optimize.minimize."
        )
    if constraints is not None and (not hasattr(constraints, "__len__") or len(constraints)):
        raise ValueError(
            "jaxsearch handles bounds only (bounds=, with method='L-BFGS-B'); for "
            "constraints use scipy.optimize.minimize(method='trust-constr') or 'SLSQP', or "
            "a penalty or a change of variables in fun."
        )


def _options(method: str, options: dict | None, tol) -> dict:
    """The method's options: scipy's defaults, then `tol` where it applies, then the caller's; an
    unknown one raises a ValueError."""
    given = dict(options or {})
    known = set(DEFAULTS[method]) | set(IGNORED[method])
    if method != "L-BFGS-B":
        known.add("return_all")
    unknown = sorted(set(given) - known)
    if unknown:
        raise ValueError(
            f"Unknown option(s) {', '.join(map(repr, unknown))} for method {method!r}: its "
            f"options are {', '.join(sorted(known))}."
        )
    settings = dict(DEFAULTS[method])
    if tol is not None:
        settings.update({name: tol for name in TOL_SETS[method]})
    settings.update({k: v for k, v in given.items() if k not in IGNORED[method]})
    if method == "BFGS" and settings["xrtol"] != 0:
        raise ValueError(
            "options['xrtol'] (scipy's BFGS stops where |step| <= xrtol (xrtol + |x|)) has no "
            "counterpart here; js.Solver(js.BFGS(), xtol=...) stops where the step's largest "
            "entry is at most xtol."
        )
    if "norm" in settings:
        norm = settings.pop("norm")
        if norm not in (math.inf, 2):
            raise ValueError(
                f"options['norm'] must be inf or 2 (the norms jaxsearch has), got {norm!r}."
            )
        settings["gtol_norm"] = "inf" if norm == math.inf else "2"
    return settings


def _floating(leaf):
    """A leaf of x0 as a JAX array, of the default floating dtype if it is not floating."""
    leaf = jnp.asarray(leaf)
    if not jnp.issubdtype(leaf.dtype, jnp.inexact):
        leaf = leaf.astype(jnp.result_type(float))
    return leaf


def _box(bounds, x0, method: str):
    """scipy's bounds as `run`'s `(lower, upper)`, arrays of x0's shape and dtype."""
    if method != "L-BFGS-B":
        raise ValueError(
            f"method={method!r} cannot handle bounds (scipy ignores them with a warning): use "
            "method='L-BFGS-B', or js.Solver(js.Gradient()).run(..., bounds=...) for projected "
            "gradient."
        )
    if not isinstance(x0, jax.Array):
        raise TypeError("bounds need x0 to be one array (scipy's); for a pytree use Solver.run.")
    shape, dtype = x0.shape, x0.dtype
    if hasattr(bounds, "lb") and hasattr(bounds, "ub"):
        lower, upper = (
            np.broadcast_to(np.asarray(b, float), shape) for b in (bounds.lb, bounds.ub)
        )
    else:
        pairs = list(bounds)
        if len(pairs) != x0.size or any(len(pair) != 2 for pair in pairs):
            raise ValueError(
                f"bounds must hold one (lo, hi) pair per entry of x0 ({x0.size}), as scipy's; "
                f"got {len(pairs)} items."
            )
        lower = np.array([-np.inf if lo is None else lo for lo, _ in pairs], float)
        upper = np.array([np.inf if hi is None else hi for _, hi in pairs], float)
        lower, upper = lower.reshape(shape), upper.reshape(shape)
    if np.any(lower > upper):
        raise ValueError("bounds: a lower bound is greater than its upper bound.")
    return jnp.asarray(lower, dtype), jnp.asarray(upper, dtype)


def _objective(fun: Callable, jac) -> tuple[Callable, bool]:
    """(fn for the Solver, whether it returns its own gradient)."""
    if callable(jac):
        return _WithJac(fun, jac), True
    if jac is None or jac is False or (isinstance(jac, str) and jac in _FINITE_DIFFERENCES):
        return fun, False
    if jac is True:
        return fun, True
    raise ValueError(
        f"jac must be None, True, a callable or one of {_FINITE_DIFFERENCES}, got {jac!r}."
    )


class _WithJac:
    """fun and a gradient of the caller's as one fn returning (f, g)."""

    def __init__(self, fun: Callable, jac: Callable):
        self.fun, self.jac = fun, jac

    def __call__(self, x, *args):
        return self.fun(x, *args), self.jac(x, *args)


def _method_solver(method: str, o: dict, own_gradient: bool, max_steps: int) -> Solver:
    """The Solver of `method` with the settings `o` (see `minimize`), `max_steps` steps a run."""
    max_steps = operator.index(max_steps)
    if method == "L-BFGS-B":
        maxls = operator.index(o["maxls"])
        if maxls <= 0:
            raise ValueError("options['maxls'] must be positive.")
        return Solver(
            LBFGS(memory_size=operator.index(o["maxcor"])),
            MoreThuente(max_trials=maxls + 1),
            gtol=o["gtol"],
            ftol=o["ftol"],
            max_steps=max_steps,
            max_evals=operator.index(o["maxfun"]) if max_steps > 1 else None,
            value_and_grad=own_gradient,
        )
    search = Zoom(c1=o["c1"], c2=o["c2"])
    if method == "Newton-CG":
        return Solver(
            NewtonCG(), search, gtol=0.0, ftol=0.0, xtol=o["xtol"], max_steps=max_steps,
            value_and_grad=own_gradient,
        )  # fmt: skip
    direction = BFGS() if method == "BFGS" else NonlinearCG("polak-ribiere", restart_threshold=None)
    return Solver(
        direction, search, gtol=o["gtol"], gtol_norm=o["gtol_norm"], ftol=0.0,
        max_steps=max_steps, value_and_grad=own_gradient,
    )  # fmt: skip


def _step_by_step(solver, fn, x0, args, box, method, settings, callback, return_all):
    """`minimize` as one-step runs, each resumed from the last state: scipy's loop, calling
    `callback` after each iteration and honouring StopIteration."""
    maxiter, maxfun = settings["maxiter"], settings.get("maxfun")
    intermediate = callback is not None and _takes_result(callback)
    allvecs = [x0] if return_all else None
    result, steps, note = solver.run(fn, x0, *args, bounds=box), 0, None
    while True:
        taken = int(result.num_steps) > steps
        steps = int(result.num_steps)
        if taken and allvecs is not None:
            allvecs.append(result.iterate)
        if taken and callback is not None:
            try:
                callback(_intermediate(result, method) if intermediate else result.iterate)
            except StopIteration:
                return MinimizeResult.of(result, method, STOPPED_BY_CALLBACK, allvecs)
        if not taken or Status(int(result.status)) != Status.MAX_STEPS or steps >= maxiter:
            break
        if maxfun is not None and int(result.num_fun_evals) > maxfun:
            note = f"Stopped: more than maxfun ({maxfun}) evaluations of fun."
            break
        result = solver.run(fn, result.iterate, *args, bounds=box, state=result.state)
    return MinimizeResult.of(result, method, None, allvecs, note)


def _takes_result(callback: Callable) -> bool:
    """Whether `callback`'s one parameter is named `intermediate_result` (scipy's form), else it
    takes x (the legacy form)."""
    try:
        names = list(inspect.signature(callback).parameters)
    except (TypeError, ValueError):
        return False
    return names == ["intermediate_result"]


def _intermediate(result, method: str) -> MinimizeResult:
    """What `callback` gets after an iteration: x the new iterate, fun f there."""
    state = result.state
    res = MinimizeResult.of(result, method)
    return dataclasses.replace(res, x=result.iterate, fun=state.value, jac=state.grad)
