"""Chip fidelity: fp32 accumulators of GeMMs that add into a partial output, and the vector units' rate, in
the chip model, in the algorithms' twins and in the simulation alike (docs/chip.md#gemm-time,
docs/chip.md#vector-work)."""

from __future__ import annotations

import pytest

from tpusim.collectives.factory import network_for
from tpusim.collectives.simulate import CollectiveSpec, simulate_collective
from tpusim.config import HardwareProfile
from tpusim.errors import ConfigError
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.params import GemmParams
from tpusim.gemm.registry import get_algorithm
from tpusim.gemm.simulate import simulate_gemm
from tpusim.hardware import ChipModel, load_hardware, scaled_profile
from tpusim.model.layer import VECTOR_OPS_PER_ELEMENT
from tpusim.topology import map_mesh, parse_topology
from tpusim.vocabulary import CollectiveOp, Dataflow, Fidelity

TPUV4 = load_hardware("tpuv4")
# the achievable rates the profile runs at (docs/chip.md#achievable-rates)
HBM = 1.2e12 * TPUV4.chip.hbm_efficiency
PEAK = 275e12 * TPUV4.chip.mxu_efficiency
STEP, LINK, HOP, PASSES, O_RS = 4e-6, 45e9 * TPUV4.ici.link_efficiency, 1e-6, 3, 26e-6  # type: ignore[attr-defined]


def _chip(**changes: object) -> HardwareProfile:
    return TPUV4.model_copy(update={"chip": TPUV4.chip.model_copy(update=changes)})


def test_tpuv4_declares_an_fp32_accumulator_and_a_vector_rate() -> None:
    assert TPUV4.chip.accumulator_bytes == 4
    assert TPUV4.chip.vector_rate == 2.15e12


def test_accumulating_gemm_reads_and_writes_fp32_where_a_fresh_one_writes_once() -> None:
    """The issue's GPT-3 ff2 slice at K = 96: at the roofline balance in bf16, HBM-bound with an fp32 accumulator."""
    chip = ChipModel(TPUV4.chip)
    m, n, k = 8192, 3072, 512
    operands = 2 * (m * k + k * n)
    assert chip.gemm_hbm_bytes(m, n, k) == operands + 2 * m * n
    assert chip.gemm_hbm_bytes(m, n, k, accumulate=True) == operands + 2 * 4 * m * n
    compute = 2 * m * n * k / PEAK
    assert chip.gemm_time(m, n, k) == pytest.approx(1e-6 + compute, rel=1e-12)
    accumulating = chip.gemm_time(m, n, k, accumulate=True)
    assert accumulating == pytest.approx(1e-6 + (operands + 8 * m * n) / HBM, rel=1e-12)
    assert 197e-6 < accumulating < 199e-6  # ~197 us of HBM against 109.3 us of MXU time (docs/chip.md#gemm-time)
    without = ChipModel(TPUV4.chip.model_copy(update={"accumulator_traffic": False}))
    assert without.gemm_hbm_bytes(m, n, k, accumulate=True) == operands


def test_op_time_takes_the_slowest_of_mxu_vector_and_hbm() -> None:
    chip = ChipModel(TPUV4.chip)
    elements = 1e8
    gelu = VECTOR_OPS_PER_ELEMENT["gelu"] * elements
    assert chip.op_time(0.0, 4 * elements, gelu) == pytest.approx(1e-6 + gelu / 2.15e12, rel=1e-12)
    residual = VECTOR_OPS_PER_ELEMENT["residual"] * elements
    assert chip.op_time(0.0, 6 * elements, residual) == pytest.approx(1e-6 + 6 * elements / HBM, rel=1e-12)
    no_rate = ChipModel(TPUV4.chip.model_copy(update={"vector_rate": None}))
    assert no_rate.op_time(0.0, 4 * elements, gelu) == pytest.approx(1e-6 + 4 * elements / HBM, rel=1e-12)


