"""The compiled engine: a state machine of which every loop iteration evaluates fn once.

An iteration computes the next point (x itself while f is unknown there, else the line
search's trial x + t d), evaluates fn there through the single evaluation site (a branch
between f alone and f with its gradient, where the search judges some trials on f alone:
`AbstractLineSearch.slope_needed`), and hands phi(t), phi'(t) to the search (scalar work,
always). A trial beyond the search's cap is not evaluated: the search is refused. The
direction's memory takes the step's pair, and the state a moved step's new iterate, gradient
and best point, by masked, branch-free updates at every iteration (so they are written in
place). Only at a step boundary (the evaluation at x, or a search that ended) does a
`lax.cond` run the rest: the step's end (counters, status, the best value, the step's
record) and the start of the next (direction, initial step, search), the transitions of
`_transitions`. `run` is the machine until a stopping criterion; `step` is it until the next
step boundary, and starts its step at the top of the iteration that needs it, so that either
program builds the next direction at one place. A `run` resumed from a state that has f at
x starts with an iteration that checks it (`take_base`): its evaluation at x is compared
with the state's, and the boundary then starts the next step, so that the direction is still
built at one place.
"""

import dataclasses
import functools
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
from jax import lax
from jaxtyping import Array, Bool, Int, PyTree, Scalar

from ._box import Box, gradient_norm, trial_point
from ._contract import remembered, searched
from ._direction._base import dense_least_squares
from ._history import History, Report
from ._linesearch import AbstractLineSearch
from ._machine import Machine, pack_search, with_search
from ._misc import (
    count_after,
    scalar,
    select,
    tree_all_finite,
    tree_dot,
    tree_equal,
    tree_inf_norm,
    tree_sub,
    tree_zeros_like,
)
from ._objective import Objective
from ._state import SolverState
from ._status import Status
from ._stopping import evals_spent, goes_on, search_end
from ._transitions import end_step, kept, prepare, take_base, take_vectors

_replace = dataclasses.replace


