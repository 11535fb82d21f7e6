"""ChipModel: GeMM time under the flops and roofline models, HBM-bound op time."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpusim.config import ChipSpec
from tpusim.hardware import ChipModel, load_hardware

F_EMULATOR = 242 * 1024**4
PEAK = 275e12
HBM_BW = 1.2e12


def _roofline(**changes: object) -> ChipModel:
    """The tpuv4 chip without its fixed per-op cost (tested on its own below)."""
    return ChipModel(load_hardware("tpuv4-wire").chip.model_copy(update=changes))


def test_tpuv4_chip_attributes() -> None:
    chip = ChipModel(load_hardware("tpuv4").chip)
    assert chip.peak_flops == PEAK
    assert chip.hbm_bandwidth == HBM_BW
    assert chip.hbm_capacity == 32 * 2**30
    assert chip.mxu_dim == 128


@pytest.mark.parametrize("name", ["meshslice-tpu-fit", "meshslice-sim"])
@pytest.mark.parametrize(("m", "n", "k"), [(1, 1, 1), (4096, 4096, 4096), (65536, 128, 128), (3, 1000, 77)])
def test_flops_model_is_plain_2mnk_over_peak(name: str, m: int, n: int, k: int) -> None:
    chip = ChipModel(load_hardware(name).chip)
    assert chip.peak_flops == F_EMULATOR
    assert chip.gemm_time(m, n, k) == 2 * m * n * k / F_EMULATOR
    # The flops model ignores dtype sizes and padding.
    assert chip.gemm_time(m, n, k, in_bytes=4, out_bytes=4) == 2 * m * n * k / F_EMULATOR


def test_gemm_flops_is_unpadded() -> None:
    chip = _roofline()
    assert chip.gemm_flops(1, 1, 1) == 2.0
    assert chip.gemm_flops(3, 5, 7) == 210.0


def test_roofline_tiny_gemm_pays_a_full_mxu_pass_or_hbm() -> None:
    chip = _roofline()
    full_pass = 2 * 128**3 / PEAK
    hbm = (2 * (1 + 1) + 2 * 1) / HBM_BW
    assert chip.gemm_time(1, 1, 1) == max(full_pass, hbm)
    assert chip.gemm_time(1, 1, 1) == full_pass  # compute dominates: ~15 ns vs ~5 ps
    # A single full tile moves 2 * 2 * 128^2 bytes of operands and writes 2 * 128^2 of output: HBM-bound.
    tile_hbm = (2 * 2 * 128 * 128 + 2 * 128 * 128) / HBM_BW
    assert tile_hbm > full_pass
    assert chip.gemm_time(128, 128, 128) == tile_hbm
    assert chip.gemm_time(129, 1, 1) == 2 * 256 * 128 * 128 / PEAK


def test_roofline_large_square_is_compute_bound() -> None:
    chip = _roofline()
    m = n = k = 4096
    expected = 2 * 4096**3 / PEAK
    hbm = (2 * (m * k + k * n) + 2 * 4 * m * n) / HBM_BW  # even accumulating in fp32
    assert hbm < expected
    assert chip.gemm_time(m, n, k, accumulate=True) == expected
    assert chip.gemm_time(m, n, k) == expected


def test_roofline_skinny_gemm_is_hbm_bound() -> None:
    chip = _roofline()
    m, n, k = 65536, 128, 128
    nbytes = 2 * (m * k + k * n) + 2 * m * n
    assert chip.gemm_hbm_bytes(m, n, k) == nbytes
    assert 2 * m * n * k / PEAK < nbytes / HBM_BW
    assert chip.gemm_time(m, n, k) == nbytes / HBM_BW


def test_accumulator_switch_changes_time_by_its_traffic() -> None:
    m, n, k = 65536, 128, 128
    with_acc, without = _roofline(), _roofline(accumulator_traffic=False)
    # Still HBM-bound without the output term, so the difference is exactly its traffic: the output written once,
    # or the fp32 accumulator read and written.
    assert without.gemm_time(m, n, k) == 2 * (m * k + k * n) / HBM_BW
    assert without.gemm_time(m, n, k, accumulate=True) == without.gemm_time(m, n, k)
    assert math.isclose(with_acc.gemm_time(m, n, k) - without.gemm_time(m, n, k), 2 * m * n / HBM_BW,
                        rel_tol=1e-12)
    assert math.isclose(with_acc.gemm_time(m, n, k, accumulate=True) - without.gemm_time(m, n, k),
                        2 * 4 * m * n / HBM_BW, rel_tol=1e-12)
    assert with_acc.gemm_time(m, n, k, out_bytes=4) == (2 * (m * k + k * n) + 4 * m * n) / HBM_BW


def test_dtype_sizes_enter_the_hbm_term() -> None:
    chip = _roofline()
    m, n, k = 65536, 128, 128
    assert chip.gemm_time(m, n, k, in_bytes=1, out_bytes=4) == (1 * (m * k + k * n) + 4 * m * n) / HBM_BW
    accumulator = ChipModel(load_hardware("tpuv4-wire").chip.model_copy(update={"accumulator_bytes": 2}))
    assert accumulator.gemm_time(m, n, k, in_bytes=1, accumulate=True) == (m * k + k * n + 2 * 2 * m * n) / HBM_BW


@pytest.mark.parametrize("dims", [(0, 5, 5), (5, 0, 5), (5, 5, 0), (0, 0, 0)])
@pytest.mark.parametrize("name", ["tpuv4", "meshslice-sim"])
def test_empty_gemm_takes_no_time(dims: tuple[int, int, int], name: str) -> None:
    assert ChipModel(load_hardware(name).chip).gemm_time(*dims) == 0.0


def test_negative_dimension_rejected() -> None:
    with pytest.raises(ValueError, match="m=-1"):
        _roofline().gemm_time(-1, 2, 3)


def test_hbm_time_and_op_time() -> None:
    chip = _roofline()
    assert chip.hbm_time(1.2e9) == 1.2e9 / HBM_BW
    assert chip.hbm_time(0) == 0.0
    assert chip.op_time(275e12, 1.0) == 1.0
    assert chip.op_time(1.0, 2.4e12) == 2.0
    with pytest.raises(ValueError):
        chip.hbm_time(-1)
    with pytest.raises(ValueError):
        chip.op_time(-1, 0)


def test_every_non_empty_op_pays_the_op_overhead() -> None:
    spec = load_hardware("tpuv4").chip
    bare = _roofline(mxu_efficiency=spec.mxu_efficiency, hbm_efficiency=spec.hbm_efficiency)
    tpu = ChipModel(spec)
    assert tpu.op_overhead == 1e-6
    assert tpu.gemm_time(4096, 4096, 4096) == bare.gemm_time(4096, 4096, 4096) + 1e-6
    assert tpu.hbm_time(1.2e9) == bare.hbm_time(1.2e9) + 1e-6
    assert tpu.op_time(275e12 * spec.mxu_efficiency, 1.0) == pytest.approx(1.0 + 1e-6, rel=1e-15)
    assert (tpu.gemm_time(0, 8, 8), tpu.hbm_time(0), tpu.op_time(0, 0)) == (0.0, 0.0, 0.0)  # nothing to launch


def test_custom_mxu_dim() -> None:
    spec = ChipSpec(
        peak_flops=1e12, tensorcores=1, mxus_per_core=1, mxu_dim=8,
        hbm_capacity=1e9, hbm_bandwidth=1e15, gemm_model="roofline",
    )
    assert ChipModel(spec).gemm_time(9, 1, 17) == 2 * 16 * 8 * 24 / 1e12


@given(
    m=st.integers(1, 5000), n=st.integers(1, 5000), k=st.integers(1, 5000),
)
@pytest.mark.slow
def test_roofline_never_faster_than_unpadded_compute_or_hbm(m: int, n: int, k: int) -> None:
    chip = _roofline()
    t = chip.gemm_time(m, n, k)
    assert t >= 2 * m * n * k / PEAK
    assert t >= chip.gemm_hbm_bytes(m, n, k) / HBM_BW
    # Padding never costs more than one extra tile per dimension.
    assert t <= max(2 * (m + 127) * (n + 127) * (k + 127) / PEAK, chip.gemm_hbm_bytes(m, n, k) / HBM_BW)


def test_gemm_runs_at_the_achieved_mxu_rate_and_hbm_at_the_achieved_bandwidth() -> None:
    # docs/chip.md#achievable-rates: compute over peak x mxu_efficiency, memory over bandwidth x hbm_efficiency
    chip = _roofline(mxu_efficiency=0.8, hbm_efficiency=0.5)
    assert (chip.peak_flops, chip.hbm_bandwidth) == (PEAK, HBM_BW)  # nominal: what MFU is measured against
    assert chip.flop_rate == PEAK * 0.8
    assert chip.hbm_rate == HBM_BW * 0.5
    assert chip.gemm_time(4096, 4096, 4096) == 2 * 4096**3 / (PEAK * 0.8)
    m, n, k = 65536, 128, 128
    assert chip.gemm_time(m, n, k) == (2 * (m * k + k * n) + 2 * m * n) / (HBM_BW * 0.5)
    assert chip.hbm_time(1e9) == 1e9 / (HBM_BW * 0.5)
    assert chip.op_time(1e12, 0.0) == 1e12 / (PEAK * 0.8)


def test_the_shipped_tpuv4_runs_below_its_peaks() -> None:
    spec = load_hardware("tpuv4").chip
    chip = ChipModel(spec)
    assert 0 < spec.mxu_efficiency < 1 and 0 < spec.hbm_efficiency < 1
    assert chip.gemm_time(8192, 8192, 8192) == pytest.approx(1e-6 + 2 * 8192**3 / (PEAK * spec.mxu_efficiency),
                                                             rel=1e-12)
