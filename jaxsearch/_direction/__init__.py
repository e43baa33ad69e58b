from ._barzilai_borwein import (
    BarzilaiBorwein as BarzilaiBorwein,
    BarzilaiBorweinState as BarzilaiBorweinState,
)
from ._base import (
    AbstractDenseLeastSquares as AbstractDenseLeastSquares,
    AbstractDirection as AbstractDirection,
    AbstractLeastSquares as AbstractLeastSquares,
    AbstractMemorylessDirection as AbstractMemorylessDirection,
    DirectionInfo as DirectionInfo,
    no_limit as no_limit,
    run_loop as run_loop,
)
from ._bfgs import BFGS as BFGS, BFGSState as BFGSState
from ._flat import flatten_tree as flatten_tree, unflatten_tree as unflatten_tree
from ._gauss_newton_cg import (
    GaussNewtonCG as GaussNewtonCG,
    GaussNewtonCGState as GaussNewtonCGState,
)
from ._gradient import Gradient as Gradient
from ._lbfgs import LBFGS as LBFGS
from ._lbfgs_compact import CompactLBFGSState as CompactLBFGSState
from ._lbfgs_memory import AbstractLBFGSState as AbstractLBFGSState
from ._lbfgs_two_loop import TwoLoopLBFGSState as TwoLoopLBFGSState
from ._least_squares import (
    GaussNewton as GaussNewton,
    GaussNewtonState as GaussNewtonState,
    LevenbergMarquardt as LevenbergMarquardt,
    LevenbergMarquardtState as LevenbergMarquardtState,
)
from ._newton import Newton as Newton, NewtonState as NewtonState
from ._newton_cg import NewtonCG as NewtonCG, NewtonCGState as NewtonCGState
from ._nonlinear_cg import NonlinearCG as NonlinearCG, NonlinearCGState as NonlinearCGState
from ._preconditioned import (
    Preconditioned as Preconditioned,
    PreconditionedState as PreconditionedState,
)
from ._self_scaled import (
    SSBFGS as SSBFGS,
    AbstractSelfScaled as AbstractSelfScaled,
    SelfScaledState as SelfScaledState,
    SSBroyden as SSBroyden,
)
