"""Progress bars: on standard error when it is a terminal, counting to their total; never on standard output,
and nothing at all when standard error is a pipe or a file."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from tpusim.cli import step as step_command
from tpusim.cli.main import main
from tpusim.cli.progress import Bar

TUNE = ["tune", "--model", "gpt3-175b", "--hardware", "meshslice-sim", "--chips", "16", "--ignore-memory"]
STEP = ["step", "--model", "gpt3-175b", "--hardware", "meshslice-sim", "--mesh", "4x4", "--algorithm", "meshslice",
        "--ignore-memory"]


class Terminal(io.StringIO):
    """What a bar sees when standard error is a terminal."""

    def isatty(self) -> bool:
        return True


def _last_frame(drawn: str) -> str:
    """The bar as it was left: the last of the frames tqdm separates with carriage returns."""
    return [frame for frame in drawn.split("\r") if frame.strip()][-1].strip()


def test_a_bar_on_a_stream_that_is_not_a_terminal_writes_nothing() -> None:
    stream = io.StringIO()
    with Bar("point", stream=stream) as bar:
        bar.describe("running")
        bar.phase("family", 1, 2)
        bar.update(2, 2)
        assert not bar.drawn
    assert stream.getvalue() == ""


def test_phases_count_from_zero_each_to_their_own_total() -> None:
    terminal = Terminal()
    with Bar("point", stream=terminal) as bar:
        for done in range(4):
            bar.phase("first", done, 3)
        assert bar.counts == (3, 3)
        bar.phase("second", 0, 2)
        assert bar.counts == (0, 2)
        bar.phase("second", 2, 2)
    assert bar.counts == (2, 2)
    drawn = terminal.getvalue()
    assert "first: 100%" in drawn and "3/3" in drawn
    assert _last_frame(drawn).startswith("second: 100%")
    assert "2/2" in _last_frame(drawn)


@pytest.mark.slow
def test_tune_counts_its_stages_to_the_total_on_a_terminal(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main([*TUNE, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)  # stdout is the JSON object alone
    stages = 2 + sum(1 for mesh in result["meshes"] if mesh["status"] == "simulated")
    last = _last_frame(terminal.getvalue())
    assert last.startswith("timing the best configuration and the runner-up as whole steps: 100%")
    assert f"| {stages}/{stages} [" in last


@pytest.mark.slow
def test_a_long_step_counts_its_layers_then_the_step_on_a_terminal(monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(step_command, "BAR_DELAY_S", 0.0)  # this step is quick; a real one draws after the delay
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main([*STEP, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["slices"]  # stdout is the JSON object alone
    drawn = terminal.getvalue()
    assert "choosing slice counts per layer: 100%" in drawn and "| 4/4 [" in drawn
    assert _last_frame(drawn).startswith("simulating the step: 100%")
    assert "| 1/1 [" in _last_frame(drawn)


def test_a_quick_step_draws_no_bar_even_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main([*STEP, "--slices", "4", "--json"]) == 0
    assert "%|" not in terminal.getvalue()


@pytest.mark.slow
def test_reproduce_counts_the_points_of_its_family_on_a_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(["reproduce", "slice-sweep", "--quick", "--jobs", "1", "--out", str(tmp_path), "--json"]) == 0
    json.loads(capsys.readouterr().out)  # stdout is the JSON object alone
    points = len(json.loads((tmp_path / "slice-sweep" / "results.json").read_text())["points"])
    last = _last_frame(terminal.getvalue())
    assert last.startswith("slice-sweep: 100%")
    assert f"| {points}/{points} [" in last


@pytest.mark.parametrize("argv", [TUNE, STEP], ids=["tune", "step"])
@pytest.mark.slow
def test_piped_standard_error_carries_no_bar(argv: list[str], monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(step_command, "BAR_DELAY_S", 0.0)
    assert main(argv) == 0
    out, err = capsys.readouterr()
    for text in (out, err):
        assert "\r" not in text
        assert "%|" not in text
