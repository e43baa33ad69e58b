from ._base import AbstractDirection as AbstractDirection
from ._gradient import Gradient as Gradient
from ._lbfgs import LBFGS as LBFGS, LBFGSState as LBFGSState
