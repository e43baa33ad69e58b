"""A conformance kit for your own direction or line search: call `check_line_search(search)`
or `check_direction(direction)` in your test suite. Each checks what the solver relies on and
raises an AssertionError that names the property that failed and how to fix it.

Both run small problems, each compiled once per dtype: float32 and float64 (under
`jax.enable_x64(True)`, scoped) for the scalars a line search sees, and float16, bfloat16,
float32, float64 and a mixed-dtype pytree of params for a direction and for a search inside
`Solver.step`. A least-squares direction (`AbstractLeastSquares`) is checked on residual
problems, with `DirectionInfo(..., residuals=r)` as the solver passes it.
"""

from ._direction import check_direction as check_direction
from ._line_search import LINES as LINES, check_line_search as check_line_search, drive as drive

__all__ = ["check_direction", "check_line_search"]
