"""Comments and docstrings in the package give rules and reasons; the numbers behind them live in
benchmarks/studies/ and docs/benchmarks.md (issue 61). A comment may name a threshold the code
holds (`COMPACT_FROM`, 1e-10) or a paper's equation, but not a measured time, a speed-up, the
machine it was measured on, a benchmark round or issue, or a commit."""

import ast
import io
import pathlib
import re
import tokenize

import pytest

import jaxsearch

PACKAGE = pathlib.Path(jaxsearch.__file__).parent
MODULES = sorted(PACKAGE.rglob("*.py"))

_NUMBER = r"(?<![\w.])\d+(?:[.,]\d+)*"
_RANGE = rf"{_NUMBER}(?:\s*(?:-|–|to)\s*\d+(?:\.\d+)?)?"
MEASUREMENTS = {
    # 0.3 ms, 1.5 to 2.5 us, 8.4 s, 10 minutes
    "a time": re.compile(
        rf"{_RANGE}\s*(?:ms|µs|μs|us|ns|s|secs?|seconds?|mins?|minutes?|hours?)(?![\w'])"
    ),
    # 3x, 1.5× faster, 2 times slower (not 2x2, 0.5 x'Ax or x0)
    "a speed-up": re.compile(
        rf"{_NUMBER}[x×](?![\w'])"
        rf"|{_RANGE}\s*(?:x|×|times)\s+(?:faster|slower|quicker|longer|shorter|as (?:fast|slow))"
    ),
    # 12% slower, 6-12%
    "a share of time": re.compile(
        rf"{_NUMBER}\s*%\s+(?:\w+\s+)?(?:faster|slower|quicker|longer|shorter|more|less|"
        rf"of (?:the |its )?(?:time|run|wall|compile))\b|{_NUMBER}\s*(?:-|–|to)\s*{_NUMBER}\s*%"
    ),
    "a machine": re.compile(
        r"\bTPU\s*v\d|\bv[4-7][ep]\b|\b(?:EPYC|Xeon|Ryzen|Threadripper|Graviton|A100|H100|H200|"
        r"V100|GH200|B200|MI\d{3}X?)\b|\b\d+[- ]cores?\b|\bcores\b",
        re.IGNORECASE,
    ),
    # round 4, issue 48, issue 48's note, #48, PR 12
    "a round or an issue": re.compile(
        r"\b(?:round|issue|PR)\s*#?\d+|(?<![\w&])#\d+\b", re.IGNORECASE
    ),
    # 7 to 40 hex digits, with a digit and a letter among them (not 1000000, not "defaced")
    "a commit": re.compile(r"(?<![\w.])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w.])"),
}


def texts(source: str) -> list[tuple[int, str]]:
    """(line, text) of each comment and each line of each docstring in `source`."""
    found = [
        (token.start[0], token.string)
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                lines = first.value.value.splitlines()
                found += [(first.lineno + i, line) for i, line in enumerate(lines)]
    return sorted(found)


def measurements(sources: dict[str, str]) -> list[str]:
    """`name:line: what (text)` for each comment or docstring line of `sources` (name -> source)
    that carries a measurement."""
    found = []
    for name, source in sources.items():
        for line, text in texts(source):
            for what, pattern in MEASUREMENTS.items():
                if pattern.search(text):
                    found.append(f"{name}:{line}: {what} ({text.strip()})")
    return found


def test_no_comment_or_docstring_carries_a_measurement():
    sources = {str(path.relative_to(PACKAGE)): path.read_text() for path in MODULES}
    found = measurements(sources)
    assert not found, (
        "Comments give the rule and the reason; the figures go to docs/benchmarks.md "
        "('Figures behind design choices') or benchmarks/studies/:\n" + "\n".join(found)
    )


@pytest.mark.parametrize(
    "text",
    [
        "# two_loop below 5000 elements: 1.8 ms vs 2.3 ms",
        "# about 1.5 to 2.5 us an output array",
        "# the vmapped GLM: 8.4 s packed, 5.6 s not",
        "# 10 minutes on the suite",
        "# 3x faster than the two-loop form",
        "# the compact form is 1.5x the speed",
        "# up to 1.5 times slower",
        "# 12% slower for the MLP run",
        "# 6-12% of a step",
        "# measured on a TPU v5e",
        "# on a v5e",
        "# on a 2-core AMD EPYC",
        "# on an Intel Xeon",
        "# on an H200",
        "# on 2 idle cores",
        "# benchmarks/HISTORY.md, round 11",
        "# issue 48's note",
        "# see #48",
        "# since 641d255",
    ],
)
def test_the_check_finds_a_measurement(text):
    """The check above can fail: each kind of measurement, in a comment and in a docstring."""
    assert measurements({"m.py": f"x = 1  {text}\n"}) != []
    assert measurements({"m.py": f'def f():\n    """{text[2:]}"""\n'}) != []


@pytest.mark.parametrize(
    "text",
    [
        "ftol's default 1e-10, below f's rounding",
        "x0's floating leaves, and x0s under vmap",
        "a 2x2 matrix, and f(x) = 0.5 x'Ax - b'x",
        "O(n^2) memory, O(n) per step",
        "float16, bfloat16 and float32",
        "two_loop below COMPACT_FROM = 5000 elements, where it is faster",
        "Nocedal & Wright (2006), Alg. 3.5, eq. 3.59, p. 61",
        "slot j that of position (j - head + count) % m",
        "on a CPU or a TPU; a GPU takes the compact form",
        "its core math on flat arrays; 36 bytes a row",
        "10^4 problems of 2 variables, max_steps = 200 steps",
        "a step whose change of f is within 100 eps |f|",
        "one host round trip per call",
    ],
)
def test_the_check_passes_rules_and_references(text):
    assert measurements({"m.py": f"x = 1  # {text}\n"}) == []
