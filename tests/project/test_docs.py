"""Every Python block of each docs page and of README.md runs, in order, as one script (a page's
blocks build on each other), so the pages cannot drift from the API; and every output a page
states is compared with what the page prints.

How a page states an output: the comment at the end of a line that starts with `print(` is what
that call prints, e.g.

    print(bool(converged), batch.success)  # True [ True  True]

- Words, booleans, statuses, dtypes and integers must be printed exactly as written, and a
  NumPy integral float (`1.`) must print a number equal to it, with its sign (a page that says
  `0.` where the code prints `-0.` shows the reader another output). Runs of spaces
  and line breaks count as one space, and spaces just inside brackets (NumPy's padding,
  `[ True  True]`) are ignored.
- `...` stands for any text, as in doctest.
- A number with digits after its point or with an exponent (`4.21e-05`, `0.93`) matches a
  printed number to the digits shown: within half a unit of its last digit (4.205e-05 to
  4.215e-05).
- `X±T` matches a printed number within T of X, and `X±P%` within P percent of X. This is the
  form for results that may differ between machines: anything computed in bfloat16 or float16
  (Intel CPUs with avx512_fp16 compute those natively, AMD's round through float32), and
  counts of steps or evaluations that last-bit differences in float32 can change. Never state
  a low-precision result to all its digits.

Every time the line runs its output must match (a print in a loop states each iteration's
output), and a stated print that never runs fails too. So a comment after a print is always an
output: an explanation goes on its own line above it.
"""

import io
import json
import math
import pathlib
import re
import subprocess
import sys
import tokenize

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = sorted(
    f"docs/{page.name}" for page in (ROOT / "docs").glob("*.md") if "```python" in page.read_text()
) + ["README.md"]

# Runs a page's script with a `print` that records, per line of the page, what each call printed.
RUNNER = """
import builtins, io, json, sys

script, page, out = sys.argv[1:4]
printed = {}


def print(*values, sep=" ", end="\\n", file=None, flush=False):
    if file is None or file is sys.stdout:
        text = io.StringIO()
        builtins.print(*values, sep=sep, end=end, file=text)
        printed.setdefault(sys._getframe(1).f_lineno, []).append(text.getvalue())
    builtins.print(*values, sep=sep, end=end, file=file, flush=flush)


try:
    code = compile(open(script).read(), page, "exec")
    exec(code, {"__name__": "__main__", "print": print})
finally:
    with open(out, "w") as file:
        json.dump(printed, file)
"""


def page_script(text: str) -> str:
    """The page's Python blocks, each line at its line number in the page (so a traceback or a
    stated output names the page's line); every other line blank."""
    lines = text.splitlines()
    script = [""] * len(lines)
    inside = False
    for number, line in enumerate(lines):
        if not inside and line.strip() == "```python":
            inside = True
        elif inside and line.strip().startswith("```"):
            inside = False
        elif inside:
            script[number] = line
    return "\n".join(script) + "\n"


def stated_outputs(script: str) -> dict[int, str]:
    """Line number -> the output stated by the comment ending that line, for lines that start
    with `print(`."""
    stated = {}
    for token in tokenize.generate_tokens(io.StringIO(script).readline):
        if token.type == tokenize.COMMENT and token.line.lstrip().startswith("print("):
            stated[token.start[0]] = token.string[1:].strip()
    return stated


_NUMBER = r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?"
# In a stated output: `...`, or a number with an optional tolerance (`±T`, `±P%`).
_STATED = re.compile(
    rf"(?P<ellipsis>\.\.\.)|(?<![\w.])(?P<number>{_NUMBER})(?:±(?P<tol>{_NUMBER})(?P<pct>%)?)?(?!\w)"
)


def _normalise(text: str) -> str:
    text = " ".join(text.split())
    return re.sub(r"(?<=[\[(]) | (?=[\])])", "", text)


def _tolerance(number: str, tol: str | None, percent: bool) -> float | None:
    """How far a printed number may be from `number`; None: it must be printed as written."""
    if tol is not None:
        return abs(float(number)) * float(tol) / 100 if percent else float(tol)
    mantissa, _, exponent = number.lower().partition("e")
    if not exponent and "." not in mantissa:
        return None  # an integer: printed as written
    if not exponent and mantissa.endswith("."):
        return 0.0  # NumPy's integral float: equal, and with its sign (`-0.` is not `0.`)
    decimals = len(mantissa.partition(".")[2])
    return 0.5 * 10.0 ** (int(exponent or 0) - decimals) * (1 + 1e-9)


def output_mismatch(stated: str, printed: str) -> str | None:
    """Why `printed` is not the output `stated` describes (the convention at the top of this
    file), or None when it is."""
    stated, printed = _normalise(stated), _normalise(printed)
    pattern, checks, start = "", [], 0
    for match in _STATED.finditer(stated):
        pattern += re.escape(stated[start : match.start()])
        start = match.end()
        if match["ellipsis"]:
            pattern += ".*?"
            continue
        tolerance = _tolerance(match["number"], match["tol"], bool(match["pct"]))
        if tolerance is None:
            pattern += rf"(?<![\w.]){re.escape(match['number'])}(?![\w.]|\.\d)"
        else:
            pattern += rf"(?<![\w.])({_NUMBER}|nan|-?inf)(?!\w)"
            checks.append((match["number"], tolerance))
    pattern += re.escape(stated[start:])
    found = re.fullmatch(pattern, printed, re.S)
    if found is None:
        return f"printed {printed!r}, the page says {stated!r}"
    for (number, tolerance), value in zip(checks, found.groups(), strict=True):
        if not math.isfinite(float(value)) or abs(float(value) - float(number)) > tolerance:
            return f"printed {value} where the page says {number} (within {tolerance:.3g})"
        if tolerance == 0 and math.copysign(1, float(value)) != math.copysign(1, float(number)):
            return f"printed {value} where the page says {number} (a zero's sign shows)"
    return None


