"""Every collective delivers the right data (numpy payloads) on physical and abstract networks.

Each chip (i, j) holds a distinct fp64 tensor; the program issues all eight operations at once on one
axis and checks what comes back against numpy on the inputs of its group, in rank order.
"""

from __future__ import annotations

import numpy as np
import pytest

from tpusim.collectives.device import Device, run_spmd
from tpusim.collectives.factory import network_for
from tpusim.collectives.runtime import CollectiveRuntime
from tpusim.engine.simulation import Simulation
from tpusim.engine.tensor import Tensor
from tpusim.hardware import load_hardware
from tpusim.topology import MeshMapping, abstract_mesh, map_mesh, parse_topology
from tpusim.vocabulary import Ring

MESHES = {
    "tpuv4-4x4x4-16x4": ("tpuv4", lambda: map_mesh(parse_topology("4x4x4"), 16, 4)),
    "tpuv4-4x4x4-8x8": ("tpuv4", lambda: map_mesh(parse_topology("4x4x4"), 8, 8)),
    "torus-4x4": ("tpuv4", lambda: map_mesh(parse_topology("torus:4x4"), 4, 4)),
    "mesh-3x4": ("tpuv4", lambda: map_mesh(parse_topology("mesh:3x4"), 3, 4)),
    "2x2x4-line": ("tpuv4", lambda: map_mesh(parse_topology("2x2x4"), 4, 4, "x*y,z")),
    "abstract-4x8": ("meshslice-tpu-fit", lambda: abstract_mesh(4, 8)),
    "ring-1x8": ("tpuv4", lambda: map_mesh(parse_topology("torus:8"), 1, 8)),  # axis 0: groups of one
}
ROWS_PER_RANK = 3  # each input has n * 3 rows, so it splits into n parts of 3 rows


def _input(i: int, j: int, n: int) -> np.ndarray:
    base = np.arange(n * ROWS_PER_RANK * 2, dtype=np.float64).reshape(n * ROWS_PER_RANK, 2)
    return base * 1000.0 + i * 100.0 + j


def _program(axis: int, n: int):  # type: ignore[no-untyped-def]
    def program(dev: Device):  # type: ignore[no-untyped-def]
        i, j = dev.index
        t = Tensor((n * ROWS_PER_RANK, 2), "fp64", _input(i, j, n))
        values = yield dev.wait(
            dev.all_gather(t, axis, dim=1),
            dev.reduce_scatter(t, axis, dim=0),
            dev.all_reduce(t, axis),
            dev.all_to_all(t, axis, dim=0),
            dev.broadcast(t, axis, root=n - 1),
            dev.reduce(t, axis, root=1 % n),
            dev.shift(t, axis, offset=2),
            dev.send_recv(t, axis, src=0, dst=n - 1),
        )
        return dev.rank(axis), values

    return program


def _run(mapping: MeshMapping, hardware: str, axis: int, ring: Ring, chunks: int) -> dict:
    sim = Simulation(network_for(load_hardware(hardware), mapping))
    runtime = CollectiveRuntime(sim, network_for(sim.hardware, sim.mapping), ring=ring, chunks=chunks)
    return run_spmd(sim, runtime, _program(axis, mapping.shape[axis]), lambda dev: ())


@pytest.mark.parametrize(("ring", "chunks"), [(Ring.BIDIRECTIONAL, 1), (Ring.UNIDIRECTIONAL, 2)])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("name", list(MESHES))
def test_every_op_delivers_the_right_data(name: str, axis: int, ring: Ring, chunks: int) -> None:
    hardware, build = MESHES[name]
    mapping = build()
    n = mapping.shape[axis]
    out = _run(mapping, hardware, axis, ring, chunks)
    assert len(out) == mapping.num_chips
    for (i, j), (rank, values) in out.items():
        assert rank == (i, j)[axis]
        group = [_input(*((k, j) if axis == 0 else (i, k)), n) for k in range(n)]
        total = np.sum(group, axis=0)
        part = slice(rank * ROWS_PER_RANK, (rank + 1) * ROWS_PER_RANK)
        ag, rs, ar, a2a, bc, rd, sh, sr = values
        np.testing.assert_array_equal(ag.data, np.concatenate(group, axis=1))
        np.testing.assert_array_equal(rs.data, total[part])
        np.testing.assert_array_equal(ar.data, total)
        np.testing.assert_array_equal(a2a.data, np.concatenate([g[part] for g in group], axis=0))
        np.testing.assert_array_equal(bc.data, group[n - 1])
        if rank == 1 % n:
            np.testing.assert_array_equal(rd.data, total)
        else:
            assert rd is None
        np.testing.assert_array_equal(sh.data, group[(rank - 2) % n])
        if rank == n - 1:
            np.testing.assert_array_equal(sr.data, group[0])
        else:
            assert sr is None
        rows = n * ROWS_PER_RANK
        assert (ag.shape, rs.shape, a2a.shape) == ((rows, 2 * n), (ROWS_PER_RANK, 2), (rows, 2))


def test_rank_order_follows_the_ring_not_the_chip_id() -> None:
    """On a snake axis the all-gather concatenates in logical rank order, whatever the chip ids are."""
    mapping = map_mesh(parse_topology("4x4x16"), 16, 16, "x*y,z")
    assert mapping.axes[0].describe()["embedding"] == "snake"
    sim = Simulation(network_for(load_hardware("tpuv4"), mapping))
    runtime = CollectiveRuntime(sim, network_for(sim.hardware, sim.mapping))

    def program(dev: Device):  # type: ignore[no-untyped-def]
        mine = np.array([[float(dev.rank(0)), float(dev.chip_id)]])
        (gathered,) = yield dev.wait(dev.all_gather(Tensor((1, 2), "fp64", mine), axis=0))
        return gathered.data

    out = run_spmd(sim, runtime, program, lambda dev: ())
    for (_, j), data in out.items():
        np.testing.assert_array_equal(data[:, 0], np.arange(16.0))
        np.testing.assert_array_equal(data[:, 1], mapping.chip_grid[:, j].astype(np.float64))
