"""The first trial step of a search: a rule any line search takes, chosen on the `Solver`
(`Solver(initial_step=...)`), as LineSearches.jl's `alphaguess`."""

import abc
from typing import Any

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Bool, PyTree, Scalar

from .._contract import scalar_of
from .._misc import Setting, check_setting, tree_inf_norm


class InitialStepInfo(eqx.Module):
    """What the solver knows when a search along d starts from x (scalars in `dtype`): `scaled`, d
    carries curvature (quasi-Newton, Newton) so the unit step is natural; `slope`, phi'(0) =
    <grad f(x), d> < 0; `d_norm`, |d|_2; `value`, f(x); `prev_decrease`, the last step's decrease
    of f as recorded for N&W eq. 3.60 (`InitialQuadratic`), NaN before the first step;
    `prev_step`, the last accepted step size, 0 where it did not move; `x`, `d`, `grad`, the
    point, the direction and the gradient (pytrees); `prev_value`, f at the previous iterate (NaN
    before the first step), giving with `value` the unclipped decrease scipy's rule min(1, 1.01 *
    2 (f_{k-1} - f_k) / -phi'(0)) needs."""

    scaled: Bool[Array, ""]
    slope: Scalar
    d_norm: Scalar
    value: Scalar
    prev_decrease: Scalar
    prev_step: Scalar
    x: PyTree
    d: PyTree
    grad: PyTree
    prev_value: Scalar

    @property
    def dtype(self):
        return self.slope.dtype


class AbstractInitialStep(eqx.Module):
    """How the first trial step of each line search is chosen. A subclass implements `init`,
    `first_trial` and `update` (Equinox's abstract/final rule; numeric settings may be 0-d
    arrays); check it with `jaxsearch.testing.check_initial_step`. `first_trial` returns a 0-d
    array of `info.dtype` (or a weakly typed scalar), else tracing raises a TypeError naming the
    class; at run time a trial that is not finite and positive is replaced by 1, silently, then
    capped at `max_step_size` and by the search. The state keeps its structure, shapes and
    dtypes, with no weakly typed leaf."""

    @abc.abstractmethod
    def init(self, dtype) -> PyTree:
        """The rule's state before the first step (scalars of `dtype`; `()` for none)."""

    @abc.abstractmethod
    def first_trial(self, state: PyTree, info: InitialStepInfo) -> Scalar:
        """The first trial step along d."""

    @abc.abstractmethod
    def update(self, state: PyTree, step: Scalar, slope: Scalar, moved: Bool[Array, ""]) -> PyTree:
        """The state after a search with phi'(0) = `slope` ended, having accepted `step` where it
        `moved`."""


class _Stateless(AbstractInitialStep):
    """A rule that keeps nothing of its own between steps."""

    def init(self, dtype) -> PyTree:
        return ()

    def update(self, state, step, slope, moved) -> PyTree:
        return state


def _positive(owner: str, name: str, value: Any) -> None:
    check_setting(owner, name, value, lambda v: v > 0, "be positive")


class InitialQuadratic(_Stateless):
    """The default rule (Nocedal & Wright, 2nd ed., section 3.5): t = 1 for a well-scaled direction
    (`info.scaled`); otherwise, after a step, t = 2 (f_{k-1} - f_k) / -phi'(0) (N&W eq. 3.60)
    with the decrease recorded as min(f_{k-1} - f_k, -t_{k-1} phi_{k-1}'(0)), or half the latter
    where f did not decrease (rounding noise), which gives N&W eq. 3.59; otherwise (the first
    step, or an unusable decrease) t = 1 / |d|_2, a unit-length step, as L-BFGS-B."""

    def first_trial(self, state, info: InitialStepInfo) -> Scalar:
        dtype = info.dtype
        unit_length = 1 / info.d_norm
        from_decrease = 2 * info.prev_decrease / -info.slope
        usable = jnp.isfinite(from_decrease) & (from_decrease > 0)
        return jnp.where(
            info.scaled, jnp.ones((), dtype), jnp.where(usable, from_decrease, unit_length)
        )


class InitialStatic(_Stateless):
    """t = `alpha` at every search (LineSearches.jl's `InitialStatic`); with `scaled=True`, t =
    `alpha` / |d|_2."""

    alpha: Setting = 1.0
    scaled: bool = eqx.field(static=True, default=False)

    def __check_init__(self):
        _positive("InitialStatic", "alpha", self.alpha)

    def first_trial(self, state, info: InitialStepInfo) -> Scalar:
        alpha = jnp.asarray(self.alpha, info.dtype)
        return alpha / info.d_norm if self.scaled else alpha


