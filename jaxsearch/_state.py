"""The solver's state: every leaf's dtype is fixed at `init`, so a jitted step never retraces."""

import equinox as eqx
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
from jax import lax
from jaxtyping import Array, Bool, Float, Int, PyTree, Scalar

from ._misc import widest_float


class BestPoint(eqx.Module):
    """The point with the lowest f accepted since fn was last evaluated at the start of a step
    (the first step, or the one after `reevaluate`), the newer of equal ones, with its
    gradient and aux; `start_value` is f at that start (f(x0) in a run). Kept for line
    searches that may accept a rise of f (`AbstractLineSearch.monotone` False), so that a run
    returns the best point it found. `params` holds the floating leaves only."""

    value: Scalar
    params: PyTree
    grad: PyTree
    aux: PyTree
    start_value: Scalar


class SolverState(eqx.Module):
    """State between steps. `value`, `grad` and `aux` are f, its gradient and fn's aux at the
    params that the last step returned (valid once `has_eval` is True). `value` has the value
    dtype; the other scalars have the scalar dtype, at least float32.

    `best` is the best point seen (`BestPoint`), or None where the line search never lets f
    rise (then the params `step` returned are the best point). `steps_since_best` counts the
    steps since the last progress: f below its best value, or the gradient's norm below its
    least (`lowest_grad_norm`); `Solver(stall_steps=...)` ends a run that makes no progress
    for that many steps as `STALLED`.

    `num_replaced` counts the steps whose direction (`AbstractDirection.compute`) was not a
    descent direction (phi'(0) not negative, or not finite), where the solver searched along
    steepest descent instead and reset the direction's memory; `search_end` says how the last
    step's search ended (`js.SearchEnd`).

    `fingerprint` identifies the params that the last step (or run) returned (`fingerprint`),
    so that a `step` given other params finds that the cached f and gradient are not theirs:
    it evaluates fn at its params first, as after `Solver.reevaluate`, and counts it in
    `num_foreign_params`."""

    value: Scalar
    grad: PyTree
    aux: PyTree
    has_eval: Bool[Array, ""]
    direction: PyTree
    linesearch: PyTree
    prev_decrease: Scalar  # f_{k-1} - f_k of the last step, for the next guess; NaN at first
    prev_value: Scalar  # f_{k-1}: f where the last step that moved started; NaN before one
    initial_step: PyTree  # the state of the solver's initial-step rule (`AbstractInitialStep`)
    step_size: (
        Scalar  # the last step's accepted step size along its direction; 0 if it did not move
    )
    num_steps: Int[Array, ""]
    num_fun_evals: Int[Array, ""]  # evaluations of fn: of f alone, or with its gradient
    num_grad_evals: Int[Array, ""]  # those of them that computed the gradient too
    num_replaced: Int[Array, ""]  # steps whose direction was not a descent direction
    search_end: Int[Array, ""]  # how the last step's search ended (a `SearchEnd` code)
    status: Int[Array, ""]  # a Status code describing the last step
    best: BestPoint | None
    steps_since_best: Int[Array, ""]  # steps since the last progress (see `Solver`)
    lowest_grad_norm: Scalar  # the least gradient norm accepted since fn was last evaluated
    fingerprint: Float[Array, "2"]  # `fingerprint` of the params the state belongs to
    num_foreign_params: Int[Array, ""]  # steps given params other than those (see above)

    @property
    def scalar_dtype(self):
        """The dtype of the line search's scalars (step sizes, slopes, norms): the value
        dtype widened to at least float32."""
        return self.prev_decrease.dtype


# The tolerance of a fingerprint's sum (`fingerprint`), in units of what can move it where
# the params are the same: the rounding of the sum, whose order is XLA's (any fusion, any
# program), at most about one eps of the accumulator per term; and params rounded anew, e.g.
# optax's `apply_updates(params, new - params)`, which gives `new` give or take an ulp of each
# element, with signs that the weights make random.
_SUM_ROUNDING = 16
_PARAMS_ROUNDING = 8

# MurmurHash3's 32-bit finaliser (Appleby, `fmix32`): a bijection of uint32 after which
# consecutive inputs give unrelated outputs.
_MIX = ((16, 0x85EBCA6B), (13, 0xC2B2AE35), (16, None))


def _mix(v):
    for shift, factor in _MIX:
        v = v ^ (v >> np.uint32(shift))
        if factor is not None:
            v = v * np.uint32(factor)
    return v


