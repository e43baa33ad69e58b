"""A conformance kit for your own direction, line search or initial-step rule: call
`check_line_search(search)`, `check_direction(direction)` or `check_initial_step(rule)` in your
test suite. Each checks what the solver relies on and raises an AssertionError that names the
class, the property that failed and how to fix it (a state's field by its pytree path).

The first two run small problems, each compiled once per dtype: float32 and float64 (under
`jax.enable_x64(True)`, scoped) for the scalars a line search sees, and float16, bfloat16,
float32, float64 and a mixed-dtype pytree of params for a direction and for a search inside
`Solver.step`. A least-squares direction (`AbstractLeastSquares`) is checked on residual
problems, with `DirectionInfo(..., residuals=r)` as the solver passes it. An initial-step rule
is driven through five searches in float32 and float64, and under `jax.vmap`.
"""

from ._direction import check_direction as check_direction
from ._initial_step import check_initial_step as check_initial_step
from ._line_search import LINES as LINES, check_line_search as check_line_search, drive as drive

__all__ = ["check_direction", "check_initial_step", "check_line_search"]
