"""Collectives on the data axis (logical axis 2) of a D x R x C pod layout: timed as their closed-form twin, right data.

The data-parallel groups are the D chips at one place (i, j) of every replica, rings along whole physical axes
(tpusim/topology/pod.py). All R x C groups run at once on links no other group uses, so each finishes exactly at the
twin of one group; with numpy payloads a reduce-scatter and an all-reduce deliver the sum over the replicas and an
all-gather the replicas' shards in replica order.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import pytest
import simpy

from tpusim.collectives.device import Device, run_spmd
from tpusim.collectives.network import network_for, place_mesh
from tpusim.collectives.runtime import CollectiveRuntime
from tpusim.engine.simulation import Simulation
from tpusim.engine.tensor import Tensor
from tpusim.hardware import load_hardware
from tpusim.topology import MeshMapping
from tpusim.topology.mapping import DATA_AXIS
from tpusim.vocabulary import CollectiveOp

TPUV4 = load_hardware("tpuv4")
# (topology, D, R, C, data axes): a wrapped ring, a longer wrapped ring, a snake over two axes, an unwrapped line
LAYOUTS = {
    "4x4x4 z ring": ("4x4x4", 4, 4, 4, None),
    "4x4x8 z ring": ("4x4x8", 8, 4, 4, None),
    "4x4x4 y*z snake": ("4x4x4", 16, 4, 1, "y*z"),
    "2x4x4 z line": ("2x4x4", 4, 2, 4, "z"),
}
ROWS_PER_RANK = 2
TIMED_COLUMNS = 3 * 2**16  # 1.5 MiB of fp64 per rank's part: bandwidth-bound on every ring above
CHECKED_COLUMNS = 5  # payloads stay small: numpy does the work of every member
OPS = (CollectiveOp.REDUCE_SCATTER, CollectiveOp.ALL_GATHER, CollectiveOp.ALL_REDUCE)


def _layout(name: str) -> MeshMapping:
    topology, data, rows, cols, data_axes = LAYOUTS[name]
    return place_mesh(TPUV4, rows, cols, topology=topology, data=data, data_axes=data_axes)


def _values(rows: int, i: int, j: int, d: int) -> np.ndarray:
    """The payload of chip (i, j) of replica d: its place and replica in the values, so a wrong member or order
    shows."""
    base = np.arange(rows * CHECKED_COLUMNS, dtype=np.float64).reshape(rows, CHECKED_COLUMNS)
    return base * 1e6 + i * 1e4 + j * 1e2 + d


def _input(dev: Device, rows: int, payload: bool) -> Tensor:
    if not payload:
        return Tensor((rows, TIMED_COLUMNS), "fp64")
    return Tensor((rows, CHECKED_COLUMNS), "fp64", _values(rows, *dev.index, dev.replica))


def _run(mapping: MeshMapping, op: CollectiveOp, *, payload: bool) -> tuple[Simulation, CollectiveRuntime, dict]:
    degree = mapping.size(DATA_AXIS)
    rows = degree * ROWS_PER_RANK if op is not CollectiveOp.ALL_GATHER else ROWS_PER_RANK

    def program(dev: Device) -> Generator[simpy.Event, Any, tuple[int, Any]]:
        t = _input(dev, rows, payload)
        if op is CollectiveOp.REDUCE_SCATTER:
            out = yield dev.reduce_scatter(t, DATA_AXIS, 0)
        elif op is CollectiveOp.ALL_GATHER:
            out = yield dev.all_gather(t, DATA_AXIS, 0)
        else:
            out = yield dev.all_reduce(t, DATA_AXIS)
        return dev.rank(DATA_AXIS), out

    sim = Simulation(network_for(TPUV4, mapping))
    runtime = CollectiveRuntime(sim, network_for(TPUV4, mapping))
    return sim, runtime, run_spmd(sim, runtime, program, lambda dev: ())


@pytest.mark.parametrize("op", OPS, ids=str)
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_every_data_group_finishes_at_the_twin(name: str, op: CollectiveOp) -> None:
    mapping = _layout(name)
    rows, cols = mapping.shape
    sim, runtime, _ = _run(mapping, op, payload=False)
    assert all(record.call.axis == DATA_AXIS for record in runtime.records)
    assert sorted(record.group for record in runtime.records) == list(range(rows * cols))  # one per place (i, j)
    twin = runtime.network.twin(runtime.records[0].call)
    assert twin is not None and twin > 0
    assert {record.call for record in runtime.records} == {runtime.records[0].call}
    for record in runtime.records:
        assert record.start == 0.0
        assert record.end == pytest.approx(twin, rel=1e-9)
    assert float(sim.now) == pytest.approx(twin, rel=1e-9)


@pytest.mark.parametrize("op", OPS, ids=str)
@pytest.mark.parametrize("name", ["4x4x4 z ring", "4x4x4 y*z snake", "2x4x4 z line"])
def test_data_collectives_deliver_the_sum_over_the_replicas(name: str, op: CollectiveOp) -> None:
    mapping = _layout(name)
    degree = mapping.size(DATA_AXIS)
    _, _, out = _run(mapping, op, payload=True)
    assert len(out) == mapping.num_chips
    for (i, j, d), (rank, result) in out.items():
        assert rank == d
        rows = degree * ROWS_PER_RANK if op is not CollectiveOp.ALL_GATHER else ROWS_PER_RANK
        replicas = [_values(rows, i, j, r) for r in range(degree)]  # the group, in replica order
        total = np.sum(replicas, axis=0)
        if op is CollectiveOp.REDUCE_SCATTER:
            expected = total[d * ROWS_PER_RANK:(d + 1) * ROWS_PER_RANK]
        elif op is CollectiveOp.ALL_GATHER:
            expected = np.concatenate(replicas, axis=0)
        else:
            expected = total
        np.testing.assert_array_equal(result.data, expected)


@pytest.mark.parametrize("name", ["4x4x4 z ring", "4x4x8 z ring"])
def test_tensor_and_data_collectives_together_share_no_link(name: str) -> None:
    """An all-gather on tensor axis 0 and a reduce-scatter on the data axis issued together each finish at their own
    twin: the data rings' links are not the replicas' links (different operations, so no overlap limit holds one)."""
    mapping = _layout(name)
    degree, rows = mapping.size(DATA_AXIS), mapping.shape[0]

    def program(dev: Device) -> Generator[simpy.Event, Any, None]:
        yield dev.wait(dev.all_gather(Tensor((ROWS_PER_RANK, TIMED_COLUMNS), "fp64"), 0, 0),
                       dev.reduce_scatter(Tensor((degree * ROWS_PER_RANK, TIMED_COLUMNS), "fp64"), DATA_AXIS, 0))

    sim = Simulation(network_for(TPUV4, mapping))
    runtime = CollectiveRuntime(sim, network_for(TPUV4, mapping))
    run_spmd(sim, runtime, program, lambda dev: ())
    by_axis = {axis: [r for r in runtime.records if r.call.axis == axis] for axis in (0, DATA_AXIS)}
    assert len(by_axis[0]) == degree * mapping.shape[1] and len(by_axis[DATA_AXIS]) == rows * mapping.shape[1]
    twins = {axis: runtime.network.twin(records[0].call) for axis, records in by_axis.items()}
    assert twins[0] is not None and twins[DATA_AXIS] is not None and twins[0] != pytest.approx(twins[DATA_AXIS])
    for axis, records in by_axis.items():
        assert [r.end for r in records] == pytest.approx([twins[axis]] * len(records), rel=1e-9)


def test_a_one_member_collective_takes_no_overlap_slot() -> None:
    """Under the tpuv4 limit of one all-gather in flight, an all-gather on a 1-wide tensor axis issued while the
    data-axis all-gather runs completes at once (it moves nothing, and XLA drops it), and its payload is the
    chip's own; an all-gather on the 4-wide data axis issued after it still waits for the first."""
    mapping = place_mesh(TPUV4, 1, 1, topology="4x1x1", data=4)
    assert TPUV4.overlap_limits.of(CollectiveOp.ALL_GATHER) == 1
    done: dict[tuple[int, int, int], list[float]] = {}

    def program(dev: Device) -> Generator[simpy.Event, Any, None]:
        timed = Tensor((ROWS_PER_RANK, TIMED_COLUMNS), "fp64")
        first = dev.all_gather(timed, DATA_AXIS, 0)
        own = Tensor((ROWS_PER_RANK, CHECKED_COLUMNS), "fp64", _values(ROWS_PER_RANK, *dev.index, dev.replica))
        alone = yield dev.all_gather(own, 0, 0)
        np.testing.assert_array_equal(alone.data, own.data)
        done[(*dev.index, dev.replica)] = [float(dev.env.now)]
        second = dev.all_gather(timed, DATA_AXIS, 0)
        yield dev.wait(first, second)
        done[(*dev.index, dev.replica)].append(float(dev.env.now))

    sim = Simulation(network_for(TPUV4, mapping))
    runtime = CollectiveRuntime(sim, network_for(TPUV4, mapping))
    run_spmd(sim, runtime, program, lambda dev: ())
    data = [r for r in runtime.records if r.call.axis == DATA_AXIS]
    twin = runtime.network.twin(data[0].call)
    assert twin is not None and twin > 0
    assert len(done) == 4 and all(times[0] == 0.0 for times in done.values())
    alone = [r for r in runtime.records if r.call.axis == 0]
    assert len(alone) == 4 and all(r.size == 1 and r.start == r.end == 0.0 for r in alone)
    assert [t for r in data for t in (r.start, r.end)] == pytest.approx([0.0, twin, twin, 2 * twin], rel=1e-9)
    assert max(times[1] for times in done.values()) == pytest.approx(2 * twin, rel=1e-9)
