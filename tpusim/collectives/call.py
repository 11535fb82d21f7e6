"""What every member of one group's collective agrees on, and the shape of the ring it runs on.

A ``CollectiveCall`` names the operation, the logical axis, the bytes of each caller's input, the root or
offset, the ring variant and the chunking. Members whose calls differ have a schedule bug. ``RingShape`` is
what the closed forms need to know of one group: its size, whether it closes, and how many physical hops
its longest neighbour-to-neighbour route takes.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpusim.config import LaunchOverheads
from tpusim.vocabulary import CollectiveOp, Ring

__all__ = ["CollectiveCall", "PhysicalCosts", "RingShape"]


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
    chunks: int = 0  # pipelined chunks per message; 0: the operation's choice (1 on rings, optimal on chains)
    variant: str = ""  # a schedule the physical network chose (e.g. "scatter-gather" for a broadcast)
    background: bool = False  # a prefetch: its transfers use only what on-demand traffic leaves of each link


@dataclass(frozen=True)
class PhysicalCosts:
    """What the physical closed forms charge (docs/network.md#physical-closed-forms)."""

    bandwidth: float  # one direction of one link, B/s
    latency: float  # per hop on the wire, pipelined after serialization
    step: float  # software handshake per transfer, holding the link
    launch: LaunchOverheads  # per collective, holding nothing
    reduce_per_byte: float  # seconds per byte a reduction adds at its destination
    max_chunks: int  # most chunks a pipelined chain is cut into

    def transfer(self, nbytes: float) -> float:
        """How long one transfer of ``nbytes`` holds its link."""
        return nbytes / self.bandwidth + self.step


@dataclass(frozen=True)
class RingShape:
    """One group of a logical axis as the closed forms see it."""

    size: int
    closed: bool
    max_hops: int = 1  # physical hops of the longest route between ring neighbours
