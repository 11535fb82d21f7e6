"""The DES reproduces the physical closed-form twin exactly wherever the twin claims a form.

One group on a 1 x n ring (``torus:n``) or line (``mesh:n``), and every group of a 2D torus at once (their
links are disjoint, so they must not interfere). Two shard sizes put chunked pipelining on both sides of
its max(): at 45 kB a 4-chunk step is latency-bound, at 180 kB it is bandwidth-bound.
"""

from __future__ import annotations

import functools

import pytest

from tpusim.collectives.factory import network_for
from tpusim.collectives.simulate import CollectiveResult, CollectiveSpec, simulate_collective, twin_time
from tpusim.hardware import load_hardware
from tpusim.topology import MeshMapping
from tpusim.vocabulary import CollectiveOp, Ring

TPUV4 = load_hardware("tpuv4")
SIZES = (2, 3, 4, 5, 7, 8, 12, 16, 31, 32, 64)
UNITS = (45_000, 180_000)  # bytes of one shard (AG), output shard (RS, AR) or one part (all-to-all)
GROUP_OPS = (CollectiveOp.ALL_GATHER, CollectiveOp.REDUCE_SCATTER, CollectiveOp.ALL_REDUCE)


@functools.cache
def _nbytes(op: CollectiveOp, n: int, unit: int) -> int:
    """``--bytes`` whose unit size (``CollectiveCall.unit_bytes``) is ``unit``."""
    if op in GROUP_OPS:
        return unit * n
    if op is CollectiveOp.ALL_TO_ALL:
        return unit * n * n
    return unit


def _run(mapping: MeshMapping, spec: CollectiveSpec) -> CollectiveResult:
    return simulate_collective(spec, network_for(TPUV4, mapping))


def _assert_twin(result: CollectiveResult) -> None:
    assert result.analytic_time_s is not None
    assert result.time_s == pytest.approx(result.analytic_time_s, rel=1e-9)


@pytest.mark.parametrize("unit", UNITS)
@pytest.mark.parametrize("chunks", [1, 4])
@pytest.mark.parametrize("ring", list(Ring))
@pytest.mark.parametrize("op", list(CollectiveOp))
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("kind", ["torus", "mesh"])
def test_one_group_matches_twin(topology_mesh, kind: str, n: int, op: CollectiveOp, ring: Ring, chunks: int,
                                unit: int) -> None:
    mapping = topology_mesh(f"{kind}:{n}", 1, n)
    assert mapping.axes[1].closed is (kind == "torus" and n >= 3)
    spec = CollectiveSpec(op, 1, _nbytes(op, n, unit), ring, chunks)
    if op is CollectiveOp.ALL_TO_ALL and chunks > 1:  # no form is claimed; nothing to compare
        assert twin_time(spec, network_for(TPUV4, mapping)) is None
        return
    result = _run(mapping, spec)
    _assert_twin(result)
    assert result.time_s > 0


ROOT_SIZES = (2, 3, 5, 8, 16, 31)


