"""The suite's one results format: every script of `benchmarks/suite/` writes its table as
`<out>/<name>_<backend>[_<tag>].md` and its measurements as the `.json` beside it (by default
`<out>` is `benchmarks/results/`), through `write` here."""

import json
import pathlib
import re

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def stem(name: str, backend: str | None = None, tag: str | None = None) -> str:
    """`<name>_<backend>[_<tag>]`; `backend` defaults to JAX's default backend (cpu, gpu, tpu)."""
    if backend is None:
        import jax

        backend = jax.default_backend()
    return "_".join(part for part in (name, backend, tag) if part)


def write(
    out_dir, stem: str, markdown: str, data, compact: bool = False
) -> tuple[pathlib.Path, pathlib.Path]:
    """Write `<out_dir>/<stem>.md` (the table, as given) and `<out_dir>/<stem>.json` (`data`,
    indented, anything JSON lacks as its `str`; `compact`: each list of numbers on one line);
    the two paths."""
    md = pathlib.Path(out_dir) / f"{stem}.md"
    js = write_json(out_dir, stem, data, compact)
    md.write_text(markdown)
    return md, js


def write_json(out_dir, stem: str, data, compact: bool = False) -> pathlib.Path:
    """Write `<out_dir>/<stem>.json` alone (as `write` does): also the measurements so far,
    while a long run goes on."""
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=1, default=str)
    if compact:  # one line per list of numbers
        text = re.sub(
            r"\[\s+([-0-9.e,\s]+?)\s+\]", lambda m: "[" + " ".join(m[1].split()) + "]", text
        )
    js = out / f"{stem}.json"
    js.write_text(text)
    return js
