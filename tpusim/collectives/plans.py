"""Per-link transfer plans of the ring collectives on a physical network.

A plan is a list of messages. Each message goes from one rank to another along a route of directed
links (one hop per ring step on a ring or a line, several for shifts and split axes) and may depend on
one earlier message: it becomes ready when that message has fully arrived at its source (a ring step
forwards what the previous step delivered; a reduction adds what arrived and passes it on). Messages
without a predecessor are ready when the collective starts. Chunking splits every message into equal
chunks that depend chunk-wise, so forwarding pipelines across hops and steps.

Ring variants: on a closed ring, bidirectional splits each shard into halves that travel opposite ways
(reference §4.2 formula 2); unidirectional sends whole shards one way. On a line (no wraparound) data
must travel both ways whole (formula 4); the ring variant does not apply there.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from tpusim.collectives.ops import CollectiveCall
from tpusim.vocabulary import CollectiveOp, Ring


class Embedding(Protocol):
    """What a plan needs of a group's ring embedding (see ``tpusim.topology.RingEmbedding``)."""

    members: tuple[int, ...]
    closed: bool
    fwd_routes: tuple[tuple[int, ...], ...]
    bwd_routes: tuple[tuple[int, ...], ...]


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


class _Builder:
    """Accumulates messages as array blocks; routes are ids into a table of link tuples."""

    def __init__(self, emb: Embedding, ring: Ring) -> None:
        self.emb = emb
        self.n = len(emb.members)
        self.uni = ring is Ring.UNIDIRECTIONAL and emb.closed
        self.routes: list[tuple[int, ...]] = []
        self._route_ids: dict[tuple[int, ...], int] = {}
        self.blocks: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self.count = 0
        n = self.n
        links = len(emb.fwd_routes)
        self.fwd_ids = np.array([self.route_id(emb.fwd_routes[r % links]) for r in range(n)], dtype=np.int64)
        # bwd_ids[r]: links from rank r to rank r - 1
        self.bwd_ids = np.array([self.route_id(emb.bwd_routes[(r - 1) % links]) if (emb.closed or r > 0) else -1
                                 for r in range(n)], dtype=np.int64)

    def route_id(self, route: tuple[int, ...]) -> int:
        rid = self._route_ids.get(route)
        if rid is None:
            rid = self._route_ids[route] = len(self.routes)
            self.routes.append(route)
        return rid

    def add_block(self, src: np.ndarray, dst: np.ndarray, route: np.ndarray, nbytes: np.ndarray | float,
                  pred: np.ndarray) -> np.ndarray:
        """Append messages; returns their indices."""
        size = len(src)
        nb = np.broadcast_to(np.asarray(nbytes, dtype=np.float64), (size,)).copy()
        self.blocks.append((src.astype(np.int64), dst.astype(np.int64), route.astype(np.int64), nb,
                            pred.astype(np.int64)))
        index = np.arange(self.count, self.count + size)
        self.count += size
        return index

    def add(self, src: int, dst: int, route: tuple[int, ...], nbytes: float, pred: int) -> int:
        one = np.array([0])
        index = self.add_block(one + src, one + dst, one + self.route_id(route), nbytes, one + pred)
        return int(index[0])

    def path(self, src: int, dst: int, forward_only: bool) -> tuple[int, ...]:
        """Links from src to dst along the ring: the shorter way (ties forward), or forward only."""
        n = self.n
        ahead = (dst - src) % n
        behind = (src - dst) % n
        if not self.emb.closed:
            go_forward = dst > src
        else:
            go_forward = forward_only or ahead <= behind
        links: list[int] = []
        if go_forward:
            for step in range(ahead if self.emb.closed else dst - src):
                links.extend(self.routes[self.fwd_ids[(src + step) % n]])
        else:
            for step in range(behind if self.emb.closed else src - dst):
                links.extend(self.routes[self.bwd_ids[(src - step) % n]])
        return tuple(links)

    def ring_steps(self, steps: int, sizes: list[float], forward: bool) -> None:
        """Every rank forwards to its neighbour each step; step s carries sizes[s] bytes."""
        n = self.n
        ranks = np.arange(n)
        dst = (ranks + 1) % n if forward else (ranks - 1) % n
        routes = self.fwd_ids if forward else self.bwd_ids
        feeder = (ranks - 1) % n if forward else (ranks + 1) % n  # who sent me what I forward
        previous: np.ndarray | None = None
        for s in range(steps):
            pred = np.full(n, -1) if previous is None else previous[feeder]
            previous = self.add_block(ranks, dst, routes, sizes[s], pred)

    def line_relay(self, size_of: Callable[[np.ndarray], np.ndarray], forward: bool) -> None:
        """Line steps: at step s, rank p forwards what p-1 (p+1) sent at step s-1; size_of(p) bytes."""
        n = self.n
        by_rank = np.full(n, -1)
        for s in range(1, n):
            senders = np.arange(s - 1, n - 1) if forward else np.arange(n - s, 0, -1)
            feeder = senders - 1 if forward else senders + 1
            pred = by_rank[np.clip(feeder, 0, n - 1)] if s > 1 else np.full(len(senders), -1)
            dst = senders + 1 if forward else senders - 1
            routes = self.fwd_ids[senders] if forward else self.bwd_ids[senders]
            index = self.add_block(senders, dst, routes, size_of(senders), pred)
            by_rank = np.full(n, -1)
            by_rank[senders] = index

    def chain(self, ranks: list[int], nbytes: float) -> None:
        """One message passed along consecutive ranks (broadcast, reduce, line reduce-scatter)."""
        pred = -1
        for a, b in itertools.pairwise(ranks):
            rid = self.fwd_ids[a % self.n] if b > a else self.bwd_ids[a % self.n]
            pred = self.add(a % self.n, b % self.n, self.routes[rid], nbytes, pred)


