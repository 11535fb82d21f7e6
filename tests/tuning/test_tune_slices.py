"""The tuner across slices over DCN (``dcn_data``) and over ZeRO stages (``zero_stage: any``): the layout it names
is the step it timed, and the stage search keeps the fastest of the stages tuned one by one
(docs/workloads.md#the-autotuner)."""

from __future__ import annotations

import pytest

import tpusim.api as tp
from tests.refusals import refusal
from tpusim.config import TransformerModel

SMALL = TransformerModel(name="small", description="test model", layers=4, hidden=1024, heads=16, head_dim=64,
                         ffn=4096, sequence=256)
FIELDS = {"model": SMALL, "hardware": "tpuv4", "topology": "torus:4x4", "ignore_memory": True,
          "algorithm": "tp1d"}


@pytest.fixture(scope="module")
def two_slices() -> tp.TuneResult:
    return tp.tune(chips=32, dcn_data=2, batch=64, zero_stage=3, **FIELDS)


@pytest.mark.slow
def test_the_search_is_one_slices_and_its_layout_joins_the_slices(two_slices: tp.TuneResult) -> None:
    best = two_slices.best
    assert (two_slices.chips, two_slices.dcn_data, two_slices.batch) == (32, 2, 64)
    rows, cols = (int(side) for side in best.mesh.split("x")[-2:])
    data = 16 // (rows * cols)
    assert data * rows * cols == 16  # the mesh is one slice's 16 chips
    fsdp = f"fsdp={data}," if data > 1 else ""
    assert best.layout == f"dcn_data=2,{fsdp}tensor={rows}x{cols}"


def test_the_best_choice_is_the_step_of_its_layout(two_slices: tp.TuneResult) -> None:
    best = two_slices.best
    step = tp.step(layout=best.layout, batch=64, zero_stage=3, dataflows=best.dataflows,
                   transposes=best.transposes, recompute=two_slices.recompute, **FIELDS)
    assert step.step_time_s == pytest.approx(best.step_time_s, rel=1e-12)
    assert step.dcn_slices == 2 and step.exposed_dcn_comm_s is not None


@pytest.mark.slow
def test_zero_stage_any_keeps_the_fastest_stage() -> None:
    fields = {**FIELDS, "chips": 16, "batch": 32}
    every = tp.tune(zero_stage="any", **fields)
    alone = {stage: tp.tune(zero_stage=stage, **fields).best.step_time_s for stage in (0, 1, 2, 3)}
    fastest = min(alone.values())
    assert every.best.step_time_s == fastest
    assert every.zero_stage == min(stage for stage, time in alone.items() if time == fastest)
    assert any(note.startswith("zero_stage any: stage ") for note in every.notes)


BAD = {
    "a stage that does not exist": (["--chips", "256", "--zero-stage", "5"],
                                    "ZeRO stage 5 does not exist; valid: 0 (model state replicated), 1 (optimizer "
                                    "state sharded over the data-parallel replicas), 2 (and gradients), 3 (and "
                                    "weights), or any (every stage searched)"),
    "slices that do not divide the chips": (["--chips", "24", "--dcn-data", "5"],
                                            "dcn_data 5 does not divide the 24 chips; valid: a divisor of 24 (the "
                                            "slices over DCN)"),
    "a calibrated profile": (["--chips", "32", "--dcn-data", "2", "--hardware", "meshslice-sim"],
                             "dcn_data 2 joins slices over DCN, which profile 'meshslice-sim' does not describe (no "
                             "dcn block)"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_slices_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], name: str) -> None:
    extra, message = BAD[name]
    argv = ["tune", "--model", "gpt3-175b", "--hardware", "tpuv4", *extra]
    assert refusal(capsys, argv).splitlines()[0] == message
