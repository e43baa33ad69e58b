"""The engine's transitions at a step boundary, functions of the `Engine` (`_engine`, the
loop that calls them and holds the evaluations they share) and its machine: f at x
(`take_base`), the end of a step (`end_step`, with the caller's `stop_when`), the start of
the next (`prepare`: the direction, the initial step, the search), and the vectors a step
that moved takes (`take_vectors`)."""

import dataclasses
import functools
import operator
from typing import TYPE_CHECKING

import jax.numpy as jnp
import jax.tree_util as jtu
from jax import lax
from jaxtyping import Array, Bool, Int, Scalar

from ._box import gradient_norm
from ._contract import computed, ended, search_started
from ._direction import AbstractLeastSquares, DirectionInfo
from ._history import FIELDS, step_record
from ._linesearch import InitialStepInfo, initial_step, search_cap
from ._machine import Machine, with_search
from ._misc import (
    select,
    tree_add_scaled,
    tree_dot,
    tree_equal,
    tree_min_step,
    tree_norm,
)
from ._state import BestPoint, SolverState
from ._status import KEPT, SearchEnd, Status
from ._stopping import step_status

if TYPE_CHECKING:
    from ._engine import Engine

_replace = dataclasses.replace


def kept(status: Int[Array, ""]) -> Bool[Array, ""]:
    """Whether `status` is one of `KEPT` (see `_status`)."""
    return functools.reduce(operator.or_, [status == code for code in KEPT])


def model_step(engine: "Engine", m: Machine, dtype) -> tuple[Scalar, Bool[Array, ""]] | None:
    """For a least-squares direction (else None): the decrease its unit step predicts
    (MINPACK's for its trial step), -phi'(0), and whether x + d rounds to x."""
    if not isinstance(engine.solver.direction, AbstractLeastSquares):
        return None
    unit = tree_add_scaled(m.x, jnp.ones((), dtype), m.d)
    return -m.dphi0.astype(dtype), tree_equal(unit, m.x)


def stop_rule(engine: "Engine", m: Machine, after: SolverState, dtype) -> Bool[Array, ""] | None:
    """The caller's `stop_when` on the record of the step that ended in `after` (None
    without one); its answer must be a boolean scalar."""
    stop_when = engine.solver.stop_when
    if stop_when is None:
        return None
    solver = engine.solver
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


def take_vectors(engine: "Engine", m: Machine, point, value, grad, aux, moved) -> Machine:
    """The vectors of a step that ends having `moved`, at every iteration and without a
    branch: x becomes its last trial `point`, f's gradient and aux there become the
    state's, and the best point's where `value` is the lowest yet (ties go to the newer
    point; the best value itself, a scalar, is `end_step`'s). Selects that XLA writes in
    place: taken inside the boundary's cond, which also reads them, each was copied back
    into the loop's carry at every boundary (more peak memory; benchmarks/HISTORY.md)."""
    st, has_aux = m.state, engine.solver.has_aux
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
    engine: "Engine", m: Machine, point, value, grad, aux, taken, stayed, change, ending
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
    checking = jnp.array(False) if engine.until_step else m.pending
    same = jnp.array(False)
    if not engine.until_step:
        same = checking & (value == st.value) & tree_equal(grad, st.grad)
        if engine.solver.has_aux:
            same = same & tree_equal(aux, st.aux)
    value, grad, aux = select(same, (st.value, st.grad, st.aux), (value, grad, aux))
    fresh_best = None if st.best is None else BestPoint(value, x, grad, aux, value)
    # A gradient other than the one the last step ended with (see `gradient_replaced`).
    replaced = engine.solver.direction.gradient_replaced(st.direction)
    kept_status = same & kept(st.status)
    grad_norm = gradient_norm(x, grad, engine.box, dtype, engine.solver.gtol_norm)
    st = _replace(
        st,
        value=value,
        grad=grad,
        aux=aux,
        has_eval=jnp.array(True),
        direction=select(same, st.direction, replaced),
        num_fun_evals=st.num_fun_evals + (checking & ~same).astype(jnp.int32),
        num_grad_evals=st.num_grad_evals + (checking & ~same).astype(jnp.int32),
        status=jnp.where(kept_status, st.status, engine.check(value, grad, grad_norm)).astype(
            jnp.int32
        ),
        best=select(same, st.best, fresh_best),
        steps_since_best=jnp.where(same, st.steps_since_best, 0).astype(jnp.int32),
        lowest_grad_norm=jnp.where(same, st.lowest_grad_norm, grad_norm).astype(dtype),
    )
    start = m
    m = _replace(m, state=st, pending=jnp.array(False))
    if engine.reads_records():  # the next step's evaluations begin after this one
        m = _replace(m, evals_at_start=st.num_fun_evals)
    if engine.report.per_step:
        # A counted evaluation at x is a row of its own: step 0 of a fresh run (f(x0)),
        # or, numbered by the state's step count, a resumed run's start where fn gave
        # other values there than the state holds (another x0, new data in args). A
        # resumed run whose check finds the state's values records nothing: its start
        # is the last row of the run it resumes.
        counted = ~start.state.has_eval | (checking & ~same)
        record = step_record(
            start.evals_at_start,
            st,
            dtype,
            m.last_step,
            engine.solver.stall_steps,
            m.last_eval,
            norm=engine.solver.gtol_norm,
        )
        record["step_size"] = jnp.zeros_like(st.step_size)  # no step taken
        record["search_end"] = jnp.full_like(st.search_end, SearchEnd.NOT_SEARCHED)
        m = engine.record(m, record, counted & m.open)
    return m


