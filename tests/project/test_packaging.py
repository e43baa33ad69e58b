"""What the package declares: one version, and runtime dependencies that are exactly what
`import jaxsearch` needs. (`nox -s build` checks the built sdist and wheel.)"""

import importlib.metadata
import pathlib
import subprocess
import sys

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import jaxsearch

tomllib = pytest.importorskip("tomllib")

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_version_is_written_once():
    """`jaxsearch.__version__` is the version: the metadata reads it from there."""
    assert "version" not in PROJECT["project"] and "version" in PROJECT["project"]["dynamic"]
    assert PROJECT["tool"]["hatch"]["version"]["path"] == "jaxsearch/__init__.py"
    assert importlib.metadata.version("jaxsearch") == jaxsearch.__version__


def _requirements(distribution: str) -> set[str]:
    """The distributions `distribution` needs when installed without extras, itself included,
    read from the installed metadata."""
    needed, todo = set(), [distribution]
    while todo:
        name = canonicalize_name(todo.pop())
        if name in needed:
            continue
        needed.add(name)
        try:
            lines = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue  # a requirement of this platform that is not installed
        for line in lines:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return needed


# Imports jaxsearch with every installed distribution that the runtime dependencies do not
# need hidden, runs a solver, and prints the distributions that the import loaded.
HIDDEN_RUN = """
import importlib.abc, importlib.metadata, sys
from packaging.utils import canonicalize_name

allowed = set(sys.argv[1].split(","))
owners = importlib.metadata.packages_distributions()


class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in owners and not allowed & {canonicalize_name(d) for d in owners[top]}:
            raise ModuleNotFoundError(f"hidden: {name}", name=top)


sys.meta_path.insert(0, Hide())
import jax, jax.numpy as jnp
import jaxsearch as js

loaded = {canonicalize_name(d) for m in list(sys.modules) for d in owners.get(m, [])}
result = js.Solver().run(lambda x, c: jnp.sum((x - c) ** 2), jnp.zeros(3), jnp.ones(3))
assert bool(result.success), result.message
batch = jax.vmap(lambda c: js.Solver().run(lambda x, c: jnp.sum((x - c) ** 2), c, c))(jnp.eye(3))
assert bool(batch.success.all())
optional = (js.Solver().as_optax, lambda: js.Solver().run(jnp.sum, jnp.ones(2), progress=True))
for call in optional:
    try:
        call()
        raise AssertionError("ran without its optional dependency")
    except ImportError as error:
        print("error:", error)
print("loaded:", ",".join(sorted(loaded)))
"""


def test_import_needs_only_the_runtime_dependencies():
    """With every distribution hidden that the declared runtime dependencies do not need
    (optax, tqdm, beartype, scipy's extras, ...), `import jaxsearch` works, a run and a batched
    run succeed, and `as_optax()` and `progress=True` say what to install. Each declared
    dependency is loaded by the import: none is there for nothing."""
    declared = {canonicalize_name(Requirement(r).name) for r in PROJECT["project"]["dependencies"]}
    allowed = {"jaxsearch"}.union(*(_requirements(name) for name in declared))
    assert "optax" not in allowed and "tqdm" not in allowed and "beartype" not in allowed
    completed = subprocess.run(
        [sys.executable, "-c", HIDDEN_RUN, ",".join(sorted(allowed))],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    lines = completed.stdout.splitlines()
    assert lines[0] == "error: as_optax() needs optax: pip install optax"
    assert lines[1] == "error: progress=True needs tqdm: pip install tqdm"
    loaded = set(lines[2].removeprefix("loaded: ").split(","))
    assert declared <= loaded, f"declared but not imported: {declared - loaded}"
