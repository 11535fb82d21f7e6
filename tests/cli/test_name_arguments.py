"""Positional and flag names the command line checks itself (family, listing, executor) fail like every other
unknown name: one line listing the valid names, a "did you mean" line, exit 2."""

from __future__ import annotations

import pytest

from tpusim.cli.main import main


@pytest.mark.parametrize(("argv", "first", "guess"), [
    (["reproduce", "headlines", "--out", "unused"],
     "unknown reproduction family 'headlines'; valid: all, breakdown, headline, mesh-shapes, pod, sensitivity, "
     "slice-sweep, strong-scaling, tuner-accuracy, tuner-accuracy-pod, weak-scaling", "did you mean 'headline'?"),
    (["list", "model"], "unknown listing 'model'; valid: algorithms, collectives, experiments, hardware, models",
     "did you mean 'models'?"),
    (["run", "unused.yaml", "--out", "unused", "--executor", "dsk"], "unknown executor 'dsk'; valid: dask, local",
     "did you mean 'dask'?"),
])
def test_unknown_names_say_what_is_valid(argv: list[str], first: str, guess: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [first, guess]
