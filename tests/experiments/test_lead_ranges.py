"""Leads with their uncertainty: ``reproduce headline|pod --lead-ranges`` runs every point once more under each
sensitivity setting, and the family tables give each lead's lowest and highest value over the settings and
whether its sign holds under all of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tpusim.config import Experiment
from tpusim.config.loader import validate
from tpusim.config.requests import TuneRequest, parse_request
from tpusim.errors import UserError
from tpusim.experiments.families import get_family
from tpusim.experiments.families.common import NOMINAL, lead_range
from tpusim.experiments.reproduce import lead_text, reproduce
from tpusim.experiments.spec import crossed, expand, load_experiment

LOW, HIGH = "βx2", "βx0.5"


@pytest.mark.parametrize(("leads", "expected"), [
    # every setting agrees with the unscaled lead
    ({NOMINAL: 0.05, HIGH: 0.2, LOW: 0.01}, (3, 0.01, LOW, 0.2, HIGH, True)),
    # one setting turns it around
    ({NOMINAL: 0.016, "λx2": -0.049, "λx0.5": 0.065}, (3, -0.049, "λx2", 0.065, "λx0.5", False)),
    # the other algorithm ahead under every setting holds too
    ({NOMINAL: -0.01, LOW: -0.02}, (2, -0.02, LOW, -0.01, NOMINAL, True)),
    # a setting where a side found nothing does not count
    ({NOMINAL: 0.1, LOW: None, HIGH: 0.3}, (2, 0.1, NOMINAL, 0.3, HIGH, True)),
    # no unscaled lead: a range but no verdict
    ({NOMINAL: None, LOW: 0.1, HIGH: 0.2}, (2, 0.1, LOW, 0.2, HIGH, None)),
    # an unscaled tie (the best layout of any kind is MeshSlice's) has no sign to hold
    ({NOMINAL: 0.0, LOW: 0.1}, (2, 0.0, NOMINAL, 0.1, LOW, None)),
    # a setting that ties turns the lead around
    ({NOMINAL: 0.1, LOW: 0.0}, (2, 0.0, LOW, 0.1, NOMINAL, False)),
])
def test_a_lead_range_is_its_extremes_and_whether_its_sign_holds(
        leads: dict[str, float | None], expected: tuple[Any, ...]) -> None:
    columns = lead_range("lead", leads)
    assert tuple(columns.values()) == expected
    assert list(columns) == ["lead_settings", "lead_low", "lead_low_at", "lead_high", "lead_high_at", "lead_holds"]


def test_without_scaled_settings_every_range_column_is_empty() -> None:
    assert set(lead_range("lead", {NOMINAL: 0.05}).values()) == {None}
    assert lead_text({"lead_settings": None}, "lead") == ""


def _experiment() -> Experiment:
    return validate(Experiment, {
        "name": "x", "point": {"kind": "tune", "hardware": "meshslice-sim", "model": "gpt3-175b", "chips": 16},
        "sweep": {"grid": {"algorithm": ["collective", "meshslice"]}, "include": [{"algorithm": "all"}]}}, "x")


def test_crossing_runs_the_grid_and_the_include_list_under_every_value_but_the_excluded() -> None:
    scales = [{}, {"beta": 0.5}, {"step": 2}]
    grown = crossed(_experiment(), "scale", scales, [{"hardware": "meshslice-sim", "scale.step": 2}])
    seen = [(p.algorithm, p.scale.beta, p.scale.step) for p in expand(grown)]
    assert seen == [("collective", 1.0, 1.0), ("collective", 0.5, 1.0), ("meshslice", 1.0, 1.0),
                    ("meshslice", 0.5, 1.0), ("all", 1.0, 1.0), ("all", 0.5, 1.0)]


def test_a_sweep_that_varies_the_key_already_is_refused() -> None:
    twice = crossed(_experiment(), "scale", [{}], [])
    with pytest.raises(UserError) as refused:
        crossed(twice, "scale", [{}], [], "x")
    assert str(refused.value) == "x: the sweep already varies 'scale', so it cannot be run under another scale list"


@pytest.mark.parametrize(("hardware", "settings"), [("meshslice-sim", 9), ("tpuv4", 17)])
@pytest.mark.slow
def test_the_packaged_headline_runs_under_each_setting_its_profile_takes(hardware: str, settings: int) -> None:
    """As ``reproduce --lead-ranges`` builds it: the sensitivity family's scale list and its exclusions (the
    calibrated profiles have no handshake, op overhead, vector unit or DMA contention to scale)."""
    headline = load_experiment("headline")
    headline = headline.model_copy(update={"point": headline.point.model_copy(update={"hardware": hardware})})
    sensitivity = load_experiment("sensitivity").sweep
    points = expand(crossed(headline, "scale", sensitivity.grid["scale"], sensitivity.exclude, "headline"))
    nominal = expand(headline)
    assert len(points) == settings * len(nominal)
    assert len({p.scale for p in points}) == settings
    # the baseline points (the include list) are ranged like the rest
    assert sum(p.algorithm == "all" for p in points) == settings * sum(p.algorithm == "all" for p in nominal)


def _entry(algorithm: str, seconds: float | None, scale: dict[str, float]) -> dict[str, Any]:
    point = parse_request(TuneRequest, {"model": "gpt3-175b", "hardware": "meshslice-sim", "chips": 256,
                                        "algorithm": algorithm, "ignore_memory": True, "scale": scale})
    best = None if seconds is None else {"mesh": "64x4", "layout": "tensor=64x4", "slices": None,
                                         "dataflows": ["os"] * 4, "step_time_s": seconds, "mfu": 0.5, "hfu": 0.5}
    return {"point": point.model_dump(mode="json", by_alias=True),
            "result": None if best is None else {"best": best, "algorithm": algorithm},
            "error": None if best else "no configuration"}


# (wang, summa, meshslice) step times under each setting; summa is the best other 2D algorithm under beta x2
TIMES = {NOMINAL: ({}, 10.2, 11.0, 10.0), LOW: ({"beta": 2.0}, 9.6, 9.3, 9.5),
         HIGH: ({"beta": 0.5}, 13.0, 14.0, 11.0)}


def test_headline_rows_range_each_lead_over_the_retuned_settings() -> None:
    entries = [_entry(algorithm, times[index + 1], times[0]) for times in TIMES.values()
               for index, algorithm in enumerate(("wang", "summa", "meshslice"))]
    rows = {row["algorithm"]: row for row in get_family("headline").table(entries)}
    assert len(rows) == 3  # the unscaled points only
    wang, summa = rows["wang"], rows["summa"]
    assert wang["meshslice_speedup"] == pytest.approx(10.2 / 10.0 - 1, rel=1e-12)
    assert (wang["meshslice_speedup_low"], wang["meshslice_speedup_low_at"]) == (
        pytest.approx(9.6 / 9.5 - 1, rel=1e-12), LOW)
    assert (wang["meshslice_speedup_high"], wang["meshslice_speedup_high_at"]) == (
        pytest.approx(13.0 / 11.0 - 1, rel=1e-12), HIGH)
    assert wang["meshslice_speedup_holds"] is True
    assert summa["meshslice_speedup_low"] == pytest.approx(9.3 / 9.5 - 1, rel=1e-12)
    assert summa["meshslice_speedup_holds"] is False
    # against the best other 2D algorithm of each setting: wang, summa (beta x2), wang
    assert wang["speedup_vs_best_other_2d_settings"] == 3
    assert wang["speedup_vs_best_other_2d_low"] == pytest.approx(9.3 / 9.5 - 1, rel=1e-12)
    assert wang["speedup_vs_best_other_2d_high"] == pytest.approx(13.0 / 11.0 - 1, rel=1e-12)
    assert wang["speedup_vs_best_other_2d_holds"] is False
    assert lead_text(wang, "speedup_vs_best_other_2d") == (
        "; over 3 settings -2.1% (βx2) to +18.2% (βx0.5): its sign changes with the setting")


def test_pod_rows_range_meshslice_against_the_best_layout_of_any_kind() -> None:
    def entry(algorithm: str, seconds: float, scale: dict[str, float]) -> dict[str, Any]:
        point = parse_request(TuneRequest, {"model": "gpt3-175b", "hardware": "tpuv4", "chips": 256,
                                            "algorithm": algorithm, "scale": scale})
        best = {"mesh": "16x16", "layout": "tensor=16x16", "data_parallel": 1, "step_time_s": seconds,
                "compute_s": seconds, "exposed_comm_s": 0.0, "exposed_data_comm_s": 0.0, "mfu": 0.5, "hfu": 0.5,
                "memory_bytes_per_chip": 1e9, "slices": None}
        return {"point": point.model_dump(mode="json", by_alias=True), "result": {"best": best}, "error": None}

    entries = [entry("meshslice", 10.0, {}), entry("all", 9.0, {}), entry("meshslice", 12.0, {"beta": 0.5}),
               entry("all", 12.6, {"beta": 0.5})]
    rows = get_family("pod").table(entries)
    baseline = next(row for row in rows if row["algorithm"] == "all")
    assert len(rows) == 2
    assert baseline["meshslice_speedup"] == pytest.approx(9.0 / 10.0 - 1, rel=1e-12)
    assert (baseline["meshslice_speedup_low"], baseline["meshslice_speedup_high"]) == (
        pytest.approx(-0.1, rel=1e-12), pytest.approx(12.6 / 12.0 - 1, rel=1e-12))
    assert baseline["meshslice_speedup_holds"] is False


def test_lead_ranges_are_refused_for_a_family_without_leads_and_with_redraw(tmp_path: Path) -> None:
    with pytest.raises(UserError) as refused:
        reproduce("slice-sweep", tmp_path, lead_ranges=True)
    assert str(refused.value) == "--lead-ranges: family 'slice-sweep' has no lead to range; valid: headline, pod or all"
    with pytest.raises(UserError) as refused:
        reproduce("headline", tmp_path, lead_ranges=True, redraw=True)
    assert str(refused.value).startswith("--lead-ranges runs points and --redraw runs none")
    assert not any(tmp_path.iterdir())  # refused before anything is written


def test_family_tables_are_tidy_for_a_plain_read_csv(tmp_path: Path) -> None:
    """Per-layer lists become a column per layer, other lists one cell, and a text cell with nothing in it reads
    ``none``, so every column reads as one dtype (the rules of results.csv)."""
    import pandas as pd

    from tpusim.experiments.results import render_csv
    from tpusim.experiments.rows import tidy

    rows = [{"algorithm": "meshslice", "slices": [6, 3, 8, 8], "dataflows": ["os", "os", "os", "ls"],
             "meshes": ["64x4", "32x8"], "best_other_2d": "wang", "error": "", "step_time_s": 1.5},
            {"algorithm": "wang", "slices": [None] * 4, "dataflows": None, "meshes": [], "best_other_2d": None,
             "error": "", "step_time_s": None}]
    table = tidy(rows)
    assert table[0]["slices_ff1"] == 8 and table[1]["slices_ff1"] is None
    assert (table[0]["dataflows_ff2"], table[1]["dataflows_ff2"]) == ("ls", "none")
    assert (table[0]["meshes"], table[1]["meshes"]) == ("64x4 32x8", "none")
    path = tmp_path / "t.csv"
    path.write_text(render_csv(table, list(table[0])))
    read = pd.read_csv(path)
    assert {str(read[c].dtype) for c in ("slices_qkv", "step_time_s")} == {"float64"}
    assert read["error"].tolist() == ["none", "none"] and read["best_other_2d"].tolist() == ["wang", "none"]
    assert read["dataflows_qkv"].tolist() == ["os", "none"]
