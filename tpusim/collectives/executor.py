"""Runs a program over the link arrays: one SimPy wake-up per distinct instant, numpy batches inside.

Messages become ready when their predecessor has arrived (and, in a reduction, been added), when their group's
previous phase has fully arrived (a gate, see ``batch``), or at the start. Each wake-up transmits every hop
that is ready at that instant, for every group of the program, in one ``LinkArray.transmit`` call, then files
what follows (the next hop of a multi-hop route, the successor message, the next phase) under its time. On
uniform rings that is one wake-up per ring step, however many links and groups the step uses. A rank is done
when its last incoming message of its group's last phase has arrived; ranks that receive nothing then are
done when their group's program is. Where chips share HBM with their DMA (``HbmCharges``), each message
charges its bytes to the HBM of the chip that sends it, of the chip that receives it and, while it is added in,
the reduction's passes (docs/chip.md#hbm-contention).

A background program (a prefetch, docs/network.md#prefetch-traffic-yields) reserves its hops in the background
class of the links, where foreground traffic that comes later can push them back. Its arrivals are therefore
filed as checks: at the provisional arrival time the message's reservation is asked again, and what has been
pushed is filed anew; what follows a message (next hop, successor, gate, rank done) happens at its final arrival.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from tpusim.collectives.batch import Program
from tpusim.engine.hbm import HbmLedger
from tpusim.engine.links import LinkArray
from tpusim.engine.simulation import CountingEnvironment
from tpusim.errors import NonFiniteError

if TYPE_CHECKING:
    from tpusim.topology import PhysicalTopology

RankDone = Callable[[int, float], None]
Filed = tuple[float, int, np.ndarray, int]  # (ready time, filing order, message indices, hop)
FEW = 64  # messages of a wake-up up to which scalars beat numpy's per-call overheads (advance_few)


def _distinct(values: np.ndarray) -> list[int]:
    """The distinct integers of ``values`` in increasing order: ``np.unique(values).tolist()`` without its
    overheads (a hash table, and an import of numpy.ma on first use that costs a small command 10 ms)."""
    if len(values) < 2:
        return list(values.tolist())
    ordered = np.sort(values)
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return list(ordered[keep].tolist())


@dataclass(frozen=True)
class HbmCharges:
    """Where a program's messages are charged in HBM: the ledger, each link's end chips, and the HBM bytes a
    reduction moves per byte it adds."""

    ledger: HbmLedger
    topology: PhysicalTopology  # each link's end chips: as arrays (``charge``) and as Python ints (``charge_few``)
    passes: float

    def charge(self, route: np.ndarray, nbytes: np.ndarray, start: np.ndarray, end: np.ndarray, *, first: bool,
               last: np.ndarray, added: np.ndarray | None, arrival: np.ndarray,
               receiver: np.ndarray | None = None) -> None:
        """Messages sent over ``route`` links during [start, end]: read at the source on their ``first`` hop,
        written at the destination on their ``last`` (or at their ``receiver`` chip, where one is given), and
        ``added`` seconds of reduction after ``arrival``."""
        parts = []  # (chips, start, end, bytes), filed in one call
        if first:
            parts.append((self.topology.link_src[route], start, end, nbytes))
        if last.any():
            dst = self.topology.link_dst[route[last]]
            if receiver is not None:
                dst = np.where(receiver[last] >= 0, receiver[last], dst)
            parts.append((dst, start[last], end[last], nbytes[last]))
            if added is not None:
                adds = added[last]
                some = adds > 0
                if some.any():
                    when = arrival[last][some]
                    parts.append((dst[some], when, when + adds[some], nbytes[last][some] * self.passes))
        if len(parts) == 1:
            self.ledger.record_many(*parts[0])
        elif parts:
            self.ledger.record_many(*(np.concatenate(column) for column in zip(*parts, strict=True)))

    def charge_few(self, route: list[int], nbytes: list[float], start: list[float], end: list[float], *,
                   first: bool, last: list[bool], added: list[float] | None, arrival: list[float],
                   receiver: list[int] | None = None) -> None:
        """``charge`` for a few messages, in scalars: the same spans filed in the same order (``advance_few``)."""
        ledger = self.ledger
        rows, file = ledger.rows, ledger.file_row
        src_of, dst_of = self.topology.link_ends
        if first:
            for link, size, begin, finish in zip(route, nbytes, start, end, strict=True):
                row = rows.get(src_of[link])
                if row is not None:
                    file(row, begin, finish, size)
        if not any(last):
            return
        receivers = [dst_of[link] for link in route] if receiver is None else [
            chip if chip >= 0 else dst_of[link] for chip, link in zip(receiver, route, strict=True)]
        ends = [(row, k) for k, chip in enumerate(receivers) if last[k] and (row := rows.get(chip)) is not None]
        for row, k in ends:
            file(row, start[k], end[k], nbytes[k])
        if added is not None:
            for row, k in ends:
                if added[k] > 0:
                    file(row, arrival[k], arrival[k] + added[k], nbytes[k] * self.passes)


def execute_program(
    env: simpy.Environment, links: LinkArray, program: Program, on_rank_done: RankDone,
    reduce_per_byte: float = 0.0, hbm: HbmCharges | None = None, *, background: bool = False,
) -> Generator[simpy.Event, Any, float]:
    """SimPy process body: run ``program`` from ``env.now``; report each rank's completion; return the end.

    A message of a reduction phase that reaches its destination is added into what the destination holds
    (``reduce_per_byte`` seconds per byte) before the sum moves on or the rank is done.
    """
    start = env.now
    links.transfers += program.elsewhere_transfers
    if program.empty:
        for rank in range(program.size * program.groups):
            on_rank_done(rank, start)
        return start
    run = _Run(links, program, on_rank_done, reduce_per_byte, start, hbm, background=background)
    heap = run.heap
    while heap:
        now = heap[0][0]
        if not math.isfinite(now):  # NaN would never equal itself below, and the loop would spin forever
            raise NonFiniteError(f"a simulated transfer's time came out {now}")
        if now > env.now:
            if isinstance(env, CountingEnvironment):
                env.link_wakeups += 1
            yield env.timeout(now - env.now)
        while heap and heap[0][0] == now:
            _, _, idx, hop = heapq.heappop(heap)
            if run.background:
                run.advance_background(idx, hop, now)
            elif len(idx) <= FEW:
                run.advance_few(idx, hop, now)
            else:
                run.advance(idx, hop, now)
    return run.finish()


class _Run:
    """The state of one program's execution: what each rank, group and gate still waits for."""

    def __init__(self, links: LinkArray, program: Program, on_rank_done: RankDone, reduce_per_byte: float,
                 start: float, hbm: HbmCharges | None = None, *, background: bool = False) -> None:
        self.links = links
        self.background = background
        # background only: each message's last reservation (a foreground run holds none, one column less)
        self.reserved = np.zeros(len(program.src) if background else 0, dtype=np.int64)
        self.hbm = hbm
        self.program = program
        self.on_rank_done = on_rank_done
        self.adding = program.nbytes * (program.adds * reduce_per_byte) if reduce_per_byte else None
        self.remaining = program.incoming.copy()
        self.last = np.full(program.size * program.groups, float(start))
        self.group_end = np.full(program.groups, float(start))
        self.gate_left = program.gate_count.copy()
        self.gate_time = np.full(len(self.gate_left), float(start))
        self.heap: list[Filed] = []
        self.order = itertools.count()
        self.file(program.roots, np.full(len(program.roots), float(start)), 0)

    def advance(self, idx: np.ndarray, hop: int, now: float) -> None:
        """Transmit hop ``hop`` of messages ``idx``, all ready at ``now``, and file what follows."""
        program = self.program
        route = program.route[idx, hop]
        arrival = self.links.transmit(route, program.nbytes[idx], now)
        more = program.hops[idx] > hop + 1
        if self.hbm is not None:
            added = None if self.adding is None else self.adding[idx]
            self.hbm.charge(route, program.nbytes[idx], np.asarray(self.links.last_start),
                            np.asarray(self.links.last_end), first=hop == 0, last=~more, added=added,
                            arrival=arrival, receiver=None if program.receiver is None else program.receiver[idx])
        self.arrived(idx, arrival, more, hop)

    def arrived(self, idx: np.ndarray, arrival: np.ndarray, more: np.ndarray, hop: int) -> None:
        """Hop ``hop`` of messages ``idx`` arrives at ``arrival``: file the next hops of those with ``more`` to go,
        and the consequences of those that reached their destination."""
        program = self.program
        if more.any():
            self.file(idx[more], arrival[more], hop + 1)
            done = ~more
            idx, arrival = idx[done], arrival[done]
            if not len(idx):
                return
        if self.adding is not None:
            arrival = arrival + self.adding[idx]
        np.maximum.at(self.group_end, program.slot[idx], arrival)
        final = program.final[idx]
        if final.any():
            dst, reached = program.dst[idx[final]], arrival[final]
            np.maximum.at(self.last, dst, reached)
            np.subtract.at(self.remaining, dst, 1)
            for rank in _distinct(dst[self.remaining[dst] == 0]):
                self.on_rank_done(rank, float(self.last[rank]))
        nxt = program.succ[idx]
        follow = nxt >= 0
        if follow.any():
            self.file(nxt[follow], arrival[follow], 0)
        gates = program.gate_in[idx]
        gated = gates >= 0
        if gated.any():
            gates, times = gates[gated], arrival[gated]
            np.maximum.at(self.gate_time, gates, times)
            np.subtract.at(self.gate_left, gates, 1)
            for gate in _distinct(gates[self.gate_left[gates] == 0]):
                self.open(gate)

    def advance_background(self, idx: np.ndarray, hop: int, now: float) -> None:
        """The background class: hop ``hop`` >= 0 of messages ``idx`` is ready at ``now`` and reserves its links;
        ``hop`` < 0 is a check that hop ``~hop`` has arrived (module docstring)."""
        program, links = self.program, self.links
        if hop < 0:
            hop = ~hop
            arrival = np.array([links.background_arrival(r) for r in self.reserved[idx].tolist()])
            late = arrival > now
            if late.any():  # pushed back by foreground traffic since it was reserved
                self.file(idx[late], arrival[late], ~hop)
                idx, arrival = idx[~late], arrival[~late]
            for reservation in self.reserved[idx].tolist():
                links.trace_background(reservation)
            if len(idx):
                self.arrived(idx, arrival, program.hops[idx] > hop + 1, hop)
            return
        route = program.route[idx, hop]
        nbytes = program.nbytes[idx]
        reservations = [links.transmit_background(link, size, now)
                        for link, size in zip(route.tolist(), nbytes.tolist(), strict=True)]
        self.reserved[idx] = reservations
        arrival = np.array([links.background_arrival(r) for r in reservations])
        if self.hbm is not None:  # over the spans as reserved: a later pre-emption stretches a span, not its bytes
            added = None if self.adding is None else self.adding[idx]
            self.hbm.charge(route, nbytes, np.array([links.background_start[r] for r in reservations]),
                            arrival - links.latency[route], first=hop == 0, last=program.hops[idx] <= hop + 1,
                            added=added, arrival=arrival,
                            receiver=None if program.receiver is None else program.receiver[idx])
        self.file(idx, arrival, ~hop)

    def advance_few(self, idx: np.ndarray, hop: int, now: float) -> None:
        """``advance`` for a few messages, in scalars: the same transfers, charges and filings in the same order
        (messages that share a link in one wake-up take the array path, which serializes them)."""
        program, links = self.program, self.links
        ids = idx.tolist()
        route = program.route[idx, hop].tolist()
        if len(set(route)) < len(route):
            self.advance(idx, hop, now)
            return
        nbytes = program.nbytes[idx].tolist()
        start, end, arrival = links.transmit_few(route, nbytes, now)
        more = [h > hop + 1 for h in program.hops[idx].tolist()]
        adding = None if self.adding is None else self.adding[idx].tolist()
        if self.hbm is not None:
            self.hbm.charge_few(route, nbytes, start, end, first=hop == 0, last=[not m for m in more],
                                added=adding, arrival=arrival,
                                receiver=None if program.receiver is None else program.receiver[idx].tolist())
        if any(more):
            self.file_few([i for i, m in zip(ids, more, strict=True) if m],
                          [t for t, m in zip(arrival, more, strict=True) if m], hop + 1)
            kept = [k for k, m in enumerate(more) if not m]
            if not kept:
                return
            idx, arrival = idx[kept], [arrival[k] for k in kept]
            adding = None if adding is None else [adding[k] for k in kept]
        if adding is not None:
            arrival = [t + a for t, a in zip(arrival, adding, strict=True)]
        self.arrived_few(idx, arrival)

    def arrived_few(self, idx: np.ndarray, arrival: list[float]) -> None:
        """``arrived`` for a few messages that reached their destination (reductions added), in scalars."""
        program = self.program
        group_end, last, remaining = self.group_end, self.last, self.remaining
        for slot, when in zip(program.slot[idx].tolist(), arrival, strict=True):
            if when > group_end[slot]:
                group_end[slot] = when
        finals = [(dst, when) for dst, when, final in zip(program.dst[idx].tolist(), arrival,
                                                           program.final[idx].tolist(), strict=True) if final]
        if finals:
            for dst, when in finals:
                if when > last[dst]:
                    last[dst] = when
                remaining[dst] -= 1
            for rank in sorted({dst for dst, _ in finals if remaining[dst] == 0}):
                self.on_rank_done(rank, float(last[rank]))
        follow = [(nxt, when) for nxt, when in zip(program.succ[idx].tolist(), arrival, strict=True) if nxt >= 0]
        if follow:
            self.file_few([nxt for nxt, _ in follow], [when for _, when in follow], 0)
        gated = [(gate, when) for gate, when in zip(program.gate_in[idx].tolist(), arrival, strict=True)
                 if gate >= 0]
        if gated:
            gate_time, gate_left = self.gate_time, self.gate_left
            for gate, when in gated:
                if when > gate_time[gate]:
                    gate_time[gate] = when
                gate_left[gate] -= 1
            for gate in sorted({gate for gate, _ in gated if gate_left[gate] == 0}):
                self.open(gate)

    def open(self, gate: int) -> None:
        """Every message of a group's phase has arrived: release the group's next phase."""
        released = self.program.gate_release[gate]
        self.file(released, np.full(len(released), float(self.gate_time[gate])), 0)

    def file(self, idx: np.ndarray, times: np.ndarray, hop: int) -> None:
        """Queue message indices ``idx`` for ``hop`` at their times, one heap entry per distinct time."""
        if not len(idx):
            return
        first = times[0]
        if np.all(times == first):
            heapq.heappush(self.heap, (float(first), next(self.order), idx, hop))
            return
        values, inverse = np.unique(times, return_inverse=True)
        for k, value in enumerate(values.tolist()):
            heapq.heappush(self.heap, (value, next(self.order), idx[inverse == k], hop))

    def file_few(self, ids: list[int], times: list[float], hop: int) -> None:
        """``file`` for a few messages: one heap entry per distinct time, in increasing time, each keeping the
        messages' order."""
        first = times[0]
        if all(t == first for t in times):
            heapq.heappush(self.heap, (first, next(self.order), np.array(ids), hop))
            return
        for value in sorted(set(times)):
            heapq.heappush(self.heap, (value, next(self.order),
                                       np.array([i for i, t in zip(ids, times, strict=True) if t == value]), hop))

    def finish(self) -> float:
        """Report the ranks that received nothing in their last phase; return the end of the program."""
        program = self.program
        idle = program.idle_reported if program.idle_reported is not None else np.flatnonzero(program.incoming == 0)
        for rank in idle.tolist():
            self.on_rank_done(rank, float(self.group_end[rank // program.size]))
        return float(self.group_end.max())
