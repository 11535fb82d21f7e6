"""The pod family: its packaged experiment tunes D x R x C layouts of both models on 256 to 4096 TPUv4 chips with
memory feasible; its table splits each tuned step into compute, exposed tensor- and data-parallel communication
and idle, and keeps an errored point as a row."""

from __future__ import annotations

from typing import Any

from tpusim.config.requests import TuneRequest, parse_request
from tpusim.experiments.families import get_family
from tpusim.experiments.families.common import LEAD_FIELDS
from tpusim.experiments.spec import expand, load_experiment

MODELS = ("gpt3-175b", "megatron-nlg-530b-ms")
CHIPS = (256, 512, 1024, 2048, 4096)


def test_the_packaged_experiment_tunes_every_layout_with_memory_feasible() -> None:
    """MeshSlice on one pod's slices and on two pods over DCN; the baseline (every algorithm, every ZeRO stage)
    at each of those chip counts."""
    points = expand(load_experiment("pod"))
    meshslice = [(model, chips, 1) for model in MODELS for chips in CHIPS] + [(model, 8192, 2) for model in MODELS]
    baseline = [(model, chips, slices) for model in MODELS for chips, slices in [(c, 1) for c in CHIPS] + [(8192, 2)]]
    assert [(p.model, p.chips, p.dcn_data) for p in points if p.algorithm == "meshslice"] == meshslice
    assert [(p.model, p.chips, p.dcn_data) for p in points if p.algorithm == "all"] == baseline
    assert len(points) == len(meshslice) + len(baseline)
    assert {(p.kind, p.hardware, p.batch, p.dp, p.ignore_memory, p.allow_infeasible, p.exhaustive)
            for p in points} == {("tune", "tpuv4", None, None, False, False, False)}
    assert {p.zero_stage for p in points if p.algorithm == "meshslice"} == {1}
    assert {p.zero_stage for p in points if p.algorithm == "all"} == {"any"}


def _entry(model: str, chips: int, best: dict[str, Any] | None, error: str | None = None) -> dict[str, Any]:
    point = parse_request(TuneRequest, {"model": model, "hardware": "tpuv4", "chips": chips})
    result = None if best is None else {"best": best, "recompute": "full", "microbatches": 2, "zero_stage": 1,
                                        "algorithm": "meshslice"}
    return {"point": point.model_dump(mode="json", by_alias=True), "result": result, "error": error}


def _best(mesh: str, data_parallel: int, exposed_comm_s: float, exposed_data_comm_s: float) -> dict[str, Any]:
    return {"mesh": mesh, "layout": f"layout of {mesh}", "data_parallel": data_parallel, "step_time_s": 14.0,
            "compute_s": 12.0,
            "exposed_comm_s": exposed_comm_s, "exposed_data_comm_s": exposed_data_comm_s, "mfu": 0.5, "hfu": 0.625,
            "memory_bytes_per_chip": 12.5e9, "slices": [18, 6, 24, 24], "feasible": True}


NO_FIT = "no configuration of gpt3-175b fits in HBM"
UNRANGED = {f"meshslice_speedup_{field}": None for field in LEAD_FIELDS}  # run without the sensitivity settings


def test_rows_split_the_step_and_keep_errors() -> None:
    entries = [_entry("gpt3-175b", 256, _best("256x1", 1, 1.5, 0.0)),
               _entry("gpt3-175b", 4096, _best("16x16x16", 16, 1.5, 1.0)),
               _entry("megatron-nlg-530b-ms", 512, None, NO_FIT)]
    rows = get_family("pod").table(entries)
    tuned = {"memory": "feasible", "algorithm": "meshslice", "chosen_algorithm": "meshslice", "dcn_data": 1,
             "step_time_s": 14.0, "mfu": 0.5, "hfu": 0.625, "compute_s": 12.0,
             "idle_s": 0.5, "memory_gb_per_chip": 12.5, "zero_stage": 1, "recompute": "full", "microbatches": 2,
             "slices": [18, 6, 24, 24], "error": "", "meshslice_speedup": 0.0, **UNRANGED}
    assert rows == [
        {"model": "gpt3-175b", "chips": 256, "batch": 256, "layout": "256x1", "named_layout": "layout of 256x1",
         "data_parallel": 1, "rows": 256,
         "columns": 1, "exposed_tensor_comm_s": 1.5, "exposed_data_comm_s": 0.0, **tuned},
        {"model": "gpt3-175b", "chips": 4096, "batch": 4096, "layout": "16x16x16",
         "named_layout": "layout of 16x16x16", "data_parallel": 16, "rows": 16,
         "columns": 16, "exposed_tensor_comm_s": 0.5, "exposed_data_comm_s": 1.0, **tuned},
        {"model": "megatron-nlg-530b-ms", "memory": "feasible", "algorithm": "meshslice", "chosen_algorithm": None,
         "chips": 512, "dcn_data": 1, "batch": 512, "layout": "", "named_layout": "", "data_parallel": None,
         "rows": None, "columns": None, "step_time_s": None, "mfu": None, "hfu": None,
         "compute_s": None, "exposed_tensor_comm_s": None, "exposed_data_comm_s": None, "idle_s": None,
         "memory_gb_per_chip": None, "zero_stage": 1, "recompute": None, "microbatches": None, "slices": None,
         "error": NO_FIT, "meshslice_speedup": None, **UNRANGED},
    ]
    # the CSV's columns, in this order
    assert list(rows[0]) == ["model", "memory", "algorithm", "chosen_algorithm", "chips", "dcn_data", "batch",
                             "layout", "named_layout", "data_parallel", "rows", "columns",
                             "step_time_s", "mfu", "hfu", "compute_s", "exposed_tensor_comm_s", "exposed_data_comm_s",
                             "idle_s", "memory_gb_per_chip", "zero_stage", "recompute", "microbatches", "slices",
                             "error", "meshslice_speedup", *UNRANGED]


def test_the_title_names_the_generation_that_ran() -> None:
    pod = get_family("pod")
    rest = ": MeshSlice with data parallelism and the best layout of any kind (batch = chips)"
    assert pod.titled("tpuv4") == "TPUv4 pods" + rest
    assert pod.titled("tpuv5p") == "TPUv5p pods" + rest
    assert pod.titled("tpuv4-wire") == "TPUv4 pods" + rest  # a profile without slice rules has TPUv4's
    assert get_family("headline").titled("tpuv5p") == get_family("headline").title  # no generation in it
