"""The single place where the user's objective is evaluated."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import PyTree

from ._misc import tree_cast_like


def split_output(out, has_aux: bool):
    """(value, aux) from fn's output, with a clear error when has_aux does not match it."""
    if has_aux:
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError(
                "fn must return a pair (value, aux) when has_aux=True; got "
                f"{type(out).__name__}. Pass has_aux=False if fn returns only the value."
            )
        return out
    if isinstance(out, tuple | list):
        raise TypeError(
            f"fn returned a {type(out).__name__} but has_aux=False: fn must return a scalar. "
            "If fn returns (value, aux), build the solver with has_aux=True."
        )
    return out, None


def check_value(value) -> None:
    """Raise unless `value` is a real floating scalar (array or abstract value)."""
    shape, dtype = jnp.shape(value), jnp.result_type(value)
    if shape != ():
        raise TypeError(f"fn must return a scalar, got an array of shape {shape}.")
    if not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(
            f"fn must return a real floating scalar, got dtype {dtype}. "
            "Cast the result, e.g. `return loss.astype(jnp.float32)`."
        )


def value_and_grad(fn, has_aux: bool, value_dtype, aux_like, diff: PyTree, static: PyTree, args):
    """f, grad f and aux at `combine(diff, static)`: value cast to `value_dtype`, gradient
    leaves cast to the dtypes of `diff`, aux leaves to those of `aux_like` (all strongly typed)."""

    def objective(d):
        value, aux = split_output(fn(eqx.combine(d, static), *args), has_aux)
        check_value(value)
        return value, aux

    (value, aux), grad = jax.value_and_grad(objective, has_aux=True)(diff)
    grad = tree_cast_like(grad, diff)
    aux = tree_cast_like(aux, aux_like) if has_aux else None
    return jnp.asarray(value).astype(value_dtype), grad, aux
