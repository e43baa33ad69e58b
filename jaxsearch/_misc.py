"""Small pytree and dtype helpers shared by directions, line searches and the solver.

All inner products and norms accumulate in at least float32, whatever the leaf dtypes,
and every helper casts explicitly, so the package runs under strict dtype promotion.
"""

import copy
import functools
import sys
import warnings
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec
from jaxtyping import Array, Bool, PyTree, Real, Scalar

from ._private_jax import with_weak_type

try:  # public in jax.experimental up to jax 0.10
    from jax.experimental.shard_alike import shard_alike
except ImportError:  # jax 0.11 has no shard_alike: zeros then take the partitioner's choice

    def shard_alike(x, y):  # type: ignore[misc]
        return x, y


def widest_float(*dtypes) -> np.dtype:
    """The narrowest floating dtype that holds every one of `dtypes` exactly.

    Unlike `jnp.promote_types` this never consults the promotion mode, so it works under
    `jax.numpy_dtype_promotion("strict")`. bfloat16 and float16 together give float32.
    """
    found = [np.dtype(d) for d in dtypes]
    best = found[0]
    for dtype in found[1:]:
        if dtype == best:
            continue
        bits, best_bits = jnp.finfo(dtype).bits, jnp.finfo(best).bits
        if bits > best_bits:
            best = dtype
        elif bits == best_bits:  # bfloat16 against float16
            best = np.dtype(jnp.float32)
    return best


def at_least_float32(dtype) -> np.dtype:
    """`dtype`, widened to float32 if it is narrower."""
    return widest_float(dtype, jnp.float32)


def leaves(tree: PyTree) -> list:
    return jtu.tree_leaves(tree)


def explicit_replicated_sharding(x):
    """For an array sharded along explicit mesh axes (sharding in types), the replicated
    sharding on its mesh, which a contraction over those axes must name for its result; else
    None."""
    sharding = jax.typeof(x).sharding
    if any(axes is not None for axes in sharding.spec):
        return NamedSharding(sharding.mesh, PartitionSpec())
    return None


def _vdot(x, y, acc) -> Scalar:
    """<x, y> over all axes, accumulated in `acc`, at full precision (a TPU's default for
    float32 products is one bfloat16 pass)."""
    out_sharding = explicit_replicated_sharding(x) or explicit_replicated_sharding(y)
    if out_sharding is None:
        return jnp.vdot(x, y, precision=lax.Precision.HIGHEST, preferred_element_type=acc)
    axes = tuple(range(x.ndim))  # no ravel: reshaping a sharded array would move it
    dims = ((axes, axes), ((), ()))
    return lax.dot_general(
        x,
        y,
        dims,
        precision=lax.Precision.HIGHEST,
        preferred_element_type=acc,
        out_sharding=out_sharding,
    )


def diagonal(matrix: Array) -> Array:
    """The diagonal of a square matrix, by a masked sum: `jnp.diagonal` traces to a
    `lax.cond`, which would be one more host round trip per call on a GPU."""
    return jnp.sum(jnp.where(jnp.eye(matrix.shape[0], dtype=bool), matrix, 0), axis=0)


def tree_dot(a: PyTree, b: PyTree, dtype) -> Scalar:
    """Sum over leaves of <a, b>, each leaf accumulated in at least float32, returned as `dtype`."""
    total = jnp.zeros((), dtype)
    for x, y in zip(leaves(a), leaves(b), strict=True):
        common = widest_float(x.dtype, y.dtype)
        acc = at_least_float32(common)
        part = _vdot(x.astype(common), y.astype(common), acc)
        total = total + part.astype(dtype)
    return total


def tree_norm(a: PyTree, dtype) -> Scalar:
    """Euclidean norm over all leaves, accumulated in at least float32 (no float16 overflow);
    its derivative at a = 0 is 0 (`safe_sqrt`)."""
    return safe_sqrt(tree_dot(a, a, dtype))


# Quotients and roots whose derivative is finite where they are not. Reverse-mode
# differentiation of `jnp.where(ok, a / b, other)` sends a zero cotangent to a / b where `ok`
# is False, and the derivative of the quotient turns it into 0 * inf = NaN where b = 0: the
# whole derivative is NaN, although that quotient was never used (likewise sqrt at 0). These
# compute their value as `/` and `jnp.sqrt` do (the same operation in the program, which XLA
# rewrites as it did, e.g. a / sqrt(b) as a * rsqrt(b)); only their derivative differs, and
# only where the value is not finite, or not differentiable (sqrt at 0). A value that is not
# finite and multiplies another differentiated value before a select drops the product still
# makes that value's derivative NaN: select it away first (`jnp.where(ok, divide(a, b), 0)`).


