"""Sessions: `nox -s tests`, `nox -s oldest`, `nox -s lint`, `nox -s typecheck`, `nox -s docs`,
`nox -s examples`, `nox -s build`, `nox -s bench`."""

import pathlib
import re
import shutil
import tarfile
import tempfile
import zipfile

import nox
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = pathlib.Path(__file__).parent

nox.options.sessions = ["lint", "tests"]


@nox.session
def tests(session):
    session.install("-e", ".[test]")
    session.run("python", "-m", "pytest", *session.posargs)


# What `nox -s oldest` pins to the oldest release that pyproject.toml allows.
OLDEST_PINNED = ("jax", "jaxlib", "equinox", "jaxtyping", "numpy")
# Its part of the suite: the project's checks (not the docs pages and examples, which take most
# of tests/project's time), and a sample of each layer that leans on JAX and Equinox -- the
# solver, the searches and directions, bounds, least squares, compiling and tracing, vmap,
# differentiating through a run, and the optax, optimistix and scipy interop.
OLDEST_TESTS = (
    "tests/project",
    "--deselect=tests/project/test_docs.py::test_docs_page_runs_and_prints_what_it_says",
    "--ignore=tests/project/test_examples.py",
    "tests/solver/test_solver.py",
    "tests/solver/test_own_gradient.py",
    "tests/compile/test_compile.py",
    "tests/scale/test_vmap.py",
    "tests/interop/test_optax.py",
    "tests/interop/test_optimistix.py",
)


def lowest(specifiers: list[str]) -> dict[str, Version]:
    """For each distribution named in `specifiers` with a lower bound, the lowest version that
    all of them allow: the highest of its `>=` (or `==`) bounds."""
    bounds: dict[str, Version] = {}
    for line in specifiers:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        for specifier in requirement.specifier:
            if specifier.operator in (">=", "=="):
                bounds[name] = max(bounds.get(name, Version("0")), Version(specifier.version))
    return bounds


# Prints Python's version and each distribution's (given as "name" or "name==version"), and
# fails where a pinned one is not at its pin (a virtualenv reused with `-R` after a bound moved).
SHOW_VERSIONS = """
import importlib.metadata, platform, sys
from packaging.version import Version
print("python", platform.python_version())
for given in sys.argv[1:]:
    name, _, pin = given.partition("==")
    version = importlib.metadata.version(name)
    print(name, version, f"(pinned: {pin})" if pin else "")
    assert not pin or Version(version) == Version(pin), f"{name} {version} is not {pin}"
"""
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# The oldest Python that pyproject.toml claims, e.g. "3.11" from ">=3.11".
OLDEST_PYTHON = str(lowest([f"python{PROJECT['requires-python']}"])["python"])


@nox.session(python=OLDEST_PYTHON)
def oldest(session):
    """The oldest versions that pyproject.toml claims: the oldest Python of `requires-python`,
    and jax, jaxlib, equinox, jaxtyping and numpy pinned (`==`) to the highest of their `>=`
    bounds in `dependencies` and the `test` extra; the test extra's other distributions (optax,
    optimistix, scipy, hypothesis, ...) at the newest versions that pip finds compatible with
    those pins. Prints the versions, then runs OLDEST_TESTS (plus the session's arguments)."""
    bounds = lowest(PROJECT["dependencies"] + PROJECT["optional-dependencies"]["test"])
    pins = [f"{name}=={bounds[name]}" for name in OLDEST_PINNED]
    session.install("-e", ".[test]", *pins)
    session.run("python", "-c", SHOW_VERSIONS, *pins, "optax", "optimistix", "scipy", "hypothesis")
    session.run(
        "python",
        "-m",
        "pytest",
        "-n",
        "2",
        "-p",
        "no:randomly",
        "-rf",
        *OLDEST_TESTS,
        *session.posargs,
    )


@nox.session
def fuzz(session):
    """The property-based tests with the "fuzz" hypothesis profile (2000 examples per test)."""
    session.install("-e", ".[test]")
    session.env["HYPOTHESIS_PROFILE"] = "fuzz"
    session.run(
        "python", "-m", "pytest", "tests/methods/test_properties.py", "-n", "2", "-p", "no:randomly"
    )


@nox.session
def lint(session):
    session.install("ruff")
    session.run("ruff", "check", "jaxsearch", "tests", "examples", "benchmarks", "noxfile.py")
    session.run(
        "ruff", "format", "--check", "jaxsearch", "tests", "examples", "benchmarks", "noxfile.py"
    )


