"""What XLA's lean compile options (`jaxsearch._programs.LEAN_OPTIONS`) may add to the run time
of one evaluation of fn, estimated from fn's jaxpr without compiling it.

On a CPU the lean options compile fused elementwise code through XLA's older elemental
emitter and LLVM at -O1. The solver's scalar logic and small vectors run no slower so
(benchmarks/HISTORY.md); an objective's elementwise work can run slower, most of all
transcendental functions (tanh, exp, sin, ...) inside a network, a least squares'
matrix-vector products hardly (docs/benchmarks.md, "Compile options by cost"). The estimate
is an envelope of the extra time
measured inside `run` (`benchmarks/studies/compile_options.py`, calibration rows) on a CPU:
nanoseconds per operation of fn's jaxpr, counted once per equation (a `scan`'s
body once per trip, a `while`'s body and each branch of a `cond` once), and per parameter for
the solver's own vector work.
"""

import math
from typing import NamedTuple

from jax.extend import core as jcore

# Nanoseconds each counted unit may add under the lean options (see the module docstring).
EXTRA_NS_PER_TRANSCENDENTAL = 10.0
EXTRA_NS_PER_ELEMENTWISE = 0.05
EXTRA_NS_PER_DOT_FLOP = 0.01
EXTRA_NS_PER_PARAMETER = 1.0

_TRANSCENDENTAL = frozenset(
    "exp exp2 log log1p expm1 tanh logistic sin cos tan asin acos atan atan2 sinh cosh asinh "
    "acosh atanh pow erf erfc erf_inv lgamma digamma igamma igammac cbrt".split()
)
# Equations that move or relabel data (XLA folds them into their users).
_FREE = frozenset(
    "reshape squeeze expand_dims broadcast_in_dim convert_element_type copy copy_p "
    "stop_gradient iota".split()
)


class Work(NamedTuple):
    """Operations of one evaluation: elements of elementwise and reduction equations, elements
    of transcendental ones, and the flops of matrix products (2 per multiply-add)."""

    elementwise: int = 0
    transcendental: int = 0
    dot_flops: int = 0


def _size(var) -> int:
    return math.prod(getattr(var.aval, "shape", ()))


def _subjaxprs(eqn):
    for value in eqn.params.values():
        for item in value if isinstance(value, list | tuple) else (value,):
            if isinstance(item, jcore.ClosedJaxpr):
                yield item.jaxpr
            elif isinstance(item, jcore.Jaxpr):
                yield item


def work(jaxpr: jcore.Jaxpr, trips: int = 1) -> Work:
    """The operations of `jaxpr` and every jaxpr it nests, each counted `trips` times."""
    elementwise = transcendental = dot_flops = 0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        inner = list(_subjaxprs(eqn))
        if inner:
            times = trips * (eqn.params.get("length", 1) if name == "scan" else 1)
            for sub in inner:
                counted = work(sub, times)
                elementwise += counted.elementwise
                transcendental += counted.transcendental
                dot_flops += counted.dot_flops
            continue
        size = sum(_size(v) for v in eqn.outvars)
        if name == "dot_general":
            (contracting, _), _ = eqn.params["dimension_numbers"]
            shape = getattr(eqn.invars[0].aval, "shape", ())
            dot_flops += trips * 2 * size * math.prod(shape[d] for d in contracting)
        elif name in _TRANSCENDENTAL:
            transcendental += trips * size
        elif name not in _FREE:  # a reduction reads more than it writes
            inputs = (_size(v) for v in eqn.invars if hasattr(v, "aval"))
            elementwise += trips * max(size, *inputs, 0)
    return Work(elementwise, transcendental, dot_flops)


def lean_extra_seconds(counted: Work, parameters: int) -> float:
    """The most the lean options are estimated to add to one evaluation of fn (and the
    solver's vector work on `parameters` elements around it), in seconds."""
    nanoseconds = (
        EXTRA_NS_PER_TRANSCENDENTAL * counted.transcendental
        + EXTRA_NS_PER_ELEMENTWISE * counted.elementwise
        + EXTRA_NS_PER_DOT_FLOP * counted.dot_flops
        + EXTRA_NS_PER_PARAMETER * parameters
    )
    return 1e-9 * nanoseconds
