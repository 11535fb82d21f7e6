"""Reading README.md and docs/*.md as tests need them: a page's text with its lines joined, the rows of the
markdown table under a given header, and the examples (fenced blocks of ``$ command`` lines, each followed by
the lines it prints) that tests run and compare with what the commands print now."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def page(relative: str) -> str:
    """The text of ``relative`` (``docs/chip.md``) with every run of whitespace made one space, so that a
    sentence matches however the page wraps it."""
    return " ".join((ROOT / relative).read_text().split())


def table(relative: str, header: str) -> list[list[str]]:
    """The body rows (cells stripped, backticks kept) of the table in ``relative`` whose header line starts
    with ``header``."""
    lines = (ROOT / relative).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


@dataclass(frozen=True)
class Example:
    """One ``$ command`` line of a page and the lines the page shows it printing (stdout, then stderr)."""

    page: str
    line: int
    command: str
    shown: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


FENCE = re.compile(r"^```")


def examples() -> list[Example]:
    """Every example of README.md and docs/: a fenced block whose first line starts with ``$ ``. A block may hold
    several commands, each one's output running to the next ``$ `` line (blank lines before it left out)."""
    found = []
    for path in PAGES:
        relative = str(path.relative_to(ROOT))
        lines = path.read_text().splitlines()
        inside, block_start = False, 0
        for number, line in enumerate(lines, 1):
            if FENCE.match(line):
                if inside:
                    found.extend(_block(relative, block_start, lines[block_start:number - 1]))
                inside, block_start = not inside, number
    return found


def _block(relative: str, opened: int, body: list[str]) -> list[Example]:
    if not body or not body[0].startswith("$ "):
        return []
    starts = [i for i, line in enumerate(body) if line.startswith("$ ")]
    result = []
    for start, end in zip(starts, [*starts[1:], len(body)], strict=True):
        shown = body[start + 1:end]
        while shown and not shown[-1]:
            shown = shown[:-1]
        result.append(Example(relative, opened + 1 + start, body[start].removeprefix("$ "), tuple(shown)))
    return result
