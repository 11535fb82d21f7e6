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
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from tpusim.collectives.ops import CollectiveCall, Op, Ring


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
    def __init__(self, emb: Embedding, ring: Ring) -> None:
        self.emb = emb
        self.n = len(emb.members)
        self.uni = ring is Ring.UNIDIRECTIONAL and emb.closed
        self.messages: list[tuple[int, int, tuple[int, ...], float, int]] = []

    def add(self, src: int, dst: int, route: tuple[int, ...], nbytes: float, pred: int) -> int:
        self.messages.append((src, dst, route, nbytes, pred))
        return len(self.messages) - 1

    def fwd(self, rank: int) -> tuple[int, ...]:
        return self.emb.fwd_routes[rank % self.n]

    def bwd(self, rank: int) -> tuple[int, ...]:
        """Links from ``rank`` to ``rank - 1``."""
        return self.emb.bwd_routes[(rank - 1) % self.n]

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
                links.extend(self.fwd(src + step))
        else:
            for step in range(behind if self.emb.closed else src - dst):
                links.extend(self.bwd(src - step))
        return tuple(links)

    def ring_steps(self, steps: int, sizes: list[float], forward: bool) -> None:
        """Every rank forwards to its neighbour each step; step s carries sizes[s-1] bytes."""
        n = self.n
        previous: list[int] | None = None
        for s in range(steps):
            current = []
            for p in range(n):
                if forward:
                    pred = -1 if previous is None else previous[(p - 1) % n]
                    current.append(self.add(p, (p + 1) % n, self.fwd(p), sizes[s], pred))
                else:
                    pred = -1 if previous is None else previous[(p + 1) % n]
                    current.append(self.add(p, (p - 1) % n, self.bwd(p), sizes[s], pred))
            previous = current

    def line_relay(self, size_of, forward: bool) -> None:
        """Line steps: at step s, rank p forwards what p-1 (p+1) sent at step s-1; size_of(p) bytes."""
        n = self.n
        previous: dict[int, int] = {}
        for s in range(1, n):
            current: dict[int, int] = {}
            senders = range(s - 1, n - 1) if forward else range(n - s, 0, -1)
            for p in senders:
                before = p - 1 if forward else p + 1
                pred = previous.get(before, -1) if s > 1 else -1
                dst = p + 1 if forward else p - 1
                route = self.fwd(p) if forward else self.bwd(p)
                current[p] = self.add(p, dst, route, size_of(p), pred)
            previous = current

    def chain(self, ranks: list[int], nbytes: float) -> None:
        """One message passed along consecutive ranks (broadcast, reduce, line reduce-scatter)."""
        pred = -1
        for a, b in itertools.pairwise(ranks):
            route = self.fwd(a) if b > a else self.bwd(a)
            pred = self.add(a % self.n, b % self.n, route, nbytes, pred)


def build_plan(call: CollectiveCall, emb: Embedding) -> list[Plan]:
    """The plan (two phases for all-reduce) of ``call`` on one group."""
    if call.op is Op.ALL_REDUCE:
        phases = (Op.REDUCE_SCATTER, Op.ALL_GATHER)
        n = len(emb.members)
        shard = call.nbytes // n
        return [
            _finish(_messages(CollectiveCall(op, call.axis, shard if op is Op.ALL_GATHER else call.nbytes,
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
    if op in (Op.ALL_GATHER, Op.REDUCE_SCATTER):
        if emb.closed:
            half = unit if b.uni else unit / 2
            b.ring_steps(n - 1, [half] * (n - 1), True)
            if not b.uni:
                b.ring_steps(n - 1, [half] * (n - 1), False)
        elif op is Op.ALL_GATHER:
            b.line_relay(lambda p: unit, True)
            b.line_relay(lambda p: unit, False)
        else:
            for dest in range(n - 1, 0, -1):
                b.chain(list(range(0, dest + 1)), unit)
            for dest in range(0, n - 1):
                b.chain(list(range(n - 1, dest - 1, -1)), unit)
    elif op is Op.ALL_TO_ALL:
        if emb.closed:
            ahead = n - 1 if b.uni else n // 2
            behind = 0 if b.uni else (n - 1) // 2
            b.ring_steps(ahead, [(ahead - s) * unit for s in range(ahead)], True)
            if behind:
                b.ring_steps(behind, [(behind - s) * unit for s in range(behind)], False)
        else:
            b.line_relay(lambda p: (n - 1 - p) * unit, True)
            b.line_relay(lambda p: p * unit, False)
    elif op in (Op.BROADCAST, Op.REDUCE):
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
                b.chain(path if op is Op.BROADCAST else path[::-1], unit)
    elif op is Op.SHIFT:
        if call.offset % n:
            for p in range(n):
                dst = (p + call.offset) % n
                b.add(p, dst, b.path(p, dst, b.uni), unit, -1)
    elif op is Op.SEND_RECV:
        src, dst = call.root % n, call.offset % n
        if src != dst:
            b.add(src, dst, b.path(src, dst, b.uni), unit, -1)
    else:
        raise AssertionError(op)
    return b


def _finish(builder: _Builder, n: int, chunks: int) -> Plan:
    msgs = builder.messages
    m = len(msgs) * chunks
    hops = np.array([len(r) for _, _, r, _, _ in msgs], dtype=np.int64)
    width = int(hops.max()) if len(msgs) else 1
    route = np.full((len(msgs), max(width, 1)), -1, dtype=np.int64)
    for i, (_, _, r, _, _) in enumerate(msgs):
        route[i, : len(r)] = r
    src = np.array([s for s, *_ in msgs], dtype=np.int64)
    dst = np.array([d for _, d, *_ in msgs], dtype=np.int64)
    nbytes = np.array([x for *_, x, _ in msgs], dtype=np.float64) / chunks
    pred = np.array([p for *_, p in msgs], dtype=np.int64)
    if chunks > 1:
        # message i chunk j -> index i * chunks + j; chunk j depends on its predecessor's chunk j
        rep = np.repeat(np.arange(len(msgs)), chunks)
        j = np.tile(np.arange(chunks), len(msgs))
        src, dst, nbytes, route, hops = src[rep], dst[rep], nbytes[rep], route[rep], hops[rep]
        base = pred[rep]
        pred = np.where(base >= 0, base * chunks + j, -1)
    succ = np.full(m, -1, dtype=np.int64)
    has = pred >= 0
    succ[pred[has]] = np.flatnonzero(has)
    incoming = np.bincount(dst, minlength=n).astype(np.int64) if m else np.zeros(n, dtype=np.int64)
    return Plan(n, src, dst, nbytes, route, hops, pred, succ, incoming)