@jax.custom_jvp
def divide(num: Array, den: Array) -> Array:
    """`num / den` (floating arrays), with derivative 0 where the quotient is not finite."""
    return num / den


@divide.defjvp
def _divide_jvp(primals, tangents):
    (num, den), (num_dot, den_dot) = primals, tangents
    quotient = num / den
    ok = jnp.isfinite(quotient)
    safe_den, safe_quotient = jnp.where(ok, den, 1), jnp.where(ok, quotient, 0)
    return quotient, jnp.where(ok, (num_dot - safe_quotient * den_dot) / safe_den, 0)


@jax.custom_jvp
def safe_sqrt(x: Array) -> Array:
    """`jnp.sqrt(x)`, with derivative 0 where the root's is not finite (x = 0): for sums of
    squares and other arguments whose own derivative vanishes where they are 0."""
    return jnp.sqrt(x)


@safe_sqrt.defjvp
def _safe_sqrt_jvp(primals, tangents):
    (x,), (x_dot,) = primals, tangents
    root = jnp.sqrt(x)
    ok = root > 0
    return root, jnp.where(ok, x_dot * 0.5 / jnp.where(ok, root, 1), 0)


def tree_inf_norm(a: PyTree, dtype) -> Scalar:
    """Largest absolute entry over all leaves (0 for an empty tree), as `dtype`."""
    total = jnp.zeros((), dtype)
    for x in leaves(a):
        total = jnp.maximum(total, jnp.max(jnp.abs(x), initial=0).astype(dtype))
    return total


def spacing(x: Array) -> Array:
    """|jnp.spacing(x)| for normal x, as x's dtype: 2^floor(log2 |x|) eps, x's exponent bits
    under a zero mantissa, times eps (0 for 0 and subnormals, inf for inf and NaN). A mask and
    a product, where `jnp.spacing` compiles to nextafter's comparisons and selects."""
    info = jnp.finfo(x.dtype)
    uint = jnp.dtype(f"uint{info.bits}")
    exponent = np.array(((1 << info.nexp) - 1) << info.nmant, uint)
    power = lax.bitcast_convert_type(lax.bitcast_convert_type(x, uint) & exponent, x.dtype)
    return power * np.array(info.eps, x.dtype)


def tree_min_step(x: PyTree, d: PyTree, dtype) -> Scalar:
    """A step t below which x + t d rounds to x in every leaf: min_i spacing(x_i) / (4 |d_i|).

    The factor 4 covers rounding to nearest and the halved spacing below a power of two.
    Where x_i is 0 (or subnormal) any step moves it: t = 0.
    A resolution limit, not a function of x to differentiate: no derivative flows through it.
    """
    x, d = lax.stop_gradient((x, d))
    total = jnp.full((), jnp.inf, dtype)
    for xi, di in zip(leaves(x), leaves(d), strict=True):
        acc = at_least_float32(xi.dtype)
        # Where d_i = 0 the coordinate never moves (no 0/0).
        step = jnp.abs(di.astype(acc))
        ratio = jnp.where(step > 0, spacing(xi).astype(acc) / (4 * step), jnp.inf)
        total = jnp.minimum(total, jnp.min(ratio, initial=jnp.inf).astype(dtype))
    return total


def tree_all_finite(a: PyTree) -> Bool[Array, ""]:
    result = jnp.array(True)
    for x in leaves(a):
        result = result & jnp.all(jnp.isfinite(x))
    return result


def tree_equal(a: PyTree, b: PyTree) -> Bool[Array, ""]:
    result = jnp.array(True)
    for x, y in zip(leaves(a), leaves(b), strict=True):
        result = result & jnp.all(x == y)
    return result


def tree_add_scaled(x: PyTree, t: Scalar, d: PyTree) -> PyTree:
    """x + t * d, computed per leaf in at least float32 and rounded once to the leaf's dtype."""

    def add(xi, di):
        acc = widest_float(at_least_float32(xi.dtype), t.dtype)
        return (xi.astype(acc) + t.astype(acc) * di.astype(acc)).astype(xi.dtype)

    return jtu.tree_map(add, x, d)


