import warnings as _warnings

from ._backtracking import Backtracking as Backtracking
from ._base import (
    AbstractLineSearch as AbstractLineSearch,
    SearchState as SearchState,
    after_trial as after_trial,
    at_binding_cap as at_binding_cap,
    capped_start as capped_start,
    end_on_best as end_on_best,
    search_cap as search_cap,
    trials_before_fallback as trials_before_fallback,
)
from ._conditions import ValueScale as ValueScale, sufficient_decrease as sufficient_decrease
from ._fixed import FixedStep as FixedStep
from ._hager_zhang import HagerZhang as HagerZhang
from ._initial import (
    AbstractInitialStep as AbstractInitialStep,
    InitialConstantChange as InitialConstantChange,
    InitialDecaying as InitialDecaying,
    InitialHagerZhang as InitialHagerZhang,
    InitialPrevious as InitialPrevious,
    InitialQuadratic as InitialQuadratic,
    InitialStatic as InitialStatic,
    InitialStepInfo as InitialStepInfo,
    initial_step as initial_step,
)
from ._more_thuente import MoreThuente as MoreThuente
from ._nonmonotone import NonmonotoneArmijo as NonmonotoneArmijo
from ._standalone import LineSearchResult as LineSearchResult
from ._stochastic import StochasticArmijo as StochasticArmijo
from ._zoom import Zoom as Zoom


def deprecated_name(name: str):
    """`SearchState` under its old name `AbstractSearchState`, with a DeprecationWarning."""
    if name == "AbstractSearchState":
        _warnings.warn(
            "AbstractSearchState is deprecated: it is a concrete class, now named SearchState.",
            DeprecationWarning,
            stacklevel=3,
        )
        return SearchState
    raise AttributeError(name)


def __getattr__(name: str):
    return deprecated_name(name)
