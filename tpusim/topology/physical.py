"""The physical ICI network: chips on a torus or mesh and the directed links between them.

Owns chip numbering (row-major with axis 0 fastest: ``chip = x + X*(y + Y*z)``), deterministic link
numbering, the networkx graph with one edge per directed ICI link (built, and networkx imported, on first use:
routing and link lookup need only the link arrays), and dimension-ordered routing. A twisted torus
(:mod:`tpusim.topology.twisted`) carries its twisted wraparound links as ordinary links and routes over them. It
knows nothing of TPU slice rules (:mod:`tpusim.topology.slices`) or logical meshes (:mod:`tpusim.topology.mapping`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from tpusim.errors import TopologyError
from tpusim.topology.twisted import Twist, reduce_coords, shortest_vectors, twisted_axes

if TYPE_CHECKING:
    import networkx as nx


def axis_names_for(ndims: int) -> tuple[str, ...]:
    """Names of the physical axes: x, y, z for up to three axes, else a0, a1, ..."""
    if ndims <= 3:
        return ("x", "y", "z")[:ndims]
    return tuple(f"a{k}" for k in range(ndims))


def _frozen(array: np.ndarray) -> np.ndarray:
    # Topologies are shared by every layer above; a read-only array turns an accidental write into an error.
    array.setflags(write=False)
    return array


@dataclass(frozen=True, eq=False)
class PhysicalTopology:
    """Chips on a (possibly wrapped) grid with one link id (and one graph edge) per directed ICI link.

    ``twist`` is None on a plain torus or mesh. On a twisted torus it holds, per axis, the offset a + crossing of
    that axis's wraparound adds to the other coordinates (docs/network.md#twisted-tori); its twisted links are
    ordinary entries of the link arrays, with their axis and sign.
    """

    name: str
    dims: tuple[int, ...]
    wrap: tuple[bool, ...]
    axis_names: tuple[str, ...]
    link_src: np.ndarray = field(repr=False)
    link_dst: np.ndarray = field(repr=False)
    link_axis: np.ndarray = field(repr=False)
    link_sign: np.ndarray = field(repr=False)
    twist: Twist | None = None
    _coords: np.ndarray = field(init=False, repr=False)
    _radix: np.ndarray = field(init=False, repr=False)
    _hop: np.ndarray = field(init=False, repr=False)
    _graph: nx.DiGraph[int] | None = field(default=None, init=False, repr=False)
    _shortest: tuple[tuple[int, ...], ...] | None = field(default=None, init=False, repr=False)
    # (link_src, link_dst) as Python ints, for per-message lookups in scalar code (collectives.executor)
    link_ends: tuple[tuple[int, ...], tuple[int, ...]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        ndims = len(self.dims)
        if not (len(self.wrap) == len(self.axis_names) == ndims):
            raise TopologyError(
                f"topology {self.name!r}: dims {self.dims}, wrap {self.wrap} and axis names "
                f"{self.axis_names} must have the same length"
            )
        if self.twist is not None:
            self._check_twist(self.twist)
        num_links = len(self.link_src)
        if not (len(self.link_dst) == len(self.link_axis) == len(self.link_sign) == num_links):
            raise TopologyError(f"topology {self.name!r}: link arrays must all have the same length")
        chips = math.prod(self.dims)
        coords = np.stack(np.unravel_index(np.arange(chips), self.dims, order="F"), axis=1)
        radix = np.cumprod((1, *self.dims[:-1]), dtype=np.int64)
        # hop[chip, axis, 0] is the +1 link out of chip along axis, hop[..., 1] the -1 link; -1 if none.
        hop = np.full((chips, ndims, 2), -1, dtype=np.int64)
        hop[self.link_src, self.link_axis, (self.link_sign < 0).astype(np.int64)] = np.arange(num_links)
        object.__setattr__(self, "_coords", _frozen(coords.astype(np.int64)))
        object.__setattr__(self, "_radix", _frozen(radix))
        object.__setattr__(self, "_hop", _frozen(hop))
        object.__setattr__(self, "link_ends", (tuple(self.link_src.tolist()), tuple(self.link_dst.tolist())))

    def _check_twist(self, twist: Twist) -> None:
        ndims = len(self.dims)
        twisted = twisted_axes(twist) if len(twist) == ndims else ()
        shifted = {other for axis in twisted for other in range(ndims) if twist[axis][other]}
        if (len(twist) != ndims or any(len(offsets) != ndims for offsets in twist) or not twisted
                or any(not self.wrap[axis] or twist[axis][axis] for axis in twisted)
                or any(not self.wrap[other] or other in twisted for other in shifted)):
            # reduce_coords relies on this: a twist shifts only plainly wrapping axes
            raise TopologyError(
                f"topology {self.name!r}: twist {twist} must give, per axis of {self.dims}, one offset per axis; "
                "only wrapped axes may be twisted, and only onto other wrapped axes that are not twisted"
            )

    @property
    def twisted(self) -> bool:
        """Whether some wraparound links land shifted (a twisted torus)."""
        return self.twist is not None

    def plain_wrap(self, axis: int) -> bool:
        """Whether ``axis`` wraps and its wraparound links close each line of the axis onto itself (not twisted)."""
        axis = self._check_axis(axis)
        return self.wrap[axis] and (self.twist is None or not any(self.twist[axis]))

    @property
    def graph(self) -> nx.DiGraph[int]:
        """The directed graph: one node per chip (with its ``coord``), one edge per link (with its ``link`` id,
        ``axis`` and ``sign``); built on first use."""
        if self._graph is not None:
            return self._graph
        import networkx as nx

        graph: nx.DiGraph[int] = nx.DiGraph(name=self.name)
        graph.add_nodes_from((chip, {"coord": self.coord(chip)}) for chip in range(self.num_chips))
        graph.add_edges_from(
            (int(s), int(d), {"link": link, "axis": int(a), "sign": int(g)})
            for link, (s, d, a, g) in enumerate(
                zip(self.link_src, self.link_dst, self.link_axis, self.link_sign, strict=True))
        )
        object.__setattr__(self, "_graph", graph)
        return graph

    @property
    def num_chips(self) -> int:
        """Number of chips."""
        return len(self._coords)

    @property
    def coords(self) -> np.ndarray:
        """[chips, axes]: every chip's physical coordinates, read-only (row ``chip`` is ``coord(chip)``)."""
        return self._coords

    @property
    def radix(self) -> np.ndarray:
        """[axes]: the chip-id stride of each axis, read-only (``chip = coords @ radix``)."""
        return self._radix

    @property
    def num_links(self) -> int:
        """Number of directed ICI links."""
        return len(self.link_src)

    def _check_chips(self, *arrays: np.ndarray) -> None:
        """``_check_chip`` of every chip of ``arrays`` at once: the first one outside the topology is refused."""
        for chips in arrays:
            bad = chips[(chips < 0) | (chips >= self.num_chips)]
            if bad.size:
                self._check_chip(int(bad[0]))

    def _check_chip(self, chip: int) -> int:
        if isinstance(chip, bool) or not isinstance(chip, int | np.integer) or not 0 <= chip < self.num_chips:
            raise TopologyError(
                f"chip {chip!r} is not in topology {self.name!r}; valid chip ids are 0..{self.num_chips - 1}"
            )
        return int(chip)

    def coord(self, chip: int) -> tuple[int, ...]:
        """Physical coordinates of a chip."""
        return tuple(int(c) for c in self._coords[self._check_chip(chip)])

    def chip_at(self, coord: Sequence[int]) -> int:
        """The chip at a coordinate; coordinates are taken modulo the size only along wrapped axes.

        On a twisted torus a coordinate outside the grid is the chip that displacement reaches from chip 0 over the
        links, so ``chip_at(coord(c) + e_a)`` is ``neighbor(c, a, +1)`` there too.
        """
        values = tuple(int(c) for c in coord)
        if len(values) != len(self.dims):
            raise TopologyError(
                f"coordinate {values!r} has {len(values)} axes but topology {self.name!r} has "
                f"{len(self.dims)} ({', '.join(self.axis_names)})"
            )
        if self.twist is not None:
            return int(reduce_coords(np.array(values), self.dims, self.twist) @ self._radix)
        fixed = []
        for value, size, wraps, axis_name in zip(values, self.dims, self.wrap, self.axis_names, strict=True):
            if wraps:
                value %= size
            elif not 0 <= value < size:
                raise TopologyError(
                    f"coordinate {values!r} is outside topology {self.name!r}: {axis_name} must be in "
                    f"0..{size - 1} (axis {axis_name} has no wraparound)"
                )
            fixed.append(value)
        return int(np.dot(fixed, self._radix))

    def link_id(self, src: int, dst: int) -> int:
        """Id of the directed link src -> dst."""
        source, target = self._check_chip(src), self._check_chip(dst)
        # at most one link joins two chips: wraparound exists only on axes of size >= 3 (build_topology)
        for link in self._hop[source].ravel():
            if link >= 0 and int(self.link_dst[link]) == target:
                return int(link)
        raise TopologyError(
            f"chips {src!r} and {dst!r} are not adjacent in {self.name!r}; no ICI link joins them"
        )

    def _check_axis(self, axis: int) -> int:
        if isinstance(axis, bool) or not isinstance(axis, int | np.integer) or not 0 <= axis < len(self.dims):
            raise TopologyError(
                f"axis {axis!r} is not an axis of {self.name!r}; valid: 0..{len(self.dims) - 1}"
            )
        return int(axis)

    def neighbor(self, chip: int, axis: int, sign: int) -> int | None:
        """The chip one link away along an axis (sign +1 or -1), or None where no link leaves."""
        if sign not in (1, -1):
            raise TopologyError(f"sign {sign!r} must be +1 or -1")
        link = self._hop[self._check_chip(chip), self._check_axis(axis), 0 if sign > 0 else 1]
        return None if link < 0 else int(self.link_dst[link])

    def route(self, src: int, dst: int) -> tuple[int, ...]:
        """Link ids of the dimension-ordered shortest path src -> dst.

        Axes are resolved in order 0, 1, ...; along a wrapped axis the shorter way round is taken, and an
        exact tie goes in the + direction. On a twisted torus the path is a shortest one over the real links:
        the displacement vector ``shortest_vectors`` picks (of the shortest, the lexicographically greatest: + before
        - on axis 0, then axis 1, ...), walked axis 0 first, then 1, ... (docs/network.md#twisted-tori).
        """
        if self.twist is not None:
            return self._twisted_route(self._check_chip(src), self._check_chip(dst))
        chip = self._check_chip(src)
        target = self._coords[self._check_chip(dst)]
        links: list[int] = []
        for axis, size in enumerate(self.dims):
            here = int(self._coords[chip, axis])
            there = int(target[axis])
            if here == there:
                continue
            if self.wrap[axis]:
                ahead = (there - here) % size
                sign, steps = (1, ahead) if ahead <= size - ahead else (-1, size - ahead)
            else:
                sign, steps = (1, there - here) if there > here else (-1, here - there)
            slot = 0 if sign > 0 else 1
            for _ in range(steps):
                link = int(self._hop[chip, axis, slot])
                links.append(link)
                chip = int(self.link_dst[link])
        return tuple(links)

    def _one_hop(self, sources: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(whether, link) per pair: the first link, in axis and then + / - order, from ``sources[i]`` that ends
        at ``targets[i]`` (none from a chip to itself)."""
        self._check_chips(sources, targets)
        hops = self._hop[sources].reshape(len(sources), -1)  # [pairs, axes x (+, -)]
        ends = np.where(hops >= 0, self.link_dst[np.maximum(hops, 0)], -1)
        matches = (ends == targets[:, None]) & (sources != targets)[:, None]
        first = matches.argmax(axis=1)
        rows = np.arange(len(sources))
        return matches[rows, first], hops[rows, first]

    def link_ids(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """``link_id`` of every pair (``src[i]``, ``dst[i]``), as an array of src's shape."""
        sources = np.asarray(src, dtype=np.int64)
        targets = np.asarray(dst, dtype=np.int64)
        if not self.num_links or not sources.size:
            return np.array([self.link_id(int(a), int(b)) for a, b in zip(sources.ravel(), targets.ravel(),
                                                                             strict=True)],
                            dtype=np.int64).reshape(sources.shape)
        found, links = self._one_hop(sources.ravel(), targets.ravel())
        if not found.all():
            apart = int(np.argmin(found))
            self.link_id(int(sources.ravel()[apart]), int(targets.ravel()[apart]))  # raises, naming the pair
        return np.asarray(links, dtype=np.int64).reshape(sources.shape)

    def routes(self, src: np.ndarray, dst: np.ndarray) -> list[tuple[int, ...]]:
        """``route`` of every pair (``src[i]``, ``dst[i]``). A ring's neighbours are mostly one link apart, and
        those are read off the link table for all pairs at once (``_one_hop``: the link ``route`` takes); the
        other pairs are routed one by one."""
        sources = np.asarray(src, dtype=np.int64).ravel()
        targets = np.asarray(dst, dtype=np.int64).ravel()
        if self.twist is not None or not sources.size or not self.num_links:
            return [self.route(int(a), int(b)) for a, b in zip(sources, targets, strict=True)]
        self._check_chips(sources, targets)
        return self._dimension_ordered(sources, targets)

    def _dimension_ordered(self, sources: np.ndarray, targets: np.ndarray) -> list[tuple[int, ...]]:
        """``route`` of every pair, walked for all pairs at once: axis by axis, one step of every pair that still
        has one on that axis at a time (the same rule as ``route``, so the same links)."""
        chip = sources.copy()
        goal = self._coords[targets]
        pairs: list[np.ndarray] = []
        links: list[np.ndarray] = []
        for axis, size in enumerate(self.dims):
            here, there = self._coords[chip, axis], goal[:, axis]
            if self.wrap[axis]:
                ahead = (there - here) % size
                forward = ahead <= size - ahead  # an exact tie goes the + way
                steps = np.where(forward, ahead, size - ahead)
            else:
                forward = there > here
                steps = np.abs(there - here)
            slot = np.where(forward, 0, 1)
            for step in range(int(steps.max(initial=0))):
                moving = np.flatnonzero(steps > step)
                hop = self._hop[chip[moving], axis, slot[moving]]
                pairs.append(moving)
                links.append(hop)
                chip[moving] = self.link_dst[hop]
        if not pairs:
            return [() for _ in range(len(sources))]
        owner = np.concatenate(pairs)
        order = np.argsort(owner, kind="stable")  # each pair's links in the order walked
        walked = np.concatenate(links)[order].tolist()
        ends = np.cumsum(np.bincount(owner, minlength=len(sources))).tolist()
        found, start = [], 0
        for end in ends:
            found.append(tuple(walked[start:end]))
            start = end
        return found

    def _twisted_route(self, chip: int, target: int) -> tuple[int, ...]:
        shortest = self._shortest
        if shortest is None:
            shortest = shortest_vectors(self.num_chips, self.link_src, self.link_dst, self.link_axis,
                                        self.link_sign, len(self.dims))
            object.__setattr__(self, "_shortest", shortest)
        assert self.twist is not None
        # every link is a unit step of the torus's group, so src -> dst is a translate of chip 0 -> (dst - src)
        offset = reduce_coords(self._coords[target] - self._coords[chip], self.dims, self.twist)
        links: list[int] = []
        for axis, steps in enumerate(shortest[int(offset @ self._radix)]):
            slot = 0 if steps > 0 else 1
            for _ in range(abs(steps)):
                link = int(self._hop[chip, axis, slot])
                links.append(link)
                chip = int(self.link_dst[link])
        return tuple(links)


def build_topology(name: str, dims: Sequence[int], wrap: Sequence[bool],
                   twist: Twist | None = None) -> PhysicalTopology:
    """Build a topology from validated sizes and requested wraparound (``twist``: see :class:`PhysicalTopology`).

    Wraparound only exists on axes of size >= 3: a size-2 axis already has its one link each way
    between its two chips, and a size-1 axis has no links at all.
    """
    sizes = tuple(int(d) for d in dims)
    wraps = tuple(bool(w) and size >= 3 for w, size in zip(wrap, sizes, strict=True))
    chips = math.prod(sizes)
    radix = np.cumprod((1, *sizes[:-1]), dtype=np.int64)
    coords = np.stack(np.unravel_index(np.arange(chips), sizes, order="F"), axis=1)
    ids = np.arange(chips, dtype=np.int64)
    # [chips, axes, (+, -)]: where each chip's link along each axis and direction goes, -1 where none leaves;
    # flattened in that order, so link ids run chip by chip, axis by axis, + before -
    targets = np.full((chips, len(sizes), 2), -1, dtype=np.int64)
    for axis, size in enumerate(sizes):
        for slot, sign in enumerate((1, -1)):
            there = coords[:, axis] + sign
            inside = (there >= 0) & (there < size)
            targets[inside, axis, slot] = ids[inside] + sign * radix[axis]
            if wraps[axis]:
                outside = np.flatnonzero(~inside)
                if twist is None:
                    targets[outside, axis, slot] = ids[outside] + ((there[outside] % size) - coords[outside, axis]) \
                        * radix[axis]
                else:
                    step = np.zeros(len(sizes), dtype=np.int64)
                    step[axis] = sign
                    targets[outside, axis, slot] = reduce_coords(coords[outside] + step, sizes, twist) @ radix
    flat = targets.reshape(-1)
    present = flat >= 0
    src = np.repeat(ids, 2 * len(sizes))[present]
    dst = flat[present]
    axes = np.tile(np.repeat(np.arange(len(sizes), dtype=np.int64), 2), chips)[present]
    signs = np.tile(np.array([1, -1], dtype=np.int64), chips * len(sizes))[present]
    return PhysicalTopology(
        name=name,
        dims=sizes,
        wrap=wraps,
        axis_names=axis_names_for(len(sizes)),
        link_src=_frozen(np.array(src, dtype=np.int64)),
        link_dst=_frozen(np.array(dst, dtype=np.int64)),
        link_axis=_frozen(np.array(axes, dtype=np.int64)),
        link_sign=_frozen(np.array(signs, dtype=np.int64)),
        twist=twist,
    )
