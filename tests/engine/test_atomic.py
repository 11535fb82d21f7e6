"""Atomic file replacement: the new content or the old, private temporary names, nothing left after a failure."""

from __future__ import annotations

from pathlib import Path
from typing import IO

import pytest

from tpusim.cli.main import main
from tpusim.files import replace_atomically, write_atomic


def test_write_replaces_the_file_and_leaves_nothing_else(tmp_path: Path) -> None:
    target = tmp_path / "results.csv"
    target.write_text("old")
    write_atomic(target, "new")
    assert target.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["results.csv"]


def test_a_failed_write_keeps_the_old_file_and_removes_its_temporary(tmp_path: Path) -> None:
    target = tmp_path / "results.json"
    target.write_text("old")

    def fail(handle: IO[bytes]) -> None:
        handle.write(b"partial")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        replace_atomically(target, fail)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


@pytest.mark.parametrize("command", ["run", "reproduce"])
def test_an_empty_out_folder_is_refused(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    target = "headline" if command == "reproduce" else "unused.yaml"
    assert main([command, target, "--out", ""]) == 2
    assert capsys.readouterr().err == ("--out '' is empty; give the folder the results go to (it is created if "
                                       "missing)\n")
