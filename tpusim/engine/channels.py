"""Channels of the abstract calibrated network: one collective at a time per axis group.

In the artifact-compatible mode each logical axis of each group is one abstract ring. A collective
occupies its channels for its whole duration; a one-directional send occupies only its direction, so two
opposite shifts (Wang's halves) run together while an all-gather excludes both. Reservations are next-free
times taken at the simulated instant the operation is issued, which is first-come first-served.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence


class ChannelArray:
    """Next-free time and busy time per channel key."""

    def __init__(self) -> None:
        self.free_at: dict[Hashable, float] = {}
        self.busy: dict[Hashable, float] = {}

    def reserve(self, keys: Sequence[Hashable], now: float, duration: float) -> tuple[float, float]:
        """Hold every channel in ``keys`` for ``duration`` from when all are free; return (start, end)."""
        start = max([now, *(self.free_at.get(k, 0.0) for k in keys)])
        end = start + duration
        for key in keys:
            self.free_at[key] = end
            self.busy[key] = self.busy.get(key, 0.0) + duration
        return start, end
