"""A chip as the engine sees it: an MXU that runs one GeMM at a time, and its accounting.

DMA engines move data over the links independently of the MXU (see ``links``), which is what lets
communication overlap compute. The MXU is a first-come first-served resource kept as a next-free time:
work issued at ``now`` starts when the MXU is free. A ``slowdown`` factor models a straggler chip.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Chip:
    """One chip's compute state; ``id`` is the physical chip id (or the logical one on abstract networks)."""

    id: int
    slowdown: float = 1.0
    mxu_free_at: float = 0.0
    mxu_busy: float = 0.0
    hbm_stall: float = 0.0  # seconds ops ran longer because collective DMA shared HBM (module ``hbm``)
    flops: float = 0.0
    spans: list[tuple[float, float]] = field(default_factory=list)

    def reserve_mxu(self, now: float, duration: float, flops: float = 0.0) -> tuple[float, float]:
        """Queue ``duration`` seconds of MXU work issued at ``now``; return (start, end)."""
        start = max(now, self.mxu_free_at)
        end = start + duration * self.slowdown
        self.ran(start, end, flops)
        return start, end

    def ran(self, start: float, end: float, flops: float = 0.0) -> None:
        """Account MXU work that ran from ``start`` to ``end`` (however its end was decided)."""
        self.mxu_free_at = end
        self.mxu_busy += end - start
        self.flops += flops
        self.spans.append((start, end))
