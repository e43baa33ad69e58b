"""What `Solver.run` returns."""

import functools
import operator

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Int, PyTree, Scalar

from ._misc import leaves
from ._packing import PackedState, pack
from ._state import SolverState
from ._status import CONVERGED, Status, stop_message
from ._stopping import stop_cause


class Result(eqx.Module):
    """Outcome of `Solver.run`.

    `params` is the best point the run has seen: the lowest f among x0 and the points it
    accepted (the newer of equal ones), or the last iterate where that is as low within the
    line search's rounding allowance, not above f(x0), and flatter (see `Solver`); always the
    last iterate with `Solver(return_best=False)`. Accepted points have finite values; near
    a minimiser a search may accept a step that raises f within its rounding allowance
    (epsilon C_k, Hager & Zhang 2005, section 4), but f never ends above f(x0), nor more
    than one allowance above any value the run accepted.
    `value`, `grad` and `aux` come from the evaluation of fn at `params`, bit for bit. At a
    complex leaf z = x + iy of params, `grad` is df/dx + i df/dy (the conjugate of
    `jax.grad`'s), and `state.grad` holds (df/dx, df/dy) on a last axis (docs/complex.md).
    `num_steps`, `num_fun_evals` (evaluations of fn, value and gradient together
    counting as one), `num_grad_evals` and `num_replaced` are read from `state`.
    `history` is a `js.History` with `run(..., history=True)`, else None. `success` and
    `message` are read from `status`: `success` in traced code too, `message` on the host.

    `state` is the solver's state at the run's last iterate, `iterate` (params like x0):
    `run(fn, result.iterate, *args, state=result.state)` continues the run as if it had not
    stopped, and `step(fn, result.iterate, result.state, *args)` goes on step by step. Its
    `status` is that of the last step (`RUNNING` where the run stopped at `max_steps`).
    `iterate` is `params` unless the run returned an earlier, better point. To go on from
    `params` rather than from `iterate` (a library that hands params and state on), use
    `state_at_params`. The state is
    carried in a few buffers, `packed_state` (a compiled program's every output array costs
    a dispatch), and unpacked when `state` is first read.
    """

    params: PyTree
    value: Scalar
    grad: PyTree
    aux: PyTree
    status: Int[Array, ""]
    packed_state: PyTree  # a PackedState (`state` unpacks it)
    iterate: PyTree
    history: PyTree = None

    def __init__(self, params, value, grad, aux, status, state, iterate, history=None):
        self.params, self.value, self.grad, self.aux = params, value, grad, aux
        self.status, self.iterate, self.history = status, iterate, history
        self.packed_state = pack(state) if isinstance(state, SolverState) else state

    @property
    def state(self) -> PyTree:
        """The solver's state at `iterate` (a `SolverState`), unpacked from `packed_state`
        when first read."""
        packed = self.packed_state
        return packed.unpack() if isinstance(packed, PackedState) else packed

    @property
    def state_at_params(self) -> PyTree:
        """The state to go on from the point the run returned (the hand-over to `step`, or
        to another run): `solver.step(fn, result.params, result.state_at_params, *args)`.
        Its `status` is the run's (`result.status`: `MAX_STEPS`, say, not the last step's
        `RUNNING`). Where `params` is the last iterate, it is `state` but for that status:
        f, its gradient and aux there, the direction's memory and the search's state go on. Where
        the run returned an earlier, better point, it is `state` with f marked for
        evaluation (as `Solver.reevaluate` does): the next step first evaluates fn at
        `params`, one evaluation, then searches from there with the direction's memory and
        the search's state the run built. Under `jax.vmap`, per problem."""
        state = self.state
        batch = jnp.ndim(state.has_eval)
        same = jnp.ones(jnp.shape(state.has_eval), bool)
        for x, y in zip(leaves(self.params), leaves(self.iterate), strict=True):
            axes = tuple(range(batch, jnp.ndim(x)))
            same = same & jnp.all(jnp.asarray(x) == jnp.asarray(y), axis=axes)
        status = jnp.asarray(self.status).astype(jnp.int32)
        # `tree_at`, not a constructor: a batched state's leaves have the batch's shape
        return eqx.tree_at(lambda s: (s.has_eval, s.status), state, (state.has_eval & same, status))

    @property
    def num_steps(self) -> Int[Array | np.ndarray, "*batch"]:
        """Steps the run took: `state.num_steps`, read from the state (one output array of
        the compiled run fewer than a field of its own, and each costs time at every call)."""
        return self.state.num_steps

    @property
    def num_fun_evals(self) -> Int[Array | np.ndarray, "*batch"]:
        """Evaluations of fn (value and gradient together count as one):
        `state.num_fun_evals`, read from the state as `num_steps` is."""
        return self.state.num_fun_evals

    @property
    def num_grad_evals(self) -> Int[Array | np.ndarray, "*batch"]:
        """Evaluations of fn that computed its gradient (`state.num_grad_evals`): all of
        `num_fun_evals` but the trials a search evaluated without their slope (see
        `Backtracking(slopes=...)`)."""
        return self.state.num_grad_evals

    @property
    def num_replaced(self) -> Int[Array | np.ndarray, "*batch"]:
        """Steps whose direction was not a descent direction, where the solver searched along
        steepest descent instead and reset the direction's memory (`state.num_replaced`).
        Where that is 2 or more and a quarter of the steps, `mostly_replaced` says so, as does
        `message`."""
        return self.state.num_replaced

    @property
    def mostly_replaced(self) -> Bool[Array | np.ndarray, "*batch"]:
        """Whether the run replaced its direction by steepest descent at 2 steps or more and
        at least a quarter of its steps (`num_replaced`, `num_steps`): the direction was
        often not a descent direction, and much of the run was steepest descent (check the
        direction's sign with `jaxsearch.testing.check_direction`). A boolean array computed
        from the state's counts, so it works inside `jax.jit` and, under `jax.vmap`, has the
        batch's shape; `message` says it in words. The built-in directions replace no step,
        or a rare one, on ordinary problems."""
        return _is_mostly_replaced(self.num_replaced, self.num_steps)

    @property
    def success(self) -> Bool[Array, "*batch"]:
        """Whether the run converged (`CONVERGED_GTOL`, `CONVERGED_FTOL`, `CONVERGED_XTOL` or
        `CONVERGED_PRECISION`): a boolean array, computed from `status`, so it works inside
        `jax.jit` and, under `jax.vmap`, has the batch's shape (one entry per problem)."""
        return functools.reduce(operator.or_, [self.status == code for code in CONVERGED])

    @property
    def message(self) -> str | list:
        """Why the run stopped, in words, naming the one cause that ended it (of a `STALLED`
        run: its last step rounded away, its search found no step that changes x, no
        progress for `stall_steps` steps, or gtol held only above the lowest f; of a
        `NONFINITE` one: x0, f at x0 or its gradient there), and, where `mostly_replaced`
        holds, at how many of its steps the direction was replaced by steepest descent. Read
        on the host, from a concrete result. For a batched result (from `jax.vmap`) a list of
        messages, one per problem (nested lists for more than one batch axis). Inside
        `jax.jit` there is no text: use `status` or `success` there, and read the message of
        the result the compiled call returns."""
        if isinstance(self.status, jax.core.Tracer):
            raise TypeError(
                "Result.message is text, read on the host from a concrete status; inside "
                "jax.jit (or vmap) use result.status or result.success, and return the "
                "result to read `result.message` outside."
            )
        codes = np.asarray(self.status)
        causes = np.broadcast_to(self._causes(codes.shape), codes.shape)
        replaced, steps = self._replaced(codes.shape)
        messages = np.frompyfunc(_message, 4, 1)(codes, causes, replaced, steps)
        return messages if codes.ndim == 0 else messages.tolist()

    def __repr__(self) -> str:
        """A few lines: the status, the message, `value`, the counts and whether a history is
        kept. A batch (`jax.vmap`) shows how many problems ended with each status, and its
        arrays; a result inside `jax.jit` or `vmap` (traced) shows dtypes and shapes, and
        computes nothing. (`eqx.tree_pprint(result)` shows every field.)"""
        if any(unreadable(x) for x in (self.status, self.value)):
            return (
                f"Result(traced: status={_shown(self.status)}, value={_shown(self.value)}, "
                f"history={'None' if self.history is None else 'kept'}; return it from the "
                "jitted function to read it)"
            )
        codes = np.asarray(self.status)
        if codes.ndim == 0:
            head = f"status={Status(int(codes)).name}, success={bool(self.success)},\n"
            head += f"       message={self.message!r},"
        else:
            found, times = np.unique(codes, return_counts=True)
            each = (f"{n} {Status(int(c)).name}" for c, n in zip(found, times, strict=True))
            head = f"batch of {codes.size}: {', '.join(each)},"
        state = self.state
        counts = ""
        if isinstance(state, SolverState):
            counts = f", num_steps={_shown(state.num_steps)}"
            counts += f", num_fun_evals={_shown(state.num_fun_evals)}"
        history = "None"
        if self.history is not None:
            history = f"kept, length={_shown(self.history.length)}"
        return f"Result({head}\n       value={_shown(self.value)}{counts}, history={history})"

    def _replaced(self, batch: tuple) -> tuple[np.ndarray, np.ndarray]:
        """`num_replaced` and `num_steps` on the host, in the batch's shape (0 where the
        state is not a `SolverState`)."""
        state = self.state
        if not isinstance(state, SolverState):
            return np.zeros(batch, np.int32), np.zeros(batch, np.int32)
        replaced, steps = np.asarray(state.num_replaced), np.asarray(state.num_steps)
        return np.broadcast_to(replaced, batch), np.broadcast_to(steps, batch)

    def _causes(self, batch: tuple) -> np.ndarray:
        """The `Cause` of each problem's end, read from the state (`stop_cause`)."""
        state = self.state
        if not isinstance(state, SolverState):
            return np.zeros(batch, np.int32)
        x_finite = np.ones(batch, bool)
        codes = np.asarray(self.status)
        # The iterate is read only where a run ended NONFINITE: a sharded iterate that spans
        # other processes' devices (a multi-process run) cannot be read on one host.
        read_x = bool(np.any(codes == Status.NONFINITE))
        for leaf in leaves(eqx.filter(self.iterate, eqx.is_inexact_array)) if read_x else []:
            values = np.asarray(leaf).reshape(*batch, -1)
            x_finite &= np.isfinite(values).all(axis=-1)
        return stop_cause(
            np,
            codes,
            np.asarray(state.status),
            np.asarray(state.step_size),
            x_finite,
            np.isfinite(np.asarray(state.value)),
            np.asarray(state.search_end),
        )