@pytest.mark.parametrize(("algorithm", "dataflow", "params", "topology", "mesh"), [
    ("meshslice", Dataflow.OS, GemmParams(slices=4), "torus:4x4", (4, 4)),
    ("summa", Dataflow.OS, GemmParams(), "torus:4x4", (4, 4)),
    ("cannon", Dataflow.OS, GemmParams(), "torus:4x4", (4, 4)),
    ("cannon", Dataflow.LS, GemmParams(), "torus:4x4", (4, 4)),
    ("wang", Dataflow.OS, GemmParams(), "torus:4x4", (4, 4)),  # gather ring over the contraction
    ("tp1d", Dataflow.LS, GemmParams(), "torus:16", (1, 16)),  # reduce ring: partial outputs circulate
])
def test_accumulator_precision_shows_in_twin_and_simulation(algorithm: str, dataflow: Dataflow, params: GemmParams,
                                                            topology: str, mesh: tuple[int, int]) -> None:
    """HBM-bound slices (k small): with a bf16 accumulator the GeMMs are faster, and the simulation follows its
    twin both ways, so the twin carries the accumulator term exactly."""
    mapping = map_mesh(parse_topology(topology), *mesh)
    problem = GemmProblem(8192, 8192, 512, dataflow)
    times = {}
    for nbytes in (4, 2):
        result = simulate_gemm(problem, get_algorithm(algorithm), params, network_for(_chip(accumulator_bytes=nbytes),
                                                                                      mapping),
                               fidelity=Fidelity.FULL)
        assert result.analytic_time_s is not None
        assert result.time_s == pytest.approx(result.analytic_time_s, rel=1e-9)
        times[nbytes] = result.time_s
    assert times[4] > times[2]


def test_single_gemm_algorithms_never_accumulate() -> None:
    """The collective 2D GeMM multiplies once: its time does not depend on the accumulator precision."""
    mapping = map_mesh(parse_topology("torus:4x4"), 4, 4)
    problem = GemmProblem(8192, 8192, 512, Dataflow.OS)
    times = {simulate_gemm(problem, get_algorithm("collective"), GemmParams(),
                           network_for(_chip(accumulator_bytes=nbytes), mapping),
                           fidelity=Fidelity.FULL).time_s for nbytes in (4, 2)}
    assert len(times) == 1


def test_vector_bound_reductions_show_in_the_reduce_scatter_twin() -> None:
    """A vector unit slower than the HBM passes (one add per bf16 element) makes every step's addition cost
    u' / 2 / rate instead of u' x 3 / HBM; simulation and twin agree on both."""
    mapping = map_mesh(parse_topology("torus:8"), 1, 8)
    unit = 180_000
    moved = unit / 2
    spec = CollectiveSpec(CollectiveOp.REDUCE_SCATTER, 1, 8 * unit)
    slow_rate = 1e11  # 5 ps per byte against 2.5 ps of HBM passes
    for rate, per_byte in ((None, PASSES / HBM), (2.15e12, PASSES / HBM), (slow_rate, 1 / (2 * slow_rate))):
        result = simulate_collective(spec, network_for(_chip(vector_rate=rate), mapping))
        expected = O_RS + 7 * (moved / LINK + STEP + HOP + moved * per_byte)
        assert result.analytic_time_s == pytest.approx(expected, rel=1e-12)
        assert result.time_s == pytest.approx(expected, rel=1e-9)


def test_the_vector_scale_factor_multiplies_the_rate() -> None:
    scaled = scaled_profile(TPUV4, vector=0.5)
    assert scaled.chip.vector_rate == pytest.approx(1.075e12)
    assert scaled.name == "tpuv4[vector*0.5]"
    calibrated = load_hardware("meshslice-sim")
    with pytest.raises(ConfigError, match=r"vector=0\.5 needs a vector rate"):
        scaled_profile(calibrated, vector=0.5)

