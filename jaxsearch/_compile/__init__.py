"""How jaxsearch's calls are compiled and dispatched, apart from what a run computes.

- `_plan`: the door: a call's `plan` (made once, on the host) and `dispatch`, the one way a
  program is compiled and called;
- `_programs`: which compiled program a call of `run` or `step` takes (dispatch by `jax.jit`
  or `eqx.filter_jit`, donation, the "auto" compile options, their pricing and split plan);
- `_cost`: what the lean compile options may cost fn's evaluations, from its jaxpr;
- `_closure`: values fn closes over, made arguments of the run;
- `_computation`: objectives compared by what they compute, so a new closure over the same
  computation shares a compiled program;
- `_retrace`: the warning when a solver keeps compiling for the same shapes;
- `_jit`: `js.jit`, a training step compiled as jaxsearch compiles its own programs;
- `_caches`: the wing's caches, each bounded, and `clear_caches`.

The rest of the library imports from this package only, never from its modules; the names of
JAX's private modules that the wing needs come from `jaxsearch._private_jax`.
"""

from . import (
    _closure as _closure,
    _computation as _computation,
    _programs as _programs,
    _retrace as _retrace,
)
from ._caches import Kept as Kept, bounded_cache as bounded_cache, clear_caches as clear_caches
from ._jit import jit as jit
from ._plan import Plan as Plan, dispatch as dispatch, plan as plan
from ._retrace import RetraceWarning as RetraceWarning
