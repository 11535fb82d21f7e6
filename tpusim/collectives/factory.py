"""Building the network model a hardware profile describes: the one place that picks a backend by profile kind.

Each kind of profile has its backend in its own package (``tpusim.collectives.physical``,
``tpusim.collectives.calibrated``), behind the interface of ``tpusim.collectives.network``. A request's model is
built here once, by the runner (``tpusim.experiments.runners``) or the tuner for its request, and every layer below
takes it, deriving other placements of the same profile from it (``Network.over``): ``network_for`` is the one
function given a profile and a mapping as two arguments. ``place_mesh`` lays a logical mesh on the kind of network
before a model exists.
"""

from __future__ import annotations

from collections.abc import Mapping

from tpusim.collectives.calibrated import CalibratedNetwork
from tpusim.collectives.network import Network, Placement
from tpusim.collectives.physical import PhysicalNetwork
from tpusim.config import CalibratedProfile, HardwareProfile, PhysicalProfile
from tpusim.engine.context import Context
from tpusim.engine.links import LinkOverride
from tpusim.topology import MeshMapping

__all__ = ["network_for", "place_mesh", "takes_data_axis"]


def _kind(hardware: HardwareProfile) -> type[PhysicalNetwork] | type[CalibratedNetwork]:
    if isinstance(hardware, CalibratedProfile):
        return CalibratedNetwork
    if isinstance(hardware, PhysicalProfile):
        return PhysicalNetwork
    raise TypeError(f"hardware profile {hardware.name!r} is neither physical nor calibrated")


def network_for(hardware: HardwareProfile, mapping: MeshMapping, *, context: Context | None = None,
                link_overrides: Mapping[int, LinkOverride] | None = None) -> Network:
    """The network model ``hardware`` describes, over ``mapping``."""
    return _kind(hardware)(Placement(hardware, mapping, context, link_overrides or {}))


def takes_data_axis(hardware: HardwareProfile) -> bool:
    """Whether the network ``hardware`` describes can hold a D x R x C layout (the calibrated profiles' fitted
    costs describe one 2D mesh)."""
    return _kind(hardware).data_axis


def place_mesh(hardware: HardwareProfile, rows: int, cols: int, *, topology: str | None = None,
               axis_map: str | None = None, data: int = 1, data_axes: str | None = None) -> MeshMapping:
    """The logical ``rows x cols`` mesh (``data`` replicas of it in a D x R x C pod layout) placed on the network
    ``hardware`` describes."""
    return _kind(hardware).place(hardware, rows, cols, topology=topology, axis_map=axis_map, data=data,
                                 data_axes=data_axes)