def _roots(n: int) -> list[int]:
    return sorted({0, 1, n // 2, n - 1})


@pytest.mark.parametrize("chunks", [1, 4])
@pytest.mark.parametrize("ring", list(Ring))
@pytest.mark.parametrize("op", [CollectiveOp.BROADCAST, CollectiveOp.REDUCE])
@pytest.mark.parametrize("n", ROOT_SIZES)
@pytest.mark.parametrize("kind", ["torus", "mesh"])
def test_broadcast_and_reduce_roots(topology_mesh, kind: str, n: int, op: CollectiveOp, ring: Ring,
                                    chunks: int) -> None:
    mapping = topology_mesh(f"{kind}:{n}", 1, n)
    for root in _roots(n):
        _assert_twin(_run(mapping, CollectiveSpec(op, 1, 180_000, ring, chunks, root=root)))


@pytest.mark.parametrize("ring", list(Ring))
@pytest.mark.parametrize("n", ROOT_SIZES)
@pytest.mark.parametrize("kind", ["torus", "mesh"])
def test_shift_offsets_unchunked(topology_mesh, kind: str, n: int, ring: Ring) -> None:
    mapping = topology_mesh(f"{kind}:{n}", 1, n)
    for offset in sorted({1, 2, n // 2, n // 2 + 1, n - 1, -1, n + 1, 2 * n + 3}):
        _assert_twin(_run(mapping, CollectiveSpec(CollectiveOp.SHIFT, 1, 180_000, ring, 1, offset=offset)))


@pytest.mark.parametrize("ring", list(Ring))
@pytest.mark.parametrize("n", ROOT_SIZES)
@pytest.mark.parametrize("kind", ["torus", "mesh"])
def test_shift_by_one_rank_chunked(topology_mesh, kind: str, n: int, ring: Ring) -> None:
    """Offsets that move every message one ring step are contention-free (n-1 is one step back on a
    bidirectional ring; a unidirectional ring goes forward only)."""
    mapping = topology_mesh(f"{kind}:{n}", 1, n)
    offsets = (1, n + 1, -1, n - 1) if kind == "torus" and ring is Ring.BIDIRECTIONAL else (1, n + 1)
    for offset in offsets:
        _assert_twin(_run(mapping, CollectiveSpec(CollectiveOp.SHIFT, 1, 180_000, ring, 4, offset=offset)))


@pytest.mark.parametrize("chunks", [1, 4])
@pytest.mark.parametrize("ring", list(Ring))
@pytest.mark.parametrize("n", ROOT_SIZES)
@pytest.mark.parametrize("kind", ["torus", "mesh"])
def test_send_recv_pairs(topology_mesh, kind: str, n: int, ring: Ring, chunks: int) -> None:
    mapping = topology_mesh(f"{kind}:{n}", 1, n)
    for src in _roots(n):
        for dst in _roots(n):
            spec = CollectiveSpec(CollectiveOp.SEND_RECV, 1, 180_000, ring, chunks, root=src, offset=dst)
            result = _run(mapping, spec)
            _assert_twin(result)
            assert (result.time_s == 0.0) is (src == dst)


@pytest.mark.parametrize(
    ("spec", "offset"), [("torus:4", 2), ("torus:8", 3), ("torus:8", -2), ("mesh:8", 2), ("torus:5", 2)]
)
def test_chunked_multi_step_shift_claims_no_closed_form(topology_mesh, spec: str, offset: int) -> None:
    # offset k puts k messages on every link and their chunks interleave: the chain form would undercount
    n = int(spec.split(":")[1])
    result = _run(topology_mesh(spec, 1, n), CollectiveSpec(CollectiveOp.SHIFT, 1, 2_000_000, Ring.UNIDIRECTIONAL, 4,
                                                       offset=offset))
    assert result.analytic_time_s is None
    assert result.max_link_bytes is not None
    assert result.time_s >= result.max_link_bytes / 45e9


@pytest.mark.parametrize("op", list(CollectiveOp))
def test_group_of_one_takes_no_time(topology_mesh, op: CollectiveOp) -> None:
    result = _run(topology_mesh("torus:8", 1, 8), CollectiveSpec(op, 0, 1000, offset=0))
    assert (result.time_s, result.analytic_time_s, result.bytes_sent, result.transfers) == (0, 0, 0, 0)


def test_no_closed_form_is_noted(topology_mesh) -> None:
    result = _run(topology_mesh("torus:8", 1, 8), CollectiveSpec(CollectiveOp.ALL_TO_ALL, 1, 8 * 8 * 1000, chunks=2))
    assert result.analytic_time_s is None
    assert result.time_s > 0
    assert result.notes == [
        "no closed form is claimed for this case (chunked multi-hop routes or all-to-all)"
    ]


TORUS_2D = [("torus:8x4", 8, 4), ("torus:4x8", 4, 8), ("mesh:6x4", 6, 4)]


@pytest.mark.parametrize("chunks", [1, 4])
@pytest.mark.parametrize("ring", list(Ring))
@pytest.mark.parametrize("op", list(CollectiveOp))
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize(("spec", "rows", "cols"), TORUS_2D)
def test_all_groups_of_2d_network_run_without_interference(
    topology_mesh, spec: str, rows: int, cols: int, axis: int, op: CollectiveOp, ring: Ring, chunks: int
) -> None:
    mapping = topology_mesh(spec, rows, cols)
    n = mapping.shape[axis]
    result = _run(mapping, CollectiveSpec(op, axis, _nbytes(op, n, 180_000), ring, chunks, root=n - 1))
    assert result.groups == mapping.shape[1 - axis]
    if op is CollectiveOp.ALL_TO_ALL and chunks > 1:
        assert result.analytic_time_s is None
        return
    _assert_twin(result)
    # every group is served by its own links: the busiest link carries what it carries for one group
    one_group = _run(topology_mesh(f"{spec.split(':')[0]}:{n}", 1, n),
                     CollectiveSpec(op, 1, _nbytes(op, n, 180_000), ring, chunks, root=n - 1))
    assert result.max_link_bytes == one_group.max_link_bytes
    assert result.bytes_sent == pytest.approx(result.groups * one_group.bytes_sent, rel=1e-12)
