"""Logical R x C mesh -> physical chips, with the ring embedding and routes of every logical group.

Logical axis 0 has size R (the R chips sharing column index j), axis 1 has size C (the C chips sharing
row index i). The rank of a chip along a logical axis is its position on that axis's ring, so rank r and
r+1 are physically adjacent wherever the embedding allows, and an all-gather concatenates in ring order.
A pod layout (``tpusim.topology.pod``) holds D replicas of the R x C mesh: chip (i, j) of replica d, the
tensor axes 0 and 1 with one group per replica and row or column, and axis 2, the data axis, whose groups are
the D chips at the same (i, j) of every replica. Also builds the abstract mesh of the calibrated profiles,
which has rings but no physical links.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tpusim.errors import TopologyError, TpusimError
from tpusim.topology.axis_pieces import AxisPiece, choose_pieces, parse_axis_map
from tpusim.topology.physical import PhysicalTopology
from tpusim.topology.rings import ring_order, ring_way

__all__ = [
    "DATA_AXIS",
    "AxisMapping",
    "AxisPiece",
    "MeshMapping",
    "RingEmbedding",
    "abstract_mesh",
    "closed_ring",
    "map_mesh",
    "mesh_layout",
    "parse_mesh",
    "place_axis",
]

_MESH = re.compile(r"(\d+)(?:x(\d+))?")


def _check_index(value: int, size: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 0 <= value < size:
        raise TopologyError(f"{what} {value!r} is out of range; valid: 0..{size - 1}")
    return int(value)


@dataclass(frozen=True)
class RingEmbedding:
    """One group of a logical axis: its chips in rank (= ring) order and the links between neighbours."""

    members: tuple[int, ...]
    closed: bool
    fwd_routes: tuple[tuple[int, ...], ...]
    bwd_routes: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        size = len(self.members)
        hops = size if self.closed else max(size - 1, 0)
        if len(self.fwd_routes) != hops or len(self.bwd_routes) != hops:
            raise TopologyError(
                f"ring of {size} members ({'closed' if self.closed else 'open'}) needs {hops} forward and "
                f"backward routes, got {len(self.fwd_routes)} and {len(self.bwd_routes)}"
            )

    @property
    def size(self) -> int:
        """Number of members."""
        return len(self.members)

    def route(self, src_rank: int, dst_rank: int, *, forward_only: bool = False) -> tuple[int, ...]:
        """Links from rank src to rank dst along the ring or the line, the way ``ring_way`` chooses."""
        size = self.size
        src = _check_index(src_rank, size, "source rank")
        dst = _check_index(dst_rank, size, "destination rank")
        forward, steps = ring_way(size, src, dst, closed=self.closed, forward_only=forward_only,
                                  links=self._links)
        links: list[int] = []
        for s in range(steps):
            links.extend(self.fwd_routes[(src + s) % size] if forward else self.bwd_routes[(src - 1 - s) % size])
        return tuple(links)

    def _links(self, src: int, steps: int, forward: bool) -> int:
        size = self.size
        if forward:
            return sum(len(self.fwd_routes[(src + s) % size]) for s in range(steps))
        return sum(len(self.bwd_routes[(src - 1 - s) % size]) for s in range(steps))


@dataclass(frozen=True)
class AxisMapping:
    """How one logical axis is embedded: its pieces, ring shape, and one ring per group.

    ``embedding`` is "wrapped ring" (one whole wrapped physical axis), "line" (one whole axis without
    wrap), "snake" (several whole axes, a Hamiltonian cycle), "split" (some piece is a segment or a
    block index of a split axis), "single" (size 1) or "abstract ring" (calibrated, no topology).
    ``physical`` holds the piece labels for reports, e.g. ("x", "y") or ("y[0:4]",).
    """

    axis: int
    size: int
    pieces: tuple[AxisPiece, ...]
    embedding: str
    closed: bool
    max_hops: int
    groups: tuple[RingEmbedding, ...] = field(repr=False)
    physical: tuple[str, ...] = ()

    def describe(self) -> dict[str, Any]:
        """JSON-able summary: size, physical pieces, embedding, closed, max_hops."""
        return {
            "size": self.size,
            "physical": list(self.physical),
            "embedding": self.embedding,
            "closed": self.closed,
            "max_hops": self.max_hops,
        }


DATA_AXIS = 2
"""The logical axis of the data-parallel replicas in a pod layout."""


@dataclass(frozen=True, eq=False)
class MeshMapping:
    """A logical R x C mesh placed on a topology (or on the abstract calibrated network when None); in a pod
    layout, D replicas of it with a third logical axis, the data axis.

    ``chip_grid`` is [R, C] (one replica) or [D, R, C]; ``axes`` has two entries, or three in a pod layout.
    """

    topology: PhysicalTopology | None
    shape: tuple[int, int]
    axes: tuple[AxisMapping, ...]
    chip_grid: np.ndarray = field(repr=False)
    replica: MeshMapping | None = field(default=None, repr=False)
    """In a pod layout: one replica's R x C mesh on its own sub-topology, whose GeMMs time the same."""
    _where_list: tuple[tuple[int, int, int], ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        rows, cols = self.shape
        grid = np.asarray(self.chip_grid, dtype=np.int64)
        data = grid.shape[0] if grid.ndim == 3 else 1
        chips = data * rows * cols
        if grid.shape[-2:] != (rows, cols) or grid.ndim not in (2, 3) or not np.array_equal(
                np.sort(grid, axis=None), np.arange(chips)):
            raise TpusimError(f"chip grid of mesh {rows}x{cols} is not a permutation of the chips 0..{chips - 1}")
        pod = grid.reshape(data, rows, cols)
        if len(self.axes) != (3 if grid.ndim == 3 else 2):
            raise TpusimError(f"a mesh with chip grid {grid.shape} needs {grid.ndim} logical axes, "
                              f"not {len(self.axes)}")
        where = np.empty((chips, 3), dtype=np.int64)
        where[pod.ravel(), 0] = np.tile(np.repeat(np.arange(rows), cols), data)
        where[pod.ravel(), 1] = np.tile(np.arange(cols), rows * data)
        where[pod.ravel(), 2] = np.repeat(np.arange(data), rows * cols)
        grid.setflags(write=False)
        object.__setattr__(self, "chip_grid", grid)
        # plain tuples: group_of runs once per collective call on the hot path
        object.__setattr__(self, "_where_list", tuple((int(i), int(j), int(d)) for i, j, d in where))

    @property
    def data(self) -> int:
        """Number of data-parallel replicas (1 without a data axis)."""
        return int(self.chip_grid.shape[0]) if self.chip_grid.ndim == 3 else 1

    @property
    def num_chips(self) -> int:
        """Number of chips (D * R * C)."""
        return self.data * self.shape[0] * self.shape[1]

    @property
    def tensor_mapping(self) -> MeshMapping:
        """The R x C mesh a tensor-parallel GeMM runs on: this one, or one replica of a pod layout."""
        return self.replica if self.replica is not None else self

    @property
    def layout(self) -> str:
        """``"RxC"``, or ``"DxRxC"`` in a pod layout."""
        mesh = f"{self.shape[0]}x{self.shape[1]}"
        return f"{self.data}x{mesh}" if len(self.axes) == 3 else mesh

    def size(self, axis: int) -> int:
        """Number of members of every group of logical ``axis``."""
        return self.axes[axis].size

    def chip(self, i: int, j: int, d: int = 0) -> int:
        """Chip id of logical chip (i, j) of replica ``d``."""
        row = _check_index(i, self.shape[0], "row index i")
        col = _check_index(j, self.shape[1], "column index j")
        if self.chip_grid.ndim == 2:
            _check_index(d, 1, "replica d")
            return int(self.chip_grid[row, col])
        return int(self.chip_grid[_check_index(d, self.data, "replica d"), row, col])

    def index_of(self, chip: int) -> tuple[int, ...]:
        """Where a chip's program runs: (i, j), or (i, j, d) in a pod layout (row, column, replica)."""
        i, j, d = self._where_list[_check_index(chip, self.num_chips, "chip")]
        return (i, j) if len(self.axes) == 2 else (i, j, d)

    def group_of(self, axis: int, chip: int) -> tuple[int, int]:
        """(group index, rank) of a chip on a logical axis: (d C + j, i) on axis 0, (d R + i, j) on axis 1,
        (i C + j, d) on the data axis."""
        if isinstance(axis, bool) or axis not in range(len(self.axes)):
            valid = "0 (size R) or 1 (size C)" + (", 2 (the data axis, size D)" if len(self.axes) == 3 else "")
            raise TopologyError(f"logical axis {axis!r} does not exist; valid: {valid}")
        i, j, d = self._where_list[_check_index(chip, self.num_chips, "chip")]
        if axis == 0:
            return (d * self.shape[1] + j, i)
        if axis == 1:
            return (d * self.shape[0] + i, j)
        return (i * self.shape[1] + j, d)

    def describe(self) -> dict[str, Any]:
        """JSON-able summary of the mesh, the topology and every axis."""
        summary = {
            "mesh": f"{self.shape[0]}x{self.shape[1]}",
            "topology": self.topology.name if self.topology is not None else "abstract",
            "axis0": self.axes[0].describe(),
            "axis1": self.axes[1].describe(),
        }
        if len(self.axes) == 3:
            summary["layout"] = self.layout
            summary["data"] = self.axes[DATA_AXIS].describe()
        return summary


def parse_mesh(text: str) -> tuple[int, int]:
    """(R, C) from ``"16x16"``; a single number ``"8"`` means an 8x1 mesh."""
    match = _MESH.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None or int(match.group(1)) < 1 or int(match.group(2) or 1) < 1:
        raise TopologyError(
            f"cannot parse mesh {text!r}; expected 'RxC' with whole numbers >= 1 (e.g. '16x16'), "
            "or one number N for an N x 1 mesh"
        )
    return int(match.group(1)), int(match.group(2) or 1)


def _check_shape(rows: int, cols: int) -> None:
    for what, value in (("rows", rows), ("columns", cols)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
            raise TopologyError(f"mesh {what} {value!r} must be an integer >= 1")


def _rings(topology: PhysicalTopology, groups: Sequence[np.ndarray], closed: bool) -> tuple[RingEmbedding, ...]:
    """One ring per group (chips in rank order), every group's routes found in one ``routes`` call."""
    members = [tuple(int(c) for c in chips) for chips in groups]
    ahead, behind = [], []
    for chips in members:
        size = len(chips)
        for r in range(size if closed else max(size - 1, 0)):
            ahead.append(chips[r])
            behind.append(chips[(r + 1) % size])
    fwd = topology.routes(np.array(ahead, dtype=np.int64), np.array(behind, dtype=np.int64))
    bwd = topology.routes(np.array(behind, dtype=np.int64), np.array(ahead, dtype=np.int64))
    rings, start = [], 0
    for chips in members:
        hops = len(chips) if closed else max(len(chips) - 1, 0)
        rings.append(RingEmbedding(members=chips, closed=closed, fwd_routes=tuple(fwd[start:start + hops]),
                                   bwd_routes=tuple(bwd[start:start + hops])))
        start += hops
    return tuple(rings)


def _embedding_name(topology: PhysicalTopology, pieces: tuple[AxisPiece, ...]) -> str:
    if not pieces:
        return "single"
    if not all(p.whole for p in pieces):
        return "split"
    if len(pieces) > 1:
        return "snake"
    return "wrapped ring" if pieces[0].is_cyclic(topology) else "line"


def _offsets(topology: PhysicalTopology, pieces: tuple[AxisPiece, ...]) -> np.ndarray:
    """Physical coordinate offsets [size, ndims] of each ring position of an axis, from its origin."""
    order = ring_order(
        [p.length for p in pieces],
        [p.is_cyclic(topology) for p in pieces],
        [p.stride * (p.length - 1) for p in pieces],
    )
    offsets = np.zeros((len(order), len(topology.dims)), dtype=np.int64)
    for k, piece in enumerate(pieces):
        offsets[:, piece.phys_axis] += piece.stride * np.array([point[k] for point in order], dtype=np.int64)
    return offsets


def map_mesh(topology: PhysicalTopology, rows: int, cols: int, axis_map: str | None = None) -> MeshMapping:
    """Place an R x C logical mesh on a topology; `axis_map` (e.g. ``"x*y,z"``) overrides the search."""
    pieces, chip_grid = mesh_layout(topology, rows, cols, axis_map)
    rows, cols = chip_grid.shape
    axes = (place_axis(topology, 0, pieces[0], [chip_grid[:, j] for j in range(cols)]),
            place_axis(topology, 1, pieces[1], [chip_grid[i, :] for i in range(rows)]))
    return MeshMapping(topology=topology, shape=(rows, cols), axes=axes, chip_grid=chip_grid)


def mesh_layout(topology: PhysicalTopology, rows: int, cols: int,
                axis_map: str | None = None) -> tuple[tuple[tuple[AxisPiece, ...], tuple[AxisPiece, ...]], np.ndarray]:
    """Where an R x C logical mesh goes, without its routes: each axis's pieces and the [R, C] chip grid
    (``map_mesh`` places both axes on them; a pod needs only its data axis's)."""
    _check_shape(rows, cols)
    rows, cols = int(rows), int(cols)
    if rows * cols != topology.num_chips:
        raise TopologyError(
            f"mesh '{rows}x{cols}' has {rows * cols} chips but topology {topology.name!r} has "
            f"{topology.num_chips}; choose R and C with R*C = {topology.num_chips}"
        )
    if axis_map is not None:
        pieces = parse_axis_map(axis_map, topology, rows, cols)
    else:
        found = choose_pieces(topology, rows, cols)
        if found is None:
            raise TopologyError(
                f"mesh '{rows}x{cols}' cannot be mapped onto topology {topology.name!r}: no assignment of "
                "whole physical axes, or of one axis split into equal blocks, gives those axis sizes",
                "choose another mesh shape, or give the pieces yourself with --axis-map (e.g. 'x*y,z')",
            )
        pieces = found
    offsets = (_offsets(topology, pieces[0]), _offsets(topology, pieces[1]))
    coords = offsets[0][:, None, :] + offsets[1][None, :, :]
    radix = np.cumprod((1, *topology.dims[:-1]), dtype=np.int64)
    return pieces, coords @ radix


def closed_ring(topology: PhysicalTopology, pieces: tuple[AxisPiece, ...]) -> bool:
    """Whether a logical axis made of ``pieces`` is a closed ring (a snake, or one wrapped piece)."""
    return len(pieces) > 1 or (len(pieces) == 1 and pieces[0].is_cyclic(topology))


def place_axis(topology: PhysicalTopology, axis: int, pieces: tuple[AxisPiece, ...],
               members: Sequence[np.ndarray]) -> AxisMapping:
    """Logical ``axis`` made of ``pieces`` (on ``topology``'s own axes), one ring per group of ``members`` (chips
    in rank order), with its routes."""
    closed = closed_ring(topology, pieces)
    groups = _rings(topology, members, closed)
    return AxisMapping(
        axis=axis,
        size=len(members[0]),
        pieces=pieces,
        physical=tuple(p.label(topology.axis_names) for p in pieces),
        embedding=_embedding_name(topology, pieces),
        closed=closed,
        max_hops=max((len(r) for g in groups for r in (*g.fwd_routes, *g.bwd_routes)), default=0),
        groups=groups,
    )


def abstract_mesh(rows: int, cols: int) -> MeshMapping:
    """The calibrated profiles' network: chip id = i*C + j; every group is a closed ring with no links."""
    _check_shape(rows, cols)
    rows, cols = int(rows), int(cols)
    chip_grid = np.arange(rows * cols, dtype=np.int64).reshape(rows, cols)

    def ring(members: np.ndarray) -> RingEmbedding:
        size = len(members)
        hops = size if size > 1 else 0
        return RingEmbedding(tuple(int(c) for c in members), size > 1, ((),) * hops, ((),) * hops)

    def axis_mapping(axis: int, groups: tuple[RingEmbedding, ...]) -> AxisMapping:
        size = (rows, cols)[axis]
        return AxisMapping(
            axis=axis,
            size=size,
            pieces=(),
            physical=(),
            embedding="abstract ring" if size > 1 else "single",
            closed=size > 1,
            max_hops=0,
            groups=groups,
        )

    axis0 = axis_mapping(0, tuple(ring(chip_grid[:, j]) for j in range(cols)))
    axis1 = axis_mapping(1, tuple(ring(chip_grid[i, :]) for i in range(rows)))
    return MeshMapping(topology=None, shape=(rows, cols), axes=(axis0, axis1), chip_grid=chip_grid)
