"""Every name jaxsearch takes from JAX's private modules, in one place.

JAX has no public way to ask what kind of trace a value belongs to (`jax.vmap`'s, `jax.jvp`'s,
or `jax.jit`'s own), whether a trace is under way, or to cast an array to a weak type. Each
name below is looked up when jaxsearch is imported: a JAX release that moves one makes
`import jaxsearch` fail here, naming it and what it is for, rather than make a run take a
wrong path later.
"""

import importlib

import jax


def _take(module: str, name: str, used_for: str):
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as error:
        raise ImportError(
            f"jaxsearch uses `{module}.{name}`, a private name of JAX, {used_for}; "
            f"jax {jax.__version__} does not have it. Install the JAX version that this "
            "jaxsearch release was tested with (its pyproject.toml gives the range), or "
            "report the JAX version at https://github.com/jaxsearch/jaxsearch/issues."
        ) from error


BatchTracer: type = _take(
    "jax._src.interpreters.batching",
    "BatchTracer",
    "to tell the values of an eager `jax.vmap` (one compile for the whole batch)",
)
JVPTracer: type = _take(
    "jax._src.interpreters.ad",
    "JVPTracer",
    "to tell a call differentiated in forward mode (its own program)",
)
LinearizeTracer: type = _take(
    "jax._src.interpreters.ad",
    "LinearizeTracer",
    "to tell a call differentiated in reverse mode (its own program)",
)
DynamicJaxprTracer: type = _take(
    "jax._src.interpreters.partial_eval",
    "DynamicJaxprTracer",
    "to tell a value traced by `jax.jit` from one of a transformation around it",
)
trace_state_clean = _take(
    "jax._src.core",
    "trace_state_clean",
    "to tell a call at the top level (where compile options are accepted) from a traced one",
)
_convert_element_type = _take(
    "jax._src.lax.lax",
    "_convert_element_type",
    "to give an array a weak type, as a Python number has (`lax.convert_element_type` cannot)",
)


def with_weak_type(x, dtype, weak: bool = True):
    """`x` as `dtype`, weakly typed where `weak`."""
    return _convert_element_type(x, dtype, weak_type=weak)
