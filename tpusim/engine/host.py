"""Each chip's link to host memory: two directed resources, to the host and from it (docs/workloads.md#memory).

A copy of ``b`` bytes that becomes ready at ``now`` starts when its direction of the chip's link is free and holds
it for ``b / bandwidth``, ``bandwidth`` being one direction of the link (PCIe carries as much again the other way,
so a copy out and a copy in proceed together). Reservations are made at the simulated time the data is ready, so
concurrent copies queue first-come first-served, as ICI transfers do on their links (``links``). The copy is DMA:
it reads HBM (to the host) or writes it (from the host) over its span, charged where the simulation shares HBM.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

__all__ = ["HostDirection", "HostLinks"]


class HostDirection(Enum):
    """The two directions of a chip's host link."""

    TO_HOST = "to-host"
    FROM_HOST = "from-host"


@dataclass
class _Direction:
    free_at: float = 0.0
    bytes: float = 0.0
    busy: float = 0.0


@dataclass
class HostLinks:
    """The host links of the chips of one simulation, created per chip on first use; ``bandwidth`` is one
    direction of one chip's link, in B/s."""

    bandwidth: float
    _state: dict[tuple[int, HostDirection], _Direction] = field(default_factory=dict)

    def reserve(self, chip: int, direction: HostDirection, nbytes: float, now: float) -> tuple[float, float]:
        """Queue a copy of ``nbytes`` ready at ``now`` on ``chip``'s link in ``direction``; its (start, end)."""
        state = self._state.setdefault((chip, direction), _Direction())
        start = max(state.free_at, now)
        end = start + nbytes / self.bandwidth
        state.free_at = end
        state.bytes += nbytes
        state.busy += end - start
        return start, end

    def busy(self, chip: int, direction: HostDirection) -> float:
        """Seconds ``chip``'s link in ``direction`` has been held."""
        state = self._state.get((chip, direction))
        return state.busy if state is not None else 0.0

    def bytes(self, chip: int, direction: HostDirection) -> float:
        """Bytes ``chip``'s link in ``direction`` has carried."""
        state = self._state.get((chip, direction))
        return state.bytes if state is not None else 0.0
