"""Limited-memory BFGS (Nocedal, 1980; Liu & Nocedal, 1989): the settings, and which form
of the algorithm a state is made with. The forms live in `_lbfgs_two_loop.py`,
`_lbfgs_compact.py` and, with bounds, `_lbfgs_bounded.py`."""

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
# Where "auto" takes the compact form on a CPU or a TPU: from params of COMPACT_FROM
# elements on, the compact form's run is the faster (benchmarks/studies/lbfgs_forms.py --auto, its
# results in benchmarks/results/lbfgs_forms_auto_*.md). Below it the two-loop recursion
# compiles faster and runs as fast or faster. A GPU takes the compact form at every size.
COMPACT_FROM = 5000
# The backends whose loop trips run on the device without a round trip to the host.
TWO_LOOP_WHEN_SMALL = ("cpu", "tpu")


def _is_floating(dtype) -> bool:
    try:
        return bool(jnp.issubdtype(dtype, jnp.floating))
    except TypeError:  # not a dtype at all, e.g. "bogus"
        return False


class LBFGS(AbstractDirection):
    """L-BFGS direction (Nocedal & Wright, section 7.2).

    Keeps the last `memory_size` pairs (s, y) in buffers with a leading `(memory_size,)` axis
    per leaf. The initial matrix is gamma * I with gamma = s'y / y'y from the newest pair
    (N&W eq. 7.20; Shanno & Phua 1978), or with `scale_initial=False` the identity, H0 = I
    (jaxopt's `use_gamma=False`), in every form below and with bounds (L-BFGS-B's theta = 1).
    `form` picks how d = -H g is computed; both give the same matrix:

    - `"two_loop"`: the two-loop recursion (N&W algorithm 7.4), two `fori_loop`s over the m
      slots. Its state is a `TwoLoopLBFGSState`: the memory alone.
    - `"compact"`: the compact representation (Byrd, Nocedal & Schnabel, 1994, eq. 3.13;
      N&W eq. 7.24), with no loop. With the pairs in the order they were stored, R the upper
      triangle of S'Y and D its diagonal, H g = gamma g + S p - gamma Y R^-1 a, where
      p = R^-T ((D + gamma Y'Y) R^-1 a - gamma b), a = S'g and b = Y'g. It takes one pass
      over each buffer for a and b, two m x m triangular solves, and one pass back: 4m
      vectors read. S'Y and Y'Y are kept in its state, a `CompactLBFGSState`, and the newest
      pair's column is folded in: off a CPU, from the products of each buffer with the newest
      y, in the same pass as g; on a CPU, where each vector costs a pass of its own, from a
      and b less those of the previous `compute` (y = g - g_previous), except after
      `gradient_replaced` or for gradients of fewer than 32 bits (two passes more).
    - `"auto"` (the default): the compact form, which has no loop trips (each one on a GPU
      waits for its predicate on the host), except on a CPU or a TPU (jax's default
      backend) for params of fewer than `COMPACT_FROM` = 5000 elements in all, where the
      two-loop recursion compiles faster and runs as fast or faster
      (benchmarks/studies/lbfgs_forms.py --auto).

    The form is chosen once, by `init`, and the state's class records it: `compute`,
    `update` and `reset` continue a state in the form it was made with, and never look at
    the backend or the size again. A state saved where `"auto"` chose one form and resumed
    where it would choose the other (a state made on a GPU for small params, resumed on a
    CPU) does not fit the solver's `init` there: the solver refuses it with a TypeError that
    names the setting to pass, `js.LBFGS(form="compact")` (or `form="two_loop"`). To resume
    states across backends, pass `form` explicitly.

    A pair is stored only if it is finite after rounding to the memory dtype and satisfies the
    curvature guard s'y > eps |s| |y|, with eps the machine epsilon of the least precise
    memory dtype unless `curvature_eps` gives it; this keeps the implicit inverse Hessian
    positive definite.

    Memory leaves have the dtype of their param leaf, or at least `memory_dtype` when given
    (e.g. `memory_dtype=jnp.float32` for bfloat16 or float16 params). Inner products accumulate
    in at least float32 and are kept in the solver's scalar dtype, never float16.

    With bounds (`Solver.run(..., bounds=...)`) it is L-BFGS-B, from the memory of a state of
    either form: see `_lbfgs_bounded.bounded_direction`.

    **Preconditioning.** `preconditioner` P, an approximation of the inverse Hessian that is
    symmetric positive definite, replaces the identity in the initial matrix: H0 = gamma P
    with gamma = s'y / y'P y from the newest pair (1 before the first pair; 1 always with
    `scale_initial=False`, H0 = P). That is L-BFGS
    in the variables z = P^(-1/2) x, where N&W's gamma = s'y / y'y is s'y / y'P y (N&W
    eq. 7.20, with the change of variables of their section 5.1; Optim.jl's `P`, as an
    inverse). P is one of:

    - a callable v -> P v on pytrees like params (called with each leaf in its params leaf's
      dtype widened to at least float32, its result cast to those dtypes), hashed by identity
      (a module-level function, or an `eqx.Module` whose arrays are then dynamic);
    - a pytree like params of positive finite diagonal entries (P = diag): arrays, dynamic
      leaves, so another diagonal of the same shapes does not recompile;
    - a lineax linear operator that lineax knows is symmetric (lineax is not imported by
      jaxsearch; the operator's input dtypes are used for its product).

    P is fixed for a run: it does not depend on x (Optim.jl's `precondprep` has no
    counterpart; to change P, pass a new diagonal or operator to a new solver, which reuses
    the compiled program where only its arrays differ, and start from a fresh state: the
    memory's gamma was taken with the old P). Only the two-loop form takes a preconditioner:
    `form="compact"` with one is refused when the direction is built, and `"auto"` takes the
    two-loop form; with bounds (L-BFGS-B) a preconditioner is refused when the run is traced.
    With P the identity (a diagonal of ones) the iterates are those without, bit for bit.
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
        """ "two_loop" or "compact": the form `init` makes a state of for params of `size`
        elements in all: `form`, where "auto" is the compact form unless jax's default
        backend is the CPU or a TPU and `size` < `COMPACT_FROM`, or a preconditioner is
        given."""
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
