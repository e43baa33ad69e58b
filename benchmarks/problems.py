"""Benchmark problems: sif2jax's CUTEst unconstrained set, large synthetic ones, and counting.

A `Problem` holds an objective `fn(x, args)`, a start `x0` and `args`. `counted(problem)` wraps
the objective so that every evaluation is counted from inside the compiled program with
`jax.debug.callback`: one count per evaluation (value-only or value and gradient), and a second
count, from a `custom_jvp` identity, per evaluation that is differentiated.
"""

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.flatten_util as jfu
import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True)
class Problem:
    """One minimisation problem: `fn(x, args)` from `x0`; `n` variables."""

    name: str
    fn: Callable
    x0: Any
    args: Any
    n: int
    source: str


class Counter:
    """Host-side tallies of evaluations, incremented from compiled code."""

    def __init__(self):
        self.values = 0
        self.grads = 0

    def reset(self):
        jax.effects_barrier()
        self.values = 0
        self.grads = 0

    def read(self) -> tuple[int, int]:
        """(evaluations, differentiated evaluations) since the last reset."""
        jax.effects_barrier()
        return self.values, self.grads

    def _value(self):
        self.values += 1

    def _grad(self):
        self.grads += 1


def counted(fn: Callable, counter: Counter) -> Callable:
    """`fn(x, args)` with each evaluation counted in `counter` (see the module docstring)."""

    @jax.custom_jvp
    def tag(x):
        return x

    @tag.defjvp
    def tag_jvp(primals, tangents):
        jax.debug.callback(counter._grad)
        return primals[0], tangents[0]

    def wrapped(x, args):
        jax.debug.callback(counter._value)
        return fn(tag(x), args)

    return wrapped


def cast(tree, dtype):
    """Floating leaves of `tree` cast to `dtype`; other leaves unchanged."""

    def one(leaf):
        if isinstance(leaf, jax.Array | np.ndarray) and jnp.issubdtype(leaf.dtype, jnp.floating):
            return jnp.asarray(leaf, dtype)
        return leaf

    return jax.tree_util.tree_map(one, tree)


def _finite_at_x0(fn, x0, args) -> str | None:
    """None if f and its gradient are finite at x0 (float64), else why not."""
    try:
        value, grad = jax.jit(jax.value_and_grad(fn))(x0, args)
    except Exception as e:  # noqa: BLE001 - any failure excludes the problem
        return f"error at x0: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
    if not np.isfinite(float(value)):
        return f"non-finite value at x0: {float(value)}"
    if not np.all(np.isfinite(np.asarray(grad))):
        return "non-finite gradient at x0"
    return None


def cutest(
    max_n: int, name_filter: str | None = None, only: tuple[str, ...] | None = None
) -> tuple[list[Problem], dict[str, str]]:
    """sif2jax's unconstrained problems with n <= max_n that evaluate cleanly at x0.

    Returns the problems and a dict name -> reason for every problem left out. Uses
    `sif2jax.unconstrained_minimisation_problems` (instances at the SIF default sizes), their
    `objective(y, args)`, `y0` and `args`. Needs float64 enabled.
    """
    import sif2jax

    problems, skipped = [], {}
    for p in sif2jax.unconstrained_minimisation_problems:
        name = p.name
        if name_filter and not _matches(name, name_filter):
            continue
        if only is not None and name not in only:
            continue
        n = int(p.num_variables())
        if n > max_n:
            skipped[name] = f"n = {n} > max-n {max_n}"
            continue
        x0 = cast(p.y0, jnp.float64)
        why = _finite_at_x0(p.objective, x0, p.args)
        if why is not None:
            skipped[name] = why
            continue
        problems.append(Problem(name, p.objective, x0, p.args, n, "sif2jax"))
    return problems, skipped


def _matches(name: str, name_filter: str) -> bool:
    return any(part.strip().lower() in name.lower() for part in name_filter.split(","))


QUICK = ("ROSENBR", "BEALE", "HELIX", "BIGGS6", "OSBORNEB", "CHNROSNB", "GENROSE", "EDENSCH")


# ------------------------------------------------------------------------------ large problems


def _ext_rosenbrock(x, args):
    del args
    odd, even = x[0::2], x[1::2]
    return jnp.sum(100.0 * (even - odd**2) ** 2 + (1.0 - odd) ** 2)


def _logistic(w, args):
    a, y, lam = args
    z = a @ w
    return jnp.mean(jnp.logaddexp(0.0, z) - y * z) + 0.5 * lam * jnp.sum(w**2)


def _mlp_unravel(sizes):
    shapes = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
        shapes.append(((fan_in, fan_out), (fan_out,)))
    return shapes


def _mlp_loss(flat, args):
    x, y, sizes = args
    h, start = x, 0
    layers = _mlp_unravel(sizes)
    for i, ((fan_in, fan_out), _) in enumerate(layers):
        w = flat[start : start + fan_in * fan_out].reshape(fan_in, fan_out)
        start += fan_in * fan_out
        b = flat[start : start + fan_out]
        start += fan_out
        h = h @ w + b
        if i < len(layers) - 1:
            h = jnp.tanh(h)
    return jnp.mean((h[:, 0] - y) ** 2)


def large(name_filter: str | None = None) -> list[Problem]:
    """Extended Rosenbrock n=1e5, L2-logistic regression with 1e5 features, a small MLP."""
    rng = np.random.default_rng(0)
    out = []
    n = 100_000
    x0 = jnp.asarray(np.tile([-1.2, 1.0], n // 2), jnp.float64)
    out.append(Problem("EXTROSEN-1e5", _ext_rosenbrock, x0, None, n, "large"))

    samples, features = 400, 100_000
    a = rng.standard_normal((samples, features))
    w_true = rng.standard_normal(features) / math.sqrt(features)
    y = (a @ w_true + 0.5 * rng.standard_normal(samples) > 0).astype(np.float64)
    args = (jnp.asarray(a), jnp.asarray(y), jnp.asarray(1e-3))
    out.append(Problem("LOGREG-1e5", _logistic, jnp.zeros(features), args, features, "large"))

    sizes = (8, 32, 32, 1)
    x = rng.standard_normal((512, sizes[0]))
    target = np.sin(x[:, 0]) + 0.5 * x[:, 1] * x[:, 2]
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
        params.append(rng.standard_normal(fan_in * fan_out) / math.sqrt(fan_in))
        params.append(np.zeros(fan_out))
    flat = jnp.asarray(np.concatenate(params))
    fn = _make_mlp(sizes)
    out.append(
        Problem(
            "MLP-8-32-32-1",
            fn,
            flat,
            (jnp.asarray(x), jnp.asarray(target)),
            int(flat.size),
            "large",
        )
    )
    if name_filter:
        out = [p for p in out if _matches(p.name, name_filter)]
    return out


def _make_mlp(sizes):
    def mlp(flat, args):
        x, y = args
        return _mlp_loss(flat, (x, y, sizes))

    return mlp


def ravel(x):
    """Flat float vector of a pytree and the function that undoes it."""
    return jfu.ravel_pytree(x)
