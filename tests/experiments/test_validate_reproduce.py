"""``tpusim validate`` passes on the reference numbers and fails with exit 3 on a miss; families run."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from tpusim.cli.main import main
from tpusim.config.requests import TuneRequest, parse_request
from tpusim.experiments import validation
from tpusim.experiments.families.common import by_panel
from tpusim.experiments.families.comparisons import _breakdown_rows, _headline_rows
from tpusim.experiments.families.scaling import _tuned_rows
from tpusim.experiments.reproduce import headline_table, reproduce
from tpusim.experiments.runners import run_request


@pytest.mark.slow
def test_validate_passes_and_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["failed"] == 0
    quantities = [c["quantity"] for c in data["checks"]]
    assert any("(physical ring" in q for q in quantities) and any("(worked example)" in q for q in quantities)
    assert any("DES vs closed form" in q for q in quantities)


@pytest.mark.slow
def test_validate_exits_3_when_a_check_misses(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(validation, "checks", lambda: [validation.Check("made-up", 100.0, 103.0, 0.01)])
    assert main(["validate"]) == 3
    captured = capsys.readouterr()
    assert "MISS" in captured.out
    assert "1 validation check(s) exceeded their tolerance: made-up" in captured.err


@pytest.mark.slow
def test_slice_sweep_family_writes_its_table_and_figure(tmp_path: Path) -> None:
    [output] = reproduce("slice-sweep", tmp_path, quick=True)
    assert output.csv == tmp_path / "slice-sweep" / "slice-sweep.csv"
    assert output.png.stat().st_size > 10_000
    rows = list(csv.DictReader(output.csv.read_text().splitlines()))
    assert [(r["model"], r["requested_slices"]) for r in rows][:3] == [("gpt3-175b", "3"), ("gpt3-175b", "4"),
                                                                        ("gpt3-175b", "6")]
    assert len(rows) == 14 and all(float(r["step_time_s"]) > 0 for r in rows)


def test_unknown_family_is_a_user_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["reproduce", "nope", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("unknown reproduction family 'nope'; valid: all, breakdown, headline")


def test_breakdown_reruns_the_tuned_configuration_with_its_memory_choices() -> None:
    """A tune point that needs memory ignored (GPT-3 on 16 chips) and a fused attention core: the breakdown's step
    is the tuned configuration, so its time equals the tuner's best exactly."""
    point = {"model": "gpt3-175b", "hardware": "meshslice-sim", "chips": 16, "algorithm": "collective",
             "batch": 16, "ignore_memory": True, "attention": "fused"}
    request = parse_request(TuneRequest, point)
    result = run_request(TuneRequest, point)
    entry = {"point": request.model_dump(mode="json", by_alias=True), "result": result.to_dict(), "error": None}
    rows = _breakdown_rows([entry])
    [step] = [row for row in rows if row["part"] == "step"]
    assert step["mesh"] == result.best.mesh
    assert step["time_s"] == pytest.approx(result.best.step_time_s, rel=1e-12)


def _tuned(algorithm: str, ignore_memory: bool, step_time_s: float, recompute: str) -> dict[str, Any]:
    best = {"mesh": "32x8", "slices": [None] * 4, "dataflows": ["os"] * 4, "step_time_s": step_time_s,
            "mfu": 0.5, "hfu": 0.6}
    return {"point": {"model": "gpt3-175b", "algorithm": algorithm, "hardware": "tpuv4",
                      "ignore_memory": ignore_memory},
            "result": {"best": best, "recompute": recompute, "microbatches": 1}, "error": None}


def test_headline_compares_within_each_memory_treatment() -> None:
    """Feasible and memory-ignored points are two comparisons: speedups never mix them, rows say which."""
    entries = [_tuned("wang", False, 12.0, "full"), _tuned("meshslice", False, 10.0, "full"),
               _tuned("wang", True, 9.0, "none"), _tuned("meshslice", True, 8.0, "none")]
    rows = _headline_rows(entries)
    by_key = {(row["memory"], row["algorithm"]): row for row in rows}
    assert by_key[("feasible", "wang")]["meshslice_speedup"] == pytest.approx(0.2)
    assert by_key[("ignored", "wang")]["meshslice_speedup"] == pytest.approx(0.125)
    assert by_key[("feasible", "meshslice")]["recompute"] == "full"
    assert by_key[("ignored", "meshslice")]["hfu"] == 0.6
    text = headline_table(rows)
    assert "gpt3-175b, memory feasible: MeshSlice vs best other 2D (wang) +20.0%" in text
    assert "gpt3-175b, memory ignored: MeshSlice vs best other 2D (wang) +12.5%" in text


def test_the_practitioners_baseline_names_its_choice_and_is_not_a_2d_algorithm() -> None:
    """The ``all`` row says which algorithm and layout it chose; MeshSlice's speedup over it is negative where it
    wins, and it never counts as the best other 2D algorithm."""
    baseline = _tuned("all", False, 9.0, "full")
    baseline["result"]["algorithm"] = "tp1d"
    baseline["result"]["best"].update(mesh="64x4x1", layout="fsdp=64,tensor=4x1")
    rows = _headline_rows([_tuned("wang", False, 12.0, "full"), _tuned("meshslice", False, 10.0, "full"), baseline])
    row = next(r for r in rows if r["algorithm"] == "all")
    assert (row["chosen_algorithm"], row["layout"]) == ("tp1d", "fsdp=64,tensor=4x1")
    assert row["meshslice_speedup"] == pytest.approx(9.0 / 10.0 - 1.0)
    assert {r["best_other_2d"] for r in rows} == {"wang"}
    lines = headline_table(rows).splitlines()
    assert lines[3].split() == ["gpt3-175b", "feasible", "all:", "tp1d", "fsdp=64,tensor=4x1", "9.000", "50.0%",
                                "60.0%", "-10.0%"]


def test_scaling_and_mesh_families_panel_by_memory_treatment() -> None:
    """Weak/strong scaling and mesh-shapes rows carry the memory treatment; figures get one panel per model and
    treatment, a row of panels per treatment."""
    entries = [dict(_tuned("meshslice", ignore, 10.0, "full"), point={
        "model": model, "algorithm": "meshslice", "hardware": "meshslice-sim", "ignore_memory": ignore,
        "chips": 256, "batch": None}) for model in ("gpt3-175b", "megatron-nlg-530b-ms") for ignore in (False, True)]
    for entry in entries:
        entry["result"]["best"]["feasible"] = True
    rows = _tuned_rows(entries)
    assert [(r["model"], r["memory"]) for r in rows] == [
        ("gpt3-175b", "feasible"), ("gpt3-175b", "ignored"),
        ("megatron-nlg-530b-ms", "feasible"), ("megatron-nlg-530b-ms", "ignored")]
    panels, columns = by_panel(rows)
    assert list(panels) == ["gpt3-175b, memory feasible", "megatron-nlg-530b-ms, memory feasible",
                            "gpt3-175b, memory ignored", "megatron-nlg-530b-ms, memory ignored"]
    assert columns == 2
    only_ignored, columns = by_panel([r for r in rows if r["memory"] == "ignored"])
    assert list(only_ignored) == ["gpt3-175b, memory ignored", "megatron-nlg-530b-ms, memory ignored"]
    assert columns == 2
