"""Every citation of the documentation resolves: ``docs/<file>.md`` names a file under docs/, and
``docs/<file>.md#<anchor>`` a heading of that file (GitHub's anchors). Citations are searched in the package's
code, the shipped files of configs/ and experiments/, the README, the docs themselves and the notebooks; inside
docs/ (and the README) relative Markdown links to ``.md`` files and ``#anchor`` links within a page are checked
the same way."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

CITATION = re.compile(r"(?<![\w./-])docs/(?P<file>[\w./-]*?\.md)(?:#(?P<anchor>[\w-]*))?")
"""``docs/<file>.md`` or ``docs/<file>.md#<anchor>``, not preceded by another path component."""
LINK = re.compile(r"\]\((?P<target>[^)\s]*)\)")
"""The target of a Markdown link ``[text](target)``."""
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(?P<text>.*?)\s*#*\s*$")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase; characters other than letters, digits, spaces, hyphens and
    underscores dropped (backticks among them); spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """The anchors of every heading of a Markdown file (a repeated heading's later ones get -1, -2, ...),
    headings inside fenced code blocks excluded."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match is None:
            continue
        base = slug(match["text"])
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


def sources() -> list[Path]:
    """The files whose citations must resolve."""
    found = [*(ROOT / "tpusim").rglob("*.py"), *(ROOT / "configs").rglob("*.yaml"), *(ROOT / "configs").rglob("*.md"),
             *(ROOT / "experiments").rglob("*.yaml"), *DOCS.glob("*.md")]
    found += [path for path in ROOT.rglob("*.ipynb")
              if not {".git", ".ipynb_checkpoints", "build"} & set(path.relative_to(ROOT).parts)]
    readme = ROOT / "README.md"
    if readme.exists():
        found.append(readme)
    return sorted(found)


def problem(target: Path, anchor: str | None) -> str | None:
    """What is wrong with a citation of ``target`` (and ``anchor``), or None."""
    if not target.is_file():
        return "no such file"
    if anchor and anchor not in anchors(target):
        return f"no heading with anchor #{anchor}"
    return None


def citations(path: Path) -> Iterator[tuple[int, str, Path, str | None]]:
    """(line, citation as written, file it names, anchor) of every citation in ``path``."""
    markdown = path.suffix == ".md"
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        for match in CITATION.finditer(line):
            yield number, match[0], DOCS / match["file"], match["anchor"]
        if not markdown:
            continue
        if FENCE.match(line):
            fenced = not fenced
        if fenced:
            continue
        for match in LINK.finditer(line):
            target = match["target"]
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("docs/"):
                continue  # an external address, or a docs/ citation checked above
            name, _, anchor = target.partition("#")
            if name and not name.endswith(".md"):
                continue  # a picture or another file
            yield number, target, (path.parent / name).resolve() if name else path, anchor or None


def broken() -> list[str]:
    found = []
    for path in sources():
        for number, written, target, anchor in citations(path):
            why = problem(target, anchor)
            if why is not None:
                found.append(f"{path.relative_to(ROOT)}:{number}: {written}: {why}")
    return found


def test_every_citation_resolves() -> None:
    found = broken()
    assert not found, f"{len(found)} broken citation(s):\n" + "\n".join(found)


@pytest.mark.parametrize(("heading", "anchor"), [
    ("Physical closed forms", "physical-closed-forms"),
    ("What `--bytes` means per operation", "what---bytes-means-per-operation"),
    ("The `mapping` result field", "the-mapping-result-field"),
    ("Wang collective matmul", "wang-collective-matmul"),
    ("tpuv4-wire", "tpuv4-wire"),
    ("1D tensor parallelism", "1d-tensor-parallelism"),
    ("What has no closed form, and why", "what-has-no-closed-form-and-why"),
])
def test_slug_follows_github(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_a_broken_citation_is_reported(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## Some `code` here\n\n```\n# not a heading\n```\n\n## Title\n", encoding="utf-8")
    assert anchors(page) == {"title", "some-code-here", "title-1"}
    assert problem(page, "some-code-here") is None
    assert problem(page, "not-a-heading") == "no heading with anchor #not-a-heading"
    assert problem(tmp_path / "missing.md", None) == "no such file"
    cited = tmp_path / "cite.py"
    cited.write_text("x = 1  # docs/network.md#links and docs/nowhere.md, not mydocs/x.md\n", encoding="utf-8")
    written = [c[1] for c in citations(cited)]
    assert written == ["docs/network.md#links", "docs/nowhere.md"]
