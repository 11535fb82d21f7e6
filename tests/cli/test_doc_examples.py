"""Every example in README.md and docs/ (a fenced block whose lines start with ``$ ``) prints what the page shows,
line for line: the command runs as a user would type it, in a fresh folder that sees the repository's
``configs/`` and ``tests/``, and its stdout followed by its stderr must equal the lines shown under it."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.documents import ROOT, Example, examples

# examples that take more than about 5 s on a loaded 2-core machine
SLOW = {
    "tpusim validate --measurements configs/measurements/calibration.csv",  # every measured run
    "tpusim step --model gpt3-175b --hardware tpuv4 --algorithm summa --mesh 4x4 --ignore-memory --slow-link x:1e308",
}


def _run(example: Example, folder: Path) -> list[str]:
    """What ``example``'s command prints (stdout lines, then stderr lines), run from ``folder``."""
    words = shlex.split(example.command)
    env = dict(os.environ)
    while "=" in words[0]:
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    quiet = words[-2:] == [">", "/dev/null"]
    if quiet:
        words = words[:-2]
    assert words[0] == "tpusim" and ">" not in words, f"{example.name}: not a tpusim command: {example.command}"
    # the page's relative PYTHONPATH is joined to the one this checkout runs from, so this tpusim is the one run
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH", ""), str(ROOT)) if p)
    done = subprocess.run([sys.executable, "-m", "tpusim", *words[1:]], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    printed = [] if quiet else done.stdout.splitlines()
    return printed + done.stderr.splitlines()


def _params() -> list[object]:
    return [pytest.param(e, id=e.name, marks=[pytest.mark.slow] if e.command in SLOW else [])
            for e in examples()]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    here = tmp_path_factory.mktemp("examples")
    for name in ("configs", "tests"):
        (here / name).symlink_to(ROOT / name)
    return here


@pytest.mark.parametrize("example", _params())
def test_the_example_prints_what_the_page_shows(example: Example, folder: Path) -> None:
    assert _run(example, folder) == list(example.shown)


def test_the_pages_hold_their_examples() -> None:
    # a block that stopped starting with "$ " would silently stop being run
    found = {e.page for e in examples()}
    assert found == {"README.md", "docs/extending.md", "docs/limits.md", "docs/results.md", "docs/validation.md",
                     "docs/workloads.md"}
    assert len(examples()) == 10
