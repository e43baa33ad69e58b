"""CONTRIBUTING.md's "where to change what" points at files and functions that exist."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEXT = (ROOT / "CONTRIBUTING.md").read_text()


def test_every_path_it_names_exists():
    paths = set(re.findall(r"`((?:jaxsearch|tests|benchmarks|\.ci)/[^`*<>]+?)`", TEXT))
    assert len(paths) >= 15
    missing = sorted(p for p in paths if not (ROOT / p.split(" ")[0]).exists())
    assert not missing


def test_every_function_it_places_in_a_module_is_there():
    """Each "`name` ... in `jaxsearch/<module>.py`" of the table names a definition there."""
    rows = [line for line in TEXT.splitlines() if line.startswith("| ") and ".py`" in line]
    checked = 0
    for row in rows:
        for cell in row.split(" | "):
            modules = re.findall(r"`([\w/]+\.py)`", cell)
            names = [n for n in re.findall(r"`(\w+)`", cell) if not n.startswith("_")]
            if len(modules) != 1 or not modules[0].startswith("jaxsearch/"):
                continue
            source = (ROOT / modules[0]).read_text()
            for name in names:
                defined = rf"^(def|class) {name}\b|^\s+def {name}\b|^{name} ="
                assert re.search(defined, source, re.M), (name, modules[0])
                checked += 1
    assert checked >= 8
