"""A solver as an optimistix minimiser: `optx.minimise(fn, solver.as_optimistix(), y0, args)`."""

from collections.abc import Callable
from typing import Any, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import optimistix as optx
from jaxtyping import Array, Bool, Int, PyTree, Scalar

from . import _traced
from ._adjoint import UnrolledAdjoint
from ._direction import AbstractLeastSquares
from ._inputs import partition
from ._misc import select, tree_cast_like, tree_cast_to_avals, with_fields
from ._state import SolverState
from ._status import Status
from ._stopping import run_status

# The optimistix result of each failing `Status`; converged and STOPPED runs are `successful`, and
# the evaluation budget is reported as a budget.
_FAILURES = (
    (Status.MAX_EVALS, optx.RESULTS.nonlinear_max_steps_reached),
    (Status.LINESEARCH_FAILED, optx.RESULTS.nonlinear_divergence),
    (Status.NONFINITE, optx.RESULTS.nonfinite),
    (Status.STALLED, optx.RESULTS.nonlinear_divergence),
)


def _inner_solver(solver):
    """The solver `step` runs: `solver`, every setting kept, but for fn returning (f, aux) as
    optimistix calls it, no error of its own, and checkpointed inner loops for
    `optx.RecursiveCheckpointAdjoint`."""
    return with_fields(solver, has_aux=True, throw=False, adjoint=UnrolledAdjoint())


class OptimistixMinimiser(optx.AbstractMinimiser):
    """A jaxsearch `Solver` as an `optx.AbstractMinimiser` (see `Solver.as_optimistix`): one
    optimistix step is one `Solver.step`, the state the `SolverState`. `rtol` (`ftol`), `atol`
    (`gtol`) and `norm` (`optx.max_norm`, or `optx.two_norm` with `gtol_norm="2"`) are for code
    that reads them: the solver's rules decide when to stop.

    **Arguments:** `solver`, the `js.Solver` to run, with neither a least-squares direction
    (optimistix's minimise gives f, not residuals) nor `value_and_grad=True`; its stopping rules
    (`gtol`, `ftol`, `xtol`, `max_evals`, `stall_steps`, `stop_when`) apply.
    """

    solver: Any  # the Solver that runs: has_aux=True, throw=False, checkpointed loops
    rtol: Any  # the solver's ftol (a float, or a 0-d array)
    atol: Any  # its gtol
    norm: Callable[[PyTree], Scalar]

    def __init__(self, solver):
        if isinstance(solver.direction, AbstractLeastSquares):
            raise TypeError(
                f"as_optimistix(): {type(solver.direction).__name__} is a least-squares "
                "direction, whose fn returns residuals; optx.minimise's fn returns a scalar. "
                "Use solver.run(fn, x0) with it, or a direction for scalar objectives."
            )
        if solver.value_and_grad:
            raise TypeError(
                "as_optimistix(): value_and_grad=True, but optx.minimise's fn returns f (and "
                "aux) alone, which jaxsearch differentiates. Build the solver without it, or "
                "use solver.run(fn, x0) with an fn that returns (value, grad)."
            )
        self.solver = _inner_solver(solver)
        self.rtol = solver.ftol
        self.atol = solver.gtol
        self.norm = optx.max_norm if solver.gtol_norm == "inf" else optx.two_norm

    def init(
        self,
        fn,
        y: PyTree,
        args: PyTree,
        options: dict[str, Any],
        f_struct: PyTree[jax.ShapeDtypeStruct],
        aux_struct: PyTree[jax.ShapeDtypeStruct],
        tags: frozenset[object],
    ) -> SolverState:
        del aux_struct, tags
        unknown = set(options) - {"autodiff_mode"}
        if unknown:
            raise ValueError(
                f"as_optimistix() takes no options {sorted(unknown)}: bounds and the other "
                "settings of a run are solver.run's (`solver.run(fn, x0, bounds=...)`)."
            )
        if options.get("autodiff_mode", "bwd") != "bwd":
            raise ValueError(
                'as_optimistix(): jaxsearch takes gradients in reverse mode: autodiff_mode="bwd" '
                f"only, got {options['autodiff_mode']!r}."
            )
        partition(y)  # refuses complex leaves, which `solver.init` would take
        return self.solver.init(y, f_struct.dtype, fn=fn, args=(args,))

    def step(
        self,
        fn,
        y: PyTree,
        args: PyTree,
        options: dict[str, Any],
        state: SolverState,
        tags: frozenset[object],
    ) -> tuple[PyTree, SolverState, PyTree]:
        del options, tags
        y, state = self.solver.step(fn, y, state, args)
        return y, state, state.aux

    def terminate(
        self,
        fn,
        y: PyTree,
        args: PyTree,
        options: dict[str, Any],
        state: SolverState,
        tags: frozenset[object],
    ) -> tuple[Bool[Array, ""], optx.RESULTS]:
        del fn, y, args, options, tags
        status = _ended(self.solver, state)
        result = optx.RESULTS.successful
        for code, failure in _FAILURES:
            result = optx.RESULTS.where(status == code, failure, result)
        return status != Status.RUNNING, cast(optx.RESULTS, result)

    def postprocess(
        self,
        fn,
        y: PyTree,
        aux: PyTree,
        args: PyTree,
        options: dict[str, Any],
        state: SolverState,
        tags: frozenset[object],
        result: optx.RESULTS,
    ) -> tuple[PyTree, PyTree, dict[str, Any]]:
        del fn, args, options, tags
        # Still running at the end: optimistix's max_steps, or its own check that y is finite
        # (before the first step, y0).
        status = _ended(self.solver, state)
        stopped = jnp.where(result == optx.RESULTS.nonfinite, Status.NONFINITE, Status.MAX_STEPS)
        status = jnp.where(status == Status.RUNNING, stopped, status).astype(jnp.int32)
        stats = {"status": status, "num_fun_evals": state.num_fun_evals}
        if state.best is None:
            return y, aux, stats
        given, static = partition(y)
        diff = tree_cast_like(given, given)
        search = self.solver.linesearch
        chosen, _, _, best_aux, _ = _traced.returned_point(
            self.solver, search, diff, state, None, status, _no_progress(self.solver, state)
        )
        # Before any step (max_steps=0) there is no point but y.
        chosen = select(state.has_eval, chosen, diff)
        best_aux = select(state.has_eval, best_aux, aux)
        return eqx.combine(tree_cast_to_avals(chosen, given), static), best_aux, stats


def _no_progress(solver, state: SolverState) -> Bool[Array, ""]:
    """Whether a run would stop here for want of progress (`stall_steps` steps)."""
    return run_status(state, solver.stall_steps)[1]


def _ended(solver, state: SolverState) -> Int[Array, ""]:
    """The status a run would end with here (RUNNING while it goes on): the last step's, STALLED
    after `stall_steps` without progress, and with a kept best point the returned point's
    (`_traced.returned_point`)."""
    status, no_progress = run_status(state, solver.stall_steps)
    running = (state.status == Status.RUNNING) & ~no_progress
    status = jnp.where(running, Status.RUNNING, status).astype(jnp.int32)
    if state.best is None:
        return status
    dummy = state.grad  # the last iterate is not needed without a box
    returned = _traced.returned_point(
        solver, solver.linesearch, dummy, state, None, status, no_progress
    )[4]
    return jnp.where(state.has_eval, returned, status).astype(jnp.int32)
