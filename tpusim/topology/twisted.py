"""Twisted tori: which shapes may be twisted, where a twisted wraparound link lands, and shortest routes over them.

The wiring rule (docs/network.md#twisted-tori): a slice whose sides are k x k x 2k or k x 2k x 2k (in any axis
order) may close its wraparound links with a twist. Every wraparound link of a short axis (side k) lands shifted by
k along every long axis (side 2k); the long axes wrap plainly. On 4x4x8 (x, y short, z long) the +x link out of
(3, y, z) enters (0, y, (z + 4) mod 8) and the -x link out of (0, y, z) enters (3, y, (z + 4) mod 8). The shift is
Camara et al.'s rectangular twisted torus (IEEE TPDS 2010), applied per short axis; the TPU v4 paper and the Cloud
TPU documentation give the shapes but not the per-link wiring, so the offsets are an ASSUMPTION.

A twisted torus is still a Cayley graph of an abelian group: chip coordinates modulo the lattice spanned by
``size * e_a - twist[a]`` (each axis a) are the group, and every link is one unit step +-e_a. So the shortest
paths between any two chips are translates of those from chip 0, and a shortest route is a shortest displacement
vector walked one axis after the other. This module holds the rule and that arithmetic; it builds no topology.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Twist = tuple[tuple[int, ...], ...]
"""Per axis a, the offset (one entry per axis) a + crossing of a's wraparound adds to the coordinates; a - crossing
subtracts it. All zero for an axis that wraps plainly."""

TWISTED_AXES = 3
TWIST_RULE = "sides k x k x 2k or k x 2k x 2k in any order"


def twist_offsets(dims: Sequence[int], unit: int) -> Twist | None:
    """The twist of a k x k x 2k or k x 2k x 2k shape with k a multiple of ``unit``; None for any other shape.

    Each short axis's wraparound shifts by k along every long axis (the module docstring's ASSUMPTION).
    """
    sides = tuple(int(side) for side in dims)
    if len(sides) != TWISTED_AXES or unit < 1:
        return None
    short = min(sides)
    if short % unit or any(side not in (short, 2 * short) for side in sides) or sides.count(short) == len(sides):
        return None
    longs = {axis for axis, side in enumerate(sides) if side == 2 * short}
    return tuple(
        tuple(short if axis not in longs and other in longs else 0 for other in range(len(sides)))
        for axis in range(len(sides))
    )


def twisted_axes(twist: Twist) -> tuple[int, ...]:
    """The axes whose wraparound is twisted."""
    return tuple(axis for axis, offsets in enumerate(twist) if any(offsets))


def reduce_coords(displacement: np.ndarray, dims: Sequence[int], twist: Twist) -> np.ndarray:
    """Coordinates (in 0..size-1 per axis) of the chips that displacements [..., axes] of any size reach from the
    origin of a twisted torus, crossing twisted wraparounds as they go."""
    coords = np.array(displacement, dtype=np.int64)
    sizes = np.asarray(dims, dtype=np.int64)
    offsets = np.asarray(twist, dtype=np.int64)
    # a twist only shifts plainly wrapping axes (checked by PhysicalTopology), so the order of the axes is free
    for axis in twisted_axes(twist):
        turns = np.floor_divide(coords[..., axis], sizes[axis])
        coords[..., axis] -= turns * sizes[axis]
        coords += turns[..., None] * offsets[axis]
    return np.asarray(np.mod(coords, sizes))


def shortest_vectors(num_chips: int, link_src: np.ndarray, link_dst: np.ndarray, link_axis: np.ndarray,
                     link_sign: np.ndarray, ndims: int) -> tuple[tuple[int, ...], ...]:
    """Per chip, the displacement vector of its shortest routes from chip 0: among the shortest, the
    lexicographically greatest (+ before - on axis 0, then on axis 1, ...), which on a plain torus is the usual
    "shorter way round, an exact tie goes +" per axis.

    Breadth-first from chip 0 over the links. The greatest vector to a chip is the greatest over its predecessors
    one level closer of (their greatest vector + the step), because adding a step keeps the order.
    """
    order = np.argsort(link_src, kind="stable")
    starts = np.searchsorted(link_src[order], np.arange(num_chips + 1))
    steps = [(int(link_dst[link]), int(link_axis[link]), int(link_sign[link])) for link in order]
    best: list[tuple[int, ...] | None] = [None] * num_chips
    best[0] = (0,) * ndims
    frontier = [0]
    while frontier:
        found: dict[int, tuple[int, ...]] = {}
        for chip in frontier:
            base = best[chip]
            assert base is not None
            for target, axis, sign in steps[starts[chip]:starts[chip + 1]]:
                if best[target] is not None:
                    continue
                vector = (*base[:axis], base[axis] + sign, *base[axis + 1:])
                known = found.get(target)
                if known is None or vector > known:
                    found[target] = vector
        for target, vector in found.items():
            best[target] = vector
        frontier = sorted(found)
    if any(vector is None for vector in best):
        raise AssertionError("a twisted torus is connected; some chip was not reached from chip 0")
    return tuple(vector for vector in best if vector is not None)
