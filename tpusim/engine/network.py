"""Choosing the network a run simulates: the abstract calibrated rings, or a physical topology.

Calibrated profiles always run on the abstract network (one ring per logical axis, no links). Physical
profiles run on the topology the user names (``4x4x16``, ``torus:16x16``, ``mesh:4x4``) or, by default,
on the TPUv4 slice that reference §5.2 gives for the chip count.
"""

from __future__ import annotations

from tpusim.config import HardwareProfile
from tpusim.errors import TopologyError
from tpusim.topology import MeshMapping, abstract_mesh, default_tpuv4_slice, map_mesh, parse_topology


def resolve_mapping(
    hardware: HardwareProfile,
    rows: int,
    cols: int,
    *,
    topology: str | None = None,
    axis_map: str | None = None,
) -> MeshMapping:
    """The logical ``rows x cols`` mesh placed on the network ``hardware`` implies."""
    if hardware.kind == "calibrated":
        if topology is not None or axis_map is not None:
            flag = "--topology" if topology is not None else "--axis-map"
            raise TopologyError(
                f"{flag} {topology if topology is not None else axis_map!r} does not apply to calibrated "
                f"profile {hardware.name!r}, which simulates one abstract ring per logical axis; "
                "use a physical profile such as 'tpuv4'"
            )
        return abstract_mesh(rows, cols)
    physical = parse_topology(topology) if topology is not None else default_tpuv4_slice(rows * cols)
    return map_mesh(physical, rows, cols, axis_map)
