"""What does the compiled L-BFGS run hold at n-vector size? XLA's buffers and the instructions
that write n-sized arrays, per L-BFGS form.
Date: 2026-12-04, commit 6f325ea

    python -m benchmarks.studies.hlo_anatomy --n 1000000 --out /tmp/anatomy

For `Solver(LBFGS(form=...))` on extended Rosenbrock (float32) under `jax.jit`: XLA's memory
analysis of the whole run in n-vectors, and, in the optimised HLO, every instruction outside
fused computations whose result holds at least n elements (fusions, copies, pads,
transposes, custom calls such as cuBLAS products), counted by kind and shape. Writes the
optimised HLO of each form (gzipped) and anatomy_<backend>.md to --out.
"""

import argparse
import collections
import gzip
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np

import jaxsearch as js
from benchmarks import problems as problems_mod

VIEWS = {"get-tuple-element", "parameter", "tuple", "bitcast", "constant"}  # no kernel of theirs
SHAPE = re.compile(r"= (\w+)\[([\d,]*)\]")


def big_instructions(text: str, n: int) -> collections.Counter:
    """(kind, dtype[shape]) -> count, over instructions outside fused computations."""
    fused = set(re.findall(r"(?:calls|to_apply)=(%[\w.\-]+)", text))
    counts: collections.Counter = collections.Counter()
    inside = False
    for line in text.splitlines():
        header = re.match(r"^(?:ENTRY )?(%[\w.\-]+) ", line)
        if header and line.rstrip().endswith("{"):
            inside = header.group(1) in fused
            continue
        if inside:
            continue
        match = SHAPE.search(line)
        if not match:
            continue
        dims = [int(d) for d in match.group(2).split(",") if d]
        if not dims or int(np.prod(dims)) < n:
            continue
        kind = re.search(r"\](?:\{[^}]*\})? ([\w-]+)\(", line)
        name = kind.group(1) if kind else "?"
        if name in VIEWS:
            continue
        if name == "fusion":
            fkind = re.search(r"kind=(\w+)", line)
            name = f"fusion:{fkind.group(1) if fkind else '?'}"
        if name == "custom-call":
            target = re.search(r'custom_call_target="([^"]+)"', line)
            name = f"custom-call:{target.group(1) if target else '?'}"
        counts[(name, f"{match.group(1)}[{match.group(2)}]")] += 1
    return counts


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--out", default="/tmp/anatomy")
    args = p.parse_args(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    n = args.n
    x0 = jnp.asarray(np.tile(np.float32([-1.2, 1.0]), n // 2))
    lines = [f"# Run anatomy, {jax.default_backend()}, n = {n}", ""]
    for form in ("compact", "two_loop"):
        solver = js.Solver(js.LBFGS(form=form), gtol=1e-3, ftol=0.0, max_steps=300)
        run = jax.jit(lambda x, solver=solver: solver.run(problems_mod._ext_rosenbrock, x, None))
        compiled = run.lower(x0).compile()
        text = compiled.as_text()
        with gzip.open(out / f"hlo_{form}_{jax.default_backend()}.txt.gz", "wt") as f:
            f.write(text)
        stats = compiled.memory_analysis()
        lines += [
            f"## {form}",
            "",
            f"memory in n-vectors: temp {stats.temp_size_in_bytes / (4 * n):.2f}, argument "
            f"{stats.argument_size_in_bytes / (4 * n):.2f}, output "
            f"{stats.output_size_in_bytes / (4 * n):.2f}, alias "
            f"{stats.alias_size_in_bytes / (4 * n):.2f}",
            "",
            "| instruction | result | count |",
            "| --- | --- | ---: |",
        ]
        for (kind, shape), count in sorted(big_instructions(text, n).items()):
            lines.append(f"| {kind} | {shape} | {count} |")
        lines.append("")
    text = "\n".join(lines) + "\n"
    (out / f"anatomy_{jax.default_backend()}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
