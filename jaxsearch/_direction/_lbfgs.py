"""Limited-memory BFGS (Nocedal, 1980; Liu & Nocedal, 1989): the settings, and which form a state is
made with (`_lbfgs_two_loop.py`, `_lbfgs_compact.py`; with bounds `_lbfgs_bounded.py`)."""

import equinox as eqx
import jax
import jax.numpy as jnp

from .._misc import as_int, check_count, leaves, widest_float
from ._base import AbstractDirection, DirectionInfo, no_limit
from ._lbfgs_bounded import bounded_direction
from ._lbfgs_compact import init as compact_init
from ._lbfgs_memory import AbstractLBFGSState, empty_memory
from ._lbfgs_two_loop import TwoLoopLBFGSState
from ._preconditioner import Preconditioner, check_fits, check_preconditioner, prepared

_FORMS = ("auto", "two_loop", "compact")
# Where "auto" takes the compact form on a CPU or a TPU: from COMPACT_FROM elements on it runs
# faster (benchmarks/studies/lbfgs_forms.py --auto); below, the two-loop recursion compiles faster
# and runs as fast or faster. A GPU takes the compact form at every size.
COMPACT_FROM = 5000
# The backends whose loop trips run on the device without a round trip to the host.
TWO_LOOP_WHEN_SMALL = ("cpu", "tpu")


def _is_floating(dtype) -> bool:
    try:
        return bool(jnp.issubdtype(dtype, jnp.floating))
    except TypeError:  # not a dtype at all, e.g. "bogus"
        return False