def _weights(shape, offset: int, dtype) -> Array:
    """A weight in +-[1, 2) for each element of a leaf of `shape`, drawn from its index in
    the flattened params (the leaf's elements start at `offset`): a float32 made of the
    hashed index's sign bit and 23 low bits under the exponent of 1. From `iota`: no copy,
    no reshape of a sharded leaf."""
    index = jnp.full(shape, offset % 2**32, jnp.uint32)
    stride = 1
    for axis in reversed(range(len(shape))):
        index = index + lax.broadcasted_iota(jnp.uint32, shape, axis) * np.uint32(stride % 2**32)
        stride *= shape[axis]
    bits = _mix(index) & np.uint32(0x807FFFFF) | np.uint32(0x3F800000)
    return lax.bitcast_convert_type(bits, jnp.float32).astype(dtype)


def fingerprint_dtype(params: PyTree):
    """The dtype of params' fingerprint: the widest of their dtypes, at least float32."""
    return widest_float(jnp.float32, *(x.dtype for x in jtu.tree_leaves(params)))


def fingerprint(params: PyTree) -> Float[Array, "2"]:
    """[S, T] for a pytree of floating arrays (params' floating leaves, as the state holds
    them): S = sum_i w_i x_i over all their elements, with weights w_i in +-[1, 2) drawn
    from each element's place, so that other values, or the same ones in other places,
    give another S; and T, the tolerance within which params give the same S:
    16 eps A + 8 sqrt(Q), where A = sum_i |x_i|, Q = sum_i (eps_i x_i)^2, eps is the
    machine epsilon of the sums' dtype (the widest of params' dtypes, at least float32) and
    eps_i that of x_i's leaf. One pass over params (one reduction of three sums)."""
    dtype = fingerprint_dtype(params)
    total = (jnp.zeros((), dtype),) * 3
    offset = 0
    for leaf in jtu.tree_leaves(params):
        x = leaf.astype(dtype)
        terms = (
            _weights(leaf.shape, offset, dtype) * x,
            jnp.abs(x),
            jnp.square(float(jnp.finfo(leaf.dtype).eps) * x),
        )
        axes = tuple(range(leaf.ndim))
        sums = lax.reduce(terms, (jnp.zeros((), dtype),) * 3, _add3, axes)
        total = tuple(a + b for a, b in zip(total, sums, strict=True))
        offset += leaf.size
    weighted, absolute, rounding = total
    eps = float(jnp.finfo(dtype).eps)
    tolerance = _SUM_ROUNDING * eps * absolute + _PARAMS_ROUNDING * jnp.sqrt(rounding)
    return jnp.stack([weighted, tolerance])


def _add3(a, b):
    return tuple(x + y for x, y in zip(a, b, strict=True))


def same_point(given: Float[Array, "2"], held: Float[Array, "2"]) -> Bool[Array, ""]:
    """Whether params of fingerprint `given` are the point of fingerprint `held` (a state's):
    their sums agree within the held tolerance, or neither is finite."""
    within = jnp.abs(given[0] - held[0]) <= held[1]
    return within | (~jnp.isfinite(given[0]) & ~jnp.isfinite(held[0]))


# -------------------------------------------------------------- the state's lifecycle
# A state fresh (`initial_state`, and `fresh_state`, the program a fresh run starts from),
# resumed (`resumed_state`) or checked against the solver and params (`check_state`). Their
# imports are here, below `SolverState`, and `_inputs` is read as a module: it imports
# `SolverState` itself (the objective, which imports it in turn, is imported where used).

import jax  # noqa: E402

from . import _evaluate, _inputs  # noqa: E402
from ._misc import at_least_float32, leaves, scalar, tree_zeros_like  # noqa: E402
from ._status import SearchEnd, Status  # noqa: E402


def initial_state(solver, search, params, diff, value_dtype, objective, args: tuple):
    """The state `init` gives for params (with floating leaves `diff`) and `search`, its
    value dtype as `Solver.init` says; the `Objective`, when given (None: no fn), is traced
    for its value and aux."""
    out = None
    if objective is not None:
        out = eqx.filter_eval_shape(lambda p: objective.value_and_aux(p, args), params)
    elif solver.has_aux:
        raise TypeError("Solver(has_aux=True).init needs `fn=` to learn the structure of aux.")
    if value_dtype is None:
        if out is not None:
            value_dtype = out[0].dtype
        else:
            value_dtype = widest_float(*(x.dtype for x in leaves(diff)), jnp.float32)
    value_dtype = jnp.dtype(_inputs.floating_dtype(value_dtype, "value_dtype"))
    aux_shapes = None
    if solver.has_aux:
        assert out is not None  # has_aux without fn raised above
        # Aux leaves become arrays (a Python number too), zero until fn is evaluated.
        aux_shapes = jtu.tree_map(
            lambda a: jax.ShapeDtypeStruct(
                jnp.shape(a), jax.dtypes.canonicalize_dtype(jnp.result_type(a))
            ),
            out[1],
        )
    return build_state(solver, search, diff, value_dtype, aux_shapes)


