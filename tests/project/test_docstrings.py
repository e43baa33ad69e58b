"""Every configurable class names each of its arguments in its docstring (issue 49): the
directions, line searches, initial-step rules and adjoints a user builds, and `Solver`. An
argument counts as named where the docstring has it in backticks, alone (`c1`) or with a
value (`c1 = 1e-4`, `form="auto"`)."""

import inspect
import re

import pytest

import jaxsearch as js

BASES = (js.AbstractDirection, js.AbstractLineSearch, js.AbstractInitialStep)


def configurable() -> list[type]:
    found = [js.Solver, js.ImplicitAdjoint, js.UnrolledAdjoint]
    for name in sorted(dir(js)):
        obj = getattr(js, name)
        if inspect.isclass(obj) and issubclass(obj, BASES) and not inspect.isabstract(obj):
            found.append(obj)
    return found


def unnamed_arguments(cls: type) -> list[str]:
    doc = inspect.getdoc(cls) or ""
    parameters = [
        p.name
        for p in inspect.signature(cls).parameters.values()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    return [name for name in parameters if not re.search(rf"`{re.escape(name)}(`|\s*=)", doc)]


@pytest.mark.parametrize("cls", configurable(), ids=lambda cls: cls.__name__)
def test_each_argument_is_named_in_the_docstring(cls):
    assert unnamed_arguments(cls) == []


def test_the_check_finds_an_unnamed_argument():
    class Search(js.Backtracking):
        """Backtracking with `c1` named and no other argument."""

    assert "shrink" in unnamed_arguments(Search)
    assert "c1" not in unnamed_arguments(Search)
