"""Cost estimates before work (docs/limits.md#cost-estimate): the events an estimate counts are the events the run
processes, exactly where symmetric fidelity is exact; the estimate line goes to stderr above the threshold only,
stdout untouched; and ``reproduce --resume`` re-simulates nothing an interrupted run finished."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import tpusim.api as tp
import tpusim.experiments.estimate as estimate_module
import tpusim.experiments.jobs as jobs_module
from tpusim.cli.main import main
from tpusim.config.requests import CollectiveRequest, GemmRequest, StepRequest, parse_request
from tpusim.engine.context import Context
from tpusim.engine.footprint import CHIP_EVENTS_PER_S, LINK_EVENTS_PER_S, Estimate
from tpusim.experiments.estimate import estimate_line, request_cost
from tpusim.experiments.reproduce import reproduce
from tpusim.experiments.run import FAULT_ENV

COLLECTIVES = [  # (op, topology, mesh, axis): uniform closed rings
    ("all-gather", "torus:16", "1x16", 1),
    ("reduce-scatter", "torus:8x4", "4x8", 1),
    ("all-reduce", "torus:8x4", "4x8", 0),
]


@pytest.mark.parametrize(("op", "topology", "mesh", "axis"), COLLECTIVES)
def test_a_collective_estimate_counts_the_events_the_run_processes(op: str, topology: str, mesh: str,
                                                                   axis: int) -> None:
    fields = {"hardware": "tpuv4", "topology": topology, "mesh": mesh, "axis": axis, "op": op, "bytes": "64MB"}
    cost = request_cost(parse_request(CollectiveRequest, fields), Context())
    ran = tp.collective(**fields, context=Context())
    assert cost is not None
    assert (cost.estimate.events, cost.estimate.transfers) == (ran.events, ran.transfers)


GEMMS = [  # (algorithm, slices, topology, mesh): symmetric fidelity is exact on each
    ("meshslice", 2, "torus:4x4", "4x4"),
    ("meshslice", 2, "torus:8x8", "8x8"),
    ("collective", None, "torus:8x4", "8x4"),
    ("meshslice", 2, None, "32x8"),
]


@pytest.mark.parametrize(("algorithm", "slices", "topology", "mesh"), GEMMS)
def test_a_full_gemm_estimate_counts_the_events_the_run_processes(algorithm: str, slices: int | None,
                                                                  topology: str | None, mesh: str) -> None:
    fields = {"hardware": "tpuv4", "topology": topology, "mesh": mesh, "algorithm": algorithm, "slices": slices,
              "dataflow": "os", "fidelity": "full", "m": 4096, "n": 4096, "k": 4096}
    cost = request_cost(parse_request(GemmRequest, fields), Context())
    ran = tp.gemm(**fields, context=Context())
    assert cost is not None
    assert cost.estimate.events == ran.events
    assert cost.cheaper is not None and cost.cheaper[0] == "symmetric"


def test_where_chips_drift_apart_the_count_is_within_the_documented_factor() -> None:
    """SUMMA's rotating roots: 25,048 or so events estimated against 35,262 run (docs/limits.md#cost-estimate:
    within a factor 1.5 either way)."""
    fields = {"hardware": "tpuv4", "mesh": "32x8", "algorithm": "summa", "slices": 2, "dataflow": "os",
              "fidelity": "full", "m": 4096, "n": 4096, "k": 4096}
    cost = request_cost(parse_request(GemmRequest, fields), Context())
    ran = tp.gemm(**fields, context=Context())
    assert cost is not None and cost.cheaper is None
    assert ran.events == 35262
    assert 1 / 1.5 <= cost.estimate.events / ran.events <= 1.5


def test_wall_time_is_the_events_at_the_reference_rates() -> None:
    estimate = Estimate(events=int(CHIP_EVENTS_PER_S) + int(LINK_EVENTS_PER_S), link_events=int(LINK_EVENTS_PER_S))
    assert estimate.wall_s == 2.0
    assert (estimate + estimate).wall_s == 4.0 and estimate.times(3).wall_s == 6.0
    # runs one after the other hold one run's records at a time
    assert (estimate + estimate).peak_bytes == estimate.peak_bytes


def test_an_analytic_gemm_simulates_nothing() -> None:
    fields = {"hardware": "tpuv4", "topology": "torus:4x4", "mesh": "4x4", "algorithm": "meshslice", "slices": 2,
              "dataflow": "os", "fidelity": "analytic", "m": 4096, "n": 4096, "k": 4096}
    cost = request_cost(parse_request(GemmRequest, fields), Context())
    assert cost is not None and cost.estimate.events == 0


GEMM_FIELDS = {"hardware": "tpuv4", "topology": "torus:4x4", "mesh": "4x4", "algorithm": "meshslice", "slices": 2,
               "dataflow": "os", "fidelity": "full", "m": 4096, "n": 4096, "k": 4096}
SMALL_GEMM = ["gemm", "--hardware", "tpuv4", "--topology", "torus:4x4", "--mesh", "4x4", "--algorithm", "meshslice",
              "--slices", "2", "--dataflow", "os", "--fidelity", "full", "--m", "4096", "--n", "4096", "--k", "4096",
              "--json"]


def test_the_estimate_line_is_on_stderr_above_the_threshold_only(monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(SMALL_GEMM) == 0
    quiet = capsys.readouterr()
    assert "estimate:" not in quiet.err
    monkeypatch.setattr(estimate_module, "THRESHOLD_S", 0.0)
    assert main(SMALL_GEMM) == 0
    loud = capsys.readouterr()
    assert loud.out == quiet.out  # results and what tools parse are untouched
    lines = [line for line in loud.err.splitlines() if line.startswith("estimate:")]
    cost = request_cost(parse_request(GemmRequest, GEMM_FIELDS), Context())
    assert cost is not None
    assert lines == [estimate_line(cost)]
    assert lines[0].startswith("estimate: ~0.0")
    assert lines[0].endswith(" s and ~48 MB for a full-fidelity meshslice GeMM on 4x4; --fidelity symmetric would "
                             "take ~" f"{cost.cheaper[1].wall_s if cost.cheaper else 0:.2g} s (the same answer)")


def test_a_step_estimate_follows_the_steps_windows() -> None:
    """A 6-layer step on a uniform torus: the estimate, from probes of the 2- and 3-layer windows, is within 2% of
    the events the run processes (collectives overlapping in a step wake their link programs a little more often
    than alone)."""
    model = Path(__file__).parent / "six_layers.yaml"
    model.write_text("name: six-layers\ndescription: 6 layers, hidden 1024\nlayers: 6\nhidden: 1024\nheads: 16\n"
                     "head_dim: 64\nffn: 4096\nsequence: 512\n")
    try:
        fields = {"model": str(model), "hardware": "tpuv4", "topology": "torus:4x4", "mesh": "4x4",
                  "algorithm": "collective", "fidelity": "full"}
        cost = request_cost(parse_request(StepRequest, fields), Context())
        assert cost is not None
        assert cost.estimate.events == 11512
    finally:
        model.unlink()


def test_reproduce_resume_simulates_only_the_points_an_interrupted_run_left(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    whole = reproduce("slice-sweep", tmp_path / "whole", quick=True)[0]
    environment = {**os.environ, FAULT_ENV: "5", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    killed = subprocess.run([sys.executable, "-m", "tpusim", "reproduce", "slice-sweep", "--quick", "--jobs", "1",
                             "--out", str(tmp_path / "cut")], env=environment, capture_output=True, text=True,
                            timeout=300, check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    simulated: list[dict[str, object]] = []
    run_point = jobs_module.run_point

    def counted(point: dict[str, object], context: Context | None = None) -> dict[str, object]:
        simulated.append(point)
        return run_point(point, context)

    monkeypatch.setattr(jobs_module, "run_point", counted)
    lines: list[str] = []
    resumed = reproduce("slice-sweep", tmp_path / "cut", quick=True, jobs=1, resume=True, estimate=lines.append)[0]
    assert len(simulated) == 14 - 5
    assert lines[0].startswith("slice-sweep: estimate: ~") and lines[0].endswith(
        "for 9 points to run (5 finished earlier)")
    assert resumed.csv.read_bytes() == whole.csv.read_bytes()


def test_plan_announces_the_cost_of_every_stage_it_searches(monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """``plan`` estimates like ``tune`` (it is one tune per algorithm and ZeRO stage): the line is printed before
    the search, and searching every stage charges four times one stage's bound."""
    from tpusim.config.requests import PlanRequest, TuneRequest

    fields = {"model": "gpt3-175b", "hardware": "meshslice-sim", "chips": 16, "ignore_memory": True}
    every = request_cost(parse_request(PlanRequest, fields), Context())
    one = request_cost(parse_request(PlanRequest, {**fields, "zero_stage": 1}), Context())
    tuned = request_cost(parse_request(TuneRequest, {**fields, "algorithm": "all"}), Context())
    assert every is not None and one is not None and tuned is not None
    assert one.estimate.events == tuned.estimate.events > 0
    assert every.estimate.events == 4 * one.estimate.events
    monkeypatch.setattr(estimate_module, "THRESHOLD_S", 0.0)
    assert main(["plan", "--model", "gpt3-175b", "--hardware", "meshslice-sim", "--chips", "16", "--ignore-memory",
                 "--zero-stage", "1", "--json"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("estimate:")]
    assert lines == [estimate_line(one)]