@eqx.filter_jit
def build_state(solver, search, diff, value_dtype, aux_shapes) -> SolverState:
    """Every leaf of a fresh state. One compiled program builds them all: built eagerly, each
    new shape of a leaf would compile a program of its own, about ten for a first `init`."""
    dtype = at_least_float32(value_dtype)
    aux = None
    if aux_shapes is not None:
        aux = jtu.tree_map(lambda a: jnp.zeros(a.shape, a.dtype), aux_shapes)
    best = None
    if solver.return_best and not search.monotone:
        best = BestPoint(
            value=scalar(jnp.inf, value_dtype),
            params=tree_zeros_like(diff),
            grad=tree_zeros_like(diff),
            aux=jtu.tree_map(jnp.zeros_like, aux),
            start_value=scalar(jnp.inf, value_dtype),
        )
    return SolverState(
        value=scalar(jnp.inf, value_dtype),
        grad=tree_zeros_like(diff),
        aux=aux,
        has_eval=jnp.array(False),
        direction=solver.direction.init(diff, dtype),
        linesearch=search.init(dtype),
        prev_decrease=scalar(jnp.nan, dtype),
        prev_value=scalar(jnp.nan, dtype),
        initial_step=solver.initial_step.init(dtype),
        step_size=scalar(0, dtype),
        num_steps=scalar(0, jnp.int32),
        num_fun_evals=scalar(0, jnp.int32),
        num_grad_evals=scalar(0, jnp.int32),
        num_replaced=scalar(0, jnp.int32),
        search_end=scalar(SearchEnd.NOT_SEARCHED, jnp.int32),
        status=scalar(Status.RUNNING, jnp.int32),
        best=best,
        steps_since_best=scalar(0, jnp.int32),
        lowest_grad_norm=scalar(jnp.inf, dtype),
        fingerprint=jnp.zeros(2, fingerprint_dtype(diff)),
        num_foreign_params=scalar(0, jnp.int32),
    )


def check_state(
    solver, search, state, params, diff, objective, args: tuple, *, bounded: bool
) -> None:
    """Raise unless `state` is a `SolverState` with the structure, shapes and dtypes of the
    state `init` gives for params, fn, args and `search` with the state's own value dtype (so
    a value dtype other than params' fits): a TypeError that names the first leaf or node
    that differs, what it is and what the solver and params give; a state made with bounds
    for a call without them (`bounded` False), or the reverse, is said so. `run`, `step` and
    the optax update call it while they are traced: it costs nothing per call."""
    _inputs.check_is_state(state)
    value_dtype = jnp.result_type(state.value)
    expected = jax.eval_shape(
        lambda: initial_state(solver, search, params, diff, value_dtype, objective, args)
    )
    if solver.linesearch is not solver.bounded_linesearch:
        other = solver.linesearch if bounded else solver.bounded_linesearch
        made_for_other = jax.eval_shape(lambda: other.init(at_least_float32(value_dtype)))
        if (
            _inputs.misfit(state.linesearch, expected.linesearch, "") is not None
            and _inputs.misfit(state.linesearch, made_for_other, "") is None
        ):
            given, made = ("with", "without") if bounded else ("without", "with")
            raise TypeError(
                f"step was called {given} bounds on a state that init made {made} them; "
                "with bounds the default line search is another one (L-BFGS-B's): pass "
                "the same bounds to init and step."
            )
    _inputs.check_fits(state, expected, "state")


def resumed_state(state, value_dtype) -> SolverState:
    """`state`, checked to be a `SolverState` of the value dtype asked for, with its leaves
    as arrays (NumPy leaves, of a checkpoint say, become new device buffers)."""
    _inputs.check_is_state(state)
    if value_dtype is not None and jnp.dtype(value_dtype) != state.value.dtype:
        raise TypeError(
            f"value_dtype {jnp.dtype(value_dtype)} differs from the state's value dtype "
            f"{state.value.dtype}: a resumed run keeps the state's."
        )
    if all(isinstance(leaf, jax.Array) for leaf in leaves(state)):
        return state
    return jax.tree.map(jnp.asarray, state)


def fresh_state(solver, search, fn, x0, args, value_dtype) -> SolverState:
    """The compiled program of a fresh run's state."""
    from ._objective import Objective

    objective = Objective.of(solver, _evaluate.TracedOnce(fn, x0, *args))  # the run's trace
    return initial_state(solver, search, x0, _inputs.partition(x0)[0], value_dtype, objective, args)
