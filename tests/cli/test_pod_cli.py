"""``tpusim step`` on a D x R x C layout (``--mesh DxRxC`` or ``--mesh RxC --dp D``): bad input is exit 2 with one line
naming it, and a good run's JSON carries the layout fields (docs/results.md#result-fields)."""

from __future__ import annotations

import json

import pytest

from tests.refusals import refusal
from tpusim.cli.main import main

STEP = ["step", "--model", "gpt3-175b", "--hardware", "tpuv4"]
ZERO_STAGES = ("0 (model state replicated), 1 (optimizer state sharded over the data-parallel replicas), "
               "2 (and gradients), 3 (and weights)")
CALIBRATED = ("does not apply to calibrated profile '{name}', whose fitted costs describe one 2D mesh; use a physical "
              "profile such as 'tpuv4'")

CASES = {
    "layout chips disagree with --chips": (
        [*STEP, "--mesh", "16x16x16", "--chips", "2048"],
        "mesh 16x16x16 has 4096 chips but chips is 2048; valid: a mesh D x R x C with D * R * C = 2048, or chips 4096"),
    "--dp times the mesh disagrees with --chips": (
        [*STEP, "--mesh", "16x16", "--dp", "8", "--chips", "4096"],
        "mesh 8x16x16 has 2048 chips but chips is 4096; valid: a mesh D x R x C with D * R * C = 4096, or chips 2048"),
    "--dp disagrees with the layout": (
        [*STEP, "--mesh", "16x16x16", "--dp", "8"],
        "dp 8 disagrees with mesh 16x16x16, whose first side is the data-parallel degree; give one of them"),
    "--dp not a count": (
        [*STEP, "--mesh", "16x16", "--dp", "0"],
        "--dp '0' must be an integer >= 1"),
    "--zero-stage 4": (
        [*STEP, "--mesh", "16x16x16", "--zero-stage", "4"],
        f"ZeRO stage 4 does not exist; valid: {ZERO_STAGES}"),
    "--zero-stage two": (
        [*STEP, "--mesh", "16x16x16", "--zero-stage", "two"],
        f"ZeRO stage 'two' does not exist; valid: {ZERO_STAGES}"),
    "a slice the rules reject": (
        [*STEP, "--topology", "4x4x6", "--mesh", "6x4x4"],
        "illegal TPUv4 slice '4x4x6': every side must be <= 4, or every side a multiple of 4 (e.g. 2x2x4, 4x4x8)"),
    "a layout the topology does not hold": (
        [*STEP, "--topology", "4x4x4", "--mesh", "2x4x4"],
        "layout 2x4x4 has 32 chips but topology 'tpuv4:4x4x4' has 64; choose D x R x C = 64"),
    "a data axis of no whole physical axes": (
        [*STEP, "--topology", "4x8x8", "--mesh", "2x8x16"],
        "a data axis of 2 chips cannot take whole physical axes of 'tpuv4:4x8x8' and leave a 8x16 mesh; valid "
        "data-parallel degrees here: 1, 4, 8, 32, 64, 256"),
    "gemm on a layout": (
        ["gemm", "--hardware", "tpuv4", "--mesh", "2x4x4", "--dataflow", "os", "--m", "1024", "--n", "1024",
         "--k", "1024"],
        "mesh 2x4x4 is a D x R x C layout, which only 'step' runs; gemm runs on one R x C mesh"),
    "collective on a layout": (
        ["collective", "--hardware", "tpuv4", "--mesh", "2x4x4", "--axis", "0", "--op", "all-gather", "--bytes",
         "64MB"],
        "mesh 2x4x4 is a D x R x C layout, which only 'step' runs; collective runs on one R x C mesh"),
    "a calibrated profile with a data axis": (
        ["step", "--model", "gpt3-175b", "--hardware", "meshslice-tpu-fit", "--mesh", "4x4x4"],
        "data parallelism (a D x R x C layout with D = 4) " + CALIBRATED.format(name="meshslice-tpu-fit")),
    "a calibrated profile with --dp": (
        ["step", "--model", "gpt3-175b", "--hardware", "meshslice-sim", "--mesh", "4x4", "--dp", "4"],
        "data parallelism (a D x R x C layout with D = 4) " + CALIBRATED.format(name="meshslice-sim")),
    "a calibrated profile with --data-axes": (
        ["step", "--model", "gpt3-175b", "--hardware", "meshslice-sim", "--mesh", "4x4", "--data-axes", "z"],
        "data parallelism (--data-axes 'z') " + CALIBRATED.format(name="meshslice-sim")),
    "--data-axes naming no axis": (
        [*STEP, "--mesh", "4x4x4", "--data-axes", "q"],
        "data axes 'q': name distinct physical axes of 'tpuv4:4x4x4' joined by '*' (its axes: x, y, z)"),
    "--data-axes of the wrong size": (
        [*STEP, "--mesh", "4x4x4", "--data-axes", "x*z"],
        "data axes 'x*z' have 16 chips on 'tpuv4:4x4x4', not the 4 of the data axis"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_layouts_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], name: str) -> None:
    argv, message = CASES[name]
    assert refusal(capsys, [*argv, "--json"]).splitlines() == [message]


@pytest.mark.parametrize("mesh", [["--mesh", "4x4x4"], ["--mesh", "4x4", "--dp", "4"]], ids=["DxRxC", "--dp"])
def test_a_layout_step_reports_its_layout_in_json(capsys: pytest.CaptureFixture[str], mesh: list[str]) -> None:
    argv = [*STEP, *mesh, "--zero-stage", "2", "--slices", "2", "--ignore-memory", "--json"]
    assert main(argv) == 0
    out, _ = capsys.readouterr()
    result = json.loads(out)
    assert (result["layout"], result["mesh"], result["data_parallel"], result["zero_stage"], result["chips"]) == (
        "4x4x4", "4x4", 4, 2, 64)
    assert 0 < result["exposed_data_comm_s"] <= result["exposed_comm_s"]
    assert result["mapping"]["layout"] == "4x4x4"
    assert result["mapping"]["data"] == {"size": 4, "physical": ["z"], "embedding": "wrapped ring", "closed": True,
                                         "max_hops": 1}
    assert result["mapping"]["axis0"]["physical"] == ["x"] and result["mapping"]["axis1"]["physical"] == ["y"]