class InitialPrevious(_Stateless):
    """t = the last step's accepted step size; `alpha` before the first step and after a step
    that did not move (LineSearches.jl's `InitialPrevious`)."""

    alpha: Setting = 1.0

    def __check_init__(self):
        _positive("InitialPrevious", "alpha", self.alpha)

    def first_trial(self, state, info: InitialStepInfo) -> Scalar:
        alpha = jnp.asarray(self.alpha, info.dtype)
        return jnp.where(info.prev_step > 0, info.prev_step, alpha)


class InitialConstantChange(AbstractInitialStep):
    """t = t_{k-1} phi_{k-1}'(0) / phi_k'(0): the first-order change of f along the new
    direction equals the last step's (Nocedal & Wright, 2nd ed., eq. 3.59; LineSearches.jl's
    `InitialConstantChange`); `alpha` before the first step and after a step that did not
    move. Its state is t_{k-1} phi_{k-1}'(0) (NaN where there is none)."""

    alpha: Setting = 1.0

    def __check_init__(self):
        _positive("InitialConstantChange", "alpha", self.alpha)

    def init(self, dtype) -> PyTree:
        return jnp.full((), jnp.nan, dtype)

    def first_trial(self, state, info: InitialStepInfo) -> Scalar:
        alpha = jnp.asarray(self.alpha, info.dtype)
        guess = state / info.slope
        return jnp.where(jnp.isfinite(guess) & (guess > 0), guess, alpha)

    def update(self, state, step, slope, moved) -> PyTree:
        return jnp.where(moved, step * slope, jnp.nan).astype(state.dtype)


class InitialHagerZhang(_Stateless):
    """Hager & Zhang's initial steps (CG_DESCENT, "Algorithm 851", ACM TOMS 32 (2006), section 4, I0
    and I2), for any d: before the first step and after one that did not move (I0), t = psi0
    |x|_inf / |d|_inf where x != 0, else psi0 |f| / -phi'(0) where f != 0, else 1 (for d = -g the
    paper's forms); otherwise (I2) t = psi2 t_{k-1}. I1 evaluates f before the search, which the
    solver does only at trials: the search's first trial at psi2 t_{k-1} takes its place.
    Defaults are the paper's, `psi0` = 0.01 and `psi2` = 2."""

    psi0: Setting = 0.01
    psi2: Setting = 2.0

    def __check_init__(self):
        _positive("InitialHagerZhang", "psi0", self.psi0)
        _positive("InitialHagerZhang", "psi2", self.psi2)

    def first_trial(self, state, info: InitialStepInfo) -> Scalar:
        dtype = info.dtype
        psi0, psi2 = jnp.asarray(self.psi0, dtype), jnp.asarray(self.psi2, dtype)
        x_norm, d_norm = tree_inf_norm(info.x, dtype), tree_inf_norm(info.d, dtype)
        f = jnp.abs(info.value)
        from_f = jnp.where(f != 0, psi0 * f / -info.slope, jnp.ones((), dtype))
        first = jnp.where(x_norm != 0, psi0 * x_norm / d_norm, from_f)
        return jnp.where(info.prev_step > 0, psi2 * info.prev_step, first)


class InitialDecaying(AbstractInitialStep):
    """A decaying gain for steps on mini-batches (Robbins & Monro 1951; the gain tau / (tau + k) of
    Schraudolph, Yu & Günter, AISTATS 2007): t = tau / (tau + k) for a well-scaled direction
    (`info.scaled`), else tau / (tau + k) / |d|_2, k counting the steps that moved (its state);
    `tau` (5) halves the gain. Pair it with `js.Backtracking()`: a Wolfe search lengthens a short
    trial, undoing the decay. With `Solver.reevaluate` each curvature pair comes from one batch,
    so a unit step goes near that batch's minimiser; the decay averages the batches
    (docs/training-loops.md, "L-BFGS on mini-batches")."""

    tau: Setting = 5.0

    def __check_init__(self):
        _positive("InitialDecaying", "tau", self.tau)

    def init(self, dtype) -> PyTree:
        return jnp.zeros((), dtype)

    def first_trial(self, state, info: InitialStepInfo) -> Scalar:
        tau = jnp.asarray(self.tau, info.dtype)
        gain = tau / (tau + state)
        return jnp.where(info.scaled, gain, gain / info.d_norm)

    def update(self, state, step, slope, moved) -> PyTree:
        return (state + moved.astype(state.dtype)).astype(state.dtype)


def initial_step(
    rule: AbstractInitialStep, state: PyTree, info: InitialStepInfo, max_step_size: Setting
) -> Scalar:
    """`rule`'s first trial step, 1 where it is not finite and positive, at most
    `max_step_size`."""
    dtype = info.dtype
    guess = rule.first_trial(state, info)
    scalar_of(rule, "first_trial", guess, dtype, "the first trial")
    guess = jnp.asarray(guess).astype(dtype)
    guess = jnp.where(jnp.isfinite(guess) & (guess > 0), guess, jnp.ones((), dtype))
    return jnp.minimum(guess, max_step_size).astype(dtype)
