"""The compiled engine: a state machine of which every loop iteration evaluates fn once.

An iteration computes the next point (x itself while f is unknown there, else the line
search's trial x + t d), evaluates fn there through the single evaluation site, and hands
phi(t), phi'(t) to the search (scalar work, always). The direction's memory takes the step's
pair, and the state a moved step's new iterate, gradient and best point, by masked,
branch-free updates at every iteration (so they are written in place). Only at a step
boundary (the evaluation at x, or a search that ended) does a `lax.cond` run the rest: the
step's end (counters, status, the best value, the step's record) and the start of the next
(direction, initial step, search). `run` is the machine until a stopping criterion; `step`
is it until the next step boundary, and starts its step at the top of the iteration that
needs it, so that either program builds the next direction at one place. A `run` resumed
from a state that has f at x starts with an iteration that checks it (`take_base`): its
evaluation at x is compared with the state's, and the boundary then starts the next step, so
that the direction is still built at one place.
"""

import dataclasses
import functools
import operator
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
from jax import lax
from jaxtyping import Array, Bool, Int, PyTree, Scalar

from ._box import Box, gradient_norm, trial_point
from ._contract import computed, ended, remembered, search_started, searched
from ._direction import DirectionInfo
from ._direction._base import dense_least_squares
from ._history import FIELDS, History, Report, step_record
from ._linesearch import AbstractLineSearch, InitialStepInfo, initial_step, search_cap
from ._machine import Machine, pack_search, with_search
from ._misc import (
    count_after,
    scalar,
    select,
    tree_all_finite,
    tree_dot,
    tree_equal,
    tree_inf_norm,
    tree_min_step,
    tree_norm,
    tree_sub,
    tree_zeros_like,
)
from ._objective import Objective
from ._state import BestPoint, SolverState
from ._status import KEPT, Status
from ._stopping import evals_spent, goes_on, search_end, step_status

_replace = dataclasses.replace


