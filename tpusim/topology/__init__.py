"""The physical ICI network and the placement of logical meshes on it.

Public API: physical topologies (:class:`PhysicalTopology`, TPUv4 slices, generic tori and meshes,
spec parsing) and logical mesh mappings (:func:`map_mesh`, :func:`abstract_mesh`, ring embeddings and
routes per logical axis). This package knows nothing of SimPy; it imports only ``tpusim.errors`` and the slice rules of
``tpusim.config``.
"""

from tpusim.topology.mapping import (
    AxisMapping,
    AxisPiece,
    MeshMapping,
    RingEmbedding,
    abstract_mesh,
    map_mesh,
    parse_mesh,
)
from tpusim.topology.physical import PhysicalTopology, build_topology
from tpusim.topology.pod import PodMapping, map_pod
from tpusim.topology.rings import ring_way
from tpusim.topology.slices import (
    DEFAULT_TPUV4_SLICES,
    default_slice,
    default_tpuv4_slice,
    generic_topology,
    parse_topology,
    slice_topology,
    tpuv4_slice,
)

__all__ = [
    "DEFAULT_TPUV4_SLICES",
    "AxisMapping",
    "AxisPiece",
    "MeshMapping",
    "PhysicalTopology",
    "PodMapping",
    "RingEmbedding",
    "abstract_mesh",
    "build_topology",
    "default_slice",
    "default_tpuv4_slice",
    "generic_topology",
    "map_mesh",
    "map_pod",
    "parse_mesh",
    "parse_topology",
    "ring_way",
    "slice_topology",
    "tpuv4_slice",
]