def build_plan(call: CollectiveCall, emb: Embedding) -> list[Plan]:
    """The plan (two phases for all-reduce) of ``call`` on one group."""
    if call.op is CollectiveOp.ALL_REDUCE:
        phases = (CollectiveOp.REDUCE_SCATTER, CollectiveOp.ALL_GATHER)
        n = len(emb.members)
        shard = call.nbytes // n
        return [
            _finish(_messages(CollectiveCall(op, call.axis, shard if op is CollectiveOp.ALL_GATHER else call.nbytes,
                                             call.dim, ring=call.ring), emb), len(emb.members), call.chunks)
            for op in phases
        ]
    return [_finish(_messages(call, emb), len(emb.members), call.chunks)]


def _messages(call: CollectiveCall, emb: Embedding) -> _Builder:
    b = _Builder(emb, call.ring)
    n = b.n
    unit = call.unit_bytes(n)
    op = call.op
    if n == 1:
        return b
    if op in (CollectiveOp.ALL_GATHER, CollectiveOp.REDUCE_SCATTER):
        if emb.closed:
            half = unit if b.uni else unit / 2
            b.ring_steps(n - 1, [half] * (n - 1), True)
            if not b.uni:
                b.ring_steps(n - 1, [half] * (n - 1), False)
        elif op is CollectiveOp.ALL_GATHER:
            b.line_relay(lambda p: np.full(len(p), unit), True)
            b.line_relay(lambda p: np.full(len(p), unit), False)
        else:
            for dest in range(n - 1, 0, -1):
                b.chain(list(range(0, dest + 1)), unit)
            for dest in range(0, n - 1):
                b.chain(list(range(n - 1, dest - 1, -1)), unit)
    elif op is CollectiveOp.ALL_TO_ALL:
        if emb.closed:
            ahead = n - 1 if b.uni else n // 2
            behind = 0 if b.uni else (n - 1) // 2
            b.ring_steps(ahead, [(ahead - s) * unit for s in range(ahead)], True)
            if behind:
                b.ring_steps(behind, [(behind - s) * unit for s in range(behind)], False)
        else:
            b.line_relay(lambda p: (n - 1 - p) * unit, True)
            b.line_relay(lambda p: p * unit, False)
    elif op in (CollectiveOp.BROADCAST, CollectiveOp.REDUCE):
        root = call.root % n
        if emb.closed:
            ahead = n - 1 if b.uni else n // 2
            behind = 0 if b.uni else (n - 1) // 2
            out_fwd = [root + q for q in range(ahead + 1)]
            out_bwd = [root - q for q in range(behind + 1)]
        else:
            out_fwd = list(range(root, n))
            out_bwd = list(range(root, -1, -1))
        for path in (out_fwd, out_bwd):
            if len(path) > 1:
                b.chain(path if op is CollectiveOp.BROADCAST else path[::-1], unit)
    elif op is CollectiveOp.SHIFT:
        if call.offset % n:
            for p in range(n):
                dst = (p + call.offset) % n
                b.add(p, dst, b.path(p, dst, b.uni), unit, -1)
    elif op is CollectiveOp.SEND_RECV:
        src, dst = call.root % n, call.offset % n
        if src != dst:
            b.add(src, dst, b.path(src, dst, b.uni), unit, -1)
    else:
        raise AssertionError(op)
    return b


def _finish(builder: _Builder, n: int, chunks: int) -> Plan:
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
