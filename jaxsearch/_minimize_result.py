"""`MinimizeResult`: what `js.minimize` returns, with the fields of scipy's `OptimizeResult`."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Int, PyTree

from ._result import Result, unreadable
from ._status import Status

# scipy's `status` codes per method (as `MinimizeResult` lists them).
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
    """What `js.minimize` returns: scipy's `OptimizeResult` fields as attributes and items (`res.x`,
    `res["x"]`, `res.keys()`), in a pytree `jax.jit` and `jax.vmap` return:

    - `x`: the point returned (the lowest f seen, as `js.Solver.run`; like `x0`); `fun`, `jac`: f
      and its gradient there;
    - `nit`: iterations; `nfev`: evaluations of fun (value and gradient as one, as scipy with
      `jac=True`); `njev`: those with the gradient;
    - `status`: scipy's code, an int32 array (one per problem under `jax.vmap`). L-BFGS-B: 0
      converged, 1 `maxiter` or `maxfun` reached, 2 any other end. BFGS, CG, Newton-CG: 0
      converged, 1 `maxiter`, 2 precision loss (no step found, no progress), 3 a non-finite
      value. 99 where `callback` raised `StopIteration`;
    - `success`: `status == 0`, a boolean array;
    - `message`: why the run stopped (`js.Result.message`), read on the host: a string, a list
      for a batch; inside `jax.jit`, a TypeError;
    - `allvecs`: the iterates, x0 first, with `options={"return_all": True}` (BFGS, CG,
      Newton-CG), else None;
    - `result`: the underlying `js.Result`, whose `state` holds what the direction kept (no
      `hess_inv`: neither L-BFGS's memory nor BFGS's scaled start would give scipy's matrix).
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
        """The scipy view of a `js.Result` of `method`; `status`: scipy's code where not
        `result.status`'s (99: StopIteration)."""
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
