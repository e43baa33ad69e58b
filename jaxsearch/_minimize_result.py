"""`MinimizeResult`: what `js.minimize` returns, with the fields of scipy's `OptimizeResult`."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Int, PyTree

from ._result import Result, unreadable
from ._status import Status

# scipy's `status` codes, per method, for each of jaxsearch's statuses. L-BFGS-B: 0 converged,
# 1 out of iterations or evaluations, 2 anything else ("ABNORMAL"; scipy's L-BFGS-B reports a
# NaN so too). BFGS, CG and Newton-CG: 0 success, 1 out of iterations, 2 precision loss (the
# line search found no step), 3 a NaN.
_SCIPY_CODES = {
    "L-BFGS-B": {
        Status.CONVERGED_GTOL: 0,
        Status.CONVERGED_FTOL: 0,
        Status.CONVERGED_XTOL: 0,
        Status.MAX_STEPS: 1,
        Status.MAX_EVALS: 1,
    },
    "quasi-Newton": {
        Status.CONVERGED_GTOL: 0,
        Status.CONVERGED_FTOL: 0,
        Status.CONVERGED_XTOL: 0,
        Status.MAX_STEPS: 1,
        Status.MAX_EVALS: 1,
        Status.NONFINITE: 3,
    },
}
STOPPED_BY_CALLBACK = 99  # scipy's status where the callback raised StopIteration
_CALLBACK_MESSAGE = "`callback` raised `StopIteration`."
_KEYS = ("x", "fun", "jac", "nit", "nfev", "njev", "status", "success", "message")


def scipy_status(status, method: str):
    """scipy's status code for the jaxsearch `status` (an int32 array, traced or not) of a
    run of `method`; every status not listed is 2."""
    table = _SCIPY_CODES["L-BFGS-B" if method == "L-BFGS-B" else "quasi-Newton"]
    status = jnp.asarray(status)
    code = jnp.full(status.shape, 2, jnp.int32)
    for ours, theirs in table.items():
        code = jnp.where(status == ours, theirs, code)
    return code


class MinimizeResult(eqx.Module):
    """What `js.minimize` returns: the fields of scipy's `OptimizeResult`, as attributes and
    as items (`res.x`, `res["x"]`, `res.keys()`), in a pytree that `jax.jit` and `jax.vmap`
    return like any other.

    - `x`: the point returned (the lowest f seen, as `js.Solver.run` returns; an array like
      `x0`), `fun`: f there, `jac`: the gradient there (each from one evaluation of fun).
    - `nit`: iterations (steps); `nfev`: evaluations of fun (value and gradient together
      count as one, as scipy counts them with `jac=True`); `njev`: those that computed the
      gradient (all of them but a line search's trials on f alone).
    - `status`: scipy's code for the method. L-BFGS-B: 0 converged, 1 `maxiter` or `maxfun`
      reached, 2 any other end (the line search found no step, a non-finite value, no
      progress). BFGS, CG and Newton-CG: 0 converged, 1 `maxiter` reached, 2 precision loss
      (the line search found no step, no progress), 3 a non-finite value. 99 where
      `callback` raised `StopIteration`. An int32 array: under `jax.vmap`, one per problem.
    - `success`: `status == 0`, a boolean array (usable inside `jax.jit`).
    - `message`: why the run stopped, in jaxsearch's words (the underlying
      `js.Result.message`), read on the host from a concrete result: a string, a list of
      them for a batch from `jax.vmap`. Inside `jax.jit` there is no text (a TypeError):
      return the result and read it outside.
    - `allvecs`: the iterates, x0 first, with `options={"return_all": True}` (BFGS, CG,
      Newton-CG, as scipy), else None.
    - `result`: the underlying `js.Result` (its `status`, `history`, `state` to resume, ...).

    There is no `hess_inv`: jaxsearch's L-BFGS keeps its memory in its own form, and its
    BFGS starts from a scaled identity where scipy's starts from the identity, so neither
    would be scipy's matrix; `result.state` holds what the direction kept.
    """

    x: PyTree
    fun: Array
    jac: PyTree
    nit: Int[Array | np.ndarray, "*batch"]
    nfev: Int[Array | np.ndarray, "*batch"]
    njev: Int[Array | np.ndarray, "*batch"]
    status: Int[Array, "*batch"]
    result: Result
    allvecs: list | None = None
    note: str | None = eqx.field(static=True, default=None)  # the message, where set

    @staticmethod
    def of(result: Result, method: str, status=None, allvecs=None, note=None):
        """The scipy view of a `js.Result` of a run of `method`; `status`: scipy's code where
        it is not the one of `result.status` (99: the callback raised StopIteration)."""
        if status == STOPPED_BY_CALLBACK:
            note = _CALLBACK_MESSAGE
        code = scipy_status(result.status, method)
        if status is not None:
            code = jnp.full_like(code, status)
        return MinimizeResult(
            x=result.params,
            fun=result.value,
            jac=result.grad,
            nit=result.num_steps,
            nfev=result.num_fun_evals,
            njev=result.num_grad_evals,
            status=code,
            result=result,
            allvecs=allvecs,
            note=note,
        )

    @property
    def success(self):
        """Whether the run converged (`status == 0`), a boolean array."""
        return jnp.asarray(self.status) == 0

    @property
    def message(self) -> str | list:
        """Why the run stopped, in words, read on the host (see the class docstring)."""
        if unreadable(self.status):
            raise TypeError(
                "MinimizeResult.message is text, read on the host from a concrete result; "
                "inside jax.jit (or vmap) use res.status or res.success, and return the result "
                "to read `res.message` outside."
            )
        if self.note is not None:
            return self.note
        return self.result.message

    def keys(self) -> tuple[str, ...]:
        """The names of scipy's fields (and `allvecs` where kept), as `OptimizeResult.keys()`."""
        return _KEYS + (("allvecs",) if self.allvecs is not None else ())

    def __getitem__(self, key: str):
        if key not in self.keys():
            raise KeyError(key)
        return getattr(self, key)

    def __contains__(self, key) -> bool:
        return key in self.keys()

    def __repr__(self) -> str:
        """scipy's layout, a field a line; inside `jax.jit` or `vmap`, the dtypes and shapes."""
        names: tuple[str, ...] = ("message", "success", "status", "fun", "x", "nit", "jac")
        names = names[unreadable(self.status) :] + ("nfev", "njev")
        width = max(map(len, names))
        lines = []
        for name in names:
            value = getattr(self, name)
            if name != "message":
                value = jax.tree.map(_shown, value)
            lines.append(f"{name:>{width}}: {value}")
        return "\n".join(lines)


def _shown(x) -> str:
    if unreadable(x):
        return f"{x.dtype}{list(x.shape)}"
    return np.array2string(np.asarray(x), threshold=6, edgeitems=2)
