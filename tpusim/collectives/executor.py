"""Runs a program over the link arrays: one SimPy wake-up per distinct instant, numpy batches inside.

Messages become ready when their predecessor has arrived (and, in a reduction, been added), when their group's
previous phase has fully arrived (a gate, see ``batch``), or at the start. Each wake-up transmits every hop
that is ready at that instant, for every group of the program, in one ``LinkArray.transmit`` call, then files
what follows (the next hop of a multi-hop route, the successor message, the next phase) under its time. On
uniform rings that is one wake-up per ring step, however many links and groups the step uses. A rank is done
when its last incoming message of its group's last phase has arrived; ranks that receive nothing then are
done when their group's program is.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import simpy

from tpusim.collectives.batch import Program
from tpusim.engine.links import LinkArray

RankDone = Callable[[int, float], None]
Filed = tuple[float, int, np.ndarray, int]  # (ready time, filing order, message indices, hop)


def execute_program(
    env: simpy.Environment, links: LinkArray, program: Program, on_rank_done: RankDone,
    reduce_per_byte: float = 0.0,
) -> Generator[simpy.Event, Any, float]:
    """SimPy process body: run ``program`` from ``env.now``; report each rank's completion; return the end.

    A message of a reduction phase that reaches its destination is added into what the destination holds
    (``reduce_per_byte`` seconds per byte) before the sum moves on or the rank is done.
    """
    start = env.now
    ranks = program.size * program.groups
    if program.empty:
        for rank in range(ranks):
            on_rank_done(rank, start)
        return start
    adding = program.nbytes * (program.adds * reduce_per_byte) if reduce_per_byte else None
    remaining = program.incoming.copy()
    last = np.full(ranks, float(start))
    group_end = np.full(program.groups, float(start))
    gate_left = program.gate_count.copy()
    gate_time = np.full(len(gate_left), float(start))
    heap: list[Filed] = []
    order = itertools.count()
    _file(heap, order, program.roots, np.full(len(program.roots), float(start)), 0)
    while heap:
        now = heap[0][0]
        if now > env.now:
            yield env.timeout(now - env.now)
        while heap and heap[0][0] == now:
            _, _, idx, hop = heapq.heappop(heap)
            arrival = links.transmit(program.route[idx, hop], program.nbytes[idx], now)
            more = program.hops[idx] > hop + 1
            if more.any():
                _file(heap, order, idx[more], arrival[more], hop + 1)
                done = ~more
                idx, arrival = idx[done], arrival[done]
                if not len(idx):
                    continue
            if adding is not None:
                arrival = arrival + adding[idx]
            np.maximum.at(group_end, program.slot[idx], arrival)
            final = program.final[idx]
            if final.any():
                dst, reached = program.dst[idx[final]], arrival[final]
                np.maximum.at(last, dst, reached)
                np.subtract.at(remaining, dst, 1)
                for rank in np.unique(dst[remaining[dst] == 0]).tolist():
                    on_rank_done(rank, float(last[rank]))
            nxt = program.succ[idx]
            follow = nxt >= 0
            if follow.any():
                _file(heap, order, nxt[follow], arrival[follow], 0)
            gates = program.gate_in[idx]
            gated = gates >= 0
            if gated.any():
                _open_gates(heap, order, program, gates[gated], arrival[gated], gate_left, gate_time)
    for rank in np.flatnonzero(program.incoming == 0).tolist():
        on_rank_done(rank, float(group_end[rank // program.size]))
    return float(group_end.max())


def _open_gates(heap: list[Filed], order: itertools.count[int], program: Program, gates: np.ndarray,
                arrival: np.ndarray, gate_left: np.ndarray, gate_time: np.ndarray) -> None:
    """Count arrivals toward their phase gates; release the next phase of every gate that is complete."""
    np.maximum.at(gate_time, gates, arrival)
    np.subtract.at(gate_left, gates, 1)
    for gate in np.unique(gates[gate_left[gates] == 0]).tolist():
        released = program.gate_release[gate]
        if len(released):
            _file(heap, order, released, np.full(len(released), float(gate_time[gate])), 0)


def _file(heap: list[Filed], order: itertools.count[int], idx: np.ndarray, times: np.ndarray, hop: int) -> None:
    """Queue message indices ``idx`` for ``hop`` at their times, one heap entry per distinct time."""
    if not len(idx):
        return
    first = times[0]
    if np.all(times == first):
        heapq.heappush(heap, (float(first), next(order), idx, hop))
        return
    values, inverse = np.unique(times, return_inverse=True)
    for k, value in enumerate(values.tolist()):
        heapq.heappush(heap, (value, next(order), idx[inverse == k], hop))
