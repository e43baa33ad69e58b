"""The suite's one command: every comparison of `benchmarks/suite/`, or those named, each in its
own process (they set JAX's options, such as float64, as they start), from the repository root.

    python -m benchmarks.suite [--only NAME,...] [--quick] [--out DIR] [--list] [--dry-run]

Each writes `<out>/<name>_<backend>[_<tag>].md` and `.json`; `--out` defaults to
benchmarks/results/, or /tmp/jaxsearch-suite with `--quick` (quick sizes never overwrite the
committed results). Exits with 1 when any of them failed, after running the others.
"""

import argparse
import ast
import pathlib
import subprocess
import sys
import time

from benchmarks import output
from benchmarks.suite import SCRIPTS

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def summary(name: str) -> str:
    """The first line of a script's docstring, read without importing it (nor JAX)."""
    tree = ast.parse((HERE / f"{name}.py").read_text())
    return (ast.get_docstring(tree) or "").splitlines()[0]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--only", default="", help="comma list of: " + ",".join(SCRIPTS))
    p.add_argument("--quick", action="store_true", help="each script's quick mode")
    p.add_argument("--out", default=None, help="output directory (see above)")
    p.add_argument("--list", action="store_true", help="list the comparisons and exit")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    a = p.parse_args(argv)
    if a.list:
        for name in SCRIPTS:
            print(f"{name:18s} {summary(name)}")
        return 0
    names = [n.strip() for n in a.only.split(",") if n.strip()] or list(SCRIPTS)
    unknown = sorted(set(names) - set(SCRIPTS))
    if unknown:
        p.error(f"unknown {unknown}; choose from {', '.join(SCRIPTS)}")
    out = a.out or ("/tmp/jaxsearch-suite" if a.quick else str(output.RESULTS))
    failed = []
    for name in names:
        command = [sys.executable, "-m", f"benchmarks.suite.{name}", "--out", out]
        command += SCRIPTS[name] if a.quick else []
        print("$ python", " ".join(command[1:]), flush=True)
        if a.dry_run:
            continue
        t0 = time.perf_counter()
        code = subprocess.run(command, cwd=ROOT).returncode
        print(f"{name}: exit status {code}, {time.perf_counter() - t0:.0f} s", flush=True)
        if code:
            failed.append(name)
    if failed:
        print("failed:", ", ".join(failed), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
