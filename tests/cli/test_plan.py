"""``tpusim plan``: its JSON and CSV carry the same ranked candidates as ``tune --algorithm all``, and on a
physical profile the layout kinds are told apart (tests/cli/test_doc_examples.py runs the documented example)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tpusim import api
from tpusim.cli.main import main
from tpusim.config import TransformerModel
from tpusim.config.requests import PlanRequest
from tpusim.engine.context import Context
from tpusim.experiments.runners import run_plan

ROOT = Path(__file__).resolve().parents[2]
ARGV = ["plan", "--model", "gpt3-175b", "--hardware", "meshslice-sim", "--chips", "16", "--ignore-memory"]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict, list[dict[str, str]]]:
    import contextlib
    import io

    out = tmp_path_factory.mktemp("plan") / "plan.csv"
    printed = []
    for argv in ([*ARGV, "--json", "--out", str(out)], ["tune", *ARGV[1:], "--algorithm", "all", "--zero-stage",
                                                          "any", "--json"]):
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(io.StringIO()):
            assert main(argv) == 0
        printed.append(json.loads(buffer.getvalue()))
    with out.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    return printed[0], printed[1], rows


@pytest.mark.slow
def test_json_candidates_are_ranked_and_those_of_tune_all(outputs: tuple[dict, dict, list[dict[str, str]]]) -> None:
    plan, tuned, _ = outputs
    candidates = plan["candidates"]
    assert len(candidates) == 7  # one per algorithm able to run gpt3-175b on 16 chips; all tensor-parallel here
    times = [c["step_time_s"] for c in candidates]
    assert times == sorted(times)
    assert candidates == tuned["candidates"]
    assert tuned["best"]["step_time_s"] == times[0] and tuned["best"]["algorithm"] == candidates[0]["algorithm"]
    for c in candidates:
        assert {"algorithm", "layout", "step_time_s", "tokens_per_s", "mfu", "memory_bytes_per_chip",
                "feasible"} <= c.keys()
        assert c["layout"] == "tensor" and c["bound"] == "memory-infeasible" and c["feasible"] is False
        assert c["tokens_per_s"] == pytest.approx(16 * 2048 / c["step_time_s"], rel=1e-12)  # batch 16 x 2048


def test_csv_rows_follow_the_results_columns(outputs: tuple[dict, dict, list[dict[str, str]]]) -> None:
    plan, _, rows = outputs
    assert [int(r["rank"]) for r in rows] == list(range(1, len(plan["candidates"]) + 1))
    for row, candidate in zip(rows, plan["candidates"], strict=True):
        assert float(row["step_time_s"]) == candidate["step_time_s"]
        assert [row[f"dataflows_{layer}"] for layer in ("qkv", "out_proj", "ff1", "ff2")] == candidate["dataflows"]
        assert "dataflows" not in row and all(value != "" or key.startswith("slices_") for key, value in row.items())


def test_a_bad_chip_count_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--model", "gpt3-175b", "--hardware", "meshslice-sim", "--chips", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--chips" in err[0]


# Two wide layers of few tokens on 8 tpuv4 chips: replicas compete with tensor parallelism.
WIDE = TransformerModel(name="wide", description="test model", layers=2, hidden=2048, heads=16, head_dim=128,
                        ffn=8192, sequence=64)


@pytest.mark.slow
def test_layout_kinds_on_a_physical_profile() -> None:
    request = PlanRequest(model=WIDE, hardware="tpuv4", chips=8, algorithm="tp1d", dataflows=("os", "ls"))
    result = run_plan(request)
    kinds = {(c.algorithm, c.layout) for c in result.candidates}
    assert len(kinds) == len(result.candidates)  # one row per algorithm and kind
    # the tensor-parallel 8x1 is left untimed: its ops alone are slower than the replicas' whole step
    assert {layout for _, layout in kinds} >= {"data", "data x tensor", "fsdp x tensor"}
    context = Context()
    for c in result.candidates:
        if c.layout in ("data", "fsdp"):
            assert c.algorithm is None and c.mesh.endswith("x1x1")
        # each row is the step `step` simulates for its layout
        step = api.step(model=WIDE, hardware="tpuv4", layout=c.named_layout, algorithm="tp1d",
                        zero_stage=max(c.zero_stage, 0) if c.layout != "tensor" else 1, dataflows=c.dataflows,
                        batch=8, context=context)
        assert step.step_time_s == pytest.approx(c.step_time_s, rel=1e-12)
