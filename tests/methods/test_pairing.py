"""The line search a Solver takes when given none comes from one table, by direction class."""

import jaxsearch as js
from jaxsearch._pairing import DEFAULT_SEARCHES


def test_default_pairings():
    expected = {
        js.LBFGS(): (js.Zoom(), js.MoreThuente()),
        js.NonlinearCG(): (js.MoreThuente(gtol=0.1), js.MoreThuente(gtol=0.1)),
        js.BFGS(): (js.Zoom(), js.Zoom()),
        js.Gradient(): (js.Zoom(), js.Zoom()),
        js.NewtonCG(): (js.Zoom(), js.Zoom()),
        js.GaussNewton(): (js.Zoom(), js.Zoom()),
        js.LevenbergMarquardt(): (js.Backtracking(epsilon=0.0), js.Backtracking(epsilon=0.0)),
    }
    for direction, (plain, bounded) in expected.items():
        solver = js.Solver(direction)
        assert (solver.linesearch, solver.bounded_linesearch) == (plain, bounded), direction


def test_a_given_search_serves_with_and_without_bounds():
    solver = js.Solver(js.LBFGS(), js.HagerZhang())
    assert solver.linesearch == solver.bounded_linesearch == js.HagerZhang()


def test_a_subclass_takes_its_parent_entry_unless_listed(monkeypatch):
    class Mine(js.NonlinearCG):
        pass

    assert js.Solver(Mine()).linesearch == js.MoreThuente(gtol=0.1)
    monkeypatch.setitem(DEFAULT_SEARCHES, Mine, (js.Backtracking, js.Backtracking))
    assert js.Solver(Mine()).linesearch == js.Backtracking()
