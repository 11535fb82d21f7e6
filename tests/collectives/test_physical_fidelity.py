"""Fidelity of the physical network's newer schedules and software costs.

1. The dimensional schedule over a logical axis of several whole physical axes: DES == twin on ``tpuv4`` and
   ``tpuv4-wire`` for every multi-axis embedding shape (wrapped rings, lines of 2, lines of 4, three parts), and
   the twin equals the hand-derived sum of its phases; the snake switch puts the call back on the one ring.
2. The dimensional all-gather reaches the bandwidth bound of all four links of a y,z plane; the snake uses two.
3. Pipelined broadcasts reach the cut-through bound; on ``tpuv4`` the resolved schedule (pipelined chain or
   scatter then all-gather) is the one whose closed form is faster, and the DES follows either.
4. Reductions cost ``reduction_passes / hbm_bandwidth`` per byte added, on top of launch, handshake and wire.
5. The runtime's overlap limit serialises the collective 2D GeMM's two gathers by exactly the shorter one.
6. Results record the collective switches a request chose.

B = 45e9 B/s per link direction on the wire (``tpuv4`` runs its links at 0.826 of that), a = 1 us per hop everywhere;
``tpuv4`` adds o_AG = 13 us, o_RS = 26 us launch,
s = 4 us handshake per transfer, and 3 HBM passes at 0.9 x 1.2e12 B/s per byte reduced.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tpusim import api
from tpusim.collectives.call import CollectiveCall
from tpusim.collectives.network import network_for
from tpusim.collectives.operations import SCATTER_GATHER, Broadcast, Reduce, operation
from tpusim.collectives.physical import PhysicalNetwork
from tpusim.collectives.simulate import CollectiveResult, CollectiveSpec, simulate_collective
from tpusim.config import HardwareProfile, PhysicalProfile
from tpusim.gemm.algorithm import GemmContext
from tpusim.gemm.costs import CostModel
from tpusim.gemm.dataflow import GemmProblem
from tpusim.gemm.params import GemmParams
from tpusim.gemm.registry import get_algorithm
from tpusim.gemm.sharding import operand_blocks
from tpusim.gemm.simulate import simulate_gemm
from tpusim.hardware import load_hardware, with_collective_switches
from tpusim.topology import MeshMapping, map_mesh, parse_topology
from tpusim.vocabulary import CollectiveOp, Dataflow, Fidelity, MultiAxis, Prefetch, Ring

TPUV4 = load_hardware("tpuv4")
WIRE = load_hardware("tpuv4-wire")
PROFILES = {"tpuv4": TPUV4, "tpuv4-wire": WIRE}
BW, A = 45e9, 1e-6  # link bandwidth one way on the wire (tpuv4-wire), hop latency
assert isinstance(TPUV4, PhysicalProfile)
# tpuv4's achievable link and HBM rates (docs/chip.md#achievable-rates)
B = BW * TPUV4.ici.link_efficiency
STEP, HBM, PASSES = 4e-6, 1.2e12 * TPUV4.chip.hbm_efficiency, 3  # handshake per transfer, HBM rate, passes
O_AG, O_RS = 13e-6, 26e-6  # tpuv4's launch overheads of an all-gather and of a reduce-scatter (or all-reduce)
GROUP_OPS = (CollectiveOp.ALL_GATHER, CollectiveOp.REDUCE_SCATTER, CollectiveOp.ALL_REDUCE)


def _place(spec: str, rows: int, cols: int, axis_map: str | None = None) -> MeshMapping:
    return map_mesh(parse_topology(spec), rows, cols, axis_map)


def _physical(hardware: HardwareProfile, mapping: MeshMapping) -> PhysicalNetwork:
    network = network_for(hardware, mapping)
    assert isinstance(network, PhysicalNetwork)
    return network


def _assert_twin(result: CollectiveResult) -> None:
    assert result.analytic_time_s is not None
    assert result.time_s == pytest.approx(result.analytic_time_s, rel=1e-9)


def test_profiles_are_the_ones_the_formulas_assume() -> None:
    assert isinstance(TPUV4, PhysicalProfile) and isinstance(WIRE, PhysicalProfile)
    for profile in (TPUV4, WIRE):
        assert (profile.ici.link_bandwidth, profile.ici.hop_latency, profile.chip.hbm_bandwidth) == (BW, A, 1.2e12)
        assert profile.multi_axis is MultiAxis.DIMENSIONAL
    assert (TPUV4.ici.achievable_bandwidth, TPUV4.chip.achievable_hbm_bandwidth) == (B, HBM)
    assert (WIRE.ici.achievable_bandwidth, WIRE.chip.achievable_hbm_bandwidth) == (BW, 1.2e12)
    assert (TPUV4.ici.step_overhead, TPUV4.ici.reduction_passes) == (STEP, PASSES)
    assert TPUV4.ici.launch_overhead.of(CollectiveOp.ALL_GATHER) == O_AG
    assert TPUV4.ici.launch_overhead.of(CollectiveOp.REDUCE_SCATTER) == O_RS
    assert TPUV4.overlap_limits.of(CollectiveOp.ALL_GATHER) == 1
    assert (WIRE.ici.step_overhead, WIRE.ici.reduction_passes, WIRE.limits_shown) == (0, 0, "unlimited")
    assert {value for _, value in WIRE.ici.launch_overhead} == {0}


# -- 1. the dimensional schedule: DES == twin ----------------------------------------------------------------
# (topology, mesh rows, mesh cols, axis map, the physical axes of logical axis 1, its pieces: (length, closed))
EMBEDDINGS = [
    ("4x4x4", 4, 16, "x,y*z", ["y", "z"], ((4, True), (4, True))),  # two wrapped 4-rings
    ("4x8x8", 4, 64, None, ["y", "z"], ((8, True), (8, True))),  # two wrapped 8-rings, 4 groups side by side
    ("4x4x4", 1, 64, "1,x*y*z", ["x", "y", "z"], ((4, True),) * 3),  # three parts
    ("2x2x4", 4, 4, "z,x*y", ["x", "y"], ((2, False), (2, False))),  # lines of 2
    ("mesh:4x4", 1, 16, None, ["x", "y"], ((4, False), (4, False))),  # lines of 4: ranks finish apart
    # pieces of different lengths: every phase waits for its slowest part
    ("torus:4x6", 1, 24, None, ["x", "y"], ((4, True), (6, True))),
    ("mesh:2x4", 1, 8, None, ["x", "y"], ((2, False), (4, False))),
    ("2x4x4", 1, 32, "1,x*y*z", ["x", "y", "z"], ((2, False), (4, False), (4, False))),  # no wraparound below 4^3
]
EMBEDDING_IDS = [f"{e[0]}-{e[1]}x{e[2]}-{'*'.join(e[4])}" for e in EMBEDDINGS]
UNIT = 360_000  # bytes of one shard (all-gather) or one output shard (reduce-scatter, all-reduce) per chip


# chunked runs of the 4 x 64 mesh take a second each; the smaller embeddings cover chunking
CHUNKED = [pytest.param(*e, chunks, id=f"{name}-chunks{chunks}")
           for e, name in zip(EMBEDDINGS, EMBEDDING_IDS, strict=True) for chunks in (1, 4)
           if chunks == 1 or e[1] * e[2] < 256]


@pytest.mark.parametrize("ring", list(Ring))
@pytest.mark.parametrize("op", GROUP_OPS, ids=str)
@pytest.mark.parametrize("hardware", list(PROFILES))
@pytest.mark.parametrize(("spec", "rows", "cols", "axis_map", "physical", "pieces", "chunks"), CHUNKED)
def test_dimensional_des_equals_twin(spec: str, rows: int, cols: int, axis_map: str | None, physical: list[str],
                                     pieces: tuple[tuple[int, bool], ...], hardware: str, op: CollectiveOp, ring: Ring,
                                     chunks: int) -> None:
    mapping = _place(spec, rows, cols, axis_map)
    described = mapping.axes[1].describe()
    assert (described["size"], described["physical"], described["embedding"]) == (cols, physical, "snake")
    result = simulate_collective(CollectiveSpec(op, 1, UNIT * cols, ring, chunks),
                                 network_for(PROFILES[hardware], mapping))
    kind = "whole parts one way" if ring is Ring.UNIDIRECTIONAL else "halves both ways"
    assert result.schedule == (f"dimensional over {'*'.join(physical)}: {len(physical)} parts in rotated axis "
                               f"orders, {kind}")
    assert result.chunks == chunks
    _assert_twin(result)
    network = _physical(PROFILES[hardware], mapping)
    dimensional = network.dimensional(CollectiveCall(op, 1, UNIT))
    assert dimensional is not None
    assert tuple((shape.size, shape.closed) for shape in dimensional.rings()) == pieces
    # a line longer than 2 makes its ranks finish apart: the network is no longer symmetric between chips
    apart = any(length > 2 and not closed for length, closed in pieces)
    assert (network.asymmetry(overrides=False) == "logical axis 1 crosses a physical axis without wraparound: ranks "
            "finish apart") is apart


# The wire all-gather of a shard s by hand, per phase (bidirectional rings halve each part, lines do not):
# 4x4x4 y*z: parts s/2 over a 4-ring, then 2s over the other: 3(a + s/4B) + 3(a + s/B)
# 4x4x4 x*y*z: parts s/3, 4s/3, 16s/3 over 4-rings: 3(a + s/6B) + 3(a + 2s/3B) + 3(a + 8s/3B) = 9a + 10.5 s/B
# 2x2x4 x*y: lines of 2, parts s/2 then s: (a + s/2B) + (a + s/B)
# mesh:4x4 x*y: lines of 4, parts s/2 then 2s: 3(a + s/2B) + 3(a + 2s/B)
HAND_AG = {
    ("4x4x4", 16, Ring.BIDIRECTIONAL): lambda s: 6 * A + 3.75 * s / BW,
    ("4x4x4", 16, Ring.UNIDIRECTIONAL): lambda s: 3 * (A + s / (2 * BW)) + 3 * (A + 2 * s / BW),
    ("4x8x8", 64, Ring.BIDIRECTIONAL): lambda s: 7 * (A + s / (4 * BW)) + 7 * (A + 2 * s / BW),
    ("4x4x4", 64, Ring.BIDIRECTIONAL): lambda s: 9 * A + 10.5 * s / BW,
    ("2x2x4", 4, Ring.BIDIRECTIONAL): lambda s: 2 * A + 1.5 * s / BW,
    ("mesh:4x4", 16, Ring.BIDIRECTIONAL): lambda s: 6 * A + 7.5 * s / BW,
    ("mesh:4x4", 16, Ring.UNIDIRECTIONAL): lambda s: 6 * A + 7.5 * s / BW,  # lines go both ways regardless
}


@pytest.mark.parametrize(("spec", "cols", "ring"), list(HAND_AG), ids=[f"{k[0]}-{k[1]}-{k[2]}" for k in HAND_AG])
def test_dimensional_all_gather_is_the_hand_sum_of_its_phases(spec: str, cols: int, ring: Ring) -> None:
    embedding = next(e for e in EMBEDDINGS if e[0] == spec and e[2] == cols)
    mapping = _place(spec, embedding[1], cols, embedding[3])
    result = simulate_collective(CollectiveSpec(CollectiveOp.ALL_GATHER, 1, UNIT * cols, ring),
                                 network_for(WIRE, mapping))
    expected = HAND_AG[(spec, cols, ring)](UNIT)
    assert result.analytic_time_s == pytest.approx(expected, rel=1e-12)
    assert result.time_s == pytest.approx(expected, rel=1e-9)


def test_dimensional_reduce_scatter_on_tpuv4_by_hand() -> None:
    """Input X per chip over y*z of a 4x4x4 slice: parts X/2 are reduce-scattered to X/8 over one 4-ring, then
    to X/32 over the other; every ring step holds its link for the half-unit plus the handshake, then the
    latency, then the addition at the HBM rate."""
    mapping = _place("4x4x4", 4, 16, "x,y*z")
    x = 16 * UNIT
    t1, t2 = x / 16, x / 64  # bytes per direction per step in each phase (half of the unit)
    expected = (O_RS + 3 * (t1 / B + STEP + A + t1 * PASSES / HBM) + 3 * (t2 / B + STEP + A + t2 * PASSES / HBM))
    result = simulate_collective(CollectiveSpec(CollectiveOp.REDUCE_SCATTER, 1, x), network_for(TPUV4, mapping))
    assert result.analytic_time_s == pytest.approx(expected, rel=1e-12)
    assert result.time_s == pytest.approx(expected, rel=1e-9)


SNAKE = {name: with_collective_switches(profile, multi_axis=MultiAxis.SNAKE) for name, profile in PROFILES.items()}


@pytest.mark.parametrize("ring", list(Ring))
@pytest.mark.parametrize("op", GROUP_OPS, ids=str)
@pytest.mark.parametrize("hardware", list(PROFILES))
@pytest.mark.parametrize(("spec", "rows", "cols", "axis_map", "physical", "pieces"), EMBEDDINGS, ids=EMBEDDING_IDS)
def test_snake_switch_runs_the_one_ring(spec: str, rows: int, cols: int, axis_map: str | None, physical: list[str],
                                        pieces: tuple[tuple[int, bool], ...], hardware: str, op: CollectiveOp,
                                        ring: Ring) -> None:
    mapping = _place(spec, rows, cols, axis_map)
    assert mapping.axes[1].describe()["max_hops"] == 1  # every snake here is one hop per step: the twin holds
    result = simulate_collective(CollectiveSpec(op, 1, UNIT * cols, ring), network_for(SNAKE[hardware], mapping))
    one_way = ring is Ring.UNIDIRECTIONAL
    assert result.schedule == ("ring, whole shards one way" if one_way else "ring, halves both ways")
    _assert_twin(result)
    # n - 1 steps round the one ring: the ring operation's own closed form
    call = CollectiveCall(op, 1, UNIT * cols // (cols if op is CollectiveOp.ALL_GATHER else 1), ring=ring, chunks=1)
    network = _physical(SNAKE[hardware], mapping)
    assert result.analytic_time_s == pytest.approx(operation(op).physical_time(call, network.ring(1), network.costs),
                                                   rel=1e-12)


def test_snake_keyword_of_the_api() -> None:
    common = {"hardware": "tpuv4", "topology": "4x4x4", "mesh": "4x16", "axis_map": "x,y*z", "axis": 1,
              "op": "all-gather", "bytes": 16 * UNIT}
    snake = api.collective(**common, multi_axis="snake")
    dimensional = api.collective(**common)
    assert snake.schedule == "ring, halves both ways"
    assert dimensional.schedule.startswith("dimensional over y*z: 2 parts")
    _assert_twin(snake)
    _assert_twin(dimensional)
    # o + 15 ring steps of s/2 against o + 3 steps of s/4 and 3 of s, each step paying a + handshake
    assert snake.time_s == pytest.approx(O_AG + 15 * (UNIT / (2 * B) + STEP + A), rel=1e-9)
    assert dimensional.time_s == pytest.approx(O_AG + 3 * (UNIT / (4 * B) + STEP + A) + 3 * (UNIT / B + STEP + A),
                                               rel=1e-9)


# -- 2. the bandwidth bound of a y,z plane -------------------------------------------------------------------
def test_dimensional_all_gather_reaches_the_four_link_bound() -> None:
    """64 MB over the 64 chips of a y,z plane of 4x8x8: each chip receives 63/64 of it over 4 links, plus the
    7 + 7 hop latencies of the two phases' ring steps. The snake uses 2 of the 4 links: twice the bytes on each."""
    mapping = _place("4x8x8", 4, 64)
    spec = CollectiveSpec(CollectiveOp.ALL_GATHER, 1, 64_000_000)
    dimensional = simulate_collective(spec, network_for(WIRE, mapping))
    snake = simulate_collective(spec, network_for(SNAKE["tpuv4-wire"], mapping))
    bound = 63 / 64 * 64e6 / (4 * BW) + (7 + 7) * A
    _assert_twin(dimensional)
    _assert_twin(snake)
    assert dimensional.time_s <= 1.1 * bound
    assert dimensional.time_s == pytest.approx(bound, rel=1e-9)  # parts of 1/2 MB: 7 steps of 1/4 MB, 7 of 2 MB
    assert snake.time_s >= 1.8 * dimensional.time_s
    assert snake.time_s == pytest.approx(63 * (A + 0.5e6 / BW), rel=1e-9)
    # each busy link direction carries 15.75 MB in the dimensional schedule, 63 half-shards (31.5 MB) in the snake
    assert dimensional.max_link_bytes == pytest.approx(15.75e6, rel=1e-12)
    assert snake.max_link_bytes == pytest.approx(31.5e6, rel=1e-12)
    assert dimensional.bytes_sent == pytest.approx(snake.bytes_sent, rel=1e-12)  # the same bytes, twice the links


