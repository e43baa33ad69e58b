"""The engine's loop carry (`Machine`): the iterate, the state, the current direction and the
line search's state, packed into a few buffers."""

import dataclasses

import equinox as eqx
from jaxtyping import Array, Bool, Int, PyTree, Scalar

from ._history import History
from ._linesearch import SearchState
from ._packing import PackedState, pack, packed
from ._state import SolverState

_replace = dataclasses.replace

# The search's scalars are carried packed, at most this many to a buffer: XLA:CPU fuses a
# concatenation with the computations of its operands where it has at most 8 of them, and
# runs no multi-output fusion, so an update costs one kernel per buffer, not one per scalar
# (and a branch passes a buffer on in one copy). tests/solver/test_engine.py measures it. A
# run under `jax.vmap` (`Report.batched`) carries them unpacked: its scalars are vectors, and
# the selects that replace its branches compile far slower on packed buffers (the vmapped GLM
# of benchmarks/suite/fresh_fit.py; docs/benchmarks.md).
PACKED_LEAVES = 8


def _nothing(leaf) -> bool:
    return False


class Machine(eqx.Module):
    """The loop's carry."""

    x: PyTree  # the iterate: where the current step started
    state: SolverState  # f, grad and aux at x (once `has_eval`), memories, counters, status
    d: PyTree  # the current step's direction
    dphi0: Scalar  # the slope of f along d at x
    packed_search: PackedState  # the search's state (`search`), packed (`PACKED_LEAVES`)
    trials: Int[Array, ""]  # evaluations of the current search (its trial budget)
    evals_at_start: Int[Array, ""]  # num_fun_evals when the current step began
    open: Bool[Array, ""]  # the loop goes on
    # f is known at x and the step from x is not prepared yet: `step` prepares it at the top of
    # the next iteration; `run` (resumed) checks f at x in the next iteration, then prepares it
    pending: Bool[Array, ""]
    last_step: Int[Array, ""]  # `run`: the step count at which it stops (max_steps from its start)
    history: History | None
    cap: Scalar  # the current search's cap on trials: min(max_step_size, the box's edge)
    # The count of evaluations at which the machine stops (`max_evals` from a run's start; for
    # `step`, `max_evals` itself); None without a budget of evaluations.
    last_eval: Int[Array, ""] | None = None
    # `run` with a dense least-squares direction: (r, J) at x, flattened, from the evaluation
    # that gave the state's f and gradient there (`Engine.forms_jacobian`); None otherwise.
    jacobian: tuple[Array, Array] | None = None
    # With value-only trials (`Engine.value_only_trials`): the step size of the last trial
    # evaluated without its slope, NaN where the last evaluation had it; None otherwise.
    value_only_t: Scalar | None = None

    @property
    def search(self) -> SearchState:
        return self.packed_search.unpack()


def pack_search(search: SearchState, batched: bool) -> PackedState:
    """The search's state as the loop carries it: packed, `PACKED_LEAVES` scalars to a buffer,
    or left unpacked in a run under `jax.vmap` (`batched`)."""
    return pack(search, PACKED_LEAVES, _nothing if batched else packed)


def with_search(m: Machine, search: SearchState, **changes) -> Machine:
    """`m` with `search` carried as `m` carries its search (packed or not: `pack_search`)."""
    batched = not m.packed_search.buffers
    return _replace(m, packed_search=pack_search(search, batched), **changes)
