"""What every member of one group's collective agrees on, and the shape of the ring it runs on.

A ``CollectiveCall`` names the operation, the logical axis, the bytes of each caller's input, the root or
offset, the ring variant and the chunking. Members whose calls differ have a schedule bug. ``RingShape`` is
what the closed forms need to know of one group: its size, whether it closes, and how many physical hops
its longest neighbour-to-neighbour route takes.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpusim.vocabulary import CollectiveOp, Ring

__all__ = ["CollectiveCall", "RingShape"]


@dataclass(frozen=True)
class CollectiveCall:
    """What every member of one group's collective agrees on."""

    op: CollectiveOp
    axis: int
    nbytes: int  # bytes of the caller's input tensor
    dim: int = 0  # tensor dimension gathered, scattered or split
    root: int = 0  # broadcast / reduce root; send-recv source
    offset: int = 0  # shift: data moves from rank r to rank r + offset; send-recv: destination rank
    ring: Ring = Ring.BIDIRECTIONAL
    chunks: int = 1


@dataclass(frozen=True)
class RingShape:
    """One group of a logical axis as the closed forms see it."""

    size: int
    closed: bool
    max_hops: int = 1  # physical hops of the longest route between ring neighbours
