"""The family figures, drawn from small synthetic tables: every label is explained, no legend hides data, no
point hides another, chip counts are plain integers; ``reproduce --redraw`` draws them from a stored run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tpusim.cli.main import main
from tpusim.experiments import reproduce as reproduce_module
from tpusim.experiments.families import comparisons, get_family, pod, scaling

Drawn = dict[str, Any]  # the figure and the note of one saved plot


def draw(monkeypatch: pytest.MonkeyPatch, module: Any, family: str, rows: list[dict[str, Any]],
         path: Path) -> Drawn:
    """Draw ``family`` from ``rows`` into ``path``, keeping the figure and its note for inspection."""
    drawn: Drawn = {}
    real_save = module.save

    def keep(fig: Any, target: Path, title: str, **kwargs: Any) -> None:
        real_save(fig, target, title, **kwargs)
        drawn.update(fig=fig, note=kwargs.get("note") or "")

    monkeypatch.setattr(module, "save", keep)
    get_family(family).plot(rows, path, family)
    assert path.stat().st_size > 10_000
    return drawn


def renderer(fig: Any) -> Any:
    """A renderer of the laid-out figure (saving closed it, which detached its canvas)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def tuned_row(model: str, memory: str, algorithm: str, chips: int, mfu: float, step: float,
              batch: int | None = None) -> dict[str, Any]:
    return {"model": model, "memory": memory, "algorithm": algorithm, "chips": chips, "batch": batch or chips,
            "mesh": f"{chips}x1", "step_time_s": step, "mfu": mfu, "hfu": mfu, "recompute": "none",
            "microbatches": 1, "slices": None, "feasible": algorithm != "tp1d", "error": ""}


CHIPS = (32, 64, 128, 256, 512, 1024, 2048)
MFU = {"collective": 0.60, "wang": 0.70, "summa": 0.72, "meshslice": 0.77, "tp1d": 0.26}


