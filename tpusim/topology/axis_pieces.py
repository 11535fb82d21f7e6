"""Which physical axes (or parts of one) make up each logical mesh axis.

Owns :class:`AxisPiece`, the automatic search that assigns physical axes to the two logical axes, and
the parser of user overrides such as ``"x*y,z"`` or ``"x*y[0:4],y[::4]*z"``. Ring orders and routes are
built from these pieces by :mod:`tpusim.topology.mapping`.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from tpusim.errors import TopologyError
from tpusim.topology.physical import PhysicalTopology

AxisPieces = tuple[tuple["AxisPiece", ...], tuple["AxisPiece", ...]]

_TOKEN = re.compile(r"(?P<name>[A-Za-z]\w*)(?:\[(?:0:(?P<segment>\d+)|::(?P<block>\d+))\])?")
_SYNTAX = (
    "write each logical axis as physical axes joined by '*', axis 0 first, e.g. 'x*y,z'; '1' for an empty "
    "axis; 'y[0:4]' and 'y[::4]' for the two parts of a split axis"
)


@dataclass(frozen=True)
class AxisPiece:
    """One physical axis, or one part of a split physical axis, used by a logical axis.

    A whole axis has stride 1 and its full length. A split axis of length L in blocks of b chips gives a
    segment (length b, stride 1: neighbours one hop apart, never wrapped) and a block index (length L/b,
    stride b: neighbouring blocks b hops apart, wrapped if the physical axis is).
    """

    phys_axis: int
    length: int
    stride: int
    whole: bool

    def label(self, axis_names: Sequence[str]) -> str:
        """``"y"`` for a whole axis, ``"y[0:4]"`` for a segment, ``"y[::4]"`` for a block index."""
        name = axis_names[self.phys_axis]
        if self.whole:
            return name
        return f"{name}[0:{self.length}]" if self.stride == 1 else f"{name}[::{self.stride}]"

    def is_cyclic(self, topology: PhysicalTopology) -> bool:
        """Whether index length-1 is one piece step (via the wrap links) from index 0."""
        # A segment never wraps: its ends are not adjacent even when the physical axis is. A twisted wraparound
        # lands on another line of the axis, so the piece's ends are several hops apart (docs/network.md#twisted-tori).
        return topology.plain_wrap(self.phys_axis) and self.length >= 3 and (self.whole or self.stride > 1)


def _best_assignment(
    pieces: Sequence[AxisPiece],
    shape: tuple[int, int],
    topology: PhysicalTopology,
    apart: tuple[int, int] | None,
) -> AxisPieces | None:
    """The preferred split of `pieces` into (axis 0, axis 1) with products `shape`, or None.

    Preference: axis 1 is one whole physical axis; then more wrapped pieces; then the lexicographically
    smallest assignment (piece -> logical axis) in physical axis order.
    """
    best: tuple[tuple[int, int, tuple[int, ...]], AxisPieces] | None = None
    for assign in itertools.product((0, 1), repeat=len(pieces)):
        if apart is not None and assign[apart[0]] == assign[apart[1]]:
            continue
        groups = (
            tuple(p for p, a in zip(pieces, assign, strict=True) if a == 0),
            tuple(p for p, a in zip(pieces, assign, strict=True) if a == 1),
        )
        if (math.prod(p.length for p in groups[0]), math.prod(p.length for p in groups[1])) != shape:
            continue
        single_last = len(groups[1]) == 1 and groups[1][0].whole
        key = (0 if single_last else 1, -sum(p.is_cyclic(topology) for p in pieces), assign)
        if best is None or key < best[0]:
            best = (key, groups)
    return None if best is None else best[1]


def choose_pieces(topology: PhysicalTopology, rows: int, cols: int) -> AxisPieces | None:
    """Pieces of logical axes 0 and 1 for an R x C mesh, or None if no whole or single-split assignment fits.

    Whole physical axes are used whenever some assignment works. Only otherwise one physical axis of
    length L is split into blocks of b (1 < b < L, b | L), smallest b first, then lowest axis; the segment
    and the block index go to different logical axes (together they would just be the whole axis).
    """
    shape = (rows, cols)
    used_axes = [axis for axis, size in enumerate(topology.dims) if size > 1]
    whole = [AxisPiece(axis, topology.dims[axis], 1, True) for axis in used_axes]
    found = _best_assignment(whole, shape, topology, None)
    if found is not None:
        return found
    splits = sorted(
        (block, axis)
        for axis in used_axes
        for block in range(2, topology.dims[axis])
        if topology.dims[axis] % block == 0
    )
    for block, axis in splits:
        pieces: list[AxisPiece] = []
        for piece in whole:
            if piece.phys_axis == axis:
                segment_at = len(pieces)
                pieces.append(AxisPiece(axis, block, 1, False))
                pieces.append(AxisPiece(axis, piece.length // block, block, False))
            else:
                pieces.append(piece)
        found = _best_assignment(pieces, shape, topology, (segment_at, segment_at + 1))
        if found is not None:
            return found
    return None


def parse_axis_map(text: str, topology: PhysicalTopology, rows: int, cols: int) -> AxisPieces:
    """Pieces from a user's axis map: ``"x*y,z"``; ``"x*y*z,1"``; ``"x*y[0:4],y[::4]*z"``.

    Every physical axis of size > 1 must appear exactly once (or split, as one segment and the matching
    block index), and the products must equal (rows, cols). Size-1 axes may be named; they add nothing.
    """
    shown = f"--axis-map {text!r}"
    if not isinstance(text, str):
        raise TopologyError(f"{shown} is not text; {_SYNTAX}")
    parts = text.split(",")
    if len(parts) != 2:
        raise TopologyError(f"{shown} must have exactly two parts separated by one comma; {_SYNTAX}")
    # per physical axis: which forms were used ("whole", "segment", "block") and their block length
    used: dict[int, dict[str, int]] = {}
    result: list[tuple[AxisPiece, ...]] = []
    for part in parts:
        if part.strip() == "1":
            result.append(())
            continue
        pieces: list[AxisPiece] = []
        for raw in part.split("*"):
            token = raw.strip()
            match = _TOKEN.fullmatch(token)
            if match is None:
                raise TopologyError(f"{shown}: cannot parse {token!r}; {_SYNTAX}")
            name = match.group("name")
            if name not in topology.axis_names:
                raise TopologyError(
                    f"{shown} names unknown axis {name!r}; topology {topology.name!r} has axes "
                    f"{', '.join(topology.axis_names)}"
                )
            axis = topology.axis_names.index(name)
            size = topology.dims[axis]
            forms = used.setdefault(axis, {})
            form = "segment" if match.group("segment") else "block" if match.group("block") else "whole"
            if form in forms or "whole" in forms or (form == "whole" and forms):
                raise TopologyError(f"{shown} uses physical axis {name} more than once")
            if form == "whole":
                forms[form] = size
                if size > 1:
                    pieces.append(AxisPiece(axis, size, 1, True))
                continue
            block = int(match.group(form))
            if not (1 < block < size and size % block == 0):
                raise TopologyError(
                    f"{shown}: {token!r} needs a block length b with 1 < b < {size} that divides {size} "
                    f"(axis {name} has {size} chips)"
                )
            forms[form] = block
            if form == "segment":
                pieces.append(AxisPiece(axis, block, 1, False))
            else:
                pieces.append(AxisPiece(axis, size // block, block, False))
        result.append(tuple(pieces))
    for axis, size in enumerate(topology.dims):
        name = topology.axis_names[axis]
        forms = used.get(axis, {})
        if size > 1 and not forms:
            raise TopologyError(f"{shown} does not cover physical axis {name} (size {size}); {_SYNTAX}")
        if "whole" in forms or not forms:
            continue
        if set(forms) != {"segment", "block"} or forms["segment"] != forms["block"]:
            block = forms.get("segment", forms.get("block", 0))
            raise TopologyError(
                f"{shown} splits physical axis {name} but does not use both {name}[0:{block}] "
                f"and {name}[::{block}]"
            )
    axis0, axis1 = result
    got = (math.prod(p.length for p in axis0), math.prod(p.length for p in axis1))
    if got != (rows, cols):
        raise TopologyError(
            f"{shown} gives a {got[0]}x{got[1]} mesh but the requested mesh is {rows}x{cols}"
        )
    return axis0, axis1