def tree_sub(a: PyTree, b: PyTree) -> PyTree:
    """a - b per leaf, computed and returned in at least float32 (no rounding to a narrower
    leaf dtype: the consumer chooses its own)."""

    def sub(x, y):
        acc = at_least_float32(widest_float(x.dtype, y.dtype))
        return x.astype(acc) - y.astype(acc)

    return jtu.tree_map(sub, a, b)


def tree_scale(t: Scalar, a: PyTree) -> PyTree:
    """t * a per leaf, keeping each leaf's dtype."""
    return jtu.tree_map(lambda x: (t.astype(at_least_float32(x.dtype)) * x).astype(x.dtype), a)


def zeros_sharded_like(x: Array, dtype, lead: tuple[int, ...] = ()) -> Array:
    """Zeros of shape `lead + x.shape` in `dtype` (strongly typed), sharded like x on the
    trailing axes and replicated along `lead`, on any mesh: by type on an explicit mesh, by
    `shard_alike` where the partitioner chooses. Plain zeros would not depend on x: XLA would
    place them whole on every device, or jit on one. With one device there is nothing to
    share, and no `shard_alike`: each one's group takes a number from a count kept by the
    process, so that the same program lowered twice would differ (and miss JAX's persistent
    compilation cache)."""
    shape = (*lead, *x.shape)
    zeros = jnp.broadcast_to(jnp.zeros_like(x, dtype), shape)
    if jax.device_count() == 1:
        return zeros
    return shard_alike(zeros, jnp.broadcast_to(x, shape))[0]


def tree_zeros_like(a: PyTree) -> PyTree:
    """Zeros like each leaf: shape, dtype (strongly typed) and sharding."""
    return jtu.tree_map(lambda x: zeros_sharded_like(x, x.dtype), a)


def tree_cast_like(a: PyTree, like: PyTree) -> PyTree:
    """Cast every leaf of `a` to the dtype of the matching leaf of `like` (strong type)."""
    return jtu.tree_map(lambda x, y: jnp.asarray(x).astype(y.dtype), a, like)


def tree_cast_to_avals(a: PyTree, like: PyTree) -> PyTree:
    """Every leaf of `a` with the dtype *and weak type* of the matching leaf of `like`.

    What `step` and `run` return for params: a weakly typed leaf given (`jnp.full(n, 0.5)`,
    Python-scalar arithmetic) comes back weakly typed, so a jitted loop that feeds the result
    back does not retrace. JAX has no public cast that sets a weak type; this uses the one
    behind `lax.convert_element_type`."""

    def cast(x, y):
        weak = bool(getattr(jax.typeof(y), "weak_type", False))
        return with_weak_type(x, y.dtype, weak)

    return jtu.tree_map(cast, a, like)


def scalar(value, dtype) -> Array:
    """A strongly typed 0-d array."""
    return jnp.asarray(value).astype(dtype)


def select(pred, on_true: PyTree, on_false: PyTree) -> PyTree:
    """Leafwise `jnp.where(pred, on_true, on_false)` over two pytrees of equal structure; a
    leaf that is the same array on both sides is kept as it is (no select over, say, an
    unchanged memory buffer)."""
    return jtu.tree_map(lambda a, b: a if a is b else jnp.where(pred, a, b), on_true, on_false)


def dtype_eps(tree: PyTree) -> float:
    """Machine epsilon of the least precise leaf of `tree`."""
    return max(float(jnp.finfo(x.dtype).eps) for x in leaves(tree))


def with_fields(module: eqx.Module, **fields) -> eqx.Module:
    """A copy of the frozen `module` with `fields` set as given, bypassing `__init__`: for
    fields that no other field is derived from (a `Solver`'s `max_steps`, `throw`, ...)."""
    changed = copy.copy(module)
    for name, value in fields.items():
        if not hasattr(module, name):
            raise AttributeError(f"{type(module).__name__} has no field {name!r}.")
        object.__setattr__(changed, name, value)
    return changed


def as_int(value: Any) -> Any:
    """A NumPy integer as a Python int (a converter for integer settings; the owner's
    `__check_init__` then checks the value with `check_count`)."""
    return int(value) if isinstance(value, np.integer) else value


# A numeric setting: a Python number (static, hashed with the module) or a 0-d real array
# (a dynamic leaf: a new value reuses the compiled program).
Setting = float | Real[Array, ""]


