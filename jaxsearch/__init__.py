"""jaxsearch: line-search optimisers for JAX, built from Equinox modules."""

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
    AbstractSelfScaled as AbstractSelfScaled,
    BarzilaiBorwein as BarzilaiBorwein,
    DirectionInfo as DirectionInfo,
    GaussNewton as GaussNewton,
    GaussNewtonCG as GaussNewtonCG,
    Gradient as Gradient,
    LevenbergMarquardt as LevenbergMarquardt,
    Newton as Newton,
    NewtonCG as NewtonCG,
    NonlinearCG as NonlinearCG,
    Preconditioned as Preconditioned,
    SSBroyden as SSBroyden,
    flatten_tree as flatten_tree,
    no_limit as no_limit,
    run_loop as run_loop,
    unflatten_tree as unflatten_tree,
)
from ._history import History as History
from ._linesearch import (
    AbstractInitialStep as AbstractInitialStep,
    AbstractLineSearch as AbstractLineSearch,
    Backtracking as Backtracking,
    FixedStep as FixedStep,
    HagerZhang as HagerZhang,
    InitialConstantChange as InitialConstantChange,
    InitialHagerZhang as InitialHagerZhang,
    InitialPrevious as InitialPrevious,
    InitialQuadratic as InitialQuadratic,
    InitialStatic as InitialStatic,
    InitialStepInfo as InitialStepInfo,
    MoreThuente as MoreThuente,
    NonmonotoneArmijo as NonmonotoneArmijo,
    SearchState as SearchState,
    StochasticArmijo as StochasticArmijo,
    ValueScale as ValueScale,
    Zoom as Zoom,
    after_trial as after_trial,
    at_binding_cap as at_binding_cap,
    capped_start as capped_start,
    deprecated_name as _deprecated_name,
    end_on_best as end_on_best,
    search_cap as search_cap,
    sufficient_decrease as sufficient_decrease,
    trials_before_fallback as trials_before_fallback,
)
from ._result import Result as Result
from ._solver import Solver as Solver
from ._state import BestPoint as BestPoint, SolverState as SolverState
from ._status import Status as Status, StatusArray as StatusArray

__version__ = "0.1.0"


def __getattr__(name: str):
    return _deprecated_name(name)  # AbstractSearchState, SearchState's old name
