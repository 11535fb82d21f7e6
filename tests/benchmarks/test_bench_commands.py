"""benchmarks/run.py: the commands its user-command figures time, their targets and the table (nothing timed)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tpusim.cli.derive import request_from_args
from tpusim.cli.main import build_parser
from tpusim.config.requests import PlanRequest, StepRequest, TuneRequest

RUN_PY = Path(__file__).resolve().parents[2] / "benchmarks" / "run.py"


@pytest.fixture(scope="module")
def bench():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("benchmarks_run", RUN_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["benchmarks_run"] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules["benchmarks_run"]


EXPECTED = {
    "plan_gpt3_256_tpuv4_s": "plan --model gpt3-175b --hardware tpuv4 --chips 256 --json",
    "plan_gpt3_4096_tpuv4_s": "plan --model gpt3-175b --hardware tpuv4 --chips 4096 --json",
    "tune_gpt3_256_tpuv4_s": "tune --model gpt3-175b --hardware tpuv4 --chips 256 --json",
    "pod_tune_s": "tune --model gpt3-175b --hardware tpuv4 --chips 4096 --json",
    "step_gpt3_256_tpuv4_s": "step --model gpt3-175b --hardware tpuv4 --mesh 256x1 --algorithm meshslice "
                             "--slices 18,6,24,24 --dataflows ls,ls,ls,os --json",
    "step_summa_gpt3_256_tpuv4_s": "step --model gpt3-175b --hardware tpuv4 --mesh 32x8 --algorithm summa --json",
    "step_405b_dcn_fsdp_v6e_s": "step --model llama3.1-405b --hardware tpuv6e --layout dcn_fsdp=2,fsdp=256 "
                                "--algorithm tp1d --batch 512 --recompute custom --remat-offload "
                                "decoder_layer_input,query_proj,key_proj,value_proj,out_proj "
                                "--attention fused-causal --embedding --optimizer --json",
    "validate_calibration_s": "validate --measurements configs/measurements/calibration.csv",
    "reproduce_headline_tpuv4_s": "reproduce headline --hardware tpuv4 --out {out}",
    "reproduce_quick_s": "reproduce all --quick --out {out}",
}


def test_each_user_command_figure_runs_exactly_the_users_command(bench) -> None:  # type: ignore[no-untyped-def]
    assert {name: " ".join(argv) for name, argv in bench.USER_COMMANDS.items()} == EXPECTED
    assert set(bench.USER_COMMANDS) <= set(bench.BENCHMARKS)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_command_parses_with_the_command_line_parser(bench, name: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    argv = [str(tmp_path) if word == bench.OUT else word for word in bench.USER_COMMANDS[name]]
    args = build_parser().parse_args(argv)
    assert args.command == argv[0]
    kind = {"step": StepRequest, "tune": TuneRequest, "plan": PlanRequest}.get(argv[0])
    if kind is not None:  # the request is built and validated as the command builds it (nothing simulated)
        request = request_from_args(kind, args)
        assert isinstance(request, kind)
    if argv[0] == "reproduce":
        assert args.out == tmp_path
        assert args.quick is (name == "reproduce_quick_s")


def test_the_validated_table_is_the_shipped_one(bench) -> None:  # type: ignore[no-untyped-def]
    assert (bench.REPOSITORY / "configs" / "measurements" / "calibration.csv").is_file()


def test_targets_are_the_readmes(bench) -> None:  # type: ignore[no-untyped-def]
    assert bench.TARGETS == {
        "collective_transfers_per_s": (">=", 4e5), "allgather_torus_64x32_full_s": ("<=", 1.0),
        "allgather_ring_2048_full_s": ("<=", 14), "ring_bytes_per_transfer": ("<=", 150),
        "gemm_full_s": ("<=", 0.5), "layer_full_s": ("<=", 5), "gemm_symmetric_ms": ("<=", 5),
        "step_symmetric_s": ("<=", 1), "tune_s": ("<=", 5), "reproduce_quick_s": ("<=", 180),
        "peak_rss_mb_gemm_2048_full": ("<=", 500), "startup_small_collective_s": ("<=", 0.15),
        "startup_version_s": ("<=", 0.1), "pod_straggler_full_s": ("<=", 120),
        "peak_rss_mb_pod_straggler": ("<=", 4096), "pod_step_symmetric_s": ("<=", 1), "pod_tune_s": ("<=", 30),
        "step_405b_512_symmetric_s": ("<=", 5), "validate_measurements_s": ("<=", 60),
        "plan_gpt3_256_tpuv4_s": ("<=", 60), "plan_gpt3_4096_tpuv4_s": ("<=", 180),
        "tune_gpt3_256_tpuv4_s": ("<=", 5), "step_gpt3_256_tpuv4_s": ("<=", 1),
        "step_summa_gpt3_256_tpuv4_s": ("<=", 10), "step_405b_dcn_fsdp_v6e_s": ("<=", 20),
        "validate_calibration_s": ("<=", 30), "reproduce_headline_tpuv4_s": ("<=", 900),
    }
    assert set(bench.BENCHMARKS) - set(bench.TARGETS) == {"gemm_analytic_us"}


def test_target_met(bench) -> None:  # type: ignore[no-untyped-def]
    assert bench.target_met("step_gpt3_256_tpuv4_s", 1.0) is True
    assert bench.target_met("step_gpt3_256_tpuv4_s", 1.01) is False
    assert bench.target_met("collective_transfers_per_s", 4e5) is True
    assert bench.target_met("collective_transfers_per_s", 3.9e5) is False
    assert bench.target_met("gemm_analytic_us", 12.6) is None


def test_table_shows_targets_and_load(bench) -> None:  # type: ignore[no-untyped-def]
    report = {"load_start": [1.5, 1.25, 1.0], "load_end": [2.0, 1.5, 1.125], "benchmarks": {
        "tune_gpt3_256_tpuv4_s": {"median": 3.5, "unit": "s", "target": ("<=", 5), "met": True},
        "step_gpt3_256_tpuv4_s": {"median": 2.25, "unit": "s", "target": ("<=", 1), "met": False},
        "gemm_analytic_us": {"median": 12.5, "unit": "us", "target": None, "met": None},
    }}
    assert bench.table(report).splitlines() == [
        "load average (1, 5, 15 min) at start: 1.50 1.25 1.00",
        "tune_gpt3_256_tpuv4_s                     3.5 s            <= 5         met",
        "step_gpt3_256_tpuv4_s                    2.25 s            <= 1         NOT MET",
        "gemm_analytic_us                         12.5 us           no target",
        "load average (1, 5, 15 min) at end: 2.00 1.50 1.12",
    ]


def test_a_failing_command_is_an_error_naming_it(bench, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setitem(bench.USER_COMMANDS, "step_gpt3_256_tpuv4_s", ("step", "--no-such-flag"))
    with pytest.raises(RuntimeError, match=r"^tpusim step --no-such-flag exited 2: "):
        bench.step_gpt3_256_tpuv4_s()