@dataclasses.dataclass(frozen=True, eq=False)
class Engine:
    """The machine for one solver, line search, objective, args and box, while they are
    traced. `until_step`: stop at the next step boundary (`Solver.step`) rather than at a
    stopping criterion (`Solver.run`). Not a pytree, and hashed by identity: its fields may
    be tracers, and the loop's transitions are its methods."""

    solver: Any  # the Solver, its numeric settings weakly typed
    linesearch: AbstractLineSearch  # the call's line search (with bounds: the bounded one)
    objective: Objective
    static: PyTree
    args: tuple
    box: Box | None
    until_step: bool
    report: Report = Report(False, None, False, False)

    def evaluate(self, state: SolverState, point):
        """f, its gradient and aux at `point` (the floating leaves of params)."""
        return self.objective.value_and_grad(
            state.value.dtype, state.aux, point, self.static, self.args
        )

    def forms_jacobian(self) -> bool:
        """Whether each trial's evaluation also forms r and J (`evaluate_trial`): in `run`
        with a dense least-squares direction, which `prepare` hands the accepted point's, so
        that its `compute` evaluates r no more. `step` starts its step in the next call, from
        the state, which holds no J: there the direction forms J itself."""
        return dense_least_squares(self.solver) and not self.until_step

    def evaluate_trial(self, state: SolverState, point):
        """f, grad, aux and (with `forms_jacobian`; else None) (r, J) at a trial point."""
        if not self.forms_jacobian():
            return (*self.evaluate(state, point), None)
        return self.objective.value_grad_and_jacobian(
            state.value.dtype, state.aux, point, self.static, self.args
        )

    def residuals(self, point):
        """fn's residuals at `point` (a least-squares direction's fn), aux dropped."""
        return self.objective.residuals(point, self.static, self.args)

    def evals_spent(self, m: Machine) -> Bool[Array, ""] | None:
        """Whether the budget of evaluations is spent (None without one)."""
        return evals_spent(m.state.num_fun_evals, m.last_eval)

    def check(self, value, grad, grad_norm: Scalar) -> Int[Array, ""]:
        """The status that forbids a search from a point with f = `value`, its gradient and
        that gradient's norm (`gradient_norm`): non-finite, or converged by gtol."""
        finite = jnp.isfinite(value) & tree_all_finite(grad)
        converged = grad_norm <= self.solver.gtol
        code = jnp.where(
            finite, jnp.where(converged, Status.CONVERGED_GTOL, Status.RUNNING), Status.NONFINITE
        )
        return code.astype(jnp.int32)

    def reads_records(self) -> bool:
        """Whether the program reads step records (`step_record`): a run that records them,
        or a solver with `stop_when`. Without, it tracks no step's first evaluation."""
        return self.report.per_step or self.solver.stop_when is not None

    def record(self, m: Machine, record: dict, recorded) -> Machine:
        """`m` with `record` appended to its history and sent to the host calls asked for,
        where `recorded`. Under vmap the loop's body runs for every problem until the last
        one ends (and the boundary's branches at every iteration): a problem's row is
        recorded where it ended a step (or evaluated f at x) in this iteration and its run
        had not ended before (`m.open`, in `recorded`)."""
        history = m.history
        if history is not None:
            history = history.append(record, recorded)
        if self.report.host:
            self.report.send(record, recorded, m.open, self.solver.max_steps)
        return _replace(m, history=history)

    def max_iterations(self, value_only: bool) -> int:
        """A bound on the iterations (for a checkpointed loop): per step, its trial budget, one
        evaluation that a search that ends as it starts does not use (with value-only trials:
        and the gradient at its step), and f at x."""
        per_step = self.linesearch.max_trials + 1 + int(value_only)
        if self.until_step:
            return per_step + 1
        return self.solver.max_steps * per_step + 2  # and a resumed run's check of f at x

    def value_only_trials(self, search) -> bool:
        """Whether the program evaluates f alone at the trials where the search needs no
        slope (`AbstractLineSearch.slope_needed`, asked of a `search` state): where the
        search asks, and not under `jax.vmap` (where a branch computes both sides), with a
        dense least-squares direction (whose trials form J) or with fn's own gradient
        (computed whatever is asked)."""
        if self.report.batched or self.forms_jacobian() or self.objective.own_grad:
            return False
        return self.linesearch.slope_needed(search) is not None

    def evaluate_at_trial(self, state: SolverState, point, value_only):
        """`evaluate_trial`, or where `value_only` f and aux alone (the gradient zeros)."""
        if value_only is None:
            return self.evaluate_trial(state, point)

        def alone(point):
            value, aux = self.objective.value_alone(
                state.value.dtype, state.aux, point, self.static, self.args
            )
            return value, tree_zeros_like(state.grad), aux, None

        return lax.cond(value_only, alone, lambda p: self.evaluate_trial(state, p), point)

    def measures_change(self) -> bool:
        """Whether the program computes each step's change of x, for `xtol` (not where `xtol`
        is the Python number 0: off, at no cost)."""
        xtol = self.solver.xtol
        return eqx.is_array(xtol) or xtol > 0

    # ------------------------------------------------------------------ start and loop

    def start(
        self, x, state: SolverState, history: History | None = None, last_step=None
    ) -> Machine:
        """The machine before its first iteration. For `step` from a state that has f and its
        gradient at x, the search starts at once, or not at all from a point already
        converged (by gtol, or by a status of `KEPT`, which the step that reached it set) or
        from a state whose evaluations are at `max_evals`: under vmap, finished problems stay
        put until `reevaluate` (the budget: for good). `run` from such a state (a resumed
        run) first checks f at x (`take_base`). A run stops at the step count `last_step`
        (per problem under vmap), by default `max_steps` steps after the state's."""
        dtype = state.scalar_dtype
        zero, one = scalar(0, dtype), scalar(1, dtype)
        last_eval = None
        max_evals = self.solver.max_evals
        if max_evals is not None:
            if self.until_step:  # `step`: a cap on the state's count, since `init`
                last_eval = scalar(max_evals, jnp.int32)
            else:  # `run`: max_evals more
                last_eval = count_after(state.num_fun_evals, max_evals)
        search = self.linesearch.start(state.linesearch, zero, -one, one, zero)
        m = Machine(
            x=x,
            state=state,
            d=tree_zeros_like(x),
            dphi0=zero,
            packed_search=pack_search(search, self.report.batched),
            trials=scalar(0, jnp.int32),
            evals_at_start=state.num_fun_evals,
            open=jnp.array(True),
            pending=jnp.array(False),
            last_step=(
                count_after(state.num_steps, self.solver.max_steps)
                if last_step is None
                else last_step
            ),
            history=history,
            cap=scalar(jnp.inf, dtype),
            last_eval=last_eval,
            value_only_t=scalar(jnp.nan, dtype) if self.value_only_trials(search) else None,
        )
        if self.forms_jacobian():  # zeros until fn is evaluated at x
            shapes = jax.eval_shape(lambda: self.evaluate_trial(state, x)[3])
            jacobian = jtu.tree_map(lambda a: jnp.zeros(a.shape, a.dtype), shapes)
            m = _replace(m, jacobian=jacobian)
        if not self.until_step:
            return _replace(m, pending=state.has_eval)
        stop = jnp.where(
            kept(state.status),
            state.status,
            self.check(
                state.value,
                state.grad,
                gradient_norm(x, state.grad, self.box, dtype, self.solver.gtol_norm),
            ),
        )
        stop = jnp.where(state.has_eval, stop, Status.RUNNING).astype(jnp.int32)
        spent = self.evals_spent(m)
        if spent is not None:
            stop = jnp.where((stop == Status.RUNNING) & spent, Status.MAX_EVALS, stop)
            stop = stop.astype(jnp.int32)
        halted = stop != Status.RUNNING
        state = _replace(
            state,
            status=jnp.where(halted, stop, state.status).astype(jnp.int32),
            step_size=jnp.where(halted, 0, state.step_size).astype(dtype),
        )
        # The first iteration prepares the step (`iterate`): one copy of `prepare` in the program.
        return _replace(m, state=state, open=~halted, pending=state.has_eval & ~halted)

    def loop(self, m: Machine) -> Machine:
        value_only = m.value_only_t is not None
        return self.solver.adjoint.while_loop(
            lambda m: m.open, self.iterate, m, self.max_iterations(value_only)
        )

    def iterate(self, m: Machine) -> Machine:
        """Evaluate fn once, update the search, and at a step boundary end the step. In
        `step`, the direction and the search's start come first where they are `pending` (from
        a state with f at x, or after f at x): `prepare` is then traced once, not both before
        the loop and at its boundary."""
        if self.until_step:
            m = lax.cond(m.pending, functools.partial(prepare, self), lambda m: m, m)
        st, linesearch = m.state, self.linesearch
        dtype = st.scalar_dtype
        at_base = ~st.has_eval
        # A resumed run's first iteration evaluates f at x to check the state's (`take_base`).
        checking = jnp.array(False) if self.until_step else m.pending
        # With value-only trials, a search that ended on a trial evaluated without its slope
        # has its step's gradient evaluated now (`completing`), before the step ends.
        value_only_t = m.value_only_t
        completing = jnp.array(False)
        if value_only_t is not None:
            completing = m.search.done & (m.search.step > 0) & (m.search.step == value_only_t)
            completing = completing & ~at_base & ~checking
        # A search that ended as it started (its first trial would change nothing) has no
        # trial: this iteration's evaluation is not counted and the step ends.
        idle = m.search.done & ~at_base & ~checking & ~completing
        no_trial = at_base | idle | checking | completing
        t = jnp.where(no_trial, 0, m.search.trial).astype(dtype)
        # No trial beyond the search's cap is evaluated: the search is refused (`ABOVE_CAP`).
        above_cap = ~no_trial & (t > m.cap)
        t = jnp.where(completing, m.search.step, jnp.where(above_cap, 0, t)).astype(dtype)
        value_only = None
        needed = linesearch.slope_needed(m.search)
        if value_only_t is not None and needed is not None:  # f alone where no slope is needed
            wanted = needed | (m.search.trial == value_only_t)
            value_only = ~no_trial & ~above_cap & ~wanted
        # Computed once and materialised: fn and the next iterate both read this one copy,
        # which no fusion can recompute (and round) differently.
        point = lax.optimization_barrier(trial_point(m.x, t, m.d, self.box))
        value, grad, aux, jacobian = self.evaluate_at_trial(st, point, value_only)
        counted = ~idle & ~checking & ~above_cap  # a check counts only where it finds a new point
        with_grad = counted if value_only is None else counted & ~value_only
        st = _replace(
            st,
            num_fun_evals=st.num_fun_evals + counted.astype(jnp.int32),
            num_grad_evals=st.num_grad_evals + with_grad.astype(jnp.int32),
        )
        phi, dphi = lax.stop_gradient((value.astype(dtype), tree_dot(grad, m.d, dtype)))
        if value_only is not None:
            dphi = jnp.where(value_only, jnp.nan, dphi).astype(dtype)
        updated = linesearch.update(m.search, lax.stop_gradient(t), phi, dphi)
        searched(linesearch, m.search, updated)
        refused = _replace(m.search, done=jnp.array(True), step=jnp.zeros_like(m.search.step))
        search = select(no_trial, m.search, select(above_cap, refused, updated))
        # A search that asks for slopes trial by trial and ends with a step whose slope is not
        # finite (at its gradient's evaluation, or on a trial it judged on f alone while the
        # program gave every trial its slope) takes none.
        if needed is not None:
            took = completing | (~no_trial & search.done & (search.step > 0))
            if value_only is not None:
                took = took & ~value_only
            search = select(took & ~jnp.isfinite(dphi), refused, search)
        trials = m.trials + (~no_trial).astype(jnp.int32)
        # A value-only trial that ends the search with its step waits for its gradient.
        awaits = jnp.array(False)
        if value_only is not None and value_only_t is not None:
            awaits = value_only & search.done & (search.step > 0)
            evaluated = jnp.where(value_only, t, jnp.nan).astype(dtype)
            value_only_t = jnp.where(no_trial & ~completing, value_only_t, evaluated)
        m = with_search(m, search, state=st, trials=trials, value_only_t=value_only_t)
        # A search ends within its trial budget; one that has not by then is cut off there,
        # as it is where the budget of evaluations is spent.
        budget = trials >= linesearch.max_trials
        ends = at_base | checking | (search.done & ~awaits) | (budget & ~awaits)
        spent = self.evals_spent(m)
        if spent is not None:
            ends = ends | spent
            # spent before the gradient of a value-only step: no step
            search = select(awaits & spent, _replace(search, done=jnp.array(False)), search)
            m = with_search(m, search)
        # A step ends here.
        taken = ends & ~at_base & ~checking
        finite = jnp.isfinite(dphi) if value_only is None else value_only | jnp.isfinite(dphi)
        ending = search_end(search, above_cap, budget, spent, jnp.isfinite(phi) & finite)
        # A step that ends having changed x gives the direction's memory its pair (s, y); one
        # that did not resets it. Done at every iteration without a branch, so the memory is
        # written in place: written inside the boundary's cond, next to the next direction's
        # reads of it, XLA copies the whole memory (measured: 54 n-vectors instead of 33).
        direction = self.solver.direction
        moved = taken & search.done & (search.step > 0)
        # Whether the trial left x where it was: read here and at the step's end (`end_step`),
        # one pass over both vectors for the two.
        stayed = tree_equal(point, m.x)
        pair = moved & ~stayed
        s, y = tree_sub(point, m.x), tree_sub(grad, st.grad)
        # For `xtol`: the largest change of a parameter, from x to this trial.
        change = tree_inf_norm(s, dtype) if self.measures_change() else None
        memory = direction.update(st.direction, s, y, dtype, accept=pair)
        remembered(direction, st.direction, memory)
        memory = select(taken & ~pair, direction.reset(memory), memory)
        m = _replace(m, state=_replace(m.state, direction=memory))
        m = take_vectors(self, m, point, value, grad, aux, moved)
        if jacobian is not None:  # r and J at x: at x itself, or at the step's new iterate
            m = _replace(m, jacobian=select(moved | at_base | checking, jacobian, m.jacobian))
        operands = (m, point, value, grad, aux, taken, stayed, change, ending)
        return lax.cond(ends, self.boundary, lambda m, *_: m, *operands)

    def boundary(
        self, m: Machine, point, value, grad, aux, taken, stayed, change, ending
    ) -> Machine:
        """The end of a step (or the evaluation at x), then the start of the next step when
        the machine goes on."""
        at_base = ~m.state.has_eval
        operands = (m, point, value, grad, aux, taken, stayed, change, ending)
        # f at x: the first evaluation, after `reevaluate`, or a resumed run's check
        at_x = at_base if self.until_step else at_base | m.pending
        m = lax.cond(
            at_x, functools.partial(take_base, self), functools.partial(end_step, self), *operands
        )
        if self.until_step:  # `step` ends here, unless this was f at x
            running = m.state.status == Status.RUNNING
            spent = self.evals_spent(m)
            go_on = at_base & (running if spent is None else running & ~spent)
            return _replace(m, open=go_on, pending=go_on)
        go_on = goes_on(m.state, m.last_step, self.solver.stall_steps, m.last_eval)
        m = _replace(m, open=go_on)
        return lax.cond(go_on, functools.partial(prepare, self), lambda m: m, m)
