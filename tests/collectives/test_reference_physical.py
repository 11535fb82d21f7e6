"""docs/network.md#physical-closed-forms worked numbers on the physical profile (B = 45e9 B/s, a = 1 us, o = 0).

Each case is checked twice: against the formula to 1e-9 relative, and against the reference's rounded
figure to the printed number of decimals (in microseconds).
"""

from __future__ import annotations

import pytest

from tpusim.collectives.device import Device, run_spmd
from tpusim.collectives.factory import network_for
from tpusim.collectives.runtime import CollectiveRuntime
from tpusim.collectives.simulate import CollectiveSpec, simulate_collective
from tpusim.engine.simulation import Simulation
from tpusim.engine.tensor import Tensor
from tpusim.hardware import load_hardware
from tpusim.topology import map_mesh, parse_topology
from tpusim.vocabulary import CollectiveOp, Ring

TPUV4 = load_hardware("tpuv4-wire")
B, A = 45e9, 1e-6
N = 64e6  # 64 MB gathered
S16 = N / 16


def test_profile_is_the_reference_network() -> None:
    ici = TPUV4.ici
    assert (ici.link_bandwidth, ici.hop_latency, ici.step_overhead, ici.reduction_passes) == (B, A, 0, 0)
    assert {value for _, value in ici.launch_overhead} == {0}


CASES = [
    # (topology, rows, cols, axis map, op, ring, formula, reference figure in us)
    ("torus:16", 1, 16, None, CollectiveOp.ALL_GATHER, Ring.BIDIRECTIONAL, 15 * (A + S16 / (2 * B)), 681.67),
    ("4x4x16", 16, 16, "x*y,z", CollectiveOp.ALL_GATHER, Ring.BIDIRECTIONAL, 15 * (A + S16 / (2 * B)), 681.67),
    ("torus:16", 1, 16, None, CollectiveOp.ALL_GATHER, Ring.UNIDIRECTIONAL, 15 * (A + S16 / B), 1348.33),
    ("4x4x16", 16, 16, "x*y,z", CollectiveOp.ALL_GATHER, Ring.UNIDIRECTIONAL, 15 * (A + S16 / B), 1348.33),
    ("mesh:16", 1, 16, None, CollectiveOp.ALL_GATHER, Ring.BIDIRECTIONAL, 15 * (A + S16 / B), 1348.33),
    ("torus:16", 1, 16, None, CollectiveOp.ALL_REDUCE, Ring.BIDIRECTIONAL, 2 * 15 * (A + S16 / (2 * B)), 1363.33),
    ("4x4x16", 16, 16, "x*y,z", CollectiveOp.ALL_REDUCE, Ring.BIDIRECTIONAL, 2 * 15 * (A + S16 / (2 * B)), 1363.33),
]


@pytest.mark.parametrize(("spec", "rows", "cols", "axis_map", "op", "ring", "formula", "figure"), CASES)
def test_worked_number(
    spec: str, rows: int, cols: int, axis_map: str | None, op: CollectiveOp, ring: Ring, formula: float, figure: float
) -> None:
    mapping = map_mesh(parse_topology(spec), rows, cols, axis_map)
    result = simulate_collective(CollectiveSpec(op, 1, int(N), ring), network_for(TPUV4, mapping))
    assert result.time_s == pytest.approx(formula, rel=1e-9)
    assert result.analytic_time_s == pytest.approx(formula, rel=1e-9)
    assert round(result.time_s * 1e6, 2) == figure


def _dimension_ordered(spec: str, rows: int, cols: int, shard: int, first: int) -> float:
    """Every chip gathers its shard over axis ``first``, then the result over the other axis."""
    mapping = map_mesh(parse_topology(spec), rows, cols)
    sim = Simulation(network_for(TPUV4, mapping))
    runtime = CollectiveRuntime(sim, network_for(sim.hardware, sim.mapping))

    def program(dev: Device):  # type: ignore[no-untyped-def]
        part = yield dev.all_gather(Tensor((shard,), "int8"), axis=first)
        whole = yield dev.all_gather(part, axis=1 - first)
        return whole.nbytes

    out = run_spmd(sim, runtime, program, lambda dev: ())
    assert set(out.values()) == {rows * cols * shard}
    return sim.now


def test_8x8_torus_dimension_ordered_gather() -> None:
    """64 MB over all 64 chips: T_ring(8, 1 MB) + T_ring(8, 8 MB) = 84.78 + 629.22 us."""
    phase1 = 7 * (A + 1e6 / (2 * B))
    phase2 = 7 * (A + 8e6 / (2 * B))
    assert (round(phase1 * 1e6, 2), round(phase2 * 1e6, 2)) == (84.78, 629.22)
    time = _dimension_ordered("torus:8x8", 8, 8, 1_000_000, first=1)
    assert time == pytest.approx(phase1 + phase2, rel=1e-9)
    assert round(time * 1e6, 2) == 714.00


BOOK_SHARD = 1024 * 4096 * 2 // 16  # bf16 [1024, 4096] sharded over X and Y of a 4x4x4 cube


def test_scaling_book_gather_over_x() -> None:
    mapping = map_mesh(parse_topology("4x4x4"), 4, 16, "x,y*z")
    assert mapping.axes[0].describe()["physical"] == ["x"]
    result = simulate_collective(CollectiveSpec(CollectiveOp.ALL_GATHER, 0, 4 * BOOK_SHARD),
                                 network_for(TPUV4, mapping))
    assert result.time_s == pytest.approx(3 * (A + BOOK_SHARD / (2 * B)), rel=1e-9)
    assert round(result.time_s * 1e6, 2) == 20.48


def test_scaling_book_gather_over_x_then_y() -> None:
    time = _dimension_ordered("torus:4x4", 4, 4, BOOK_SHARD, first=0)
    over_x = 3 * (A + BOOK_SHARD / (2 * B))
    over_y = 3 * (A + 4 * BOOK_SHARD / (2 * B))
    assert time == pytest.approx(over_x + over_y, rel=1e-9)
    assert round(time * 1e6, 1) == 93.4