def _is_mostly_replaced(replaced, steps):
    """Whether `replaced` of `steps` steps is 2 or more and at least a quarter of them
    (`Result.mostly_replaced`; arrays, traced or not, or host integers)."""
    return (replaced >= 2) & (replaced >= (steps + 3) // 4)  # 4 replaced >= steps, no overflow


def _message(status, cause, replaced, steps) -> str:
    """One problem's `Result.message`: why it stopped (`stop_message`), and where its
    direction was mostly replaced by steepest descent (`mostly_replaced`), how often."""
    message = stop_message(status, cause, "x0")
    if _is_mostly_replaced(int(replaced), int(steps)):
        message += (
            f" The direction was not a descent direction at {int(replaced)} of {int(steps)} "
            "steps, where the solver searched along steepest descent instead "
            "(Result.num_replaced; check the direction's sign with "
            "jaxsearch.testing.check_direction)."
        )
    return message


def unreadable(x) -> bool:
    """Whether `x` cannot be read on this host: traced, or an array some of whose shards live
    on other processes' devices."""
    return isinstance(x, jax.core.Tracer) or (
        isinstance(x, jax.Array) and not x.is_fully_addressable
    )


def _shown(x) -> str:
    """An array's values (a few at each end of a long one), or its dtype and shape where they
    cannot be read (`unreadable`)."""
    if unreadable(x):
        return f"{x.dtype}{list(x.shape)}"
    return np.array2string(np.asarray(x), threshold=6, edgeitems=2)
