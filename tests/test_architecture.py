"""The package's structure (issue 34): modules talk through public names, and `Solver` holds
its settings and the public API while the run's pipeline lives in its own module."""

import ast
import pathlib

import jaxsearch

PACKAGE = pathlib.Path(jaxsearch.__file__).parent
MODULES = sorted(PACKAGE.rglob("*.py"))


NAMEDTUPLE_API = {"_replace", "_fields", "_asdict", "_make"}  # public despite the underscore


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in NAMEDTUPLE_API


def _defined_privately(tree: ast.AST) -> set[str]:
    """Private names a module defines: functions, classes, methods, module and class
    assignments, and attributes set on `self`."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {name for name in names if _private(name)}


def _trees() -> dict[pathlib.Path, ast.AST]:
    return {path: ast.parse(path.read_text(), str(path)) for path in MODULES}


def foreign_private_uses(trees: dict) -> list[str]:
    """Each use of a private name that another of the package's modules defines: imported
    (`from ._x import _name`) or read as an attribute (`module._name`, `obj._name`) anywhere
    but on `self` or `cls`."""
    defined = {path: _defined_privately(tree) for path, tree in trees.items()}
    everywhere = set().union(*defined.values())
    found = []
    for path, tree in trees.items():
        own = defined[path]
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                names = [alias.name for alias in node.names if _private(alias.name)]
            elif isinstance(node, ast.Attribute) and _private(node.attr):
                receiver = node.value
                if isinstance(receiver, ast.Name) and receiver.id in ("self", "cls"):
                    continue
                names = [node.attr]
            else:
                continue
            for name in names:
                if name in everywhere and name not in own:
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} uses {name}")
    return found


def test_no_module_uses_another_s_private_names():
    assert foreign_private_uses(_trees()) == []


def test_the_check_finds_a_private_name_used_across_modules():
    """The check above can fail: a module that imports or reads another's private name."""
    trees = _trees()
    engine = next(path for path in trees if path.name == "_engine.py")
    trees[engine] = ast.parse(
        "from ._pipeline import _private_helper\nfrom . import _solver\nx = _solver._optional\n"
    )
    trees[PACKAGE / "_pipeline.py"] = ast.parse("def _private_helper(): pass\n")
    found = foreign_private_uses(trees)
    assert found == ["_engine.py:1 uses _private_helper", "_engine.py:3 uses _optional"]


def test_the_solver_module_holds_settings_and_the_public_api():
    """`_solver.py` about 250 lines: `Solver`'s settings, their checks delegated
    (`_inputs.solver_settings`), and its methods handing over to `_pipeline`."""
    source = (PACKAGE / "_solver.py").read_text()
    assert len(source.splitlines()) <= 260
    tree = ast.parse(source)
    (solver,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Solver"]
    methods = {n.name for n in solver.body if isinstance(n, ast.FunctionDef)}
    assert methods == {
        "__init__", "init", "step", "reevaluate", "run", "as_optax", "as_optimistix"
    }  # fmt: skip
