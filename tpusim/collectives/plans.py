"""Per-link transfer plans of the ring collectives on a physical network.

A plan is a list of messages. Each message goes from one rank to another along a route of directed
links (one hop per ring step on a ring or a line, several for shifts and split axes) and may depend on
one earlier message: it becomes ready when that message has fully arrived at its source (a ring step
forwards what the previous step delivered; a reduction adds what arrived and passes it on). Messages
without a predecessor are ready when the collective starts. Chunking splits every message into equal
chunks that depend chunk-wise, so forwarding pipelines across hops and steps.

Ring variants: on a closed ring, bidirectional splits each shard into halves that travel opposite ways
(docs/network.md#physical-closed-forms); unidirectional sends whole shards one way. On a line (no wraparound) data
must travel both ways whole (formula 4); the ring variant does not apply there.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tpusim.topology import RingEmbedding
from tpusim.vocabulary import Ring


@dataclass(frozen=True, eq=False)
class Plan:
    """Messages as arrays: ``route[i, :hops[i]]`` are message i's links, ``pred``/``succ`` its chain."""

    size: int  # ranks in the group
    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray
    route: np.ndarray
    hops: np.ndarray
    pred: np.ndarray
    succ: np.ndarray
    incoming: np.ndarray  # messages finishing at each rank

    @property
    def roots(self) -> np.ndarray:
        return np.flatnonzero(self.pred < 0)

    @property
    def transfers(self) -> int:
        return int(self.hops.sum())


class PlanBuilder:
    """Accumulates one group's messages as array blocks; routes are ids into a table of link tuples."""

    def __init__(self, emb: RingEmbedding, ring: Ring) -> None:
        self.emb = emb
        self.size = len(emb.members)
        self.closed = emb.closed
        self.uni = ring is Ring.UNIDIRECTIONAL and emb.closed
        self.routes: list[tuple[int, ...]] = []
        self._route_ids: dict[tuple[int, ...], int] = {}
        self.blocks: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self.count = 0
        n = self.size
        links = len(emb.fwd_routes)
        self.fwd_ids = np.array([self._route_id(emb.fwd_routes[r % links]) for r in range(n)], dtype=np.int64)
        # bwd_ids[r]: links from rank r to rank r - 1
        self.bwd_ids = np.array([self._route_id(emb.bwd_routes[(r - 1) % links]) if (emb.closed or r > 0) else -1
                                 for r in range(n)], dtype=np.int64)

    def _route_id(self, route: tuple[int, ...]) -> int:
        rid = self._route_ids.get(route)
        if rid is None:
            rid = self._route_ids[route] = len(self.routes)
            self.routes.append(route)
        return rid

    def _add_block(self, src: np.ndarray, dst: np.ndarray, route: np.ndarray, nbytes: np.ndarray | float,
                   pred: np.ndarray) -> np.ndarray:
        """Append messages; returns their indices."""
        size = len(src)
        nb = np.broadcast_to(np.asarray(nbytes, dtype=np.float64), (size,)).copy()
        self.blocks.append((src.astype(np.int64), dst.astype(np.int64), route.astype(np.int64), nb,
                            pred.astype(np.int64)))
        index = np.arange(self.count, self.count + size)
        self.count += size
        return index

    def _add(self, src: int, dst: int, route: tuple[int, ...], nbytes: float, pred: int) -> int:
        one = np.array([0])
        index = self._add_block(one + src, one + dst, one + self._route_id(route), nbytes, one + pred)
        return int(index[0])

    def direct(self, src: int, dst: int, nbytes: float) -> None:
        """One independent message from rank src to rank dst, along the ring's route between them."""
        self._add(src, dst, self.emb.route(src, dst, forward_only=self.uni), nbytes, -1)

    def ring_steps(self, steps: int, sizes: list[float], forward: bool) -> None:
        """Every rank forwards to its neighbour each step; step s carries sizes[s] bytes."""
        n = self.size
        ranks = np.arange(n)
        dst = (ranks + 1) % n if forward else (ranks - 1) % n
        routes = self.fwd_ids if forward else self.bwd_ids
        feeder = (ranks - 1) % n if forward else (ranks + 1) % n  # who sent me what I forward
        previous: np.ndarray | None = None
        for s in range(steps):
            pred = np.full(n, -1) if previous is None else previous[feeder]
            previous = self._add_block(ranks, dst, routes, sizes[s], pred)

    def ring_both_ways(self, steps: int, unit: float) -> None:
        """``steps`` ring steps of ``unit`` bytes: halves both ways (bidirectional) or whole ones forward."""
        if self.uni:
            self.ring_steps(steps, [unit] * steps, True)
            return
        self.ring_steps(steps, [unit / 2] * steps, True)
        self.ring_steps(steps, [unit / 2] * steps, False)

    def line_relay(self, size_of: Callable[[np.ndarray], np.ndarray], forward: bool) -> None:
        """Line steps: at step s, rank p forwards what p-1 (p+1) sent at step s-1; size_of(p) bytes."""
        n = self.size
        by_rank = np.full(n, -1)
        for s in range(1, n):
            senders = np.arange(s - 1, n - 1) if forward else np.arange(n - s, 0, -1)
            feeder = senders - 1 if forward else senders + 1
            pred = by_rank[np.clip(feeder, 0, n - 1)] if s > 1 else np.full(len(senders), -1)
            dst = senders + 1 if forward else senders - 1
            routes = self.fwd_ids[senders] if forward else self.bwd_ids[senders]
            index = self._add_block(senders, dst, routes, size_of(senders), pred)
            by_rank = np.full(n, -1)
            by_rank[senders] = index

    def chain(self, ranks: list[int], nbytes: float) -> None:
        """One message passed along consecutive ranks (broadcast, reduce, line reduce-scatter)."""
        pred = -1
        for a, b in itertools.pairwise(ranks):
            rid = self.fwd_ids[a % self.size] if b > a else self.bwd_ids[a % self.size]
            pred = self._add(a % self.size, b % self.size, self.routes[rid], nbytes, pred)

    def finish(self, chunks: int) -> Plan:
        """The messages as a plan, each split into ``chunks`` chunks that pipeline across hops."""
        return _finish(self, self.size, chunks)


