"""The compile wing's door: a call's `plan`, made once on the host before anything is
compiled, and `dispatch`, the one way a program is compiled and called. `_programs` holds
the rules the plan reads (its module docstring says them: dispatch, donation, the "auto"
options and the cut of a run in two)."""

import dataclasses
from typing import NamedTuple

from . import _programs
from ._caches import bounded_cache


class Plan(NamedTuple):
    """How a call of `run` on fn at params and args is compiled and dispatched.

    `plain`: by `jax.jit` with the solver, search and fn static (else `eqx.filter_jit`);
    `options`: the run's compile options (sorted items, or None: XLA's defaults);
    `state_options`: those of a fresh state's program; `split`: 0 for one call, else the
    step count below which the run's steps run lean, the rest under the defaults (the run
    cut in two: `_programs.run_options`); `report`: the run's, marked `batched` under
    `jax.vmap`."""

    plain: bool
    options: tuple | None
    state_options: tuple | None
    split: int
    report: object


def plan(solver, fn, params, args: tuple, report, state, compiler_options) -> Plan:
    """The `Plan` of a call of `solver.run` (fn: the stand-in `_computation` gives), after
    refusing forward-mode differentiation through an adjoint that has none; within
    `js.jit`'s pricing trace, the call is priced (`_programs.price`)."""
    call = (params, args)
    if not solver.adjoint.forward_mode and _programs.differentiated_forward(call):
        raise TypeError(
            f"jaxsearch: {type(solver.adjoint).__name__} differentiates Solver.run in reverse "
            "mode only (jax.grad, jax.vjp); forward mode (jax.jvp, jax.jacfwd) needs "
            "adjoint=js.ImplicitAdjoint() (the default)."
        )
    if _programs.batched((*call, state)):
        report = dataclasses.replace(report, batched=True)
    # equinox turns a `throw=True` error into a clean exception under its own jit only
    plain = not solver.throw and _programs.plain_call(fn, call) and _programs.hashable(solver)
    _programs.price(solver, fn, params, args)
    options, split = _programs.run_options(
        compiler_options, solver, fn, params, args, report, state
    )
    state_options = options
    if compiler_options == "auto" and _programs.lean_eligible((*call, state)):
        state_options = _programs.LEAN_ITEMS  # the fresh state's program evaluates no fn
    return Plan(plain, options, state_options, split, report)


@bounded_cache(16)
def _bundled(program):
    """`program(*settings, last)` called as `program(settings, last)`, under its own name:
    the form `eqx.filter_jit` compiles with the last argument alone donated."""

    def bundled(settings: tuple, last):
        return program(*settings, last)

    bundled.__name__ = bundled.__qualname__ = program.__name__
    return bundled


def dispatch(program, arguments: tuple, *, plain: bool, static: tuple, donate: bool, options):
    """`program(*arguments)`, compiled and called as a `Plan` says: by `jax.jit` with the
    arguments at positions `static` static where `plain`, else by `eqx.filter_jit` (non-array
    leaves static); the last argument donated when `donate`; with `options` (XLA's defaults
    where this jaxlib refuses the lean ones: `_programs.with_fallback`)."""
    if plain:
        return _programs.call(
            program,
            *arguments,
            filtered=False,
            donate=donate,
            options=options,
            static_argnums=static,
        )
    bundled = _bundled(program)
    return _programs.call(
        bundled, arguments[:-1], arguments[-1], filtered=True, donate=donate, options=options
    )