def setting_value(owner: str, name: str, value) -> float | None:
    """The number a numeric setting holds, after checking that it is a real number or a 0-d
    real array; None for a traced one (a setting built inside `jax.jit`), which cannot be
    checked when it is built."""
    if isinstance(value, jax.core.Tracer):
        return None
    if isinstance(value, jax.Array | np.ndarray | np.generic):
        dtype = value.dtype
        real = jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.integer)
        if np.ndim(value) != 0 or not real:
            raise TypeError(
                f"{owner}: {name} must be a real number or a 0-d real array, got an array of "
                f"shape {np.shape(value)} and dtype {dtype}."
            )
        return float(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{owner}: {name} must be a real number, got {value!r}.")
    return float(value)


def check_setting(owner: str, name: str, value, valid: Callable[[float], bool], rule: str) -> None:
    """Raise a ValueError "owner: name must <rule>, got value" unless `valid(value)` (see
    `setting_value`; a traced setting is not checked)."""
    number = setting_value(owner, name, value)
    if number is not None and not valid(number):
        raise ValueError(f"{owner}: {name} must {rule}, got {value}.")


def weak_settings(module: PyTree) -> PyTree:
    """`module` with its array leaves (numeric settings given as arrays) weakly typed, so that
    they combine with scalars of any dtype as a Python number does, under strict promotion."""

    def weak(x):
        if not eqx.is_array(x):
            return x
        return with_weak_type(x, np.dtype(x.dtype))

    return jtu.tree_map(weak, module)


# The largest count a setting may hold: the loops' counters (steps, evaluations, trials) are
# int32, and a count is compared with them, or sets a loop bound or a shape.
MAX_COUNT = 2**31 - 1


def check_count(owner: str, name: str, value) -> None:
    """Raise unless `value` is an integer from 1 to `MAX_COUNT` (a bool is not one)."""
    if isinstance(value, jax.Array | np.ndarray):
        raise TypeError(
            f"{owner}: {name} must be a Python int, got an array: it sets a loop bound or a "
            "shape, which is fixed when the program is compiled."
        )
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{owner}: {name} must be an integer >= 1, got {value!r}.")
    if value > MAX_COUNT:
        raise ValueError(
            f"{owner}: {name} must be at most 2**31 - 1 = {MAX_COUNT}, got {value}: the "
            "solver counts steps, evaluations and trials in int32."
        )


def count_after(count, more: int):
    """count + more, kept within int32 (at most `MAX_COUNT`): the count at which a loop that
    is at `count` (an int32 array, or a Python int) and may go `more` further stops."""
    if isinstance(count, int):
        return count + min(MAX_COUNT - count, more)
    return count + jnp.minimum(MAX_COUNT - count, more)


_NOT_GIVEN = object()


def caller_stacklevel() -> int:
    """The `stacklevel` of `warnings.warn` (called by this function's caller) that points at
    the first frame outside jaxsearch and the libraries it is built with: the user's line."""
    frame, level = sys._getframe(1), 1
    library = ("jaxsearch", "equinox", "jaxtyping", "beartype", "typeguard")
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith(library):
        frame, level = frame.f_back, level + 1
    return level


def renamed_keyword(
    old: str,
    new: str,
    convert: Callable[[Any, Any], Any],
    note: Callable[[Any], str] = lambda cls: "",
):
    """A class decorator: `cls(old=v)` still works as `cls(new=convert(cls, v))`, with a
    `DeprecationWarning` that says what to write instead (and `note(cls)`); both at once
    raise a TypeError. `convert` sees the value as given (it checks it)."""

    def decorate(cls):
        init = cls.__init__

        @functools.wraps(init)
        def __init__(self, *args, **kwargs):
            value = kwargs.pop(old, _NOT_GIVEN)
            if value is not _NOT_GIVEN:
                if new in kwargs:
                    raise TypeError(f"{cls.__name__}: pass {new} only ({old} is its old name).")
                kwargs[new] = convert(cls, value)
                warnings.warn(
                    f"{cls.__name__}({old}={value!r}) is deprecated: write "
                    f"{cls.__name__}({new}={kwargs[new]!r}).{note(cls)}",
                    DeprecationWarning,
                    stacklevel=caller_stacklevel(),
                )
            init(self, *args, **kwargs)

        cls.__init__ = __init__
        return cls

    return decorate