# -- 3. pipelined broadcast ----------------------------------------------------------------------------------
def test_pipelined_broadcast_reaches_the_cut_through_bound() -> None:
    mapping = _place("torus:32", 1, 32)
    pipelined = simulate_collective(CollectiveSpec(CollectiveOp.BROADCAST, 1, 8_000_000), network_for(WIRE, mapping))
    bound = 8e6 / BW + 16 * A  # the farther half of a bidirectional 32-ring is 16 hops away
    _assert_twin(pipelined)
    assert pipelined.chunks > 1
    assert pipelined.schedule == f"pipelined chain, {pipelined.chunks} chunks"
    assert bound <= pipelined.time_s <= 1.1 * bound
    whole = simulate_collective(CollectiveSpec(CollectiveOp.BROADCAST, 1, 8_000_000, chunks=1),
                                network_for(WIRE, mapping))
    _assert_twin(whole)
    assert whole.time_s == pytest.approx(16 * (8e6 / BW + A), rel=1e-9)  # store-and-forward, 16 hops
    assert whole.time_s >= 5 * pipelined.time_s


def _forms(op: CollectiveOp, nbytes: int, mapping: MeshMapping) -> tuple[float, float, int]:
    """The closed forms of the best pipelined chain and of the scatter-gather variant on tpuv4, and the chain's
    chunk count."""
    network = _physical(TPUV4, mapping)
    ring, costs = network.ring(1), network.costs
    rooted = operation(op)
    assert isinstance(rooted, Broadcast | Reduce)
    call = CollectiveCall(op, 1, nbytes)
    chunks = rooted.chain_chunks(call, ring, costs)
    chained = rooted.physical_time(replace(call, chunks=chunks), ring, costs)
    split = rooted.physical_time(replace(call, chunks=1, variant=SCATTER_GATHER), ring, costs)
    assert chained is not None and split is not None
    return chained, split, chunks


