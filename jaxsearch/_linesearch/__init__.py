from ._backtracking import Backtracking as Backtracking
from ._base import (
    AbstractLineSearch as AbstractLineSearch,
    AbstractSearchState as AbstractSearchState,
)
from ._fixed import FixedStep as FixedStep
from ._hager_zhang import HagerZhang as HagerZhang
from ._initial import initial_step as initial_step
from ._more_thuente import MoreThuente as MoreThuente
from ._stochastic import StochasticArmijo as StochasticArmijo
from ._zoom import Zoom as Zoom
