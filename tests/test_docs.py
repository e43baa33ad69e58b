"""Every Python block of each docs page runs, in order, as one script (a page's blocks build on
each other), so the pages cannot drift from the API."""

import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = sorted(
    page.name for page in (ROOT / "docs").glob("*.md") if "```python" in page.read_text()
)


def python_blocks(text: str) -> str:
    return "\n\n".join(re.findall(r"```python\n(.*?)```", text, re.S))


@pytest.mark.parametrize("page", PAGES)
def test_docs_page_runs(page):
    code = python_blocks((ROOT / "docs" / page).read_text())
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
