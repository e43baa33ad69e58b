"""The public surface by audience: `jaxsearch` holds a user's names, `jaxsearch.internal` the
author's kit, whose old top-level names stay one release with a DeprecationWarning."""

import pathlib
import re
import warnings

import pytest

import jaxsearch as js
import jaxsearch.internal as jsi
import jaxsearch.testing

from .test_docs import PAGES


def test_the_kit_is_in_internal_and_not_among_the_users_names():
    for name in jsi.KIT:
        assert hasattr(jsi, name), name
        assert name not in vars(js), name
    # (jaxtyping's import hook, which the suite runs under, adds its own name to the module)
    exported = {name for name in vars(jsi) if not name.startswith("_")} - {"KIT", "jaxtyping"}
    assert set(jsi.KIT) == exported


@pytest.mark.parametrize("name", ["SearchState", "capped_start", "DirectionInfo", "no_limit"])
def test_a_kit_name_at_the_top_level_warns_and_is_the_same_object(name):
    with pytest.warns(DeprecationWarning, match=rf"jaxsearch\.internal\.{name}"):
        found = getattr(js, name)
    assert found is getattr(jsi, name)


def test_the_users_names_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in ("Solver", "LBFGS", "Zoom", "AbstractLineSearch", "AbstractDirection"):
            getattr(js, name)


def test_search_states_old_name_still_works_with_a_warning():
    with pytest.warns(DeprecationWarning, match="SearchState"):
        assert js.AbstractSearchState is jsi.SearchState


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError):
        js.no_such_name  # noqa: B018


def test_every_public_name_is_jaxsearchs_own():
    """No module or name that jaxsearch merely imports (say `warnings`) shows among the user's."""
    foreign = [
        name
        for name, value in vars(js).items()
        if not name.startswith("_")
        and not getattr(value, "__module__", getattr(value, "__name__", "")).startswith("jaxsearch")
    ]
    assert set(foreign) <= {"jaxtyping"}  # jaxtyping's import hook, which the suite runs under


def _documented(page: str) -> set[str]:
    text = (pathlib.Path(__file__).resolve().parents[2] / "docs" / page).read_text()
    return set(re.findall(r"^::: ([\w.]+)", text, re.M))


def test_the_api_reference_has_a_page_for_each_audience():
    """docs/api.md documents what a user runs; docs/api-authors.md the bases to subclass,
    the author's kit and the conformance kit; each public name is on one page."""
    users, authors = _documented("api.md"), _documented("api-authors.md")
    bases = {"AbstractDirection", "AbstractMemorylessDirection", "AbstractLineSearch"}
    bases |= {"AbstractInitialStep", "AbstractAdjoint"}
    public = {
        name
        for name, value in vars(js).items()
        if not name.startswith("_") and (isinstance(value, type) or callable(value))
    }
    assert not users & authors
    assert {f"jaxsearch.{name}" for name in public - bases} <= users
    assert {f"jaxsearch.{name}" for name in bases} <= authors
    assert {f"jaxsearch.internal.{name}" for name in jsi.KIT} <= authors
    assert {f"jaxsearch.testing.{name}" for name in jaxsearch.testing.__all__} <= authors


def test_the_authors_guide_covers_the_whole_kit():
    """docs/extending.md mentions every name of the author's kit and every check of the
    conformance kit, and the docs tests run its code blocks (`tests/project/test_docs.py`)."""
    text = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "extending.md").read_text()
    names = [*jsi.KIT, *jaxsearch.testing.__all__]
    missing = [name for name in names if not re.search(rf"(?<!\w){name}\b", text)]
    assert not missing
    assert "docs/extending.md" in PAGES and "```python" in text
    for field in ("grad", "prev_value"):  # what `InitialStepInfo` hands a rule
        assert f"`{field}`" in text
