"""A D x R x C layout: D data-parallel replicas of an R x C tensor-parallel mesh on one physical topology.

The data axis takes whole physical axes, so every replica is the same sub-topology (the remaining axes, with their
wraparound) and the links of the data axis are disjoint from every replica's links: a replica's R x C mesh is
placed on its sub-topology by the ordinary mapping rules (:func:`~tpusim.topology.mapping.map_mesh`), and the
data-parallel groups (the D chips at the same place of every replica) form rings along the data axes, placed by the
same rules on the whole topology (as axis 0 of a D x (R*C) mesh, of which only that axis is placed).

Which physical axes the data axis takes, when several choices give D chips (docs/network.md#data-parallel-layouts):
first those that leave a replica mesh of whole physical axes, then the fewest axes, then wrapped ones (a closed
ring), then the outermost (z before y before x: an ASSUMPTION, the order device meshes usually list). ``data_axes``
(e.g. ``"z"`` or ``"y*z"``) chooses them explicitly. Splitting a physical axis between data and tensor parallelism
is not supported.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass

import numpy as np

from tpusim.errors import TopologyError
from tpusim.topology.axis_pieces import AxisPiece, choose_pieces
from tpusim.topology.mapping import DATA_AXIS, MeshMapping, map_mesh, mesh_layout, place_axis
from tpusim.topology.physical import PhysicalTopology, build_topology

__all__ = ["PodMapping", "map_pod"]


@dataclass(frozen=True, eq=False)
class PodMapping:
    """D replicas of an R x C mesh: the replica's own mapping, the data-parallel rings, and where each replica's
    chips and links are on the whole topology."""

    topology: PhysicalTopology
    data_axes: tuple[int, ...]
    """The physical axes the data axis takes, in ring order."""
    replica: MeshMapping
    """The R x C mesh on the replica sub-topology (chip ids 0..R*C-1 of that sub-topology)."""
    replica_chips: np.ndarray
    """[D, R*C]: the physical chip of replica d's sub-topology chip q."""
    replica_links: np.ndarray
    """[D, links of the sub-topology]: the physical link of replica d's sub-topology link l."""
    mesh: MeshMapping
    """The whole layout as one three-axis mesh: chip (i, j) of replica d; the tensor axes 0 and 1 with one group
    per replica and row or column, the data axis 2 with one group per (i, j) (what a simulation runs on)."""

    @property
    def shape(self) -> tuple[int, int, int]:
        """(D, R, C)."""
        rows, cols = self.replica.shape
        return (self.replica_chips.shape[0], rows, cols)

    def describe(self) -> dict[str, object]:
        """JSON-able summary: the layout, the physical axes of the data axis and the replica's mapping."""
        names = self.topology.axis_names
        return {
            "layout": "x".join(str(n) for n in self.shape),
            "topology": self.topology.name,
            "data": {"size": self.shape[0], "physical": [names[a] for a in self.data_axes],
                     "embedding": self.mesh.axes[DATA_AXIS].embedding, "closed": self.mesh.axes[DATA_AXIS].closed},
            "replica": self.replica.describe(),
        }


_Replica = tuple[tuple[int, ...], PhysicalTopology]
"""The physical axes a replica keeps (those of size > 1 the data axis does not take) and its sub-topology."""


def _replica(topology: PhysicalTopology, data_axes: tuple[int, ...]) -> _Replica:
    """The topology of one replica: the kept axes with their sizes, wraparound and names."""
    keep = tuple(a for a in range(len(topology.dims)) if a not in data_axes and topology.dims[a] > 1)
    names = tuple(topology.axis_names[a] for a in keep)
    sub = build_topology(f"{topology.name} replica ({','.join(names) or 'one chip'})",
                         [topology.dims[a] for a in keep] or [1], [topology.wrap[a] for a in keep] or [False])
    return keep, dataclasses.replace(sub, axis_names=names or ("x",))


def _choices(topology: PhysicalTopology, data: int, rows: int,
             cols: int) -> list[tuple[tuple[int, ...], _Replica]]:
    """Subsets of physical axes with D chips, best first (see the module docstring), each with its replica."""
    axes = [a for a, size in enumerate(topology.dims) if size > 1]
    ranked: list[tuple[tuple[int, int, int, tuple[int, ...]], tuple[int, ...], _Replica]] = []
    for count in range(len(axes) + 1):
        for subset in itertools.combinations(axes, count):
            if math.prod(topology.dims[a] for a in subset) != data:
                continue
            replica = _replica(topology, subset)
            pieces = choose_pieces(replica[1], rows, cols)
            if pieces is None:
                continue
            whole = all(p.whole for group in pieces for p in group)
            wrapped = sum(topology.wrap[a] for a in subset)
            ranked.append(((0 if whole else 1, count, -wrapped, tuple(-a for a in subset)), subset, replica))
    return [(subset, replica) for _, subset, replica in sorted(ranked, key=lambda item: item[0])]


