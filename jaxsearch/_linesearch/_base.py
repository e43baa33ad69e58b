"""What a line search must provide to the solver."""

import abc

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Bool, Int, PyTree, Scalar


class Point(eqx.Module):
    """A trial of a search: step t, value phi(t) and slope phi'(t)."""

    t: Scalar
    phi: Scalar
    dphi: Scalar

    def triple(self):
        return self.t, self.phi, self.dphi


class AbstractSearch(eqx.Module):
    """The record a line search carries through one search.

    The solver evaluates phi(t) = f(x + t d) and phi'(t) = <grad f(x + t d), d> at `trial`
    and hands both back to `AbstractLineSearch.update` until `done`. When a search ends with
    `step > 0`, the last evaluated trial was at `step` (so the solver keeps that point's value
    and gradient); `step == 0` means no step is taken.

    `min_step` is the resolution of the line: below it no parameter changes (x + t d rounds to
    x), so a search never proposes a trial below it and gives up instead.
    """

    trial: Scalar  # next step size to evaluate
    done: Bool[Array, ""]
    step: Scalar  # accepted step size, 0 if none
    success: Bool[Array, ""]  # True when the search's own conditions hold at `step`
    num_trials: Int[Array, ""]
    min_step: Scalar


def fresh_search(trial: Scalar, min_step: Scalar) -> dict:
    """The `AbstractSearch` fields of a search that has evaluated nothing yet."""
    false = jnp.array(False)
    return dict(
        trial=trial.astype(min_step.dtype),
        done=false,
        step=jnp.zeros((), min_step.dtype),
        success=false,
        num_trials=jnp.zeros((), jnp.int32),
        min_step=min_step,
    )


class AbstractLineSearch(eqx.Module):
    """A line search over phi(t) = f(x + t d) that sees value *and* slope at every trial.

    Subclasses are immutable configuration: every field is static, so equal searches hash
    equal and share compiled programs. All scalars are in `dtype`, at least float32.
    """

    max_step_size: eqx.AbstractVar[float]  # no trial step exceeds this

    @abc.abstractmethod
    def init(self, dtype) -> PyTree:
        """State kept between searches (e.g. the previous step size)."""

    @abc.abstractmethod
    def start(
        self,
        state: PyTree,
        phi0: Scalar,
        dphi0: Scalar,
        guess: Scalar,
        min_step: Scalar,
        scaled: Bool[Array, ""] | None = None,
    ) -> AbstractSearch:
        """Begin a search from phi(0), phi'(0) < 0, the shared initial-step `guess` and the
        line's resolution `min_step` (0 when every step counts). `scaled` tells whether the
        direction carries curvature information (the unit step is natural); None: unknown."""

    @abc.abstractmethod
    def update(
        self, search: AbstractSearch, t: Scalar, phi: Scalar, dphi: Scalar
    ) -> AbstractSearch:
        """Take phi(t), phi'(t) at t = search.trial; non-finite values must never be accepted."""

    @abc.abstractmethod
    def finish(self, state: PyTree, search: AbstractSearch) -> PyTree:
        """State for the next search, once this one is done."""