@pytest.mark.slow
def test_weak_scaling_legend_sits_below_every_panel(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """tp1d's low MFU at 32 chips lies in a panel's lower left corner, where an in-panel legend would sit."""
    rows = [tuned_row(model, "ignored", algorithm, chips, mfu / (1 + index), 1.0)
            for model in ("gpt3-175b", "megatron-nlg-530b-ms") for algorithm, mfu in MFU.items()
            for index, chips in enumerate(CHIPS)]
    drawn = draw(monkeypatch, scaling, "weak-scaling", rows, tmp_path / "weak.png")
    fig = drawn["fig"]
    [legend] = fig.legends
    drawing = renderer(fig)
    box = legend.get_window_extent(drawing)
    lowest = min(ax.get_window_extent(drawing).y0 for ax in fig.axes)
    assert box.y1 < lowest  # the shared legend is below the panels, so it covers no point
    assert all(ax.get_legend() is None for ax in fig.axes)
    assert "MFU = model FLOPs utilisation" in drawn["note"]
    assert "Hollow marker: the best configuration breaks a sharding constraint" in drawn["note"]


def test_strong_scaling_ticks_are_plain_chip_counts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    rows = [tuned_row("gpt3-175b", "ignored", algorithm, chips, 0.5, 64.0 * 16 / chips * (1 + 0.1 * index), 64)
            for index, algorithm in enumerate(("collective", "wang", "meshslice")) for chips in (16, 32, 128, 256)]
    fig = draw(monkeypatch, scaling, "strong-scaling", rows, tmp_path / "strong.png")["fig"]
    [ax] = fig.axes
    renderer(fig)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["16", "32", "128", "256"]
    y_labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert y_labels and all(text.replace(",", "").replace(".", "").isdigit() for text in y_labels), y_labels


def test_a_scaling_panel_without_any_result_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Megatron-NLG fits at no chip count of strong scaling under memory feasible: its panel says so instead of
    drawing empty axes with a made-up scale."""
    rows = [tuned_row("gpt3-175b", "feasible", "meshslice", chips, 0.5, 64.0 / chips, 64) for chips in (128, 256)]
    rows += [{**tuned_row("megatron-nlg-530b-ms", "feasible", "meshslice", chips, 0.5, 1.0, 64), "step_time_s": None,
              "mfu": None, "error": "does not fit"} for chips in (128, 256)]
    fig = draw(monkeypatch, scaling, "strong-scaling", rows, tmp_path / "strong.png")["fig"]
    empty = [ax for ax in fig.axes if not ax.lines]
    assert len(empty) == 1 and empty[0].get_title().startswith("megatron-nlg-530b-ms")
    assert [t.get_text() for t in empty[0].texts] == ["no result for any algorithm\n(see the error column of the CSV)"]
    assert list(empty[0].get_xticks()) == [] and list(empty[0].get_yticks()) == []


def test_tuner_accuracy_shows_both_models_when_both_gaps_are_zero(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    rows = [{"model": model, "chips": chips, "gap_percent": 0.0}
            for model in ("gpt3-175b", "megatron-nlg-530b-ms") for chips in CHIPS]
    drawn = draw(monkeypatch, scaling, "tuner-accuracy", rows, tmp_path / "accuracy.png")
    [ax] = drawn["fig"].axes
    gpt3, mtnlg = (line for line in ax.get_lines() if line.get_label() in ("gpt3-175b", "megatron-nlg-530b-ms"))
    assert gpt3.get_marker() != mtnlg.get_marker() and gpt3.get_markersize() != mtnlg.get_markersize()
    # side by side, never on top of each other: every gpt3 marker left of its chip count, every MT-NLG one right
    assert all(x < chips < y for x, y, chips in zip(gpt3.get_xdata(), mtnlg.get_xdata(), CHIPS, strict=True))
    assert list(gpt3.get_ydata()) == list(mtnlg.get_ydata()) == [0.0] * len(CHIPS)
    assert "0% means the default tuner found the optimum" in drawn["note"]
    assert [t.get_text() for t in ax.texts] == [
        "gpt3-175b and megatron-nlg-530b-ms: gap 0.000% at every chip count"]


def test_headline_explains_its_ms_labels(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    times = {"collective": 12.0, "wang": 10.5, "meshslice": 10.0}
    rows = [{"model": "gpt3-175b", "memory": "ignored", "algorithm": algorithm, "mesh": "32x8",
             "step_time_s": time, "meshslice_speedup": time / 10.0 - 1.0, "best_other_2d": "wang",
             "speedup_vs_best_other_2d": 0.05} for algorithm, time in times.items()]
    drawn = draw(monkeypatch, comparisons, "headline", rows, tmp_path / "headline.png")
    [ax] = drawn["fig"].axes
    assert [t.get_text() for t in ax.texts] == ["32x8\nMS +20.0%", "32x8\nMS +5.0%", "32x8"]
    assert ("MS +x% = MeshSlice speedup over that algorithm, T_alg / T_MeshSlice - 1 (positive: MeshSlice is "
            "faster)") in drawn["note"]
    assert "simulated +5.0% (vs wang), paper +12.0%" in ax.get_title()


def test_headline_panel_with_no_result_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A model that fits on no mesh (MT-NLG in the 16 GB of a TPU v5e) leaves its panel empty, saying why."""
    rows = [{"model": model, "memory": "feasible", "algorithm": algorithm, "mesh": "32x8" if time else "",
             "step_time_s": time, "meshslice_speedup": None, "best_other_2d": None, "speedup_vs_best_other_2d": None}
            for model, time in (("gpt3-175b", 10.0), ("megatron-nlg-530b-ms", None))
            for algorithm in ("wang", "meshslice")]
    drawn = draw(monkeypatch, comparisons, "headline", rows, tmp_path / "headline.png")
    empty = next(ax for ax in drawn["fig"].axes if ax.get_title().startswith("megatron-nlg-530b-ms"))
    assert [t.get_text() for t in empty.texts] == ["no result for any algorithm\n(see the error column of the CSV)"]
    assert not empty.patches


POD_LAYOUTS = {256: "256x1", 512: "2x256x1", 1024: "4x32x8", 2048: "8x16x16", 4096: "16x16x16"}
POD_REPLICAS = {256: 1, 512: 2, 1024: 4, 2048: 8, 4096: 16}


def pod_row(model: str, chips: int, step: float | None) -> dict[str, Any]:
    """A pod row whose step is 60% compute, 10% exposed tensor-parallel, 20% exposed data-parallel, 10% idle."""
    error = "" if step is not None else "no configuration fits in HBM"
    parts = dict.fromkeys(("compute_s", "exposed_tensor_comm_s", "exposed_data_comm_s", "idle_s"))
    if step is not None:
        parts = {"compute_s": 0.6 * step, "exposed_tensor_comm_s": 0.1 * step, "exposed_data_comm_s": 0.2 * step,
                 "idle_s": 0.1 * step}
    return {"model": model, "memory": "feasible", "chips": chips, "batch": chips,
            "layout": POD_LAYOUTS[chips] if step is not None else "", "step_time_s": step,
            "data_parallel": POD_REPLICAS[chips] if step is not None else None,
            "mfu": 0.5 if step is not None else None, "zero_stage": 1, "error": error, **parts}


@pytest.mark.slow
def test_pod_bars_stack_the_step_and_their_labels_never_overlap(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    """Five chip counts per model, bars of nearly equal height (weak scaling) and one point without a result: every
    bar is the step's four parts stacked, every label sits inside its panel and clear of every other label."""
    rows = [pod_row("gpt3-175b", chips, 13.0 + index / 4) for index, chips in enumerate(POD_LAYOUTS)]
    rows += [pod_row("megatron-nlg-530b-ms", chips, None if chips == 512 else 50.0 - index)
             for index, chips in enumerate(POD_LAYOUTS)]
    drawn = draw(monkeypatch, pod, "pod", rows, tmp_path / "pod.png")
    fig = drawn["fig"]
    gpt3, mtnlg = fig.axes
    assert [ax.get_title() for ax in fig.axes] == ["gpt3-175b, memory feasible",
                                                  "megatron-nlg-530b-ms, memory feasible"]
    # the exposed data-parallel time is written out wherever there are replicas (D > 1)
    assert [t.get_text() for t in gpt3.texts] == ["256x1\nMFU 50.0%", "2x256x1\nMFU 50.0%\nDP 2.650 s",
                                                  "4x32x8\nMFU 50.0%\nDP 2.700 s", "8x16x16\nMFU 50.0%\nDP 2.750 s",
                                                  "16x16x16\nMFU 50.0%\nDP 2.800 s"]
    assert [t.get_text() for t in mtnlg.texts][:2] == ["256x1\nMFU 50.0%", "no result\n(see error)"]
    assert [t.get_text() for t in gpt3.get_xticklabels()] == ["256", "512", "1024", "2048", "4096"]
    # four stacked parts per chip count, each bar as tall as its step
    heights = [0.0] * len(POD_LAYOUTS)
    for index, patch in enumerate(gpt3.patches):
        heights[index % len(POD_LAYOUTS)] += patch.get_height()
    assert heights == pytest.approx([13.0, 13.25, 13.5, 13.75, 14.0])
    drawing = renderer(fig)
    for ax in fig.axes:
        panel = ax.get_window_extent(drawing)
        boxes = [text.get_window_extent(drawing) for text in ax.texts]
        assert all(panel.x0 <= b.x0 and b.x1 <= panel.x1 and panel.y0 <= b.y0 and b.y1 <= panel.y1 for b in boxes)
        assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    [legend] = fig.legends
    assert legend.get_window_extent(drawing).y1 < min(ax.get_window_extent(drawing).y0 for ax in fig.axes)
    assert [t.get_text() for t in legend.get_texts()] == [
        "compute", "exposed tensor-parallel communication (R x C mesh)",
        "exposed data-parallel communication (over the D replicas)", "idle (launch gaps, waiting on other chips)"]
    note = drawn["note"]
    assert "written above it as D x R x C (D data-parallel replicas, each an R x C tensor-parallel mesh" in note
    assert "DP = its exposed data-parallel communication in seconds" in note
    assert "Batch = chips (one sequence per chip); ZeRO stage 1 (optimizer state sharded over the D replicas)" in note
    assert "Memory feasible: every layout fits in HBM" in note
    assert note.endswith("No result: that point ended with an error (the error column of the table).")


def accuracy_run(folder: Path, finished: int = 4) -> None:
    """A stored tuner-accuracy run of two chip counts (default and exhaustive tuner each), as results.json."""
    times = {(32, False): 2.02, (32, True): 2.0, (64, False): 1.5, (64, True): 1.5}
    points = [{"index": index, "error": None,
               "point": {"model": "gpt3-175b", "chips": chips, "exhaustive": exhaustive},
               "result": {"best": {"mesh": "8x4", "slices": [2, 2, 2, 2], "step_time_s": time}}}
              for index, ((chips, exhaustive), time) in enumerate(times.items())]
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({
        "experiment": {"point": {"kind": "tune", "hardware": "meshslice-sim"}},
        "points": points[:finished], "points_finished": finished, "points_total": 4}))


def test_redraw_draws_again_from_stored_results_without_simulating(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    accuracy_run(tmp_path / "tuner-accuracy")

    def no_simulation(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("redraw must not run the experiment")

    monkeypatch.setattr(reproduce_module, "run_experiment", no_simulation)
    [output] = reproduce_module.reproduce("tuner-accuracy", tmp_path, redraw=True)
    assert [(row["chips"], row["gap_percent"]) for row in output.rows] == [(32, pytest.approx(1.0)), (64, 0.0)]
    assert output.png.stat().st_size > 10_000
    assert output.csv.read_text().splitlines()[0].startswith("model,chips,default_mesh")


def test_redraw_refuses_a_missing_or_unfinished_run(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["reproduce", "tuner-accuracy", "--out", str(tmp_path), "--redraw"]) == 2
    stored = tmp_path / "tuner-accuracy" / "results.json"
    assert capsys.readouterr().err == (f"--redraw: {str(stored)!r} does not exist; run 'tpusim reproduce "
                                       f"tuner-accuracy --out {tmp_path}' first\n")
    accuracy_run(tmp_path / "tuner-accuracy", finished=3)
    assert main(["reproduce", "tuner-accuracy", "--out", str(tmp_path), "--redraw"]) == 2
    assert capsys.readouterr().err == (f"--redraw: {str(stored)!r} holds 3 of 4 points; run 'tpusim reproduce "
                                       f"tuner-accuracy --out {tmp_path}' first\n")


def test_the_pod_accuracy_table_pairs_the_searches_of_each_algorithm() -> None:
    from tpusim.experiments.families.scaling import TUNER_ACCURACY, TUNER_ACCURACY_POD

    times = (("wang", False, 10.1), ("wang", True, 10.0), ("collective", False, 12.0), ("collective", True, 12.0))
    entries = [{"error": None, "point": {"model": "gpt3-175b", "algorithm": algorithm, "chips": 16,
                                         "exhaustive": exhaustive},
                "result": {"best": {"mesh": "2x4x2", "slices": [None] * 4, "step_time_s": time}}}
               for algorithm, exhaustive, time in times]
    rows = TUNER_ACCURACY_POD.table(entries)
    assert [(r["algorithm"], r["chips"], r["same_mesh"]) for r in rows] == [("collective", 16, True),
                                                                           ("wang", 16, True)]
    assert rows[0]["gap_percent"] == 0.0 and rows[1]["gap_percent"] == pytest.approx(1.0, rel=1e-12)
    assert "algorithm" not in TUNER_ACCURACY.table([{**e, "point": {**e["point"], "algorithm": None}}
                                                    for e in entries[:2]])[0]
