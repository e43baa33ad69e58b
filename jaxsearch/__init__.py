"""jaxsearch: line-search optimisers for JAX, built from Equinox modules."""

import warnings as _warnings

from . import internal as internal
from ._adjoint import (
    AbstractAdjoint as AbstractAdjoint,
    ImplicitAdjoint as ImplicitAdjoint,
    UnrolledAdjoint as UnrolledAdjoint,
)
from ._batched import batched_run as batched_run
from ._compile import RetraceWarning as RetraceWarning, clear_caches as clear_caches, jit as jit
from ._direction import (
    BFGS as BFGS,
    LBFGS as LBFGS,
    SSBFGS as SSBFGS,
    AbstractDirection as AbstractDirection,
    AbstractLeastSquares as AbstractLeastSquares,
    AbstractMemorylessDirection as AbstractMemorylessDirection,
    AbstractSelfScaled as AbstractSelfScaled,
    BarzilaiBorwein as BarzilaiBorwein,
    GaussNewton as GaussNewton,
    GaussNewtonCG as GaussNewtonCG,
    Gradient as Gradient,
    LevenbergMarquardt as LevenbergMarquardt,
    Newton as Newton,
    NewtonCG as NewtonCG,
    NonlinearCG as NonlinearCG,
    Preconditioned as Preconditioned,
    SSBroyden as SSBroyden,
)
from ._history import History as History
from ._linesearch import (
    AbstractInitialStep as AbstractInitialStep,
    AbstractLineSearch as AbstractLineSearch,
    Backtracking as Backtracking,
    FixedStep as FixedStep,
    HagerZhang as HagerZhang,
    InitialConstantChange as InitialConstantChange,
    InitialDecaying as InitialDecaying,
    InitialHagerZhang as InitialHagerZhang,
    InitialPrevious as InitialPrevious,
    InitialQuadratic as InitialQuadratic,
    InitialStatic as InitialStatic,
    LineSearchResult as LineSearchResult,
    MoreThuente as MoreThuente,
    NonmonotoneArmijo as NonmonotoneArmijo,
    StochasticArmijo as StochasticArmijo,
    Zoom as Zoom,
    deprecated_name as _deprecated_name,
)
from ._minimize import minimize as minimize
from ._minimize_result import MinimizeResult as MinimizeResult
from ._result import Result as Result
from ._solver import Solver as Solver
from ._state import BestPoint as BestPoint, SolverState as SolverState
from ._status import SearchEnd as SearchEnd, Status as Status, StatusArray as StatusArray

__version__ = "0.1.0"


def __getattr__(name: str):
    """The author's kit under its old top-level names (`jaxsearch.internal` now), and
    `AbstractSearchState` (SearchState's old name), each with a DeprecationWarning."""
    if name in internal.KIT:
        _warnings.warn(
            f"jaxsearch.{name} moved to jaxsearch.internal.{name} (the author's kit); the "
            "top-level name goes in the next release.",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(internal, name)
    return _deprecated_name(name)
