"""Properties: link bytes are conserved exactly, and more link bandwidth never makes a collective slower."""

from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpusim.collectives.factory import network_for
from tpusim.collectives.simulate import CollectiveSpec, simulate_collective
from tpusim.hardware import load_hardware, scaled_profile
from tpusim.topology import abstract_mesh
from tpusim.vocabulary import CollectiveOp, Ring

TPUV4 = load_hardware("tpuv4")
FAST = scaled_profile(TPUV4, bandwidth=2)
TPU_FIT = load_hardware("meshslice-tpu-fit")
FAST_FIT = scaled_profile(TPU_FIT, bandwidth=2)


@functools.cache
@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(3, 12),
    groups=st.integers(1, 4),
    shard_units=st.integers(1, 5000),
    op=st.sampled_from([CollectiveOp.ALL_GATHER, CollectiveOp.REDUCE_SCATTER]),
    ring=st.sampled_from(list(Ring)),
    chunks=st.sampled_from([1, 2, 4]),
)
def test_ring_gather_and_scatter_conserve_bytes(
    topology_mesh, n: int, groups: int, shard_units: int, op: CollectiveOp, ring: Ring, chunks: int
) -> None:
    """Each of n ranks sends (n-1) shards (as halves both ways on a bidirectional ring), one hop each."""
    shard = 8 * shard_units  # halves and chunks stay whole bytes
    mapping = topology_mesh(f"torus:{n}x{groups}", n, groups)
    assert mapping.axes[0].closed
    result = simulate_collective(CollectiveSpec(op, 0, n * shard, ring, chunks), network_for(TPUV4, mapping))
    assert result.groups == groups
    assert result.bytes_sent == groups * n * (n - 1) * shard
    directions = 1 if ring is Ring.UNIDIRECTIONAL else 2
    assert result.transfers == groups * n * (n - 1) * directions * chunks
    assert result.max_link_bytes == (n - 1) * shard / directions


NETWORKS = [("torus:6x4", 6, 4), ("mesh:5x4", 5, 4), ("4x4x4", 8, 8), ("torus:7", 1, 7), ("2x2x4", 4, 4)]


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(
    network=st.sampled_from(NETWORKS),
    axis=st.sampled_from([0, 1]),
    op=st.sampled_from(list(CollectiveOp)),
    ring=st.sampled_from(list(Ring)),
    chunks=st.sampled_from([1, 2, 3]),
    units=st.integers(1, 20000),
    root=st.integers(0, 63),
    offset=st.integers(-8, 8),
)
def test_more_bandwidth_is_never_slower_physical(
    topology_mesh, network: tuple[str, int, int], axis: int, op: CollectiveOp, ring: Ring, chunks: int, units: int,
    root: int,
    offset: int,
) -> None:
    spec_text, rows, cols = network
    mapping = topology_mesh(spec_text, rows, cols)
    n = mapping.shape[axis]
    destination = offset % n if op is CollectiveOp.SEND_RECV else offset  # a shift distance may be any integer
    spec = CollectiveSpec(op, axis, units * n * n, ring, chunks, root % n, destination)
    slow = simulate_collective(spec, network_for(TPUV4, mapping))
    fast = simulate_collective(spec, network_for(FAST, mapping))
    assert fast.time_s <= slow.time_s
    assert fast.bytes_sent == slow.bytes_sent


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(
    shape=st.sampled_from([(8, 8), (32, 8), (4, 16)]),
    axis=st.sampled_from([0, 1]),
    op=st.sampled_from(list(CollectiveOp)),
    units=st.integers(1, 10**6),
    offset=st.integers(1, 8),
)
def test_more_bandwidth_is_never_slower_calibrated(
    shape: tuple[int, int], axis: int, op: CollectiveOp, units: int, offset: int
) -> None:
    n = shape[axis]
    spec = CollectiveSpec(op, axis, units * n * n, offset=offset % n)
    mapping = abstract_mesh(*shape)
    slow = simulate_collective(spec, network_for(TPU_FIT, mapping)).time_s
    fast = simulate_collective(spec, network_for(FAST_FIT, mapping)).time_s
    assert fast <= slow