class LBFGS(AbstractDirection):
    """L-BFGS direction (Nocedal & Wright, section 7.2): the last `memory_size` pairs (s, y) in
    buffers with a leading `(memory_size,)` axis per leaf; the initial matrix gamma * I, gamma =
    s'y / y'y of the newest pair (N&W eq. 7.20; Shanno & Phua 1978), or the identity with
    `scale_initial=False` (jaxopt's `use_gamma=False`; L-BFGS-B's theta = 1). A pair is stored
    only if finite in the memory dtype and s'y > eps |s| |y| (eps the least precise memory
    dtype's, or `curvature_eps`), keeping H positive definite. Memory leaves have their param's
    dtype, or at least `memory_dtype` (e.g. `jnp.float32` for bfloat16 params); inner products
    are in at least float32. With bounds it is L-BFGS-B (`_lbfgs_bounded.bounded_direction`).
    `form` picks how d = -H g is computed, the same matrix either way:

    - `"two_loop"`: the two-loop recursion (N&W algorithm 7.4), two `fori_loop`s over the m
      slots; state `TwoLoopLBFGSState`.
    - `"compact"`: the compact representation (Byrd, Nocedal & Schnabel, 1994, eq. 3.13; N&W eq.
      7.24), loop-free: H g = gamma g + S p - gamma Y R^-1 a, p = R^-T ((D + gamma Y'Y) R^-1 a -
      gamma b), a = S'g, b = Y'g, R the upper triangle of S'Y and D its diagonal; state
      `CompactLBFGSState`, keeping S'Y and Y'Y up to date.
    - `"auto"` (the default): the compact form (no loop trips, each of which waits on the host on
      a GPU), except on a CPU or a TPU for params of fewer than `COMPACT_FROM` = 5000 elements,
      where the two-loop recursion compiles faster and runs as fast or faster. `init` chooses
      once and the state's class records it; a state resumed where `"auto"` would choose the
      other is refused with a TypeError naming `js.LBFGS(form="compact")` (or `"two_loop"`): pass
      `form` to resume across backends.

    **Preconditioning.** `preconditioner` P, a symmetric positive definite inverse-Hessian
    approximation, gives H0 = gamma P, gamma = s'y / y'P y (1 before a pair, and with
    `scale_initial=False`): L-BFGS in z = P^(-1/2) x (N&W eq. 7.20 with section 5.1's change of
    variables; Optim.jl's `P`, as an inverse). P is a callable v -> P v on pytrees like params
    (leaves widened to at least float32, cast back; hashed by identity: a module-level function,
    or an `eqx.Module` with dynamic arrays); a pytree like params of positive finite diagonal
    entries (dynamic: no recompile for another); or a lineax operator lineax knows is symmetric.
    P is fixed for a run: for a new one, build a new solver and start afresh. Only the two-loop
    form takes one (`form="compact"` is refused, `"auto"` takes two-loop; with bounds it is
    refused when traced). The identity gives the iterates without one, bit for bit.
    """

    supports_bounds = True

    memory_size: int = eqx.field(static=True, default=10, converter=as_int)
    memory_dtype: jnp.dtype | type | str | None = eqx.field(static=True, default=None)
    curvature_eps: float | None = eqx.field(static=True, default=None)
    form: str = eqx.field(static=True, default="auto")
    preconditioner: Preconditioner = None
    scale_initial: bool = eqx.field(static=True, default=True)

    def __check_init__(self):
        check_count("LBFGS", "memory_size", self.memory_size)
        if self.form not in _FORMS:
            raise ValueError(f"LBFGS: form must be one of {_FORMS}, got {self.form!r}.")
        check_preconditioner("LBFGS", self.preconditioner)
        if self.preconditioner is not None and self.form == "compact":
            raise ValueError(
                'LBFGS: form="compact" takes no preconditioner (its middle matrix holds the '
                'identity as H0); use form="two_loop" or "auto", which then takes the '
                "two-loop form."
            )
        if self.memory_dtype is not None and not _is_floating(self.memory_dtype):
            raise ValueError(
                f"LBFGS: memory_dtype must be a floating dtype such as jnp.float32, "
                f"got {self.memory_dtype!r}."
            )
        if not isinstance(self.scale_initial, bool):
            raise TypeError(
                f"LBFGS: scale_initial must be True or False, got {self.scale_initial!r}."
            )
        if self.curvature_eps is not None and not self.curvature_eps >= 0:
            raise ValueError(
                f"LBFGS: curvature_eps must be non-negative, got {self.curvature_eps}."
            )

    def _memory_dtype(self, dtype):
        return dtype if self.memory_dtype is None else widest_float(dtype, self.memory_dtype)

    def init(self, params, dtype) -> AbstractLBFGSState:
        """An empty memory for `params`, in the state of the form `form_in_use` picks."""
        check_fits("LBFGS", self.preconditioner, params)
        memory = empty_memory(params, self.memory_size, self._memory_dtype, dtype)
        size = sum(x.size for x in leaves(params))
        if self.form_in_use(size) == "compact":
            return compact_init(memory, params, dtype)
        return TwoLoopLBFGSState(**memory)

    def form_in_use(self, size: int) -> str:
        """ "two_loop" or "compact", the form `init` makes for params of `size` elements: `form`,
        where "auto" is compact unless the default backend is a CPU or a TPU and `size` <
        `COMPACT_FROM`, or a preconditioner is given."""
        if self.form != "auto":
            return self.form
        if self.preconditioner is not None:
            return "two_loop"
        small = jax.default_backend() in TWO_LOOP_WHEN_SMALL and size < COMPACT_FROM
        return "two_loop" if small else "compact"

    def compute(self, state: AbstractLBFGSState, info: DirectionInfo):
        if not self.scale_initial:  # H0 = I: every form reads gamma from the state
            state = eqx.tree_at(lambda st: st.gamma, state, jnp.ones_like(state.gamma))
        if info.box is not None:
            if self.preconditioner is not None:
                raise ValueError(
                    "LBFGS: a preconditioner is not supported with bounds (L-BFGS-B's Cauchy "
                    "point and subspace step use the identity as H0); run without bounds or "
                    "without the preconditioner."
                )
            d, scaled, limit = bounded_direction(state, info)
            return d, scaled, state, limit
        d, state = state.direction(info.grad, info.dtype, prepared(self.preconditioner))
        return d, state.count > 0, state, no_limit(info.dtype)

    def update(self, state: AbstractLBFGSState, s, y, dtype, accept=True) -> AbstractLBFGSState:
        precondition = prepared(self.preconditioner)
        return state.update(s, y, dtype, self.curvature_eps, accept, precondition)

    def reset(self, state: AbstractLBFGSState) -> AbstractLBFGSState:
        return state.reset()

    def gradient_replaced(self, state: AbstractLBFGSState) -> AbstractLBFGSState:
        """The compact form's products with the last gradient no longer give S'y for the
        next pair: its y will not start there."""
        return state.gradient_replaced()
