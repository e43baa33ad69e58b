"""The stochastic Armijo line search (SLS) of Vaswani et al. (2019) for mini-batch training."""

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Scalar

from .._misc import Setting, as_int, check_count, check_setting
from ._backtracking import AbstractDecreaseBacktracking
from ._decrease import accepts_max_steps


@accepts_max_steps
class StochasticArmijo(AbstractDecreaseBacktracking):
    """Backtracking on the Armijo condition of the step's mini-batch, the step size carried from
    step to step: SGD with Armijo line-search (SLS) of Vaswani, Mishkin, Laradji, Schmidt, Gidel
    & Lacoste-Julien, "Painless Stochastic Gradient: Interpolation, Line-Search, and Convergence
    Rates", NeurIPS 2019 (algorithms 1 and 2). With f_k the objective on step k's batch (in
    `args`), phi(t) = f_k(x_k + t d) and `Solver.step` evaluates f_k and its gradient at x_k
    first (`evaluates_each_step`; `run` does not). The condition is phi(t) <= phi(0) + c1 t
    phi'(0) (for a preconditioned d = -D^{-1} grad f_k, Armijo in the D^{-1}-norm of Vaswani et
    al. 2020). Where no trial passes within `max_trials` or above the line's resolution, no step
    is taken (`Status.LINESEARCH_FAILED`) and the last trial times `shrink` is carried forward as
    if accepted, as the authors' code does, so a step far too large is shrunk over a few steps
    (their code's untested 1e-6 grad f move after a failure is left out). The first search starts
    at `init_step`, the solver's guess unused. No cap by default, as the paper: a flat
    objective's step grows by `gamma` per epoch while Armijo holds. Rounding (`epsilon`), a
    dynamic cap and array settings: as `Backtracking`.

    **Arguments** (defaults: the paper's c = 0.1, beta = 0.9, gamma = 2; the authors' code's
    initial step 1, 100 trials, 500 batches per epoch):

    - `c1`: the Armijo constant, in (0, 1).
    - `shrink`: the backtracking factor (the paper's beta), in (0, 1).
    - `gamma`: the growth over an epoch with `reset="grow"`, >= 1.
    - `batches_per_epoch`: steps per epoch (an int >= 1), the paper's n / b: set it to yours.
    - `init_step`: the first trial of the first search (of every one with `reset="init"`; the
      paper's eta_max), > 0.
    - `reset` (algorithm 2, static): the first trial of step k > 1 from the carried eta_{k-1}:
      `"grow"` (option 1, the default) eta_{k-1} gamma ** (1 / batches_per_epoch), the paper's
      gamma^(b/n); `"keep"` (option 0) eta_{k-1}; `"init"` (option 2) `init_step`.
    - `max_step_size`: no trial exceeds it, > 0 (default +inf).
    - `max_trials`: the trial budget (an int >= 1; `max_steps`, its old name, is deprecated).
    - `epsilon`: the rounding tolerance (None: as `Backtracking`'s, >= 0).
    """

    c1: Setting = 0.1
    shrink: Setting = 0.9
    gamma: Setting = 2.0
    batches_per_epoch: int = eqx.field(static=True, default=500, converter=as_int)
    init_step: Setting = 1.0
    reset: str = eqx.field(static=True, default="grow")
    max_step_size: Setting = float("inf")
    max_trials: int = eqx.field(static=True, default=100, converter=as_int)
    epsilon: Setting | None = None

    evaluates_each_step: ClassVar[bool] = True

    def __check_init__(self):
        name = "StochasticArmijo"
        check_setting(name, "c1", self.c1, lambda v: 0 < v < 1, "lie in (0, 1)")
        check_setting(name, "shrink", self.shrink, lambda v: 0 < v < 1, "lie in (0, 1)")
        check_setting(name, "gamma", self.gamma, lambda v: 1 <= v < float("inf"), "be >= 1")
        check_count(name, "batches_per_epoch", self.batches_per_epoch)
        check_setting(
            name, "init_step", self.init_step, lambda v: 0 < v < float("inf"), "be positive"
        )
        if not (isinstance(self.reset, str) and self.reset in _RESETS):
            raise ValueError(
                f"{name}: reset must be one of {', '.join(map(repr, _RESETS))} (the paper's "
                f"options 1, 0 and 2), got {self.reset!r}."
            )

    @property
    def growth(self) -> Setting:
        """gamma ** (1 / batches_per_epoch), the growth per step with `reset="grow"`."""
        return self.gamma ** (1.0 / self.batches_per_epoch)

    def first_trial(self, prev_step: Scalar, guess: Scalar) -> Scalar:
        dtype = prev_step.dtype
        init = jnp.asarray(self.init_step).astype(dtype)
        if self.reset == "init":
            return init
        carried = prev_step if self.reset == "keep" else (prev_step * self.growth).astype(dtype)
        return jnp.where(prev_step > 0, carried, init)

    def long_enough(self, search, t, phi, dphi, lost) -> None:
        return None  # Armijo's test alone

    def carried_after_failure(self, prev_step: Scalar, search) -> Scalar:
        # The last trial shrunk once more (none at a cap below the resolution).
        shrunk = search.trial
        tried = (search.num_trials > 0) & jnp.isfinite(shrunk) & (shrunk > 0)
        return jnp.where(tried, shrunk, prev_step).astype(prev_step.dtype)


_RESETS = ("grow", "keep", "init")
