"""The shape every refused command line has: exit status 2, nothing on stdout, no traceback; what it said."""

from __future__ import annotations

import pytest

from tpusim.cli.main import main


def refusal(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run ``argv``, check that it was refused as the project refuses bad input, and return its stderr."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "Traceback" not in captured.err
    return captured.err