def kept(status: Int[Array, ""]) -> Bool[Array, ""]:
    """Whether `status` is one of `KEPT` (see `_status`)."""
    return functools.reduce(operator.or_, [status == code for code in KEPT])


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

    def max_iterations(self, value_only: bool) -> int:
        """A bound on the iterations (for a checkpointed loop): per step, its trial budget, one
        evaluation that a search that ends as it starts does not use (with value-only trials:
        and the gradient at its step), and f at x."""
        per_step = self.linesearch.max_trials + 1 + int(value_only)
        if self.until_step:
            return per_step + 1
        return self.solver.max_steps * per_step + 2  # and a resumed run's check of f at x

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

    def residuals(self, point):
        """fn's residuals at `point` (a least-squares direction's fn), aux dropped."""
        return self.objective.residuals(point, self.static, self.args)

    def measures_change(self) -> bool:
        """Whether the program computes each step's change of x, for `xtol` (not where `xtol`
        is the Python number 0: off, at no cost)."""
        xtol = self.solver.xtol
        return eqx.is_array(xtol) or xtol > 0

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
            m = lax.cond(m.pending, self.prepare, lambda m: m, m)
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
        m = self.take_vectors(m, point, value, grad, aux, moved)
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
        m = lax.cond(at_x, self.take_base, self.end_step, *operands)
        if self.until_step:  # `step` ends here, unless this was f at x
            running = m.state.status == Status.RUNNING
            spent = self.evals_spent(m)
            go_on = at_base & (running if spent is None else running & ~spent)
            return _replace(m, open=go_on, pending=go_on)
        go_on = goes_on(m.state, m.last_step, self.solver.stall_steps, m.last_eval)
        m = _replace(m, open=go_on)
        return lax.cond(go_on, self.prepare, lambda m: m, m)

    # ------------------------------------------------------------------ transitions

    def stop_rule(self, m: Machine, after: SolverState, dtype) -> Bool[Array, ""] | None:
        """The caller's `stop_when` on the record of the step that ended in `after` (None
        without one); its answer must be a boolean scalar."""
        stop_when = self.solver.stop_when
        if stop_when is None:
            return None
        solver = self.solver
        record = step_record(
            m.evals_at_start, after, dtype, m.last_step, solver.stall_steps, norm=solver.gtol_norm
        )
        stop = stop_when({name: record[name] for name in FIELDS})
        stop = jnp.asarray(stop)
        if stop.shape != () or stop.dtype != jnp.bool_:
            raise TypeError(
                "stop_when must return a boolean scalar (a 0-d bool array, per problem under "
                f"vmap), got shape {stop.shape} and dtype {stop.dtype}."
            )
        return stop

    def take_vectors(self, m: Machine, point, value, grad, aux, moved) -> Machine:
        """The vectors of a step that ends having `moved`, at every iteration and without a
        branch: x becomes its last trial `point`, f's gradient and aux there become the
        state's, and the best point's where `value` is the lowest yet (ties go to the newer
        point; the best value itself, a scalar, is `end_step`'s). Selects that XLA writes in
        place: taken inside the boundary's cond, which also reads them, each was copied back
        into the loop's carry at every boundary (at n = 1e5, 33 n-vectors of peak memory
        against 31; benchmarks/HISTORY.md,
        round 11)."""
        st, has_aux = m.state, self.solver.has_aux
        x = select(moved, point, m.x)
        grad = select(moved, grad, st.grad)
        aux = select(moved, aux, st.aux) if has_aux else st.aux
        best = st.best
        if best is not None:
            new_best = moved & (value <= best.value)
            best = _replace(
                best,
                params=select(new_best, x, best.params),
                grad=select(new_best, grad, best.grad),
                aux=select(new_best, aux, best.aux) if has_aux else best.aux,
            )
        return _replace(m, x=x, state=_replace(st, grad=grad, aux=aux, best=best))

    def take_base(
        self, m: Machine, point, value, grad, aux, taken, stayed, change, ending
    ) -> Machine:
        """f, grad and aux at x itself: the first step, after `reevaluate`, or the first
        iteration of a run resumed from a state with f at x (`pending` in `run`).

        A fresh evaluation at the start of a step, when the objective may have changed,
        starts the record of the best point anew. A resumed run's evaluation is checked
        instead: where f, its gradient and aux at x are those the state holds (x is the point
        the state belongs to, with the same fn and args), the run goes on as if it had never
        stopped, and this evaluation is not counted; the status is checked again as `step`
        does (so a run that ended on a failure tries again, its memory reset). Otherwise
        (another x0, or new data in args) the evaluation is counted and taken as fresh, as
        after `Solver.reevaluate`. One branch for both, with selects: a resumed run's check
        runs once per run, and a branch of its own cost the program about 20 fusions."""
        st, x = m.state, m.x
        dtype = st.scalar_dtype
        checking = jnp.array(False) if self.until_step else m.pending
        same = jnp.array(False)
        if not self.until_step:
            same = checking & (value == st.value) & tree_equal(grad, st.grad)
            if self.solver.has_aux:
                same = same & tree_equal(aux, st.aux)
        value, grad, aux = select(same, (st.value, st.grad, st.aux), (value, grad, aux))
        fresh_best = None if st.best is None else BestPoint(value, x, grad, aux, value)
        # A gradient other than the one the last step ended with (see `gradient_replaced`).
        replaced = self.solver.direction.gradient_replaced(st.direction)
        kept_status = same & kept(st.status)
        grad_norm = gradient_norm(x, grad, self.box, dtype, self.solver.gtol_norm)
        st = _replace(
            st,
            value=value,
            grad=grad,
            aux=aux,
            has_eval=jnp.array(True),
            direction=select(same, st.direction, replaced),
            num_fun_evals=st.num_fun_evals + (checking & ~same).astype(jnp.int32),
            num_grad_evals=st.num_grad_evals + (checking & ~same).astype(jnp.int32),
            status=jnp.where(kept_status, st.status, self.check(value, grad, grad_norm)).astype(
                jnp.int32
            ),
            best=select(same, st.best, fresh_best),
            steps_since_best=jnp.where(same, st.steps_since_best, 0).astype(jnp.int32),
            lowest_grad_norm=jnp.where(same, st.lowest_grad_norm, grad_norm).astype(dtype),
        )
        return _replace(m, state=st, pending=jnp.array(False))

    def prepare(self, m: Machine) -> Machine:
        """The direction at x and the start of a line search along it (which may end at once,
        e.g. when its first step would change nothing)."""
        st, x, box, solver = m.state, m.x, self.box, self.solver
        dtype = st.scalar_dtype
        direction = solver.direction
        evaluate = functools.partial(self.evaluate, st)
        hvp = functools.partial(self.objective.hessian_vector_product, evaluate, x, grad=st.grad)
        residuals = self.residuals if self.objective.residual else None
        info = DirectionInfo(
            x, st.grad, dtype, hvp, box, solver.adjoint.while_loop, residuals, m.jacobian
        )
        d, scaled, direction_state, limit = direction.compute(st.direction, info)
        computed(direction, st.direction, st.grad, (d, scaled, direction_state, limit))
        # Not a descent direction (e.g. rounding in low precision): restart from steepest
        # descent (projected onto the box when there is one). Its slope without a box,
        # -<g, g>, is <g, -g> to the bit, and leaves -g to the select (no vector of its own).
        if box is None:
            steepest = jtu.tree_map(jnp.negative, st.grad)
            steepest_slope = -tree_dot(st.grad, st.grad, dtype)
        else:
            steepest = box.projected_gradient(x, st.grad)
            steepest_slope = tree_dot(st.grad, steepest, dtype)
        dphi0 = tree_dot(st.grad, d, dtype)
        descent = jnp.isfinite(dphi0) & (dphi0 < 0)
        d = select(descent, d, steepest)
        dphi0 = jnp.where(descent, dphi0, steepest_slope)
        direction_state = select(descent, direction_state, direction.reset(direction_state))
        num_replaced = st.num_replaced + (~descent).astype(jnp.int32)
        scaled = scaled & descent
        linesearch = self.linesearch
        first = InitialStepInfo(
            scaled,
            dphi0,
            tree_norm(d, dtype),
            st.value.astype(dtype),
            st.prev_decrease,
            st.step_size,
            x,
            d,
            st.grad,
            st.prev_value,
        )
        guess = initial_step(solver.initial_step, st.initial_step, first, linesearch.max_step_size)
        phi0, min_step = st.value.astype(dtype), tree_min_step(x, d, dtype)
        # Step sizes carry no derivative (see `UnrolledAdjoint`): the searches branch on them.
        phi0, dphi0_search, guess = lax.stop_gradient((phi0, dphi0, guess))
        # With a box, no step goes beyond its edge along d, nor the direction's own limit.
        max_step = None
        if box is not None:
            limit = jnp.where(descent, limit, jnp.inf).astype(dtype)
            max_step = lax.stop_gradient(jnp.minimum(box.max_step(x, d, dtype), limit))
        search = linesearch.start(
            st.linesearch, phi0, dphi0_search, guess, min_step, scaled, max_step=max_step
        )
        search_started(linesearch, m.search, search)
        st = _replace(st, direction=direction_state, num_replaced=num_replaced)
        trials = jnp.zeros_like(m.trials)
        cap = lax.stop_gradient(search_cap(linesearch.max_step_size, max_step, dtype))
        value_only_t = None if m.value_only_t is None else jnp.full_like(m.value_only_t, jnp.nan)
        return with_search(
            m,
            search,
            state=st,
            d=d,
            dphi0=dphi0,
            trials=trials,
            pending=jnp.array(False),
            cap=cap,
            value_only_t=value_only_t,
        )

    def end_step(
        self, m: Machine, point, value, grad, aux, taken, stayed, change, ending
    ) -> Machine:
        """The counters and status after a search (the direction's memory, and the new
        iterate's vectors, are taken in `iterate`): a search that ends with a step ends at
        its last trial, so `point` and its f, grad and aux (not x + t d computed again, which
        XLA may round differently) are the new iterate's. `stayed`: `point` equals x;
        `change`: the largest change of a parameter from x to `point` (None: not measured);
        `ending`: how the search ended (a `SearchEnd` code).
        The caller's `stop_when` sees the step's record as history does (`FIELDS`)."""
        st, x, search, box, solver = m.state, m.x, m.search, self.box, self.solver
        dtype = st.scalar_dtype
        # A search cut off at its trial budget takes no step (and is reported as failed).
        cut_off = ~search.done
        moved = search.done & (search.step > 0)
        x_new, grad, aux = x, st.grad, st.aux  # the step's vectors (`take_vectors`)
        value = jnp.where(moved, value, st.value)

        unchanged = ~moved | stayed  # x_new equals x
        decrease = st.value.astype(dtype) - value.astype(dtype)
        # For the next initial step (N&W eq. 3.60): the decrease, but at most the first-order
        # decrease -t phi'(0), which it cannot exceed for convex phi; half of that where f did
        # not decrease (rounding noise near a minimiser), which makes eq. 3.60 N&W's eq. 3.59.
        first_order = -search.step * m.dphi0
        guess_decrease = jnp.where(
            decrease > 0, jnp.minimum(decrease, first_order), first_order / 2
        )
        # Progress is a new best value of f or a new least gradient norm; `run` ends a run
        # without progress for `stall_steps` steps (cycling within the searches' rounding
        # allowance, climbing on a wrong gradient) as stalled.
        best_value = st.value if st.best is None else st.best.value
        grad_norm = gradient_norm(x_new, grad, box, dtype, solver.gtol_norm)
        improved = moved & ((value < best_value) | (grad_norm < st.lowest_grad_norm))
        lowest_grad_norm = jnp.where(
            moved, jnp.minimum(grad_norm, st.lowest_grad_norm), st.lowest_grad_norm
        )
        best = st.best
        if best is not None:  # ties go to the newer point
            new_best = moved & (value <= best.value)
            # the best value (its vectors: `take_vectors`)
            best = _replace(best, value=jnp.where(new_best, value, best.value))
        # What a cut-off search leaves for the next one: no step.
        search = _replace(search, step=jnp.where(search.done, search.step, 0))
        after = SolverState(
            value=value,
            grad=grad,
            aux=aux,
            has_eval=st.has_eval,
            direction=st.direction,
            linesearch=self.linesearch.finish(st.linesearch, search),
            prev_decrease=jnp.where(moved, guess_decrease, st.prev_decrease),
            prev_value=jnp.where(moved, st.value.astype(dtype), st.prev_value),
            initial_step=solver.initial_step.update(st.initial_step, search.step, m.dphi0, moved),
            step_size=jnp.where(moved, search.step, 0).astype(dtype),
            num_steps=st.num_steps + 1,
            num_fun_evals=st.num_fun_evals,
            num_grad_evals=st.num_grad_evals,
            num_replaced=st.num_replaced,
            search_end=ending,
            status=st.status,  # the step's, below
            best=best,
            steps_since_best=jnp.where(improved, 0, st.steps_since_best + 1).astype(jnp.int32),
            lowest_grad_norm=lowest_grad_norm,
            fingerprint=st.fingerprint,
            num_foreign_params=st.num_foreign_params,
        )
        ended(self.linesearch, solver.initial_step, st, after)
        spent = self.evals_spent(m)
        status = step_status(
            cut_off=cut_off,
            moved=moved,
            below_resolution=search.trial < search.min_step,
            unchanged=unchanged,
            grad_norm=grad_norm,
            gtol=solver.gtol,
            before=st.value,
            after=value,
            ftol=solver.ftol,
            # a search cut off within its own trial budget was cut off by this one
            out_of_evals=None if spent is None else spent & (m.trials < self.linesearch.max_trials),
            change=change,
            xtol=solver.xtol,
            stop=self.stop_rule(m, after, dtype),
        )
        if not self.until_step and self.linesearch.evaluates_each_step:
            # A stochastic search's failure is part of its method: it carries a shrunk step to
            # the next search (`StochasticArmijo`), so `run` goes on, as a loop of `step`s
            # does; the step's record keeps why (`search_end`), and `stall_steps` ends a run
            # whose searches keep failing.
            failed = status == Status.LINESEARCH_FAILED
            status = jnp.where(failed, Status.RUNNING, status).astype(jnp.int32)
        after = _replace(after, status=status)
        history = m.history
        if self.report.per_step:
            record = step_record(
                m.evals_at_start,
                after,
                dtype,
                m.last_step,
                solver.stall_steps,
                m.last_eval,
                norm=solver.gtol_norm,
            )
            # Under vmap the loop's body runs for every problem until the last one ends (and
            # this branch at every iteration): a problem's step is recorded where it ended
            # one here and its run had not ended before (`m.open`).
            recorded = taken & m.open
            if history is not None:
                history = history.append(record, recorded)
            if self.report.host:
                self.report.send(record, recorded, m.open, solver.max_steps)
        return _replace(
            m, x=x_new, state=after, evals_at_start=after.num_fun_evals, history=history
        )