def check_page(path: pathlib.Path, tmp_path: pathlib.Path) -> list[str]:
    """Runs the page's Python blocks; returns what is wrong: a failed run, a stated output that
    differs from the printed one, or a stated print that never ran."""
    script = page_script(path.read_text())
    (tmp_path / "page.py").write_text(script)
    completed = subprocess.run(
        [
            sys.executable,
            "-c",
            RUNNER,
            *map(str, (tmp_path / "page.py", path, tmp_path / "out.json")),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    if completed.returncode != 0:
        return [completed.stderr[-3000:]]
    printed = json.loads((tmp_path / "out.json").read_text())
    problems = []
    for line, stated in stated_outputs(script).items():
        if str(line) not in printed:
            problems.append(f"{path.name}:{line}: states {stated!r}, but the print never ran")
        for text in printed.get(str(line), []):
            mismatch = output_mismatch(stated, text)
            if mismatch is not None:
                problems.append(f"{path.name}:{line}: {mismatch}")
    return problems


@pytest.mark.parametrize("page", PAGES)
def test_docs_page_runs_and_prints_what_it_says(page, tmp_path):
    problems = check_page(ROOT / page, tmp_path)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("stated", "printed"),
    [
        ("True [ True  True]", "True [ True  True]\n"),
        ("True [True True]", "True [ True  True]\n"),
        ("float32 STALLED 16", "float32 STALLED 16\n"),
        ("Stopped: max_steps reached ...", "Stopped: max_steps reached (5).\n"),
        ("4.21e-05", "4.2149e-05"),
        ("4.2e-05±5%", "4.38e-05"),
        ("16±3", "18"),
        ("[1. 0. 1.]", "[1. 0. 1.]"),
        ("[1. -0. 1.]", "[ 1. -0.  1.]"),
        ("[1.000 1.000]", "[0.99999994 1.        ]"),
        ("0.93 [..., ...]", "0.9251 ['a b', 'c']"),
    ],
)
def test_a_true_stated_output_passes(stated, printed):
    assert output_mismatch(stated, printed) is None


@pytest.mark.parametrize(
    ("stated", "printed"),
    [
        ("True [ True  True]", "False [False False]"),  # words and booleans are exact
        ("16", "17"),  # integers are exact
        ("16", "16.0"),
        ("16", "160"),
        ("float32", "float16"),
        ("[1. 0. 1.]", "[0.99999994 0. 1.]"),  # NumPy's `1.` is 1
        ("[1. 0. 1.]", "[ 1. -0.  1.]"),  # and its `0.` is not `-0.`
        ("[1. -0. 1.]", "[1. 0. 1.]"),
        ("4.1e-05", "4.21e-05"),  # to the digits shown
        ("4.21e-05", "4.2151e-05"),
        ("4.2e-05±1%", "4.3e-05"),
        ("16±1", "18"),
        ("0.5", "nan"),
        ("Converged ...", "Stopped: max_steps reached"),
    ],
)
def test_a_false_stated_output_fails(stated, printed):
    assert output_mismatch(stated, printed) is not None


def test_a_page_with_a_false_comment_fails(tmp_path):
    """The whole path, on a small page: a false comment, a print in a loop whose second
    iteration differs, a stated print that never runs, a note above a print (not an output)."""
    page = tmp_path / "page.md"
    page.write_text(
        "# A page\n\nSome text.\n\n```python\nx = 2 + 2\nprint(x, x > 3)  # 4 True\n"
        "print(x / 3)  # 1.33\n```\n\nMore text.\n\n```python\nprint(x * 2)  # 9\n"
        "for i in range(2):\n    print(i)  # 0\n# an explanation, not an output:\nprint('ok')\n"
        "if x < 0:\n    print(x)  # 4\n```\n"
    )
    problems = check_page(page, tmp_path)
    assert len(problems) == 3, problems
    assert problems[0].startswith("page.md:14: printed '8', the page says '9'")
    assert problems[1].startswith("page.md:16: printed '1', the page says '0'")
    assert problems[2] == "page.md:20: states '4', but the print never ran"


def test_a_page_that_raises_fails(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```python\nx = 1\n\nraise ValueError('from the page')\n```\n")
    (problem,) = check_page(page, tmp_path)
    assert 'page.md", line 4' in problem and "ValueError: from the page" in problem


def test_the_index_lists_every_example():
    index = (ROOT / "docs" / "index.md").read_text()
    listed = set(re.findall(r"^- `(\w+\.py)`", index, re.M))
    assert listed == {path.name for path in (ROOT / "examples").glob("*.py")}


def test_the_index_and_the_nav_list_every_page():
    """docs/index.md links every other page of docs/, and mkdocs.yml's nav lists every page
    once."""
    pages = {path.name for path in (ROOT / "docs").glob("*.md")}
    index = (ROOT / "docs" / "index.md").read_text()
    linked = set(re.findall(r"\]\(([\w-]+\.md)(?:#[\w-]*)?\)", index))
    assert linked == pages - {"index.md"}, f"not linked: {sorted(pages - {'index.md'} - linked)}"
    nav = re.findall(r"^\s*- [^:\n]+: ([\w-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    assert sorted(nav) == sorted(pages)