def _named_axes(text: str, topology: PhysicalTopology) -> tuple[int, ...]:
    names = [part.strip() for part in text.split("*")]
    unknown = [name for name in names if name not in topology.axis_names]
    if unknown or len(set(names)) != len(names):
        raise TopologyError(f"data axes {text!r}: name distinct physical axes of {topology.name!r} joined by '*' "
                            f"(its axes: {', '.join(topology.axis_names)})")
    return tuple(topology.axis_names.index(name) for name in names)


def map_pod(topology: PhysicalTopology, data: int, rows: int, cols: int, *, axis_map: str | None = None,
            data_axes: str | None = None) -> PodMapping:
    """Place D replicas of an R x C mesh on ``topology`` (``axis_map`` places the replica's mesh on its
    sub-topology, as for a plain mesh; ``data_axes`` names the data axis's physical axes)."""
    for what, value in (("data-parallel degree", data), ("rows", rows), ("columns", cols)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise TopologyError(f"{what} {value!r} must be an integer >= 1")
    if topology.twisted:
        raise TopologyError(f"a D x R x C layout on the twisted slice {topology.name!r} is not supported (its replicas "
                            "would not be copies of one sub-topology); use the plain slice of the same shape")
    if data * rows * cols != topology.num_chips:
        raise TopologyError(f"layout {data}x{rows}x{cols} has {data * rows * cols} chips but topology "
                            f"{topology.name!r} has {topology.num_chips}; choose D x R x C = {topology.num_chips}")
    if data_axes is not None:
        chosen = _named_axes(data_axes, topology)
        if math.prod(topology.dims[a] for a in chosen) != data:
            raise TopologyError(f"data axes {data_axes!r} have {math.prod(topology.dims[a] for a in chosen)} chips "
                                f"on {topology.name!r}, not the {data} of the data axis")
        keep, sub = _replica(topology, chosen)
    else:
        found = _choices(topology, data, rows, cols)
        if not found:
            sides = sorted({math.prod(topology.dims[a] for a in s) for n in range(len(topology.dims) + 1)
                            for s in itertools.combinations(range(len(topology.dims)), n)})
            raise TopologyError(f"a data axis of {data} chips cannot take whole physical axes of {topology.name!r} "
                                f"and leave a {rows}x{cols} mesh; valid data-parallel degrees here: "
                                f"{', '.join(str(s) for s in sides)}")
        chosen, (keep, sub) = found[0]
    replica = map_mesh(sub, rows, cols, axis_map)
    names = topology.axis_names
    view_map = f"{'*'.join(names[a] for a in chosen) or '1'},{'*'.join(names[a] for a in keep) or '1'}"
    # the data axis as axis 0 of a D x (R*C) mesh of the whole topology; its other axis is never placed
    data_pieces, view_grid = mesh_layout(topology, data, rows * cols, view_map)
    # replica d's chips: its data-ring offset added to the sub-topology coordinates laid on the kept axes
    base = np.zeros((sub.num_chips, len(topology.dims)), dtype=np.int64)
    for position, axis in enumerate(keep):
        base[:, axis] = sub.coords[:, position]
    ring = view_grid[:, 0]  # replica order: the data ring through the chip at the origin
    origin = topology.coords[list(ring)]
    chips = (origin[:, None, :] + base[None, :, :]) @ topology.radix
    links = topology.link_ids(chips[:, sub.link_src], chips[:, sub.link_dst]).reshape(data, sub.num_links)
    chips.setflags(write=False)
    links.setflags(write=False)
    return PodMapping(topology, chosen, replica, chips, links, _pod_mesh(topology, keep, replica, chips,
                                                                         data_pieces[0]))


def _pod_mesh(topology: PhysicalTopology, keep: tuple[int, ...], replica: MeshMapping, chips: np.ndarray,
              data_pieces: tuple[AxisPiece, ...]) -> MeshMapping:
    """The three-axis mesh of a layout: the replica's axes on the whole topology in every replica, and the data
    rings (on ``data_pieces``, rank d in replica d) one per place (i, j)."""
    rows, cols = replica.shape
    grid = chips[:, replica.chip_grid]  # [D, R, C]

    def lifted(pieces: tuple[AxisPiece, ...]) -> tuple[AxisPiece, ...]:  # sub-topology axis -> physical axis
        return tuple(dataclasses.replace(piece, phys_axis=keep[piece.phys_axis]) for piece in pieces)

    data = grid.shape[0]
    axes = (
        place_axis(topology, 0, lifted(replica.axes[0].pieces), [grid[d, :, j] for d in range(data)
                                                                  for j in range(cols)]),
        place_axis(topology, 1, lifted(replica.axes[1].pieces), [grid[d, i, :] for d in range(data)
                                                                  for i in range(rows)]),
        place_axis(topology, DATA_AXIS, data_pieces, [grid[:, i, j] for i in range(rows)
                                                                    for j in range(cols)]),
    )
    return MeshMapping(topology=topology, shape=(rows, cols), axes=axes, chip_grid=grid, replica=replica)
