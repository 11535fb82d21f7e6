"""Directed ICI links as arrays: serialization holds a link, latency is pipelined after it.

Every directed link keeps the time it is next free, the bytes it carried and the time it was busy. A transfer of ``b``
bytes that becomes ready at ``now`` starts when the link is free, holds it for ``b / bandwidth`` (plus a fixed
per-transfer ``overhead``) and arrives ``latency`` after it leaves the link, when the link is already free for the
next transfer (ASTRA-sim's congestion-aware link). Reservations are made at the simulated time the data becomes ready,
so concurrent traffic queues first-come first-served, exactly as a FIFO resource would, without a process per
transfer. Batches are numpy arrays: one call moves every chunk that becomes ready at the same instant.

Background traffic (a prefetch, docs/network.md#prefetch-traffic-yields) is a second, lower class: it uses only
the time the foreground leaves a link, and a foreground transfer pre-empts it. Foreground reservations never look
at background ones, so the foreground times are exactly those of a run without the background. At the current
time the foreground still to come on a link is one contiguous span (every gap between its reservations lies in
the past), and the background queued behind it another; a foreground reservation of ``d`` seconds that starts
while background work is pending therefore pushes every pending background reservation of that link ``d``
later. A background reservation's arrival is then only provisional: ``background_arrival`` gives its current one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LinkOverride:
    """Scale one directed link's bandwidth and latency (a what-if: a slow or degraded link)."""

    bandwidth_factor: float = 1.0
    latency_factor: float = 1.0


TransferHook = Callable[[np.ndarray, np.ndarray, np.ndarray], None]
_ELEMENTWISE = 4  # transfers of a scalar batch up to which element access beats numpy's fancy indexing


