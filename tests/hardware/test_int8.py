"""int8 GeMMs (docs/chip.md#int8-gemms): the int8 rate and 1-byte operands in the roofline, MFU against the bf16
peak, and one-line refusals where a profile has no int8 rate."""

from __future__ import annotations

import pytest

from tpusim import api
from tpusim.cli.main import main
from tpusim.hardware import ChipModel, load_hardware
from tpusim.hardware.profiles import with_precision
from tpusim.vocabulary import Precision

PUBLISHED_INT8 = {"tpuv4": 275e12, "tpuv5e": 393e12, "tpuv5p": 918e12, "tpuv6e": 1836e12}


def test_each_physical_profile_carries_its_published_int8_rate() -> None:
    for name, rate in PUBLISHED_INT8.items():
        assert load_hardware(name).chip.int8_peak_ops == rate


@pytest.mark.parametrize(("m", "n", "k"), [(8192, 8192, 8192), (4096, 128, 300), (100, 200, 40000)])
def test_int8_gemm_time_is_the_roofline_hand_formula(m: int, n: int, k: int) -> None:
    profile = load_hardware("tpuv5e")
    chip = ChipModel(with_precision(profile, Precision.INT8).chip)
    spec = profile.chip

    def pad(x: int) -> int:
        return -(-x // 128) * 128

    # at the achievable rates (docs/chip.md#achievable-rates)
    compute = 2 * pad(m) * pad(n) * pad(k) / (393e12 * spec.mxu_efficiency)
    memory = (1 * (m * k + k * n) + 2 * m * n) / (spec.hbm_bandwidth * spec.hbm_efficiency)  # int8 operands
    assert chip.gemm_time(m, n, k) == pytest.approx(spec.op_overhead + max(compute, memory), rel=1e-12)
    # the fp32 accumulator read and written
    accumulated = (1 * (m * k + k * n) + 2 * 4 * m * n) / (spec.hbm_bandwidth * spec.hbm_efficiency)
    assert chip.gemm_time(m, n, k, accumulate=True) == pytest.approx(spec.op_overhead + max(compute, accumulated),
                                                                     rel=1e-12)


@pytest.mark.slow
def test_an_int8_step_is_faster_with_mfu_against_the_bf16_peak() -> None:
    args = {"model": "gpt3-175b", "hardware": "tpuv5e", "mesh": "16x16", "algorithm": "collective",
            "recompute": "full", "ignore_memory": True}
    bf16, int8 = api.step(**args), api.step(**args, precision="int8")
    assert int8.step_time_s < bf16.step_time_s
    # the same model FLOPs over the same bf16 peak: MFU scales as the inverse step time
    assert int8.mfu * int8.step_time_s == pytest.approx(bf16.mfu * bf16.step_time_s, rel=1e-12)


@pytest.mark.parametrize("argv", [
    ["step", "--model", "gpt3-175b", "--hardware", "meshslice-sim", "--mesh", "32x8", "--precision", "int8"],
    ["gemm", "--hardware", "meshslice-tpu-fit", "--mesh", "4x4", "--dataflow", "os", "--m", "1024", "--n", "1024",
     "--k", "1024", "--precision", "int8"],
])
def test_int8_without_an_int8_rate_is_one_line_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("precision int8 needs an int8 rate (chip.int8_peak_ops), which 'meshslice")
