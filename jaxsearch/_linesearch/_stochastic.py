"""The stochastic Armijo line search (SLS) of Vaswani et al. (2019) for mini-batch training."""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Scalar

from .._misc import Setting, as_int, check_count, check_setting
from ._backtracking import AbstractBacktracking
from ._decrease import accepts_max_steps


@accepts_max_steps
class StochasticArmijo(AbstractBacktracking):
    """Backtracking on the Armijo condition of the step's mini-batch, with the step size
    carried over from step to step: SGD with Armijo line-search (SLS) of Vaswani, Mishkin,
    Laradji, Schmidt, Gidel & Lacoste-Julien, "Painless Stochastic Gradient: Interpolation,
    Line-Search, and Convergence Rates", NeurIPS 2019 (algorithms 1 and 2).

    With f_k the objective on step k's batch (passed through `args`; call
    `solver.reevaluate(state)` before each `step`, so that f_k and its gradient at x_k are
    evaluated on that batch) and phi(t) = f_k(x_k + t d):

    - **Condition.** phi(t) <= phi(0) + c1 t phi'(0), that is
      f_k(x_k + t d) <= f_k(x_k) + c1 t <grad f_k(x_k), d> (the paper's c = `c1` = 0.1;
      for d = -grad f_k the paper's f_k(x) - c t |grad f_k(x)|^2; for a preconditioned
      d = -D^{-1} grad f_k it is the Armijo condition in the D^{-1}-norm of Vaswani et al.
      2020).
    - **Backtracking.** A rejected trial (also one where f or its slope is not finite) is
      multiplied by `shrink` (the paper's beta = 0.9). After `max_trials` trials without one
      that passes, or when the next would be below the line's resolution (no parameter would
      change), the step takes no step (`Status.LINESEARCH_FAILED`) and the step size is kept.
    - **Reset** (the paper's option 1). The first trial of step k is
      min(growth eta_{k-1}, `max_step_size`) with eta_{k-1} the last accepted step and
      growth = `gamma` ** (1 / `batches_per_epoch`) (the paper's gamma^(b/n), gamma = 2): the
      step may double over an epoch. Before any step is accepted it is `init_step` (1). The
      solver's own initial guess is not used.

    Defaults are the paper's constants (c = 0.1, beta = 0.9, gamma = 2) and those of the
    authors' implementation (initial step 1, cap eta_max = 10, 100 trials, 500 batches per
    epoch). Set `batches_per_epoch` to the number of steps in an epoch of your data.

    Where phi(t) - phi(0) and t phi'(0) are within `epsilon C_k` (rounding; see
    `Backtracking`), the test is on the slope instead, phi'(t) <= (2 c1 - 1) phi'(0);
    `epsilon = 0` gives the condition above alone. A dynamic cap `max_step` and settings
    given as arrays behave as in `Backtracking`.

    **Arguments:**

    - `c1`: the Armijo constant, in (0, 1).
    - `shrink`: the backtracking factor, in (0, 1).
    - `gamma`: the growth of the step over an epoch, >= 1 (1: the step never grows).
    - `batches_per_epoch`: steps per epoch (an int >= 1), the paper's n / b.
    - `init_step`: the first trial of the first search, > 0.
    - `max_step_size`: no trial exceeds it (the paper's eta_max), > 0.
    - `max_trials`: the trial budget of a search (an int >= 1): the evaluations of f it may
      use (`max_steps`, its old name, is deprecated).
    - `epsilon`: the rounding tolerance (None: as `Backtracking`'s, >= 0).
    """

    c1: Setting = 0.1
    shrink: Setting = 0.9
    gamma: Setting = 2.0
    batches_per_epoch: int = eqx.field(static=True, default=500, converter=as_int)
    init_step: Setting = 1.0
    max_step_size: Setting = 10.0
    max_trials: int = eqx.field(static=True, default=100, converter=as_int)
    epsilon: Setting | None = None

    def __check_init__(self):
        name = "StochasticArmijo"
        check_setting(name, "c1", self.c1, lambda v: 0 < v < 1, "lie in (0, 1)")
        check_setting(name, "shrink", self.shrink, lambda v: 0 < v < 1, "lie in (0, 1)")
        check_setting(name, "gamma", self.gamma, lambda v: 1 <= v < float("inf"), "be >= 1")
        check_count(name, "batches_per_epoch", self.batches_per_epoch)
        check_setting(
            name, "init_step", self.init_step, lambda v: 0 < v < float("inf"), "be positive"
        )

    @property
    def growth(self) -> Setting:
        """gamma ** (1 / batches_per_epoch): the factor between a step and the next one's
        first trial."""
        return self.gamma ** (1.0 / self.batches_per_epoch)

    def first_trial(self, prev_step: Scalar, guess: Scalar) -> Scalar:
        dtype = prev_step.dtype
        grown = (prev_step * self.growth).astype(dtype)
        return jnp.where(prev_step > 0, grown, jnp.asarray(self.init_step).astype(dtype))
