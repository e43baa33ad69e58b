"""Sessions: `nox -s tests`, `nox -s lint`, `nox -s typecheck`, `nox -s docs`,
`nox -s examples`, `nox -s bench`."""

import nox

nox.options.sessions = ["lint", "tests"]


@nox.session
def tests(session):
    session.install("-e", ".[test]")
    session.run("python", "-m", "pytest", *session.posargs)


@nox.session
def fuzz(session):
    """The property-based tests with the "fuzz" hypothesis profile (2000 examples per test)."""
    session.install("-e", ".[test]")
    session.env["HYPOTHESIS_PROFILE"] = "fuzz"
    session.run(
        "python", "-m", "pytest", "tests/test_properties.py", "-n", "2", "-p", "no:randomly"
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
    (`benchmarks/run.py`, given the session's arguments, e.g. `nox -s bench -- --quick`), then
    compile, run and memory costs (`benchmarks/speed.py`), then the compiled engine against
    optax.lbfgs (`benchmarks/engine.py`)."""
    session.install(".[bench]")
    session.run("python", "benchmarks/run.py", *session.posargs)
    session.run("python", "benchmarks/speed.py")
    session.run("python", "benchmarks/engine.py")


@nox.session
def docs(session):
    """The documentation site (mkdocs-material, API pages from the docstrings), built with
    `--strict`: any warning fails the session."""
    session.install("-e", ".[docs]")
    session.run("mkdocs", "build", "--strict", *session.posargs)