def prepare(engine: "Engine", m: Machine) -> Machine:
    """The direction at x and the start of a line search along it (which may end at once,
    e.g. when its first step would change nothing)."""
    st, x, box, solver = m.state, m.x, engine.box, engine.solver
    dtype = st.scalar_dtype
    direction = solver.direction
    evaluate = functools.partial(engine.evaluate, st)
    hvp = functools.partial(engine.objective.hessian_vector_product, evaluate, x, grad=st.grad)
    residuals = engine.residuals if engine.objective.residual else None
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
    linesearch = engine.linesearch
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
    engine: "Engine", m: Machine, point, value, grad, aux, taken, stayed, change, ending
) -> Machine:
    """The counters and status after a search (the direction's memory, and the new
    iterate's vectors, are taken in `iterate`): a search that ends with a step ends at
    its last trial, so `point` and its f, grad and aux (not x + t d computed again, which
    XLA may round differently) are the new iterate's. `stayed`: `point` equals x;
    `change`: the largest change of a parameter from x to `point` (None: not measured);
    `ending`: how the search ended (a `SearchEnd` code).
    The caller's `stop_when` sees the step's record as history does (`FIELDS`)."""
    st, x, search, box, solver = m.state, m.x, m.search, engine.box, engine.solver
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
    guess_decrease = jnp.where(decrease > 0, jnp.minimum(decrease, first_order), first_order / 2)
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
        linesearch=engine.linesearch.finish(st.linesearch, search),
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
    ended(engine.linesearch, solver.initial_step, st, after)
    spent = engine.evals_spent(m)
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
        out_of_evals=None if spent is None else spent & (m.trials < engine.linesearch.max_trials),
        change=change,
        xtol=solver.xtol,
        stop=stop_rule(engine, m, after, dtype),
        model=model_step(engine, m, dtype),
    )
    if not engine.until_step and engine.linesearch.evaluates_each_step:
        # A stochastic search's failure is part of its method: it carries a shrunk step to
        # the next search (`StochasticArmijo`), so `run` goes on, as a loop of `step`s
        # does; the step's record keeps why (`search_end`), and `stall_steps` ends a run
        # whose searches keep failing.
        failed = status == Status.LINESEARCH_FAILED
        status = jnp.where(failed, Status.RUNNING, status).astype(jnp.int32)
    after = _replace(after, status=status)
    evals_at_start = m.evals_at_start
    m = _replace(m, x=x_new, state=after, evals_at_start=after.num_fun_evals)
    if engine.report.per_step:
        record = step_record(
            evals_at_start,
            after,
            dtype,
            m.last_step,
            solver.stall_steps,
            m.last_eval,
            norm=solver.gtol_norm,
        )
        m = engine.record(m, record, taken & m.open)
    return m