def _chain_by_hand(op: CollectiveOp, nbytes: float, hops: int, chunks: int) -> float:
    """tpuv4's pipelined chain: launch, then the first chunk through every hop, the rest behind it."""
    piece = nbytes / chunks
    t = piece / B + STEP
    add = piece * PASSES / HBM if op is CollectiveOp.REDUCE else 0.0
    launch = O_AG if op is CollectiveOp.BROADCAST else O_RS
    return launch + hops * (t + A + add) + (chunks - 1) * t


SPLIT_NAMES = {CollectiveOp.BROADCAST: "scatter, then ring all-gather",
               CollectiveOp.REDUCE: "ring reduce-scatter, then gather"}


@pytest.mark.parametrize("op", [CollectiveOp.BROADCAST, CollectiveOp.REDUCE], ids=str)
def test_tpuv4_rooted_schedule_is_the_faster_closed_form(op: CollectiveOp) -> None:
    mapping = _place("torus:32", 1, 32)
    # 3.2 MB: the chain wins; 8 MB: scatter and all-gather (reduce-scatter and gather) wins
    small_chain, small_split, small_chunks = _forms(op, 3_200_000, mapping)
    big_chain, big_split, big_chunks = _forms(op, 8_000_000, mapping)
    assert small_chain < small_split and big_split < big_chain
    assert small_chain == pytest.approx(_chain_by_hand(op, 3.2e6, 16, small_chunks), rel=1e-12)

    small = simulate_collective(CollectiveSpec(op, 1, 3_200_000), network_for(TPUV4, mapping))
    assert (small.schedule, small.chunks) == (f"pipelined chain, {small_chunks} chunks", small_chunks)
    assert small.analytic_time_s == pytest.approx(small_chain, rel=1e-12)
    _assert_twin(small)

    big = simulate_collective(CollectiveSpec(op, 1, 8_000_000), network_for(TPUV4, mapping))
    assert (big.schedule, big.chunks) == (SPLIT_NAMES[op], 1)
    assert big.analytic_time_s == pytest.approx(big_split, rel=1e-12)
    _assert_twin(big)

    forced = simulate_collective(CollectiveSpec(op, 1, 8_000_000, chunks=big_chunks), network_for(TPUV4, mapping))
    assert forced.schedule == f"pipelined chain, {big_chunks} chunks"
    assert forced.analytic_time_s == pytest.approx(_chain_by_hand(op, 8e6, 16, big_chunks), rel=1e-12)
    _assert_twin(forced)
    assert forced.time_s > big.time_s  # the DES agrees with the choice


