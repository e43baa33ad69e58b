"""What `Solver.run` returns."""

import equinox as eqx
from jaxtyping import Array, Int, PyTree, Scalar

from ._status import Status


class Result(eqx.Module):
    """Outcome of `Solver.run`.

    `params` is the last accepted point. Every accepted point has a finite value, no higher
    than the one before it except within the line searches' rounding allowance: where the
    change of f is below epsilon C_k (C_k a running average of |f|; Hager & Zhang 2005, section
    4) a search judges a step by its slope, and f may rise by at most that much. So `params`
    is the best point found up to that allowance, and finite whenever x0 was. `value`, `grad`
    and `aux` are evaluated there. `num_fun_evals` counts evaluations of fn (value and gradient
    together count as one). `history` is a `js.History` with `run(..., history=True)`, else
    None.
    """

    params: PyTree
    value: Scalar
    grad: PyTree
    aux: PyTree
    status: Int[Array, ""]
    num_steps: Int[Array, ""]
    num_fun_evals: Int[Array, ""]
    history: PyTree = None

    @property
    def message(self) -> str:
        return Status(int(self.status)).message

    @property
    def success(self) -> bool:
        return Status(int(self.status)).converged
