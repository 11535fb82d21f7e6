"""results.csv is tidy: one column per value, every input of a point, text that reads back as str in pandas."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tpusim.config.requests import FF_LAYERS
from tpusim.experiments.rows import input_cells
from tpusim.experiments.run import run_experiment

# step points with one K for all layers and with one K each, two that fail, and a tune point
EXPERIMENT = """\
name: tidy
point: {kind: step, hardware: meshslice-sim, model: gpt3-175b, mesh: 4x4, batch: 16, algorithm: meshslice,
        ignore_memory: true}
sweep:
  include:
    - {slices: 2}
    - {slices: [1, 2, 4, 4], dataflows: os, slow_chips: ["3,5:1.5"], prefetch: window, prefetch_budget: 1MiB}
    - {algorithm: cannon, mesh: 8x2}
    - {kind: tune, chips: 16}
"""
CANNON_ERROR = ("algorithm 'cannon' needs a square mesh; got 8x2 (R != C); valid on 16, 64, 256, 1024 chips as "
                "4x4, 8x8, 16x16, 32x32")


@pytest.fixture(scope="module")
def tidy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, pd.DataFrame, list[dict[str, Any]]]:
    folder = tmp_path_factory.mktemp("tidy")
    (folder / "experiment.yaml").write_text(EXPERIMENT)
    summary = run_experiment(folder / "experiment.yaml", folder / "out")
    entries = json.loads((folder / "out" / "results.json").read_text())["points"]
    return summary, pd.read_csv(folder / "out" / "results.csv"), entries


@pytest.mark.slow
def test_every_input_of_a_point_is_a_column(tidy: tuple[Any, pd.DataFrame, list[dict[str, Any]]]) -> None:
    _, frame, _ = tidy
    assert len(frame) == 4
    assert frame["point.kind"].tolist() == ["step", "step", "step", "tune"]
    assert frame["point.model"].tolist() == ["gpt3-175b"] * 4  # fixed inputs, not only the swept ones
    assert frame["point.hardware"].tolist() == ["meshslice-sim"] * 4
    assert frame["point.batch"].tolist() == [16] * 4
    assert frame["point.scale.beta"].tolist() == [1.0] * 4
    assert frame["point.mesh"].tolist()[:3] == ["4x4", "4x4", "8x2"] and pd.isna(frame["point.mesh"][3])
    assert frame["point.chips"].isna().tolist() == [True, True, True, False] and frame["point.chips"][3] == 16
    # one K for all four layers is repeated; four are spread over the per-layer columns
    assert frame.loc[0, [f"point.slices_{layer}" for layer in FF_LAYERS]].tolist() == [2, 2, 2, 2]
    assert frame.loc[1, [f"point.slices_{layer}" for layer in FF_LAYERS]].tolist() == [1, 2, 4, 4]
    assert frame.loc[2, [f"point.slices_{layer}" for layer in FF_LAYERS]].isna().all()
    assert frame.loc[0, [f"point.dataflows_{layer}" for layer in FF_LAYERS]].tolist() == ["default"] * 4
    assert frame.loc[1, [f"point.dataflows_{layer}" for layer in FF_LAYERS]].tolist() == ["os"] * 4
    # defaults, lists, sizes
    assert frame["point.topology"].tolist() == ["default"] * 4
    assert frame["point.prefetch"].tolist() == ["default", "window", "default", "default"]
    assert frame["point.slow_chips"].tolist()[:3] == ["none", "3,5:1.5", "none"]
    assert frame["point.dataflows"][3] == "os ls rs"  # what a tune point may choose from
    assert frame["point.prefetch_budget_bytes"][1] == 1048576 and pd.isna(frame["point.prefetch_budget_bytes"][0])


def test_per_layer_results_and_resolved_fidelity(tidy: tuple[Any, pd.DataFrame, list[dict[str, Any]]]) -> None:
    _, frame, entries = tidy
    step, tune = entries[0]["result"], entries[3]["result"]
    for name in ("slices", "dataflows", "transposes"):
        assert frame.loc[0, [f"{name}_{layer}" for layer in FF_LAYERS]].tolist() == step[name]
        assert frame.loc[3, [f"{name}_{layer}" for layer in FF_LAYERS]].tolist() == tune["best"][name]
    assert frame["step_time_s"][0] == step["step_time_s"]  # repr(): exact round trip
    assert frame["step_time_s"][3] == tune["best"]["step_time_s"]
    assert frame["point.fidelity"].tolist() == ["auto"] * 4
    assert tune["fidelity"] == "auto"  # results.json keeps the tune result as it is: the fidelity requested
    assert frame["fidelity"][3] == tune["best"]["fidelity"] == step["fidelity"] == "symmetric"
    assert frame["mesh"][3] == tune["best"]["mesh"] and frame["batch"][3] == tune["batch"] == 16
    # where the chosen mesh was placed: nowhere on a calibrated profile, an empty cell
    assert tune["best"]["slice_shape"] is None and pd.isna(frame["slice_shape"][3])
    assert frame["recompute"].tolist()[::3] == ["none", "none"]


def test_errors_and_text_read_back_as_str(tidy: tuple[Any, pd.DataFrame, list[dict[str, Any]]]) -> None:
    summary, frame, _ = tidy
    assert frame["error"].tolist() == ["none", "none", CANNON_ERROR, "none"]
    assert summary.errors == 1
    assert frame.loc[2, ["step_time_s", "mfu", "slices_ff1"]].isna().all()  # no result: empty cells
    for column in ("error", "point.model", "point.topology", "fidelity", "mesh", "dataflows_ff1"):
        assert pd.api.types.is_string_dtype(frame[column]), column
    for column in frame.columns:  # no JSON text left in any cell
        assert not frame[column].map(lambda v: isinstance(v, str) and v[:1] in "[{").any(), column


def test_to_frame_is_what_read_csv_gives(tidy: tuple[Any, pd.DataFrame, list[dict[str, Any]]]) -> None:
    summary, frame, _ = tidy
    pd.testing.assert_frame_equal(summary.to_frame(), frame)


def test_a_sweep_of_one_kind_has_plain_dtypes(tmp_path: Path) -> None:
    text = EXPERIMENT.split("sweep:")[0] + "sweep:\n  grid:\n    slices: [2, 4]\n    scale.beta: [0.5, 1]\n"
    (tmp_path / "experiment.yaml").write_text(text)
    run_experiment(tmp_path / "experiment.yaml", tmp_path / "out")
    frame = pd.read_csv(tmp_path / "out" / "results.csv")
    assert list(frame.columns[:7]) == ["index", *(f"point.slices_{layer}" for layer in FF_LAYERS), "point.scale.beta",
                                       "point.kind"]
    assert frame["error"].tolist() == ["none"] * 4
    kinds = {column: frame[column].dtype.kind for column in frame.columns}
    strings = {c for c in frame.columns if pd.api.types.is_string_dtype(frame[c])}
    assert all(kind in "ifb" for c, kind in kinds.items() if c not in strings), kinds
    assert {"error", "point.model", "point.topology", "point.slow_links", "fidelity", "dataflows_qkv"} <= strings
    assert frame["slices_ff2"].tolist() == [2, 2, 4, 4] and frame["point.scale.beta"].tolist() == [0.5, 1.0] * 2


@pytest.mark.slow
def test_resume_rebuilds_rows_of_an_older_format(tmp_path: Path) -> None:
    (tmp_path / "experiment.yaml").write_text(EXPERIMENT)
    run_experiment(tmp_path / "experiment.yaml", tmp_path / "clean")
    run_experiment(tmp_path / "experiment.yaml", tmp_path / "old")
    path = tmp_path / "old" / "results.json"
    data = json.loads(path.read_text())
    for entry in data["points"]:  # rows as an earlier version wrote them
        entry["row"] = {"index": entry["index"], "slices": json.dumps(entry["point"].get("slices"))}
    path.write_text(json.dumps(data))
    (tmp_path / "old" / "results.csv").write_text("index,slices\n")
    assert run_experiment(tmp_path / "experiment.yaml", tmp_path / "old", resume=True).skipped == 4
    for name in ("results.csv", "results.json"):
        assert (tmp_path / "old" / name).read_bytes() == (tmp_path / "clean" / name).read_bytes()


def test_input_cells_of_sizes_objects_and_defaults() -> None:
    cells = input_cells({"kind": "collective", "hardware": {"name": "mine", "chip": {}}, "bytes": "64MB",
                         "overlap_limit": None, "chunks": None, "slow_links": ["x:2", "0-16:2:3"]})
    assert cells == {
        "kind": {"point.kind": "collective"},
        "hardware": {"point.hardware": "mine"},  # a profile given inline: its name
        "bytes": {"point.bytes": 64_000_000},
        "overlap_limit": {"point.overlap_limit": "default"},
        "chunks": {"point.chunks": None},  # a number not given: an empty cell
        "slow_links": {"point.slow_links": "x:2 0-16:2:3"},
    }