class LinkArray:
    """State of ``L`` directed links; ``bandwidth`` is one direction of one link, in B/s."""

    def __init__(self, bandwidth: np.ndarray, latency: np.ndarray, overhead: float = 0.0) -> None:
        self.bandwidth = np.asarray(bandwidth, dtype=np.float64)
        self.latency = np.asarray(latency, dtype=np.float64)
        self.overhead = overhead  # seconds every transfer holds its link besides its bytes (a handshake)
        # the same rates as Python floats, for the scalar path (``transmit_few``): the links' rates never change
        self._bandwidth_of: list[float] = self.bandwidth.tolist()
        self._latency_of: list[float] = self.latency.tolist()
        count = len(self.bandwidth)
        self.free_at = np.zeros(count)
        self.bytes = np.zeros(count)
        self.busy = np.zeros(count)
        self.transfers = 0
        self.on_transfer: TransferHook | None = None  # set by a tracer that wants every link span
        # the serialization spans of the last transmit call, for HBM accounting (engine/hbm.py)
        self.last_start: np.ndarray | float = 0.0
        self.last_end: np.ndarray | float = 0.0
        # background class: the end of each link's queued background work, and the reservations still pending
        self.background_free_at = np.zeros(count)
        self._pending: dict[int, list[int]] = {}  # by link: ids of background reservations not yet ended
        self.background_start: list[float] = []  # by reservation id: its start as first reserved
        self.background_end: list[float] = []  # by reservation id: its current end (pushed by pre-emption)
        self.background_link: list[int] = []

    @property
    def count(self) -> int:
        return len(self.bandwidth)

    def hold(self, links: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
        """How long a transfer of ``nbytes[i]`` holds ``links[i]``: its bytes plus the per-transfer overhead."""
        duration: np.ndarray = nbytes / self.bandwidth[links] + self.overhead
        return duration

    def transmit(self, links: np.ndarray, nbytes: np.ndarray, now: float) -> np.ndarray:
        """Send ``nbytes[i]`` over ``links[i]``, all ready at ``now``; return each arrival time.

        Transfers that share a link within the batch are serialized in batch order.
        """
        duration = self.hold(links, nbytes)
        if len(links) > 1 and not _distinct(links):
            start, end = self._serialize(links, duration, now)
            np.add.at(self.bytes, links, nbytes)
            np.add.at(self.busy, links, duration)
        else:
            start = np.maximum(self.free_at[links], now)
            end = start + duration
            self.free_at[links] = end
            self.bytes[links] += nbytes
            self.busy[links] += duration
        self.transfers += len(links)
        self.last_start, self.last_end = start, end
        if self._pending:
            for link, begin, finish in zip(links.tolist(), np.broadcast_to(start, len(links)).tolist(),
                                           np.broadcast_to(end, len(links)).tolist(), strict=True):
                self._preempt(link, begin, finish)
        if self.on_transfer is not None:
            self.on_transfer(links, start, end)
        arrival: np.ndarray = end + self.latency[links]
        return arrival

    def transmit_one(self, link: int, nbytes: float, now: float) -> float:
        """``transmit`` for a single transfer, without array overhead; its arrival."""
        return self.transmit_few([link], [nbytes], now)[2][0]

    def transmit_few(self, links: list[int], nbytes: list[float], now: float
                     ) -> tuple[list[float], list[float], list[float]]:
        """``transmit`` for a few transfers on distinct links, in scalars (most wake-ups of a pipeline, or of a
        symmetric run's kept lines, move a handful of messages): the same arithmetic, so the same times to the
        bit; (starts, ends, arrivals)."""
        bandwidth, latency, overhead = self._bandwidth_of, self._latency_of, self.overhead
        durations = [size / bandwidth[link] + overhead for link, size in zip(links, nbytes, strict=True)]
        free_at, carried, busy = self.free_at, self.bytes, self.busy
        if len(links) <= _ELEMENTWISE:
            starts = [max(float(free_at[link]), now) for link in links]
            ends = [start + duration for start, duration in zip(starts, durations, strict=True)]
            for link, size, end, duration in zip(links, nbytes, ends, durations, strict=True):
                free_at[link] = end
                carried[link] += size
                busy[link] += duration
        else:
            starts = [max(free, now) for free in free_at[links].tolist()]
            ends = [start + duration for start, duration in zip(starts, durations, strict=True)]
            free_at[links] = ends  # the links are distinct: one write each
            carried[links] += nbytes
            busy[links] += durations
        arrivals = [end + latency[link] for link, end in zip(links, ends, strict=True)]
        self.transfers += len(links)
        self.last_start, self.last_end = (starts[0], ends[0]) if len(links) == 1 else (np.array(starts),
                                                                                     np.array(ends))
        if self._pending:
            for link, begin, finish in zip(links, starts, ends, strict=True):
                self._preempt(link, begin, finish)
        if self.on_transfer is not None:
            self.on_transfer(np.array(links), np.array(starts), np.array(ends))
        return starts, ends, arrivals

    def _preempt(self, link: int, start: float, end: float) -> None:
        """A foreground reservation of ``link`` over [start, end]: the background work pending there after
        ``start`` (all of it sits after the foreground's own queue) waits ``end - start`` longer."""
        pending = self._pending.get(link)
        if not pending:
            return
        ends = self.background_end
        live = [r for r in pending if ends[r] > start]
        if not live:
            del self._pending[link]
            return
        shift = end - start
        for r in live:
            ends[r] += shift
        self.background_free_at[link] += shift
        self._pending[link] = live

    def transmit_background(self, link: int, nbytes: float, now: float) -> int:
        """Reserve ``link`` for a background transfer of ``nbytes`` ready at ``now``: after the foreground queued
        there and the background before it, pre-empted by any foreground that comes; returns its reservation id
        (its arrival: ``background_arrival``)."""
        duration = nbytes / float(self.bandwidth[link]) + self.overhead
        start = max(now, float(self.free_at[link]), float(self.background_free_at[link]))
        end = start + duration
        self.background_free_at[link] = end
        self.bytes[link] += nbytes
        self.busy[link] += duration
        self.transfers += 1
        reservation = len(self.background_end)
        self.background_start.append(start)
        self.background_end.append(end)
        self.background_link.append(link)
        pending = self._pending.setdefault(link, [])
        pending[:] = [r for r in pending if self.background_end[r] > now]
        pending.append(reservation)
        self.last_start, self.last_end = start, end
        return reservation

    def background_arrival(self, reservation: int) -> float:
        """When background reservation ``reservation`` arrives at the far end, as far as is known now (later
        foreground traffic can only push it later, and only while it has not ended)."""
        return self.background_end[reservation] + float(self.latency[self.background_link[reservation]])

    def trace_background(self, reservation: int) -> None:
        """Hand the tracer a background transfer once it has ended: its span from its start to its (pre-empted)
        end."""
        if self.on_transfer is not None:
            link = self.background_link[reservation]
            self.on_transfer(np.array([link]), np.array([self.background_start[reservation]]),
                             np.array([self.background_end[reservation]]))

    def _serialize(self, links: np.ndarray, duration: np.ndarray, now: float) -> tuple[np.ndarray, np.ndarray]:
        order = np.argsort(links, kind="stable")
        sorted_links = links[order]
        sorted_duration = duration[order]
        first = np.empty(len(links), dtype=bool)
        first[0] = True
        first[1:] = sorted_links[1:] != sorted_links[:-1]
        group = np.cumsum(first) - 1
        heads = np.flatnonzero(first)
        begin = np.maximum(self.free_at[sorted_links[heads]], now)
        done = np.cumsum(sorted_duration)
        before = done[heads] - sorted_duration[heads]
        end_sorted = begin[group] + done - before[group]
        start_sorted = end_sorted - sorted_duration
        last = np.append(heads[1:] - 1, len(links) - 1)
        self.free_at[sorted_links[last]] = end_sorted[last]
        start = np.empty_like(start_sorted)
        end = np.empty_like(end_sorted)
        start[order] = start_sorted
        end[order] = end_sorted
        return start, end

    def utilisation(self, elapsed: float) -> np.ndarray:
        """Busy time over ``elapsed`` per link (zeros when nothing elapsed)."""
        if elapsed <= 0:
            return np.zeros(self.count)
        return self.busy / elapsed


def _distinct(links: np.ndarray) -> bool:
    if len(links) < 64:
        return len(set(links.tolist())) == len(links)
    ordered = np.sort(links)
    return bool(np.all(ordered[1:] != ordered[:-1]))
