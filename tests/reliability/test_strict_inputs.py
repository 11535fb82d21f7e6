"""Inputs that used to be accepted silently, and tampered results a resume used to count: each now one line, exit 2.

(Damaged disk-cache entries are in tests/engine/test_cache.py; trace-chip lists of steps in
tests/experiments/test_step_trace.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.reliability.files import TINY_GEMM_POINT
from tpusim.cli.main import main
from tpusim.experiments.spec import expand, load_experiment

GEMM = ["gemm", "--hardware", "meshslice-tpu-fit", "--mesh", "4x4", "--algorithm", "summa", "--dataflow", "os",
        "--m", "64", "--n", "64", "--k", "64"]


def _status(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    status = main(argv)
    return status, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("extra, message", [
    ("  model: gpt3-175b\n", "unknown key 'model' at point"),
    ("  chunks: 4\n", "unknown key 'chunks' at point"),
])
def test_fields_a_kind_does_not_use_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: str,
                                                message: str) -> None:
    experiment = tmp_path / "unused.yaml"
    experiment.write_text("name: unused\n" + TINY_GEMM_POINT + extra)
    status, err = _status(["run", str(experiment), "--out", str(tmp_path / "out")], capsys)
    assert status == 2 and len(err) in (1, 2) and message in err[0]  # a second line may suggest a key


def test_a_byte_count_of_nan_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    experiment = tmp_path / "nan.yaml"
    experiment.write_text("name: nan\npoint:\n  kind: collective\n  hardware: tpuv4\n  topology: torus:4x4\n"
                          "  mesh: 4x4\n  axis: 0\n  op: all-gather\n  bytes: 'nan'\n")
    status, err = _status(["run", str(experiment), "--out", str(tmp_path / "out")], capsys)
    assert status == 2
    assert err == [f"{experiment}: point.bytes: cannot parse 'nan' as a number with a unit"]


@pytest.mark.parametrize("chips", ["5-2", "0-999"])
def test_trace_chips_outside_the_mesh_or_reversed_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              chips: str) -> None:
    trace = tmp_path / "t.json"
    status, err = _status([*GEMM, "--trace", str(trace), "--trace-chips", chips], capsys)
    assert status == 2 and len(err) == 1 and err[0].startswith("trace chips: ")
    assert not trace.exists()


@pytest.mark.parametrize("index", [999, -5, "0"])
def test_resume_refuses_an_out_of_range_point_index(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   index: object) -> None:
    experiment = tmp_path / "two.yaml"
    experiment.write_text("name: two\n" + TINY_GEMM_POINT + "sweep:\n  grid:\n    m: [64, 128]\n")
    out = tmp_path / "out"
    assert _status(["run", str(experiment), "--out", str(out), "--quiet"], capsys)[0] == 0
    results = json.loads((out / "results.json").read_text())
    results["points"][0]["index"] = index
    (out / "results.json").write_text(json.dumps(results))
    status, err = _status(["run", str(experiment), "--out", str(out), "--resume", "--quiet"], capsys)
    assert status == 2
    assert err == [f"{str(out / 'results.json')!r}: finished point #0 is malformed (its 'index' must be a distinct "
                   "integer in 0..1, its 'row' and 'point' objects); it cannot be resumed (use another --out folder)"]


def test_exclude_compares_quantities_not_their_spelling(tmp_path: Path) -> None:
    # 1MB is 1000000 bytes and 4194304 is 4MiB: a pattern excludes the point whichever way either is written
    path = tmp_path / "sizes.yaml"
    path.write_text("name: sizes\ndescription: x\npoint:\n  kind: collective\n  hardware: meshslice-tpu-fit\n"
                    "  mesh: 4x4\n  op: all-gather\n  axis: 1\n  bytes: 1MB\nsweep:\n  grid:\n"
                    "    bytes: [1MB, 2MB, 4194304]\n  exclude:\n    - {bytes: 1000000}\n    - {bytes: 4MiB}\n")
    assert [point.bytes for point in expand(load_experiment(path))] == ["2MB"]