# -- 4. reductions at the HBM rate ---------------------------------------------------------------------------
def _without_reductions(profile: HardwareProfile) -> HardwareProfile:
    assert isinstance(profile, PhysicalProfile)
    return profile.model_copy(update={"ici": profile.ici.model_copy(update={"reduction_passes": 0.0})})


@pytest.mark.parametrize("ring", list(Ring))
def test_reduce_scatter_on_a_torus_ring_by_hand(ring: Ring) -> None:
    """n = 8, output shard u: o_RS + 7 steps of (u' / B + s + a + u' passes / HBM), u' = u/2 both ways, u one way."""
    mapping = _place("torus:8", 1, 8)
    unit = 180_000
    moved = unit / 2 if ring is Ring.BIDIRECTIONAL else unit
    expected = O_RS + 7 * (moved / B + STEP + A + moved * PASSES / HBM)
    spec = CollectiveSpec(CollectiveOp.REDUCE_SCATTER, 1, 8 * unit, ring)
    result = simulate_collective(spec, network_for(TPUV4, mapping))
    assert result.analytic_time_s == pytest.approx(expected, rel=1e-12)
    assert result.time_s == pytest.approx(expected, rel=1e-9)
    free = simulate_collective(spec, network_for(_without_reductions(TPUV4), mapping))
    assert result.time_s - free.time_s == pytest.approx(7 * moved * PASSES / HBM, rel=1e-9)


