"""How jaxsearch's calls are compiled and dispatched, apart from what a run computes.

The door is functions only: `plan` (how a call is compiled, made once on the host: closure
conversion, trace sharing by computation, retrace watching, the options and the cut of a run
in two, the fresh-state cache, behind the `Plan` it returns), `dispatch` (the one way a
program is compiled and called), `Plan`, `clear_caches`, `jit` and `RetraceWarning`; and
`seam`, the module tests reach the wing through (a dispatch recorder, an options hook, the
pricing rules), never its private modules. Inside:

- `_plan`: `plan`, `Plan` and `dispatch`;
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

from . import seam as seam
from ._caches import clear_caches as clear_caches
from ._jit import jit as jit
from ._plan import Plan as Plan, dispatch as dispatch, plan as plan
from ._retrace import RetraceWarning as RetraceWarning

__all__ = ["Plan", "RetraceWarning", "clear_caches", "dispatch", "jit", "plan", "seam"]
