"""DES equals the physical twin on TPUv4 slices: wrapped axes of 4, 8 and 16, lines of 2 and 4."""

from __future__ import annotations

import functools

import pytest

from tpusim.collectives.factory import network_for
from tpusim.collectives.simulate import CollectiveSpec, simulate_collective
from tpusim.hardware import load_hardware
from tpusim.vocabulary import CollectiveOp, Ring

TPUV4 = load_hardware("tpuv4-wire")

# (slice, mesh rows, mesh cols, axis map, logical axis, its size, its embedding)
SLICES = [
    ("4x4x16", 16, 16, "x*y,z", 1, 16, "wrapped ring"),
    ("4x4x16", 16, 16, "x*y,z", 0, 16, "snake"),
    ("4x8x8", 32, 8, None, 1, 8, "wrapped ring"),
    ("4x4x4", 16, 4, None, 1, 4, "wrapped ring"),
    ("2x2x4", 4, 4, "x*y,z", 1, 4, "line"),
    ("1x1x2", 1, 2, None, 1, 2, "line"),
    ("2x2x1", 2, 2, None, 0, 2, "line"),
    ("2x2x1", 2, 2, None, 1, 2, "line"),
]
IDS = [f"{s}-{r}x{c}-axis{a}" for s, r, c, _, a, _, _ in SLICES]


@functools.cache
def _nbytes(op: CollectiveOp, n: int) -> int:
    unit = 1_000_000
    if op in (CollectiveOp.ALL_GATHER, CollectiveOp.REDUCE_SCATTER, CollectiveOp.ALL_REDUCE):
        return unit * n
    if op is CollectiveOp.ALL_TO_ALL:
        return unit * n * n
    return unit


@pytest.mark.parametrize("chunks", [1, 4])
@pytest.mark.parametrize("ring", list(Ring))
@pytest.mark.parametrize("op", list(CollectiveOp))
@pytest.mark.parametrize(("spec", "rows", "cols", "axis_map", "axis", "size", "embedding"), SLICES, ids=IDS)
def test_slice_axis_matches_twin(
    topology_mesh, spec: str, rows: int, cols: int, axis_map: str | None, axis: int, size: int, embedding: str,
    op: CollectiveOp, ring: Ring, chunks: int,
) -> None:
    mapping = topology_mesh(spec, rows, cols, axis_map)
    described = mapping.axes[axis].describe()
    assert (described["size"], described["embedding"], described["max_hops"]) == (size, embedding, 1)
    assert described["closed"] is (embedding != "line")
    if op is CollectiveOp.ALL_TO_ALL and chunks > 1:
        return  # no closed form is claimed
    result = simulate_collective(CollectiveSpec(op, axis, _nbytes(op, size), ring, chunks, root=size - 1),
                                 network_for(TPUV4, mapping))
    assert result.analytic_time_s is not None
    assert result.time_s == pytest.approx(result.analytic_time_s, rel=1e-9)


@pytest.mark.parametrize("op", [CollectiveOp.BROADCAST, CollectiveOp.REDUCE, CollectiveOp.SEND_RECV])
@pytest.mark.parametrize(("spec", "rows", "cols", "axis_map", "axis", "size", "embedding"), SLICES, ids=IDS)
def test_slice_roots(
    topology_mesh, spec: str, rows: int, cols: int, axis_map: str | None, axis: int, size: int, embedding: str,
    op: CollectiveOp,
) -> None:
    mapping = topology_mesh(spec, rows, cols, axis_map)
    for root in sorted({0, 1, size // 2, size - 1}):
        result = simulate_collective(CollectiveSpec(op, axis, 1_000_000, root=root, offset=(root + 1) % size),
                                     network_for(TPUV4, mapping))
        assert result.time_s == pytest.approx(result.analytic_time_s, rel=1e-9)


def test_line_all_gather_is_formula_4(topology_mesh) -> None:
    """A 4-chip line: the end link carries 3 whole shards one way, (p-1)(a + S/B)."""
    mapping = topology_mesh("2x2x4", 4, 4, "x*y,z")
    result = simulate_collective(CollectiveSpec(CollectiveOp.ALL_GATHER, 1, 4_000_000), network_for(TPUV4, mapping))
    assert result.time_s == pytest.approx(3 * (1e-6 + 1e6 / 45e9), rel=1e-9)
    assert result.max_link_bytes == 3e6


@pytest.mark.parametrize("op", [CollectiveOp.BROADCAST, CollectiveOp.SEND_RECV])
def test_split_axis_single_message_has_no_claimed_twin(topology_mesh, op: CollectiveOp) -> None:
    mapping = topology_mesh("4x8x8", 16, 16, None)
    assert mapping.axes[1].describe()["embedding"] == "split"
    result = simulate_collective(CollectiveSpec(op, 1, 4_000_000, chunks=1, root=0, offset=8),
                                 network_for(TPUV4, mapping))
    # the message travels 9 links (one 2-hop neighbour route and seven 1-hop ones) in the DES
    assert result.time_s == pytest.approx(9 * (4e6 / 45e9 + 1e-6), rel=1e-9)
    assert result.analytic_time_s is None  # no closed form is claimed for multi-hop embeddings