def test_chunked_reduce_scatter_by_hand() -> None:
    """Four chunks a step: each chunk moves on once added, so a step takes max(t + a + p, 4t); the last step
    ends with its last chunk's arrival and addition."""
    mapping = _place("torus:8", 1, 8)
    unit = 1_800_000
    piece = unit / 2 / 4
    t, p = piece / B + STEP, piece * PASSES / HBM
    expected = O_RS + 6 * max(t + A + p, 4 * t) + 4 * t + A + p
    result = simulate_collective(CollectiveSpec(CollectiveOp.REDUCE_SCATTER, 1, 8 * unit, chunks=4),
                                 network_for(TPUV4, mapping))
    assert result.analytic_time_s == pytest.approx(expected, rel=1e-12)
    assert result.time_s == pytest.approx(expected, rel=1e-9)


def test_reduce_chain_adds_at_every_hop() -> None:
    """A reduce to rank 0 of an 8-ring in 4 chunks: two chains of 4 hops (bidirectional), each chunk added at
    every hop; against the same chain with free reductions, 4 hops of one chunk's addition more."""
    mapping = _place("torus:8", 1, 8)
    spec = CollectiveSpec(CollectiveOp.REDUCE, 1, 800_000, chunks=4)
    result = simulate_collective(spec, network_for(TPUV4, mapping))
    expected = _chain_by_hand(CollectiveOp.REDUCE, 800_000, 4, 4)
    assert result.analytic_time_s == pytest.approx(expected, rel=1e-12)
    assert result.time_s == pytest.approx(expected, rel=1e-9)
    free = simulate_collective(spec, network_for(_without_reductions(TPUV4), mapping))
    assert result.time_s - free.time_s == pytest.approx(4 * 200_000 * PASSES / HBM, rel=1e-9)


