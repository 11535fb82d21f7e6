"""Fixtures the test modules share: logical meshes placed on topologies and on hardware profiles."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tpusim.collectives.network import place_mesh
from tpusim.config import HardwareProfile, PhysicalProfile
from tpusim.hardware import load_hardware
from tpusim.topology import MeshMapping, map_mesh, parse_mesh, parse_topology

TopologyMesh = Callable[..., MeshMapping]
ProfileMesh = Callable[[HardwareProfile | str, int, int], tuple[HardwareProfile, MeshMapping]]


def on_topology(spec: str, rows: int | str, cols: int | str | None = None,
                axis_map: str | None = None) -> MeshMapping:
    """A logical mesh on a topology spec such as ``"4x4x8"`` or ``"torus:16"``: ``(spec, R, C[, axis_map])`` or
    ``(spec, "RxC"[, axis_map])``."""
    if isinstance(rows, str):
        shape = parse_mesh(rows)
        axis_map = axis_map if axis_map is not None else (cols if isinstance(cols, str) else None)
    else:
        shape = (rows, int(cols) if cols is not None else 1)
    return map_mesh(parse_topology(spec), *shape, axis_map=axis_map)


def on_profile(hardware: HardwareProfile | str, rows: int, cols: int) -> tuple[HardwareProfile, MeshMapping]:
    """The profile and the mesh on its network: abstract rings if calibrated, a wrapped torus of the mesh's
    own shape if physical (so every axis is a one-hop ring)."""
    profile = load_hardware(hardware) if isinstance(hardware, str) else hardware
    topology = f"torus:{rows}x{cols}" if isinstance(profile, PhysicalProfile) else None
    return profile, place_mesh(profile, rows, cols, topology=topology)


@pytest.fixture(scope="session")
def topology_mesh() -> TopologyMesh:
    return on_topology


@pytest.fixture(scope="session")
def profile_mesh() -> ProfileMesh:
    return on_profile
