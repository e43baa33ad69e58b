"""What `Solver.run` returns."""

import equinox as eqx
from jaxtyping import Array, Int, PyTree, Scalar

from ._status import Status


class Result(eqx.Module):
    """Outcome of `Solver.run`.

    `params` is the last accepted point: every accepted point has a finite value that is no
    higher than the one before it, so this is also the best point found. `value`, `grad` and
    `aux` are evaluated there. `num_fun_evals` counts evaluations of fn (value and gradient
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