# -- 5. overlap limits in a GeMM program ---------------------------------------------------------------------
GEMM_MAPPINGS = [
    ("torus:4x4", 4, 4, None, MultiAxis.DIMENSIONAL),
    ("4x4x4", 4, 16, "x,y*z", MultiAxis.DIMENSIONAL),
    ("4x4x4", 4, 16, "x,y*z", MultiAxis.SNAKE),
]


@pytest.mark.parametrize(("spec", "rows", "cols", "axis_map", "multi_axis"), GEMM_MAPPINGS,
                         ids=[f"{g[0]}-{g[1]}x{g[2]}-{g[4]}" for g in GEMM_MAPPINGS])
def test_overlap_limit_serialises_the_collective_gemm_gathers(spec: str, rows: int, cols: int, axis_map: str | None,
                                                             multi_axis: MultiAxis) -> None:
    """Collective 2D GeMM, OS, prefetch previous-op: X and W are gathered at once over the two axes. One
    all-gather in flight runs them one after the other (a_x + a_w), no limit lets them overlap (max)."""
    mapping = _place(spec, rows, cols, axis_map)
    problem = GemmProblem(1024, 2048, 4096, Dataflow.OS)
    params = GemmParams(prefetch=Prefetch.PREVIOUS_OP)
    results = {}
    for limit in (1, "unlimited"):
        hw = with_collective_switches(TPUV4, multi_axis=multi_axis, overlap_limit=limit)
        result = simulate_gemm(problem, get_algorithm("collective"), params, network_for(hw, mapping),
                               fidelity=Fidelity.FULL)
        assert result.analytic_time_s is not None
        assert result.time_s == pytest.approx(result.analytic_time_s, rel=1e-9)
        results[limit] = result
    assert results[1].overlap_limits == "all-gather=1,reduce-scatter=1,all-reduce=1"
    assert results["unlimited"].overlap_limits == "unlimited"
    algorithm = get_algorithm("collective")
    ctx = GemmContext(problem, params, mapping.shape)
    blocks = operand_blocks(problem.x_shape, problem.w_shape, algorithm.sharding(problem, mapping.shape),
                            mapping.shape)
    costs = CostModel(network_for(TPUV4 if multi_axis is MultiAxis.DIMENSIONAL else SNAKE["tpuv4"], mapping))
    gathers = {mv.operand: costs.all_gather(ctx.axis(mv.axis), blocks[mv.operand][0] * blocks[mv.operand][1])
               for mv in ctx.roles.gathers}
    assert sorted(gathers) == ["w", "x"] and min(gathers.values()) > 0
    assert results[1].time_s - results["unlimited"].time_s == pytest.approx(min(gathers.values()), rel=1e-9)


