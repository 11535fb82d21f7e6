"""The README's `tpusim step` example prints what the README shows, line for line (its text summary: throughput,
slice counts and sizes as docs/results.md#command-line-conventions says)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from tpusim.cli.main import main

README = Path(__file__).resolve().parents[2] / "README.md"


def _step_examples() -> list[tuple[list[str], list[str]]]:
    """(arguments from ``step`` on, promised stdout lines) of every README block that starts with
    ``$ tpusim step``."""
    examples = []
    for block in README.read_text().split("```")[1::2]:
        lines = block.strip("\n").splitlines()
        if lines and lines[0].startswith("$ tpusim step "):
            examples.append((shlex.split(lines[0])[2:], lines[1:]))  # the arguments after "$ tpusim"
    return examples


@pytest.mark.slow  # a 4096-chip pod, under symmetric fidelity: about 9 s
@pytest.mark.parametrize(("argv", "promised"), _step_examples())
def test_the_readme_step_example_prints_what_it_shows(capsys: pytest.CaptureFixture[str], argv: list[str],
                                                      promised: list[str]) -> None:
    assert main(argv) == 0
    assert capsys.readouterr().out.splitlines() == promised


def test_the_readme_has_a_step_example() -> None:
    assert len(_step_examples()) == 1
