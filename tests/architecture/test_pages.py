"""The tables of README.md and docs/ are whole: no table repeats its header row inside its body (a header pasted
twice reads as a row of column names)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.documents import PAGES, ROOT

SEPARATOR = re.compile(r"^\|(\s*:?-+:?\s*\|)+$")


def _repeated_headers(text: str) -> list[int]:
    """Line numbers of table rows (or separators) that repeat their table's header or separator line."""
    lines = text.splitlines()
    repeated = []
    for i, line in enumerate(lines):
        if i and SEPARATOR.match(line) and lines[i - 1].startswith("|"):
            header, j = lines[i - 1], i + 1
            while j < len(lines) and lines[j].startswith("|"):
                if lines[j] in (header, line):
                    repeated.append(j + 1)
                j += 1
    return repeated


def test_a_repeated_header_is_found() -> None:
    assert _repeated_headers("| a | b |\n|---|---|\n| a | b |\n|---|---|\n| 1 | 2 |\n") == [3, 4]


@pytest.mark.parametrize("path", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_no_table_repeats_its_header(path: Path) -> None:
    assert _repeated_headers(path.read_text()) == []
