"""What `Solver` pairs with a direction when it is given none: its line search, and its
stopping tolerances, in one table each."""

from collections.abc import Callable

from ._direction import (
    LBFGS,
    AbstractDirection,
    AbstractLeastSquares,
    BarzilaiBorwein,
    LevenbergMarquardt,
    NonlinearCG,
    Preconditioned,
)
from ._linesearch import (
    AbstractLineSearch,
    Backtracking,
    MoreThuente,
    NonmonotoneArmijo,
    StochasticArmijo,
    Zoom,
)

# direction class: (search without bounds, with bounds), for the first of its classes (MRO) listed,
# else `Zoom()`: strong Wolfe with c2 = 0.9 keeps s'y > 0 for quasi-Newton updates and accepts their
# unit step when good.
DEFAULT_SEARCHES: dict[type, tuple[Callable[[], AbstractLineSearch], ...]] = {
    # Nocedal & Wright recommend c2 = 0.1 for nonlinear CG (docs/methods.md).
    NonlinearCG: (lambda: MoreThuente(gtol=0.1),) * 2,
    # L-BFGS-B 3.0 passes Moré–Thuente's dcsrch ftol 1e-3, gtol 0.9, xtol 0.1: its defaults.
    LBFGS: (Zoom, MoreThuente),
    # Mini-batches: Vaswani et al. (2020) pair adaptive preconditioners with SLS. No bounds.
    Preconditioned: (StochasticArmijo,) * 2,
    # BB steps need a nonmonotone search (Raydan 1997). It has no bounds either.
    BarzilaiBorwein: (NonmonotoneArmijo,) * 2,
    # A trust region: the search only stands in for its rejected steps, as a monotone Armijo test
    # does (an allowance epsilon C_k averages |f| over iterates falling by orders of magnitude, and
    # once accepted a rise that lost MGH10 from start 1). No bounds.
    LevenbergMarquardt: (lambda: Backtracking(epsilon=0.0),) * 2,
}


def default_search(direction: AbstractDirection, bounded: bool) -> AbstractLineSearch:
    """The search `Solver(direction)` uses, for runs with bounds when `bounded`."""
    for cls in type(direction).__mro__:
        if cls in DEFAULT_SEARCHES:
            return DEFAULT_SEARCHES[cls][bounded]()
    return Zoom()


def searches(
    direction: AbstractDirection, linesearch: AbstractLineSearch | None
) -> tuple[AbstractLineSearch, AbstractLineSearch]:
    """The searches of `Solver(direction, linesearch)`: (without bounds, with bounds); the one
    given for both, else the direction's defaults."""
    if linesearch is not None:
        return linesearch, linesearch
    return default_search(direction, bounded=False), default_search(direction, bounded=True)


# scipy's L-BFGS-B: factr = 1e7 times float64 epsilon
SCIPY_FTOL = 2.220446049250313e-09

# direction class: its default (gtol, ftol), found as `DEFAULT_SEARCHES`, else
# `AbstractDirection`'s.
DEFAULT_TOLERANCES: dict[type, tuple[float, float]] = {
    # scipy's L-BFGS-B: pgtol 1e-5 on the (projected) gradient's infinity norm, and its ftol.
    AbstractDirection: (1e-5, SCIPY_FTOL),
    # No gradient test (a bound on J'r depends on the scales of r and x), and MINPACK's relative
    # decrease test, actual and predicted, at 1e-10 (`_stopping.step_status`): on NIST StRD's 16
    # runs LevenbergMarquardt then matches or passes scipy's least_squares defaults in certified
    # digits, where 1e-8 falls short on 3 (benchmarks/studies/least_squares_defaults.py).
    AbstractLeastSquares: (0.0, 1e-10),
}


def default_tolerances(direction: AbstractDirection) -> tuple[float, float]:
    """(gtol, ftol) that `Solver(direction)` uses where they are not given."""
    for cls in type(direction).__mro__:
        if cls in DEFAULT_TOLERANCES:
            return DEFAULT_TOLERANCES[cls]
    raise AssertionError("every direction is an AbstractDirection")
