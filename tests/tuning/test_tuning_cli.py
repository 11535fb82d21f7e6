"""``tpusim tune``: one JSON object with the promised fields, the table, and errors with exit status 2."""

from __future__ import annotations

import json

import pytest

from tpusim.cli.main import main

BASE = ["tune", "--model", "gpt3-175b", "--hardware", "meshslice-tpu-fit", "--chips", "32"]


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
def test_json_is_one_object_with_the_promised_fields(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, [*BASE, "--ignore-memory", "--json"])
    assert code == 0
    result = json.loads(out)
    for key in ("best", "runner_up", "evaluated", "simulated", "exhaustive", "meshes", "notes"):
        assert key in result
    best = result["best"]
    for key in ("mesh", "dataflows", "transposes", "slices", "step_time_s"):
        assert key in best
    assert len(best["dataflows"]) == len(best["transposes"]) == len(best["slices"]) == 4
    assert result["runner_up"]["mesh"] != best["mesh"]
    assert result["batch"] == 32 and result["exhaustive"] is False
    assert 0 < result["simulated"] < result["evaluated"]


@pytest.mark.slow
def test_human_output_is_a_table_of_best_and_runner_up(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, [*BASE, "--ignore-memory", "--dataflows", "os,ls"])
    assert code == 0
    lines = out.splitlines()
    assert lines[2].startswith("best") and lines[3].startswith("runner-up")
    assert "memory ignored" in err


def test_nothing_fits_exits_2_with_the_shortfall(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, BASE)
    assert code == 2 and out == ""
    message, suggestion = err.strip().splitlines()
    assert "smallest shortfall" in message
    assert "--ignore-memory" in suggestion


@pytest.mark.parametrize(("extra", "expected"), [
    (["--topology", "4x4x2"], "does not apply to calibrated"),
    (["--dataflows", "os,xs"], "unknown dataflow 'xs'"),
    (["--algorithm", "meshslise"], "unknown algorithm"),
])
def test_bad_input_exits_2(capsys: pytest.CaptureFixture[str], extra: list[str], expected: str) -> None:
    code, _, err = run(capsys, [*BASE, "--ignore-memory", *extra])
    assert code == 2
    assert expected in err
