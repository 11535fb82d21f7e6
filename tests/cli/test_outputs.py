"""The command line's words and outputs (docs/results.md#command-line-conventions): ``gemm`` picks its slice count
as ``step`` does, S is the slice count and K only the contraction, help texts quote the code's defaults and offer
only the fidelities a command runs, text output has no reprs and one size unit, an axis of several physical axes
is named by the schedule that ran, and steps report tokens/s and seconds per sequence."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from tests.small_model import SMALL_MODEL_YAML
from tpusim import api
from tpusim.cli.main import command_parser, main
from tpusim.config.hardware import CalibratedProfile, PhysicalProfile
from tpusim.errors import UserError
from tpusim.units import format_size, format_time

PLAIN_GEMM = ["gemm", "--hardware", "tpuv4", "--mesh", "4x4", "--dataflow", "os", "--m", "1000", "--n", "1000",
              "--k", "1000"]
REPRS = re.compile(r"\{'|\['|\bNone\b|\bTrue\b|\bFalse\b")


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def small_model(tmp_path: Path) -> str:
    path = tmp_path / "small.yaml"
    path.write_text(SMALL_MODEL_YAML)
    return str(path)


def _action(command: str, flag: str) -> argparse.Action:
    return next(a for a in command_parser(command)._actions if flag in a.option_strings)


# ---------------------------------------------------------------------------------------------- gemm's slice count


def test_a_plain_gemm_with_no_slicing_flag_runs_one_slice(capsys: pytest.CaptureFixture[str]) -> None:
    """k = 1000 on 4x4 is a multiple of lcm(4, 4) = 4 but not of 4 x 8: one MeshSlice slice is the only count, and
    the GeMM runs instead of failing on a --slices the user never gave; the product is exact."""
    code, out, err = run(capsys, [*PLAIN_GEMM, "--verify", "--json"])
    assert code == 0, err
    result = json.loads(out)
    assert (result["algorithm"], result["slices"]) == ("meshslice", 1)
    assert result["max_abs_error"] < 1e-9
    code, out, _ = run(capsys, PLAIN_GEMM)
    assert code == 0
    assert out.splitlines()[0] == ("meshslice os M=1000 N=1000 K=1000 on 4x4, slice count 1, tpuv4, "
                                   "prefetch previous-gemm")


def test_gemm_without_slices_takes_the_fastest_feasible_count(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["gemm", "--hardware", "meshslice-sim", "--mesh", "4x4", "--dataflow", "os", "--m", "4096", "--n",
            "4096", "--k", "1024", "--json"]
    times = {}
    for count in (1, 2, 4, 8, 16, 32):  # 1024 / (4 x 8) = 32: every divisor of 32 is feasible
        code, out, _ = run(capsys, [*base, "--slices", str(count)])
        assert code == 0
        times[count] = json.loads(out)["time_s"]
    code, out, _ = run(capsys, base)
    assert code == 0
    result = json.loads(out)
    fastest = min(times, key=lambda count: (times[count], count))
    assert result["slices"] == fastest
    assert result["time_s"] == times[fastest]
    assert f"slice count {fastest} chosen, the fastest of the feasible 1, 2, 4, 8, 16, 32" in result["notes"]


def test_an_algorithm_that_does_not_slice_still_runs_unsliced(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, [*PLAIN_GEMM, "--algorithm", "collective", "--json"])
    assert code == 0
    assert json.loads(out)["slices"] is None


def test_no_feasible_slice_count_names_no_flag_the_user_never_gave(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*PLAIN_GEMM[:-1], "1002"]  # 1002 is no multiple of lcm(4, 4) = 4
    code, _, err = run(capsys, argv)
    assert code == 2
    assert err == ("meshslice: the sliced dimension k = 1002 is not divisible by lcm(4, 4) = 4, so no slice count is "
                   "feasible; use a multiple of 4\n")


# ---------------------------------------------------------------------------------------------- help texts


@pytest.mark.parametrize("command", ["gemm", "step", "tune", "plan"])
def test_k_is_only_ever_the_contraction_dimension(command: str) -> None:
    parser = command_parser(command)
    calls_k = {a.option_strings[0] for a in parser._actions
               if re.search(r"\bK\d?\b", f"{a.help or ''} {a.metavar or ''}")}
    assert calls_k <= {"--k", "--dataflow"}  # the contraction: --k itself, and the operand shapes [N,K], [K,M]
    if command in ("gemm", "step"):
        assert "slice count S" in (_action(command, "--slices").help or "")


def test_per_layer_flags_show_that_they_take_one_value_or_four() -> None:
    usage = command_parser("step").format_usage()
    for shown in ("--slices S[,S,S,S]", "--dataflows DF[,DF,DF,DF]", "--transposes T[,T,T,T]",
                  "--remat-save NAME[,NAME...]"):
        assert shown in usage
    assert "each one of os, ls, rs" in (_action("step", "--dataflows").help or "")
    assert "--dataflows DF[,DF...]" in command_parser("tune").format_usage()


@pytest.mark.parametrize("command", ["gemm", "step", "tune", "plan"])
def test_prefetch_help_quotes_each_profile_kind_default_from_the_code(command: str) -> None:
    physical, calibrated = (kind.model_fields["prefetch"].default for kind in (PhysicalProfile, CalibratedProfile))
    assert (physical, calibrated) == ("previous-gemm", "ideal")
    text = " ".join((_action(command, "--prefetch").help or "").split())
    assert text.endswith(f"(default: the profile's, {physical} on physical profiles, {calibrated} on calibrated "
                         "ones)")
    assert "default: the profile's, dimensional on physical profiles" in " ".join(
        (_action(command, "--multi-axis").help or "").split())


@pytest.mark.parametrize(("command", "offered"), [("gemm", ["full", "symmetric", "analytic", "auto"]),
                                                  ("step", ["auto", "full", "symmetric"]),
                                                  ("tune", ["auto", "full", "symmetric"]),
                                                  ("plan", ["auto", "full", "symmetric"])])
def test_fidelity_choices_are_those_the_command_runs(command: str, offered: list[str]) -> None:
    assert _action(command, "--fidelity").metavar == "{" + ",".join(offered) + "}"


@pytest.mark.parametrize("command", [["step", "--mesh", "2x2"], ["tune", "--chips", "4"]])
def test_analytic_is_refused_before_any_work(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                             small_model: str, command: list[str]) -> None:
    import tpusim.gemm.simulate

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("simulated before refusing")

    monkeypatch.setattr(tpusim.gemm.simulate, "simulate_gemm", never)
    code, _, err = run(capsys, [command[0], "--hardware", "meshslice-sim", "--model", small_model, *command[1:],
                                "--fidelity", "analytic"])
    assert code == 2
    assert err == ("--fidelity 'analytic' is not offered for a whole step (it has no closed form); valid: auto, "
                   "full, symmetric\n")
    with pytest.raises(UserError, match=r"^fidelity 'analytic' is not offered for a whole step"):
        api.step(hardware="meshslice-sim", model=small_model, mesh="2x2", fidelity="analytic")


# ---------------------------------------------------------------------------------------------- text output


def test_collective_prints_its_schedule_and_mapping_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, ["collective", "--hardware", "tpuv4", "--mesh", "4x4", "--op", "all-gather",
                                "--axis", "0", "--bytes", "64MB"])
    assert code == 0
    assert REPRS.search(out) is None
    assert out.splitlines()[-2:] == [
        "  schedule    dimensional over x*y: 2 parts in rotated axis orders, halves both ways",
        "  network     tpuv4:2x2x4 (axis 0: x*y; axis 1: z line)"]


def test_step_text_has_no_reprs_and_says_what_is_not_sliced(capsys: pytest.CaptureFixture[str],
                                                            small_model: str) -> None:
    base = ["step", "--hardware", "meshslice-sim", "--model", small_model, "--mesh", "2x2"]
    code, out, _ = run(capsys, [*base, "--algorithm", "collective"])
    assert code == 0
    assert REPRS.search(out) is None
    assert "  dataflows     os, ls, os, ls   not sliced" in out.splitlines()
    code, out, _ = run(capsys, [*base, "--slices", "1,2,1,2"])
    assert code == 0
    assert "  dataflows     os, ls, os, ls   slice counts 1, 2, 1, 2" in out.splitlines()


@pytest.mark.parametrize("command", [["tune", "--chips", "4"], ["plan", "--chips", "4"]])
def test_tune_and_plan_text_have_no_reprs(capsys: pytest.CaptureFixture[str], small_model: str,
                                          command: list[str]) -> None:
    code, out, _ = run(capsys, [command[0], "--hardware", "meshslice-sim", "--model", small_model, *command[1:]])
    assert code == 0
    assert REPRS.search(out) is None


def test_sizes_print_in_one_unit_style(capsys: pytest.CaptureFixture[str], small_model: str) -> None:
    """tpuv5p lets a program fill 95 GiB: printed in GB like the footprint beside it, not as '95 GiB'."""
    code, out, _ = run(capsys, ["step", "--hardware", "tpuv5p", "--model", small_model, "--mesh", "2x2", "--json"])
    assert code == 0
    result = json.loads(out)
    assert result["memory_capacity_bytes"] == 95 * 2**30
    code, out, _ = run(capsys, ["step", "--hardware", "tpuv5p", "--model", small_model, "--mesh", "2x2"])
    memory = next(line for line in out.splitlines() if line.startswith("  memory"))
    assert memory.startswith(f"  memory        {format_size(result['memory_bytes_per_chip'])} per chip of "
                             "102.005 GB,")
    assert "iB" not in out


# ---------------------------------------------------------------------------------------------- throughput


def test_a_step_reports_tokens_per_second_and_seconds_per_sequence(capsys: pytest.CaptureFixture[str],
                                                                   small_model: str) -> None:
    base = ["step", "--hardware", "meshslice-sim", "--model", small_model, "--mesh", "2x2", "--batch", "8"]
    code, out, _ = run(capsys, [*base, "--json"])
    assert code == 0
    result = json.loads(out)
    assert result["tokens_per_s"] == 8 * 512 / result["step_time_s"]  # batch 8 x sequence 512
    assert result["seconds_per_sequence"] == result["step_time_s"] / 8
    code, out, _ = run(capsys, base)
    assert (f"  throughput    {result['tokens_per_s']:,.0f} tokens/s, "
            f"{format_time(result['seconds_per_sequence'])} per sequence") in out.splitlines()


def test_micro_batches_count_every_sequence_of_the_step(small_model: str) -> None:
    whole = api.step(hardware="meshslice-sim", model=small_model, mesh="2x2", batch=8, microbatches=2)
    assert whole.tokens_per_s == 8 * 512 / whole.step_time_s
    assert whole.seconds_per_sequence == whole.step_time_s / 8


def test_tune_choices_report_throughput(capsys: pytest.CaptureFixture[str], small_model: str) -> None:
    code, out, _ = run(capsys, ["tune", "--hardware", "meshslice-sim", "--model", small_model, "--chips", "4",
                                "--json"])
    assert code == 0
    result = json.loads(out)
    for choice in (result["best"], result["runner_up"]):
        assert choice["tokens_per_s"] == 4 * 512 / choice["step_time_s"]
        assert choice["seconds_per_sequence"] == choice["step_time_s"] / 4
    code, out, _ = run(capsys, ["tune", "--hardware", "meshslice-sim", "--model", small_model, "--chips", "4"])
    header, best = out.splitlines()[1:3]
    assert header.split() == ["mesh", "dataflows", "transposed", "slices", "step", "time", "tokens/s", "per",
                              "sequence", "MFU", "HFU"]
    assert " ".join(best.split()[-7:-2]) == (f"{format_time(result['best']['step_time_s'])} "
                                             f"{result['best']['tokens_per_s']:,.0f} "
                                             f"{format_time(result['best']['seconds_per_sequence'])}")