@nox.session
def typecheck(session):
    """mypy on jaxsearch/ (settings in pyproject.toml, untyped bodies checked too)."""
    session.install("-e", ".[typecheck]")
    session.run("mypy")


@nox.session
def examples(session):
    session.install("-e", ".[test]")  # scipy, matplotlib, tqdm
    for script in (
        "quickstart.py",
        "training_loop.py",
        "mixed_precision.py",
        "convergence_plot.py",
        "history_and_progress.py",
        "logistic_vs_scipy.py",
    ):
        session.run("python", f"examples/{script}")


@nox.session
def bench(session):
    """Benchmarks against scipy, optax, jaxopt, optimistix: problems solved and evaluations
    (`python -m benchmarks.suite.cutest`, given the session's arguments, e.g. `nox -s bench --
    --quick`), then compile, run and memory costs (`python -m benchmarks.suite.speed`), then the
    compiled engine against optax.lbfgs (`python -m benchmarks.studies.engine`)."""
    session.install(".[bench]")
    session.run("python", "-m", "benchmarks.suite.cutest", *session.posargs)
    session.run("python", "-m", "benchmarks.suite.speed")
    session.run("python", "-m", "benchmarks.studies.engine")


@nox.session
def docs(session):
    """The documentation site (mkdocs-material, API pages from the docstrings), built with
    `--strict`: any warning fails the session."""
    session.install("-e", ".[docs]")
    session.run("mkdocs", "build", "--strict", *session.posargs)


@nox.session
def build(session):
    """The sdist and the wheel (`python -m build`), `twine check --strict`, what they hold
    (LICENSE, no benchmarks/results, a long description with absolute links), then the wheel
    installed (not editable) in this session's fresh virtualenv, which runs
    examples/quickstart.py from a folder outside the repository."""
    session.install("build", "twine")
    tmp = pathlib.Path(session.create_tmp()).resolve()
    dist = tmp / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    session.run("python", "-m", "build", "--outdir", str(dist), str(ROOT))
    (sdist,), (wheel,) = dist.glob("*.tar.gz"), dist.glob("*.whl")
    session.run("twine", "check", "--strict", str(sdist), str(wheel))
    version = check_distributions(sdist, wheel)
    session.install(str(wheel))
    outside = pathlib.Path(tempfile.mkdtemp(prefix="jaxsearch-outside-"))
    shutil.copy(ROOT / "examples" / "quickstart.py", outside)
    session.chdir(outside)
    session.run(
        "python",
        "-c",
        "import importlib.metadata, jaxsearch; "
        f"assert jaxsearch.__version__ == importlib.metadata.version('jaxsearch') == {version!r}; "
        f"assert jaxsearch.__file__.startswith({str(session.virtualenv.location)!r}), "
        "jaxsearch.__file__; print('jaxsearch', jaxsearch.__version__, 'from', jaxsearch.__file__)",
    )
    session.run("python", "quickstart.py")


def check_distributions(sdist: pathlib.Path, wheel: pathlib.Path) -> str:
    """Checks what the sdist and the wheel hold; returns the wheel's version."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (metadata_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = archive.read(metadata_name).decode()
    version = re.search(r"^Version: (.+)$", metadata, re.M)[1]
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names
    assert "jaxsearch/py.typed" in names, names
    assert not [n for n in names if not n.startswith(("jaxsearch/", "jaxsearch-"))], names
    headers, _, description = metadata.partition("\n\n")
    for header in ("License-Expression: Apache-2.0", "License-File: LICENSE"):
        assert header in headers.splitlines(), headers
    for wrong in ("pip install -e", "DESIGN"):
        assert wrong not in description, f"the long description has {wrong!r}"
    relative = [
        t for t in re.findall(r"\]\(([^)]*)\)", description) if not t.startswith("https://")
    ]
    assert not relative, f"links and images that are broken on a package index: {relative}"
    assert description.startswith("# jaxsearch\n\n```bash\npip install jaxsearch\n```")
    with tarfile.open(sdist) as archive:
        names = [n.partition("/")[2] for n in archive.getnames()]
    for needed in ("LICENSE", "README.md", "CHANGELOG.md", "pyproject.toml", "jaxsearch/py.typed"):
        assert needed in names, (needed, names)
    assert not [n for n in names if n.startswith("benchmarks/results")], names
    return version
