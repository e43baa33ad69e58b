"""The memory every form of L-BFGS keeps: the last m pairs (s, y) in circular buffers, and
how a pair is offered to it (Nocedal & Wright, section 7.2)."""

import abc
from typing import TypeVar

import equinox as eqx
import jax.numpy as jnp
import jax.tree_util as jtu
from equinox import AbstractVar
from jaxtyping import Array, Bool, Int, PyTree, Scalar

from .._misc import dtype_eps, scalar, tree_dot, tree_norm, zeros_sharded_like
from ._preconditioner import Preconditioning
from ._slots import with_slot

_State = TypeVar("_State", bound="AbstractLBFGSState")


class AbstractLBFGSState(eqx.Module):
    """An L-BFGS state: `s`, `y`, circular buffers with a leading `(memory_size,)` axis per leaf;
    `rho` (m,) 1 / s'y in the scalar dtype (never float16: it would overflow); `gamma`, s'y / y'y
    of the newest pair; `count` valid pairs; `head`, the next pair's slot. Each form is a
    subclass, so a state is continued in the form it was made in."""

    s: AbstractVar[PyTree]
    y: AbstractVar[PyTree]
    rho: AbstractVar[Array]
    gamma: AbstractVar[Scalar]
    count: AbstractVar[Int[Array, ""]]
    head: AbstractVar[Int[Array, ""]]

    @abc.abstractmethod
    def direction(
        self, grad: PyTree, dtype, precondition: Preconditioning | None = None
    ) -> tuple[PyTree, "AbstractLBFGSState"]:
        """d = -H g for `grad`, with gamma I as the initial matrix (gamma P with
        `precondition`, v -> P v), and the state."""

    @abc.abstractmethod
    def update(
        self,
        s,
        y,
        dtype,
        curvature_eps: float | None,
        accept,
        precondition: Preconditioning | None = None,
    ) -> "AbstractLBFGSState":
        """The state once the pair (s, y) is offered (see `offered`)."""

    @abc.abstractmethod
    def reset(self) -> "AbstractLBFGSState":
        """The state with no pair (gamma kept)."""

    @abc.abstractmethod
    def gradient_replaced(self) -> "AbstractLBFGSState":
        """The state once the gradient at x was replaced (`AbstractDirection`)."""

    def offered(
        self,
        s,
        y,
        dtype,
        curvature_eps: float | None,
        accept,
        precondition: Preconditioning | None = None,
    ) -> tuple["AbstractLBFGSState", Bool[Array, ""], Scalar, Scalar]:
        """(state, keep, s'y, y'y): the pair written where `keep`: finite in the memory dtype,
        `accept`, and s'y > eps |s| |y| (`curvature_eps`, else the least precise memory dtype's
        eps), keeping H positive definite. gamma becomes s'y / y'y, with `precondition` (v -> P
        v) s'y / y'P y: N&W eq. 7.20 in z = P^(-1/2) x (section 5.1)."""
        s = jtu.tree_map(lambda si, b: si.astype(b.dtype), s, self.s)
        y = jtu.tree_map(lambda yi, b: yi.astype(b.dtype), y, self.y)
        sy = tree_dot(s, y, dtype)
        yy = tree_dot(y, y, dtype)
        eps = dtype_eps(self.s) if curvature_eps is None else curvature_eps
        guard = sy > eps * tree_norm(s, dtype) * jnp.sqrt(yy)
        y_h_y = yy if precondition is None else precondition.quadratic_form(y, dtype)
        keep = guard & jnp.isfinite(sy) & jnp.isfinite(yy) & (yy > 0) & accept
        if precondition is not None:
            keep = keep & jnp.isfinite(y_h_y) & (y_h_y > 0)

        # Divisors of 1 where the pair is not kept: the update also runs for pairs it does
        # not take (s = 0, say), and a derivative through the unused quotient would be NaN.
        sy_, yy_ = jnp.where(keep, sy, 1), jnp.where(keep, y_h_y, 1)
        m = self.rho.shape[0]

        def write(buffer, new):
            return with_slot(buffer, self.head, new, keep)

        memory = (
            jtu.tree_map(write, self.s, s),
            jtu.tree_map(write, self.y, y),
            write(self.rho, 1 / sy_),
            jnp.where(keep, sy_ / yy_, self.gamma).astype(dtype),
            jnp.where(keep, jnp.minimum(self.count + 1, m), self.count).astype(jnp.int32),
            jnp.where(keep, (self.head + 1) % m, self.head).astype(jnp.int32),
        )
        return eqx.tree_at(_memory_fields, self, memory), keep, sy, yy

    def emptied(self: _State) -> _State:
        """The memory with no pair: count and head 0."""
        return eqx.tree_at(lambda st: (st.count, st.head), self, (self.count * 0, self.head * 0))


def _memory_fields(state: AbstractLBFGSState) -> tuple:
    return state.s, state.y, state.rho, state.gamma, state.count, state.head


def empty_memory(params: PyTree, memory_size: int, memory_dtype, dtype) -> dict:
    """The fields of an empty memory for `params`: buffers sharded like each leaf and
    replicated along the memory axis, in `memory_dtype(leaf dtype)`; gamma 1."""
    m = memory_size

    def buffer(x):
        return zeros_sharded_like(x, memory_dtype(x.dtype), (m,))

    return dict(
        s=jtu.tree_map(buffer, params),
        y=jtu.tree_map(buffer, params),
        rho=jnp.zeros((m,), dtype),
        gamma=scalar(1, dtype),
        count=scalar(0, jnp.int32),
        head=scalar(0, jnp.int32),
    )
