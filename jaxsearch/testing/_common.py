"""What the conformance kit's checks share: compile counting, scoped x64, abstract values, the
failure message and the params dtypes a check runs on."""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import PyTree

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


@contextlib.contextmanager
def counting_compiles():
    """A list that grows by one at each XLA backend compile inside the block."""
    seen: list[float] = []

    def listen(event: str, duration_secs: float, **kwargs: str | int) -> None:
        if event == COMPILE_EVENT:
            seen.append(duration_secs)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield seen
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)


def scoped_x64(dtype):
    """x64 on, scoped, for float64; nothing otherwise."""
    if np.dtype(dtype) == np.float64:
        return jax.enable_x64(True)
    return contextlib.nullcontext()


def abstract_value(x):
    if isinstance(x, jax.Array | np.ndarray | np.generic):
        return (x.shape, x.dtype, getattr(x, "weak_type", False))
    return (type(x).__name__,)  # a Python value: static under jit, its value in the compile key


def abstract_values(tree: PyTree):
    return jax.tree.structure(tree), [abstract_value(x) for x in jax.tree.leaves(tree)]


@contextlib.contextmanager
def contract(where: str, property: str = "state structure"):
    """The solver's own trace-time checks (`jaxsearch/_contract.py`) inside the block, their
    TypeError (which names the class, the member and the field) turned into the kit's
    AssertionError on the `property`; `where` says on what the check ran (e.g. "float32")."""
    try:
        yield
    except TypeError as error:
        raise AssertionError(f"{property} ({where}): {error}") from None


def require(ok, who: str, what: str, fix: str) -> None:
    if not ok:
        raise AssertionError(f"{who}: {what}. Fix: {fix}")


def param_cases():
    """(name, dtype to enable x64 for, params) for each params dtype a direction must take."""
    base = np.linspace(-1.0, 1.0, 6)
    return [
        ("float16", None, jnp.asarray(base, jnp.float16)),
        ("bfloat16", None, jnp.asarray(base, jnp.bfloat16)),
        ("float32", None, jnp.asarray(base, jnp.float32)),
        ("float64", np.float64, base),
        ("mixed", None, {"a": jnp.asarray(base[:2], jnp.bfloat16), "b": jnp.asarray(base[2:])}),
    ]
