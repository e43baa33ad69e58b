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


PRIVATE_JAX = ("jax._src", "jax.interpreters")
COMPILE_WING = "_compile"


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: pathlib.Path, node: ast.ImportFrom) -> str:
    """The absolute name of the module `node` imports from."""
    if not node.level:
        return node.module or ""
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def layer_breaches(trees: dict) -> list[str]:
    """Imports that break the layer rules (issues 49 and 61): JAX's private modules are
    imported by `_private_jax.py` alone; outside the compile wing (`jaxsearch/_compile/`), a
    module imports from the wing's package (its door), never from one of the wing's private
    modules, nor a private name from the door."""
    wing = f"jaxsearch.{COMPILE_WING}"
    found = []
    for path, tree in trees.items():
        inside = _module_name(path).startswith(wing)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [_imported(path, node)]
            else:
                continue
            where = f"{path.relative_to(PACKAGE)}:{node.lineno}"
            for name in names:
                if name.startswith(PRIVATE_JAX) and path.name != "_private_jax.py":
                    found.append(f"{where} imports {name}")
                if not inside and name.startswith(wing + "."):
                    found.append(f"{where} imports {name}, behind the wing's door")
            if not inside and isinstance(node, ast.ImportFrom) and names == [wing]:
                for alias in node.names:
                    if alias.name.startswith("_"):
                        found.append(f"{where} imports {wing}.{alias.name}, behind the door")
    return found


def test_layer_rules_hold():
    assert layer_breaches(_trees()) == []


def test_the_layer_check_finds_breaches():
    """The check above can fail: private JAX outside `_private_jax.py`, and a module outside
    the wing that reaches past its door."""
    trees = _trees()
    engine = next(path for path in trees if path.name == "_engine.py")
    trees[engine] = ast.parse(
        "from jax._src.core import trace_state_clean\n"
        "from jax.interpreters import partial_eval\n"
        "from ._compile._programs import call\n"
        "from ._compile import plan\n"
        "from ._compile import _programs\n"
    )
    assert layer_breaches(trees) == [
        "_engine.py:1 imports jax._src.core",
        "_engine.py:2 imports jax.interpreters",
        "_engine.py:3 imports jaxsearch._compile._programs, behind the wing's door",
        "_engine.py:5 imports jaxsearch._compile._programs, behind the door",
    ]


DOOR = {"Plan", "RetraceWarning", "clear_caches", "dispatch", "jit", "plan", "seam"}


def test_the_compile_wing_s_door_is_functions_and_one_seam():
    """Issue 61: the wing exports `plan`, `dispatch`, `Plan`, `clear_caches`, `jit`,
    `RetraceWarning` and the test seam, nothing else."""
    import types

    import jaxsearch._compile as wing

    assert set(wing.__all__) == DOOR
    public = {
        name
        for name, value in vars(wing).items()
        if not name.startswith("_") and (name == "seam" or not isinstance(value, types.ModuleType))
    }
    assert public == DOOR


TESTS = PACKAGE.parent / "tests"


def wing_private_references(trees: dict) -> list[str]:
    """Where a test names something private of the compile wing: imports a module of it
    (`jaxsearch._compile._x`) or a private name from it, or reads `_compile._x` or
    `seam._x` (tests reach the wing through `jaxsearch._compile.seam` alone)."""
    wing = f"jaxsearch.{COMPILE_WING}"
    found = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module == wing:
                names = [f"{wing}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Attribute) and _private(node.attr):
                receiver = node.value
                if isinstance(receiver, ast.Attribute):
                    receiver = ast.Name(receiver.attr)
                if isinstance(receiver, ast.Name) and receiver.id in ("seam", COMPILE_WING):
                    found.append(f"{path.name}:{node.lineno} {receiver.id}.{node.attr}")
                continue
            for name in names:
                parts = name.split(".")
                if parts[:2] == wing.split(".") and any(_private(p) for p in parts[2:]):
                    found.append(f"{path.name}:{node.lineno} {name}")
    return found


def _test_trees() -> dict:
    return {path: ast.parse(path.read_text(), str(path)) for path in sorted(TESTS.rglob("*.py"))}


def test_tests_reach_the_compile_wing_through_its_seam():
    assert wing_private_references(_test_trees()) == []


def test_the_seam_check_finds_private_references():
    tree = ast.parse(
        "from jaxsearch._compile import _programs\n"
        "from jaxsearch._compile._cost import work\n"
        "import jaxsearch._compile._plan\n"
        "from jaxsearch._compile import seam\n"
        "seam._programs\n"
        "jaxsearch._compile._caches\n"
    )
    found = wing_private_references({TESTS / "t.py": tree})
    assert [line.split()[-1] for line in found] == [
        "jaxsearch._compile._programs",
        "jaxsearch._compile._cost",
        "jaxsearch._compile._plan",
        "seam._programs",
        "_compile._caches",
    ]


def test_no_module_is_over_550_lines():
    """Issue 49: a module over 550 lines holds more than one concept."""
    long = {
        str(path.relative_to(PACKAGE)): len(path.read_text().splitlines())
        for path in MODULES
        if len(path.read_text().splitlines()) > 550
    }
    assert not long


def _functions(tree: ast.AST):
    """(function node, the nodes in its body outside nested functions) of each function."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            own, pending = [], list(ast.iter_child_nodes(node))
            while pending:
                child = pending.pop()
                own.append(child)
                if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                    pending.extend(ast.iter_child_nodes(child))
            yield node, own


def _called_names(nodes) -> list[str]:
    """The names called by name (`f(...)`, not `obj.f(...)`) among `nodes`."""
    return [
        node.func.id
        for node in nodes
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    ]


def test_one_place_builds_a_result():
    """A `Result` is built in `_traced.finish` alone: `batched_run` ends each problem there,
    and complex params turn the real view's result back without building another."""
    builders = [
        f"{path.name}:{function.name}"
        for path, tree in _trees().items()
        for function, body in _functions(tree)
        if "Result" in _called_names(body)
    ]
    assert builders == ["_traced.py:finish"]


def test_the_run_never_calls_itself():
    """No function of the host side (`_pipeline`) or the traced side (`_traced`) calls itself:
    a run cut in two is two dispatches of one program (`run_in_two`), and complex params
    take one pass on their real view."""
    trees = _trees()
    recursive = [
        f"{path.name}:{function.name}"
        for path in (PACKAGE / "_pipeline.py", PACKAGE / "_traced.py")
        for function, body in _functions(trees[path])
        if function.name in _called_names(body)
    ]
    assert recursive == []


STOP_TERMS = ("steps_since_best", "stall_steps", "last_step", "last_eval")


def test_the_stop_condition_is_written_once():
    """Only `_stopping` orders the counts a run stops on (steps since the best point against
    `stall_steps`, the step count against the last step, evaluations against their budget):
    the engine's loop, the step record and the run's status read `goes_on` and `stalled`."""
    found = []
    for path, tree in _trees().items():
        if path.name == "_stopping.py":
            continue
        for node in ast.walk(tree):
            ordering = isinstance(node, ast.Compare) and all(
                isinstance(op, ast.Lt | ast.LtE | ast.Gt | ast.GtE) for op in node.ops
            )
            if ordering and any(term in ast.unparse(node) for term in STOP_TERMS):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    assert found == []
