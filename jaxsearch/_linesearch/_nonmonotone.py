"""The nonmonotone Armijo line search of Zhang & Hager (2004)."""

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Scalar

from .._misc import Setting, as_int, check_count, check_setting, scalar
from ._backtracking import AbstractBacktracking
from ._base import SearchState, capped_start, search_cap


class ReferenceValue(eqx.Module):
    """Zhang & Hager's C_k and Q_k: Q_0 = 1, C_0 = f(x_0) and, once x_{k+1} is taken,

        Q_{k+1} = eta Q_k + 1,    C_{k+1} = (eta Q_k C_k + f(x_{k+1})) / Q_{k+1}.

    Q = 0 until the first search (then C_0 is that search's phi(0))."""

    C: Scalar
    Q: Scalar


class _NonmonotoneSearch(SearchState):
    reference: ReferenceValue  # C_k, Q_k at this search's start point
    dphi0: Scalar
    taken: Scalar  # phi(step), for C_{k+1}


class NonmonotoneArmijo(AbstractBacktracking):
    """Backtracking on the nonmonotone Armijo condition of Zhang & Hager, "A nonmonotone line search
    technique and its application to unconstrained optimization", SIAM J. Optim. 14(4), 2004, pp.
    1043-1056 (algorithm NMLS, Armijo form), phi(t) <= C_k + c1 t phi'(0), C_k a weighted average
    of the iterates' values (`ReferenceValue`; `eta` = 0: Armijo against phi(0), 1: the mean of
    all). f may rise (not `monotone`), which lets Barzilai-Borwein steps through (Raydan 1997).
    The loop is `AbstractBacktracking`'s (a trial at a binding cap is judged as any other); on
    failure C_k, Q_k stay.

    **Arguments:** `c1` in (0, 1) (the paper's delta, 1e-4); `eta` in [0, 1] (0.85, the paper's
    experiments'); `shrink` in (0, 1) (0.5); `max_trials` (an int >= 1, 30); `max_step_size` > 0
    (+inf: no cap).
    """

    c1: Setting = 1e-4
    eta: Setting = 0.85
    shrink: Setting = 0.5
    max_trials: int = eqx.field(static=True, default=30, converter=as_int)
    max_step_size: Setting = float("inf")

    evaluates_each_step: ClassVar[bool] = False
    monotone: ClassVar[bool] = False  # f may rise up to C_k

    def __check_init__(self):
        name = "NonmonotoneArmijo"
        check_setting(name, "c1", self.c1, lambda v: 0 < v < 1, "lie in (0, 1)")
        check_setting(name, "eta", self.eta, lambda v: 0 <= v <= 1, "lie in [0, 1]")
        check_setting(name, "shrink", self.shrink, lambda v: 0 < v < 1, "lie in (0, 1)")
        check_setting(name, "max_step_size", self.max_step_size, lambda v: v > 0, "be positive")
        check_count(name, "max_trials", self.max_trials)

    def allowance(self, state) -> float:
        return 0.0  # a rise is not rounding: the solver keeps the best point apart

    def init(self, dtype) -> ReferenceValue:
        return ReferenceValue(C=scalar(0, dtype), Q=scalar(0, dtype))

    def start(
        self, state, phi0, dphi0, guess, min_step, scaled=None, max_step=None
    ) -> _NonmonotoneSearch:
        first = state.Q <= 0
        reference = ReferenceValue(
            C=jnp.where(first, phi0, state.C).astype(phi0.dtype),
            Q=jnp.where(first, 1, state.Q).astype(phi0.dtype),
        )
        cap = search_cap(self.max_step_size, max_step, phi0.dtype)
        fields = capped_start(guess, min_step, cap)
        return _NonmonotoneSearch(**fields, reference=reference, dphi0=dphi0, taken=phi0)

    def reference(self, search) -> Scalar:
        return search.reference.C

    def lost_in_rounding(self, search, t, phi, dphi):
        return jnp.array(False)  # values alone: a rise up to C_k is the method, not rounding

    def long_enough(self, search, t, phi, dphi, lost) -> None:
        return None  # Armijo's test alone

    def recorded(self, search, accept, phi) -> dict:
        return {"taken": jnp.where(accept, phi, search.taken).astype(phi.dtype)}

    def finish(self, state, search) -> ReferenceValue:
        ref = search.reference
        Q = (self.eta * ref.Q + 1).astype(ref.Q.dtype)
        C = ((self.eta * ref.Q * ref.C + search.taken) / Q).astype(ref.C.dtype)
        moved = search.step > 0
        return ReferenceValue(C=jnp.where(moved, C, ref.C), Q=jnp.where(moved, Q, ref.Q))