def _finish(builder: PlanBuilder, n: int, chunks: int) -> Plan:
    if builder.blocks:
        src, dst, rid, nbytes, pred = (np.concatenate(parts) for parts in zip(*builder.blocks, strict=True))
    else:
        src = dst = rid = pred = np.zeros(0, dtype=np.int64)
        nbytes = np.zeros(0)
    table_hops = np.array([len(r) for r in builder.routes] or [0], dtype=np.int64)
    width = max(int(table_hops.max()), 1)
    table = np.full((max(len(builder.routes), 1), width), -1, dtype=np.int64)
    for i, r in enumerate(builder.routes):
        table[i, : len(r)] = r
    route = table[rid]
    hops = table_hops[rid]
    nbytes = nbytes / chunks
    if chunks > 1:
        # message i chunk j -> index i * chunks + j; chunk j depends on its predecessor's chunk j
        count = len(src)
        rep = np.repeat(np.arange(count), chunks)
        j = np.tile(np.arange(chunks), count)
        src, dst, nbytes, route, hops = src[rep], dst[rep], nbytes[rep], route[rep], hops[rep]
        base = pred[rep]
        pred = np.where(base >= 0, base * chunks + j, -1)
    m = len(src)
    succ = np.full(m, -1, dtype=np.int64)
    has = pred >= 0
    succ[pred[has]] = np.flatnonzero(has)
    incoming = np.bincount(dst, minlength=n).astype(np.int64) if m else np.zeros(n, dtype=np.int64)
    return Plan(n, src, dst, nbytes, route, hops, pred, succ, incoming)
