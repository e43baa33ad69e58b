"""benchmarks/ is a package run as `python -m benchmarks...` (benchmarks/README.md): no file
edits `sys.path`, the suite (benchmarks/suite/ and the helpers it imports) uses jaxsearch's
public names only, and every study opens with its question and the date and commit it was
last changed (issue 49, item 5)."""

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
DATE = re.compile(r"^Date: \d{4}-\d{2}-\d{2}, commit [0-9a-f]{7,40}$", re.M)


def _tree(path: pathlib.Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _private_names(tree: ast.Module) -> list[str]:
    """jaxsearch's private names that `tree` imports or reads: `jaxsearch._x` modules,
    `from jaxsearch import _x`, and `_x` read off a name bound to jaxsearch or one of its
    public modules (`js._x`, `jsi._x`)."""
    found, aliases = [], set()
    private = lambda module: any(part.startswith("_") for part in module.split("."))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != "jaxsearch":
                    continue
                if private(alias.name):
                    found.append(alias.name)
                else:
                    aliases.add(alias.asname or "jaxsearch")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "jaxsearch":
            if private(node.module):
                found.append(node.module)
            for alias in node.names:
                if alias.name.startswith("_"):
                    found.append(f"{node.module}.{alias.name}")
                else:
                    aliases.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            found.append(f"{node.value.id}.{node.attr}")
    return found


def _benchmark_imports(tree: ast.Module) -> set[pathlib.Path]:
    """The files of `benchmarks` that `tree` imports (`from benchmarks import x`,
    `from benchmarks.suite import y`, `import benchmarks.x`)."""
    paths = set()
    for node in ast.walk(tree):
        modules = []
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("benchmarks"):
            modules = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
        elif isinstance(node, ast.Import):
            modules = [a.name for a in node.names if a.name.startswith("benchmarks")]
        for module in modules:
            path = ROOT.joinpath(*module.split("."))
            if path.with_suffix(".py").is_file():
                paths.add(path.with_suffix(".py"))
    return paths


def _suite_files() -> set[pathlib.Path]:
    """benchmarks/suite/*.py and every benchmarks module they import, transitively."""
    todo = set((BENCHMARKS / "suite").glob("*.py"))
    seen: set[pathlib.Path] = set()
    while todo:
        path = todo.pop()
        seen.add(path)
        todo |= _benchmark_imports(_tree(path)) - seen
    return seen


def _studies() -> list[pathlib.Path]:
    return sorted(p for p in (BENCHMARKS / "studies").glob("*.py") if p.name != "__init__.py")


def test_no_benchmark_edits_sys_path():
    files = sorted(BENCHMARKS.rglob("*.py"))
    assert len(files) >= 25
    editing = [
        str(p.relative_to(ROOT)) for p in files if re.search(r"\bsys\.path\b", p.read_text())
    ]
    assert not editing


def test_benchmarks_and_its_folders_are_packages():
    for folder in (BENCHMARKS, BENCHMARKS / "suite", BENCHMARKS / "studies"):
        assert (folder / "__init__.py").is_file(), folder


def test_the_suite_uses_public_names_only():
    files = _suite_files()
    assert BENCHMARKS / "peers.py" in files  # the helpers the suite imports are checked too
    private = {
        str(p.relative_to(ROOT)): names
        for p in sorted(files)
        if (names := _private_names(_tree(p)))
    }
    assert not private


@pytest.mark.parametrize(
    "source",
    [
        "from jaxsearch._compile._programs import LEAN_OPTIONS",
        "import jaxsearch._misc",
        "from jaxsearch import _pipeline",
        "import jaxsearch as js\njs._engine.run",
        "import jaxsearch.internal as jsi\njsi._x",
        "def f():\n    from jaxsearch._direction import _slots",
    ],
)
def test_the_check_finds_a_private_name(source):
    assert _private_names(ast.parse(source))


def test_the_check_passes_public_names():
    source = "import jaxsearch as js\nimport jaxsearch.internal as jsi\njs.Solver, jsi.State"
    assert not _private_names(ast.parse(source))


def test_the_suite_command_lists_every_suite_script():
    from benchmarks.suite import SCRIPTS

    scripts = {p.stem for p in (BENCHMARKS / "suite").glob("*.py") if not p.stem.startswith("_")}
    assert set(SCRIPTS) == scripts


@pytest.mark.parametrize("path", _studies(), ids=lambda p: p.stem)
def test_every_study_opens_with_its_question_and_date(path):
    doc = ast.get_docstring(_tree(path)) or ""
    head = doc.split("\n\n")[0]
    assert "?" in head, f"{path.name}: the docstring's first paragraph asks no question"
    assert DATE.search(head), f"{path.name}: no line 'Date: YYYY-MM-DD, commit <sha>'"


def test_the_lean_options_of_fresh_fit_are_the_library_s():
    """fresh_fit.py names the lean compile options itself (the suite's names are public);
    they are the ones `compiler_options="auto"` picks."""
    from jaxsearch._compile.seam import LEAN_OPTIONS

    tree = _tree(BENCHMARKS / "suite" / "fresh_fit.py")
    (value,) = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "LEAN_OPTIONS" for t in node.targets)
    ]
    assert ast.literal_eval(value) == LEAN_OPTIONS
