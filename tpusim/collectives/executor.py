"""Runs a plan over the link arrays: one SimPy wake-up per distinct instant, numpy batches inside.

Messages become ready when their predecessor has arrived (and, in a reduction, been added) or at the start;
each wake-up transmits every
hop that is ready at that instant in one ``LinkArray.transmit`` call, then files what follows (the next
hop of a multi-hop route, or the successor message) under its arrival time. On a uniform ring that is one
wake-up per ring step, however many links the step uses. A rank is done when its last incoming message
has arrived; ranks that receive nothing are done when the whole plan is.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import simpy

from tpusim.collectives.plans import Plan
from tpusim.engine.links import LinkArray

RankDone = Callable[[int, float], None]
Filed = tuple[float, int, np.ndarray, int]  # (ready time, filing order, message indices, hop)


def execute_plan(
    env: simpy.Environment, links: LinkArray, plan: Plan, on_rank_done: RankDone, reduce_per_byte: float = 0.0,
) -> Generator[simpy.Event, Any, float]:
    """SimPy process body: run ``plan`` from ``env.now``; report each rank's completion; return the end.

    In a plan that ``adds``, a message that reaches its destination is added into what the destination holds
    (``reduce_per_byte`` seconds per byte) before the sum moves on or the rank is done.
    """
    adding = reduce_per_byte if plan.adds else 0.0
    start = env.now
    n = plan.size
    if len(plan.src) == 0:
        for rank in range(n):
            on_rank_done(rank, start)
        return start
    remaining = plan.incoming.copy()
    last = np.full(n, float(start))
    heap: list[Filed] = []
    order = itertools.count()
    _file(heap, order, plan.roots, np.full(len(plan.roots), float(start)), 0)
    end = start
    while heap:
        now = heap[0][0]
        if now > env.now:
            yield env.timeout(now - env.now)
        while heap and heap[0][0] == now:
            _, _, idx, hop = heapq.heappop(heap)
            arrival = links.transmit(plan.route[idx, hop], plan.nbytes[idx], now)
            more = plan.hops[idx] > hop + 1
            if more.any():
                _file(heap, order, idx[more], arrival[more], hop + 1)
                done = ~more
                idx, arrival = idx[done], arrival[done]
                if not len(idx):
                    continue
            if adding:
                arrival = arrival + plan.nbytes[idx] * adding
            end = max(end, float(arrival.max()))
            dst = plan.dst[idx]
            np.maximum.at(last, dst, arrival)
            np.subtract.at(remaining, dst, 1)
            for rank in np.unique(dst[remaining[dst] == 0]).tolist():
                on_rank_done(rank, float(last[rank]))
            nxt = plan.succ[idx]
            follow = nxt >= 0
            if follow.any():
                _file(heap, order, nxt[follow], arrival[follow], 0)
    for rank in np.flatnonzero(plan.incoming == 0).tolist():
        on_rank_done(rank, end)
    return end


def _file(heap: list[Filed], order: itertools.count[int], idx: np.ndarray, times: np.ndarray, hop: int) -> None:
    """Queue message indices ``idx`` for ``hop`` at their times, one heap entry per distinct time."""
    first = times[0]
    if np.all(times == first):
        heapq.heappush(heap, (float(first), next(order), idx, hop))
        return
    values, inverse = np.unique(times, return_inverse=True)
    for k, value in enumerate(values.tolist()):
        heapq.heappush(heap, (value, next(order), idx[inverse == k], hop))