# -- 6. results record the switches --------------------------------------------------------------------------
GEMM = {"algorithm": "collective", "dataflow": "os", "m": 1024, "n": 1024, "k": 1024, "mesh": "4x4"}
STEP_REQUEST = {"model": "gpt3-175b", "algorithm": "meshslice", "mesh": "4x4", "slices": 1, "dataflows": "os",
                "transposes": "0", "ignore_memory": True}  # GPT-3 cannot fit on 16 chips


@pytest.mark.parametrize(
    ("switches", "multi_axis", "limits"),
    [
        ({}, "dimensional", "all-gather=1,reduce-scatter=1,all-reduce=1"),
        ({"multi_axis": "snake", "overlap_limit": "unlimited"}, "snake", "unlimited"),
        ({"overlap_limit": 3}, "dimensional", "all-gather=3,reduce-scatter=3,all-reduce=3"),
    ],
    ids=["profile", "snake-unlimited", "three"],
)
def test_results_record_the_switches(switches: dict[str, object], multi_axis: str, limits: str) -> None:
    gemm = api.gemm(hardware="tpuv4", **GEMM, **switches)
    step = api.step(hardware="tpuv4", **STEP_REQUEST, **switches)
    for result in (gemm, step):
        assert (result.multi_axis, result.overlap_limits) == (multi_axis, limits)
        assert result.to_dict()["multi_axis"] == multi_axis
        assert result.to_dict()["overlap_limits"] == limits


def test_calibrated_results_have_no_multi_axis() -> None:
    gemm = api.gemm(hardware="meshslice-sim", **GEMM, overlap_limit=2)
    step = api.step(hardware="meshslice-sim", **STEP_REQUEST)
    assert (gemm.multi_axis, gemm.overlap_limits) == (None, "all-gather=2,reduce-scatter=2,all-reduce=2")
    assert (step.multi_axis, step.overlap_limits) == (None, "unlimited")
