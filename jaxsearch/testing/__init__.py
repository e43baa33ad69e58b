"""A conformance kit for your own direction, line search or initial-step rule: call
`check_line_search(search)`, `check_direction(direction)` or `check_initial_step(rule)` in your
tests. Each raises an AssertionError naming the class, the property that failed and how to fix it
(a state's field by its pytree path). Problems compile once per dtype: float32 and float64 (x64
scoped) for a search's scalars; float16, bfloat16, float32, float64 and mixed params for a
direction and a search inside `Solver.step`; residual problems for an `AbstractLeastSquares`;
float32, float64 and `jax.vmap` for an initial-step rule."""

from ._direction import check_direction as check_direction
from ._initial_step import check_initial_step as check_initial_step
from ._line_search import LINES as LINES, check_line_search as check_line_search, drive as drive

__all__ = ["check_direction", "check_initial_step", "check_line_search"]
