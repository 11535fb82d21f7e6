"""An experiment's names are checked before any point runs (one line, exit 2, nothing written), and a point that
could not be simulated makes ``tpusim run`` exit 4 with every other point recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.refusals import refusal
from tpusim.cli.main import main
from tpusim.experiments.run import POINT_ERRORS_EXIT
from tpusim.hardware import hardware_names

POINT = """name: names
point:
  kind: gemm
  hardware: meshslice-tpu-fit
  mesh: 2x2
  algorithm: collective
  dataflow: os
  m: 64
  n: 64
  k: 64
sweep:
  grid:
"""
VALID_ALGORITHMS = "cannon, collective, fsdp, meshslice, summa, tp1d, wang"


@pytest.mark.parametrize(("grid", "lines"), [
    ("    algorithm: [collective, colective]\n",
     ["sweep.yaml (sweep point 1): algorithm: unknown algorithm 'colective'; valid: " + VALID_ALGORITHMS,
      "did you mean 'collective'?"]),
    ("    hardware: [meshslice-tpu-fit, tpuv4x]\n",
     ["sweep.yaml (sweep point 1): hardware: unknown hardware profile 'tpuv4x'; valid: "
      + ", ".join(hardware_names()), "did you mean 'tpuv4'?"]),
])
def test_an_unknown_name_is_refused_before_any_point_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           grid: str, lines: list[str]) -> None:
    (tmp_path / "sweep.yaml").write_text(POINT + grid)
    err = refusal(capsys, ["run", str(tmp_path / "sweep.yaml"), "--out", str(tmp_path / "out")])
    assert err.splitlines() == [line.replace("sweep.yaml", str(tmp_path / "sweep.yaml"), 1) for line in lines]
    assert not (tmp_path / "out").exists()


def test_an_unknown_model_of_a_tune_point_is_refused_and_all_is_an_algorithm(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "tune.yaml").write_text("name: t\npoint:\n  kind: tune\n  hardware: tpuv4\n  chips: 4\n"
                                        "  algorithm: all\n  model: gpt3-175b\nsweep:\n  grid:\n"
                                        "    model: [gpt3-175b, gpt9]\n")
    err = refusal(capsys, ["run", str(tmp_path / "tune.yaml"), "--out", str(tmp_path / "out")])
    assert err.splitlines()[0].startswith(f"{tmp_path / 'tune.yaml'} (sweep point 1): model: unknown model 'gpt9'; "
                                          "valid: ")


def test_a_point_that_cannot_be_simulated_exits_4_and_keeps_the_others(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "sweep.yaml").write_text(POINT + "    algorithm: [collective, cannon]\n    mesh: [2x2, 2x1]\n")
    assert POINT_ERRORS_EXIT == 4
    assert main(["run", str(tmp_path / "sweep.yaml"), "--out", str(tmp_path / "out"), "--quiet", "--json"]) == 4
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["point.algorithm"], r["point.mesh"], r["error"] == "none") for r in rows] == [
        ("collective", "2x2", True), ("collective", "2x1", True), ("cannon", "2x2", True), ("cannon", "2x1", False)]
    assert rows[3]["error"].startswith("algorithm 'cannon' needs a square mesh; got 2x1")
