"""HBM shared between compute and collective DMA (docs/chip.md#hbm-contention).

1. The ledger counts the DMA bytes inside a window of uniform-rate spans; a collective charges every byte sent,
   received and (in a reduction) added with its HBM passes.
2. An op overlapping DMA of rate R stretches to the fixed point t = o + (H + R t) / BW, settled by hand; ops queue
   behind a stretched op.
3. A GeMM overlapped with an all-gather lies between its uncontended time and both contended bounds (all the
   gather's DMA bytes added to its HBM bytes; the gather fully serialised after it); with a very high HBM
   bandwidth, or with contention off, it equals the uncontended time, and whole GeMM algorithms equal their twins.
4. ``scale.dma`` multiplies the charged traffic, and only where there is contention.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
import simpy

from tpusim.collectives.device import Device, run_spmd
from tpusim.collectives.factory import network_for
from tpusim.collectives.runtime import CollectiveRuntime
from tpusim.config import HardwareProfile
from tpusim.engine.chip import Chip
from tpusim.engine.hbm import HbmLedger, SharedHbm
from tpusim.engine.simulation import Simulation
from tpusim.errors import ConfigError
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.params import GemmParams
from tpusim.gemm.registry import get_algorithm
from tpusim.gemm.simulate import simulate_gemm
from tpusim.hardware import load_hardware, scaled_profile
from tpusim.topology import MeshMapping, map_mesh, parse_topology
from tpusim.vocabulary import CollectiveOp, Dataflow, Fidelity, Prefetch

TPUV4 = load_hardware("tpuv4")
BW = TPUV4.chip.hbm_bandwidth
GATHER_ELEMENTS = 8 * 2**20  # bf16 elements of each member's all-gather shard (16 MiB)
M, K, N = 128, 8192, 8192  # an HBM-bound GeMM: 138 MB of operands and output (115 us) against 63 us of MXU work


def _chip(update: dict[str, Any]) -> HardwareProfile:
    return TPUV4.model_copy(update={"chip": TPUV4.chip.model_copy(update=update)})


def _ring() -> MeshMapping:
    return map_mesh(parse_topology("torus:4x4"), 4, 4, None)


# -- 1. the ledger ---------------------------------------------------------------------------------------
def test_ledger_counts_the_overlap_of_uniform_spans() -> None:
    ledger = HbmLedger()
    ledger.watch(0)
    ledger.watch(1)
    ledger.record(2, 0.0, 1e-3, 5e6)  # a chip that runs no program: not kept
    ledger.record(0, 0.0, 1e-3, 1e6)
    ledger.record(0, 5e-4, 2e-3, 3e6)
    ledger.record(1, 0.0, 1e-3, 7e6)
    assert ledger.total(0) == 4e6
    assert ledger.bytes_between(0, 2.5e-4, 7.5e-4) == pytest.approx(5e5 + 3e6 * 2.5e-4 / 1.5e-3, rel=1e-12)
    assert ledger.bytes_between(0, 3e-3, 4e-3) == 0.0
    assert ledger.bytes_between(1, 0.0, 2e-3) == 7e6
    assert ledger.total(2) == 0.0


@pytest.mark.parametrize(("op", "passes"), [(CollectiveOp.ALL_GATHER, 0), (CollectiveOp.REDUCE_SCATTER, 3)])
def test_a_collective_charges_its_bytes_sent_received_and_added(op: CollectiveOp, passes: int) -> None:
    """On a ring of p = 4 every member sends and receives (p - 1) shards; a reduce-scatter also adds every byte it
    receives, reading two operands and writing one (3 passes)."""
    shard = 16 * 2**20
    sim = Simulation(network_for(TPUV4, _ring()))
    runtime = CollectiveRuntime(sim, network_for(sim.hardware, sim.mapping))

    def program(dev: Device) -> Generator[simpy.Event, Any, None]:
        if op is CollectiveOp.ALL_GATHER:
            yield dev.all_gather(dev.tensor((shard,), "int8"), 0)
        else:
            yield dev.reduce_scatter(dev.tensor((4 * shard,), "int8"), 0)

    run_spmd(sim, runtime, program, lambda dev: ())
    assert sim.hbm is not None
    for chip in range(16):
        assert sim.hbm.ledger.total(chip) == pytest.approx(3 * shard * (2 + passes), rel=1e-12)


def test_a_run_without_compute_may_skip_the_accounting() -> None:
    sim = Simulation(network_for(TPUV4, _ring()))
    CollectiveRuntime(sim, network_for(sim.hardware, sim.mapping), share_hbm=False)
    assert sim.hbm is None


# -- 2. the stretch by hand ------------------------------------------------------------------------------
def _settled(seconds: float, hbm_bytes: float, spans: list[tuple[float, float, float]], *, ops: int = 1
             ) -> list[tuple[float, float]]:
    env = simpy.Environment()
    hbm = SharedHbm(env, BW, 1e-6)
    hbm.ledger.watch(0)
    for span in spans:
        hbm.ledger.record(0, *span)
    chip = Chip(0)
    ends: list[tuple[float, float]] = []
    for _ in range(ops):
        hbm.occupy(chip, seconds, hbm_bytes, 0.0, None, lambda start, end: ends.append((start, end)))
    env.run()
    return ends


def test_an_op_under_steady_dma_settles_at_the_fixed_point() -> None:
    """R = 0.3e12 B/s of DMA for 1 ms, an op of 100 us (compute 99 us + 1 us) moving 96 MB (80 us of HBM):
    t = o + (H + R t) / BW, so t = (1 us + 80 us) / (1 - 0.25) = 108 us."""
    (span,) = _settled(100e-6, 96e6, [(0.0, 1e-3, 0.3e12 * 1e-3)])
    assert span == (0.0, pytest.approx(108e-6, rel=1e-9))


def test_a_compute_bound_op_absorbs_light_dma() -> None:
    """R = 0.1e12 B/s: (1 us + 80 us) / (1 - 1/12) = 88.4 us < 100 us, so the op keeps its time exactly."""
    (span,) = _settled(100e-6, 96e6, [(0.0, 1e-3, 0.1e12 * 1e-3)])
    assert span == (0.0, 100e-6)


def test_ops_queue_behind_a_stretched_op() -> None:
    """Two ops issued together: the second starts when the first (stretched to 108 us) ends, and sees the same
    DMA rate, so it takes 108 us too."""
    first, second = _settled(100e-6, 96e6, [(0.0, 1e-3, 0.3e12 * 1e-3)], ops=2)
    assert second[0] == first[1]
    assert second[1] == pytest.approx(216e-6, rel=1e-9)


def test_dma_that_ends_inside_the_op_is_charged_only_for_its_part() -> None:
    """DMA of 0.3e12 B/s for the first 40 us only: t = 1 us + (96 MB + 12 MB) / BW = 91 us < 100 us, the op
    keeps 100 us; with 0.9e12 B/s, t = 1 us + (96 MB + 36 MB) / BW = 111 us."""
    (light,) = _settled(100e-6, 96e6, [(0.0, 40e-6, 0.3e12 * 40e-6)])
    (heavy,) = _settled(100e-6, 96e6, [(0.0, 40e-6, 0.9e12 * 40e-6)])
    assert light[1] == 100e-6
    assert heavy[1] == pytest.approx(111e-6, rel=1e-9)


# -- 3. a GeMM overlapped with a collective --------------------------------------------------------------
def _overlapped(hardware: HardwareProfile) -> tuple[float, float, float]:
    """Every chip starts an all-gather on axis 0 and an HBM-bound GeMM at once; returns chip 0's GeMM end, the
    gather's end, and the gather's end when run alone."""
    ends: dict[str, float] = {}

    def program(dev: Device, with_gemm: bool) -> Generator[simpy.Event, Any, None]:
        gather = dev.all_gather(dev.tensor((GATHER_ELEMENTS,)), 0)
        if with_gemm:
            yield dev.matmul(dev.tensor((M, K)), dev.tensor((K, N)))
            if dev.chip_id == 0:
                ends["gemm"] = dev.env.now
        yield gather
        if dev.chip_id == 0:
            ends["gather" if with_gemm else "alone"] = dev.env.now

    for with_gemm in (True, False):
        sim = Simulation(network_for(hardware, _ring()))
        run_spmd(sim, CollectiveRuntime(sim, network_for(sim.hardware, sim.mapping)), program, lambda dev,
                 w=with_gemm: (w,))  # type: ignore[misc]
    return ends["gemm"], ends["gather"], ends["alone"]


def test_a_gemm_overlapped_with_a_gather_lies_between_its_bounds() -> None:
    model = Simulation(network_for(TPUV4, _ring())).chip_model
    uncontended = model.gemm_time(M, N, K)
    own = model.gemm_hbm_bytes(M, N, K)
    assert own / BW > 2 * M * N * K / TPUV4.chip.peak_flops  # HBM-bound, so contention must show
    gemm, gather, alone = _overlapped(TPUV4)
    dma = 2 * 3 * GATHER_ELEMENTS * 2  # every chip sends and receives 3 shards of the ring of 4
    contended_bound = max(uncontended, TPUV4.chip.op_overhead + (own + dma) / BW)
    assert uncontended * 1.01 < gemm < min(contended_bound, uncontended + alone)
    assert gather == alone  # the DMA is served first: the gather is not slowed


@pytest.mark.parametrize("profile", ["fast-hbm", "off"])
def test_without_contention_the_gemm_keeps_its_uncontended_time(profile: str) -> None:
    hardware = _chip({"hbm_bandwidth": 1e18} if profile == "fast-hbm" else {"dma_hbm_traffic": 0.0})
    gemm, gather, alone = _overlapped(hardware)
    assert gemm == pytest.approx(Simulation(network_for(hardware, _ring())).chip_model.gemm_time(M, N, K), rel=1e-12)
    assert gather == alone


@pytest.mark.parametrize("algorithm", ["collective", "meshslice", "wang", "summa", "cannon"])
def test_with_very_fast_hbm_whole_gemms_equal_their_uncontended_twins(algorithm: str) -> None:
    problem = GemmProblem(2048, 8192, 8192, Dataflow.OS)
    params = GemmParams(slices=4, prefetch=Prefetch.PREVIOUS_OP) if algorithm == "meshslice" else GemmParams()
    for hardware in (_chip({"hbm_bandwidth": 1e18}), _chip({"dma_hbm_traffic": 0.0})):
        result = simulate_gemm(problem, get_algorithm(algorithm), params, network_for(hardware, _ring()),
                               fidelity=Fidelity.FULL)
        assert result.analytic_time_s is not None
        assert result.time_s == pytest.approx(result.analytic_time_s, rel=1e-9)


@pytest.mark.parametrize(("algorithm", "dataflow"), [("meshslice", Dataflow.RS), ("wang", Dataflow.LS)])
def test_contention_slows_an_overlapped_gemm_by_at_most_its_stall(algorithm: str, dataflow: Dataflow) -> None:
    """Blocks near the roofline balance (8192 x 384 x 2048 per chip, 8 slices for MeshSlice) whose collectives
    overlap them on the critical path: slower with contention, by no more than the stall the critical chip's ops
    accrued, which in turn stays below its DMA bytes over the HBM bandwidth."""
    problem = GemmProblem(65536, 1536, 2048, dataflow)
    params = GemmParams(slices=8) if algorithm == "meshslice" else GemmParams()
    off = simulate_gemm(problem, get_algorithm(algorithm), params, network_for(_chip({"dma_hbm_traffic": 0.0}),
                                                                               _ring()),
                        fidelity=Fidelity.FULL)
    on = simulate_gemm(problem, get_algorithm(algorithm), params, network_for(TPUV4, _ring()), fidelity=Fidelity.FULL)
    assert off.hbm_stall_s == 0.0 and on.hbm_stall_s > 0.0
    assert off.time_s * 1.001 < on.time_s <= off.time_s + on.hbm_stall_s * (1 + 1e-9)
    assert on.bytes_sent is not None
    assert on.hbm_stall_s <= 5 * on.bytes_sent / 16 / BW  # sent, received and, added, three reduction passes


# -- 4. the switch -----------------------------------------------------------------------------------------
def test_the_dma_scale_factor_multiplies_the_charged_traffic() -> None:
    scaled = scaled_profile(TPUV4, dma=2)
    assert scaled.chip.dma_hbm_traffic == 2.0
    assert scaled.name == "tpuv4[dma*2]"
    assert scaled_profile(TPUV4, dma=0).chip.dma_hbm_traffic == 0.0
    with pytest.raises(ConfigError, match=r"^scale factor dma=2 needs HBM contention; 'meshslice-sim' charges no DMA "
                                          r"traffic to HBM \(chip\.dma_hbm_traffic is 0\)$"):
        scaled_profile(load_hardware("meshslice-sim"), dma=2)
    with pytest.raises(ConfigError, match=r"^scale factor dma=-1 must be a finite number >= 0$"):
        scaled_profile(TPUV4, dma=-1)


def test_twice_the_traffic_stretches_more() -> None:
    """The hand case of test_an_op_under_steady_dma_settles_at_the_fixed_point with the DMA charged twice:
    t = (1 us + 80 us) / (1 - 0.5) = 162 us."""
    env = simpy.Environment()
    hbm = SharedHbm(env, BW, 1e-6, traffic=2.0)
    hbm.ledger.watch(0)
    hbm.ledger.record(0, 0.0, 1e-3, 0.3e12 * 1e-3)
    spans: list[tuple[float, float]] = []
    hbm.occupy(Chip(0), 100e-6, 96e6, 0.0, None, lambda start, end: spans.append((start, end)))
    env.run()
    assert spans == [(0.0, pytest.approx(162e-6, rel=1e-9))]
