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
from typing import Any

import numpy as np

from tpusim.topology import RingEmbedding
from tpusim.vocabulary import Ring

INDEX_LIMIT = 2**31
"""Index columns (ranks, routes, message chains) are 32-bit below this many entries: half the memory of a plan's
columns, which are most of a large collective's resident memory (benchmarks ``ring_bytes_per_transfer``)."""


def index_type(*counts: int) -> type[np.signedinteger[Any]]:
    """The narrowest integer type that numbers ``max(counts)`` entries and -1."""
    return np.int32 if max(counts, default=0) < INDEX_LIMIT else np.int64


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
    adds: bool = False  # every message is added into what its destination holds (a reduction)
    # folded rings (``PlanBuilder`` with ``fold``): the chip whose HBM a message's arrival is charged to where it
    # stands for another chip's arrival, else -1; and the transfers of the positions folded away
    receiver: np.ndarray | None = None
    folded_out: int = 0

    @property
    def roots(self) -> np.ndarray:
        return np.flatnonzero(self.pred < 0)

    @property
    def transfers(self) -> int:
        return int(self.hops.sum())


@dataclass(frozen=True, eq=False)
class Path:
    """Ranks of a group in order along a ring or a line, with the route id between consecutive positions."""

    ranks: np.ndarray
    fwd: np.ndarray  # route id from position q to q + 1 (to position 0 from the last on a ring)
    bwd: np.ndarray  # route id from position q to q - 1; -1 at position 0 of a line
    closed: bool

    @property
    def size(self) -> int:
        return len(self.ranks)


class PlanBuilder:
    """Accumulates one group's messages as array blocks; routes are ids into a table of link tuples.

    Ring and line steps run along a ``Path``: the group's own ring by default, or any sub-ring of its ranks
    (``path``), so one plan can hold several rings that share no link.
    """

    def __init__(self, emb: RingEmbedding, ring: Ring, *, adds: bool = False,
                 fold: frozenset[int] | None = None) -> None:
        self.emb = emb
        # ranks whose positions a closed ring keeps when folded (``ring_steps``); None: every position
        self.fold = fold
        self.folded_out = 0  # messages of the positions folded away
        self.adds = adds
        self.ring = ring
        self.size = len(emb.members)
        self.closed = emb.closed
        self.uni = ring is Ring.UNIDIRECTIONAL and emb.closed
        self.routes: list[tuple[int, ...]] = []
        self._route_ids: dict[tuple[int, ...], int] = {}
        self.blocks: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self.count = 0
        n = self.size
        links = len(emb.fwd_routes)
        self.fwd_ids = np.array([self._route_id(emb.fwd_routes[r % links]) for r in range(n)], dtype=np.int64)
        # bwd_ids[r]: links from rank r to rank r - 1
        self.bwd_ids = np.array([self._route_id(emb.bwd_routes[(r - 1) % links]) if (emb.closed or r > 0) else -1
                                 for r in range(n)], dtype=np.int64)
        self.whole = Path(np.arange(n), self.fwd_ids, self.bwd_ids, emb.closed)

    def _route_id(self, route: tuple[int, ...]) -> int:
        rid = self._route_ids.get(route)
        if rid is None:
            rid = self._route_ids[route] = len(self.routes)
            self.routes.append(route)
        return rid

    def path(self, ranks: list[int], forward: list[tuple[int, ...]], backward: list[tuple[int, ...]],
             closed: bool) -> Path:
        """A sub-ring (or sub-line) of the group: ``forward[q]`` links position q to q + 1, ``backward[q]`` the
        reverse of that hop."""
        m = len(ranks)
        fwd = np.array([self._route_id(forward[q % len(forward)]) for q in range(m)] if forward else [-1] * m,
                       dtype=np.int64)
        bwd = np.array([self._route_id(backward[(q - 1) % len(backward)]) if (closed or q > 0) else -1
                        for q in range(m)] if backward else [-1] * m, dtype=np.int64)
        return Path(np.asarray(ranks, dtype=np.int64), fwd, bwd, closed)

    def _add_block(self, src: np.ndarray, dst: np.ndarray, route: np.ndarray, nbytes: np.ndarray | float,
                   pred: np.ndarray, receiver: np.ndarray | None = None) -> np.ndarray:
        """Append messages (``receiver``: see ``Plan``); returns their indices."""
        size = len(src)
        nb = np.broadcast_to(np.asarray(nbytes, dtype=np.float64), (size,)).copy()
        self.blocks.append((src.astype(np.int64), dst.astype(np.int64), route.astype(np.int64), nb,
                            pred.astype(np.int64),
                            np.full(size, -1, dtype=np.int64) if receiver is None else receiver.astype(np.int64)))
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

    def ring_steps(self, steps: int, sizes: list[float], forward: bool, path: Path | None = None) -> None:
        """Every position forwards to its neighbour each step; step s carries sizes[s] bytes."""
        on = path or self.whole
        m = on.size
        if self.fold is not None and on.closed:
            kept = np.array([int(rank) in self.fold for rank in on.ranks.tolist()])
            if 0 < kept.sum() < m:
                self._folded_steps(steps, sizes, forward, on, kept)
                return
        here = np.arange(m)
        there = (here + 1) % m if forward else (here - 1) % m
        routes = on.fwd if forward else on.bwd
        feeder = (here - 1) % m if forward else (here + 1) % m  # who sent me what I forward
        previous: np.ndarray | None = None
        for s in range(steps):
            pred = np.full(m, -1) if previous is None else previous[feeder]
            previous = self._add_block(on.ranks, on.ranks[there], routes, sizes[s], pred)

    def _folded_steps(self, steps: int, sizes: list[float], forward: bool, on: Path, kept: np.ndarray) -> None:
        """``ring_steps`` keeping only the positions ``kept`` of a closed ring whose positions all move alike
        (docs/network.md#fidelity-modes). A kept position fed by a folded one forwards instead what the last
        position of its run of kept positions sent the step before: a rotation of the ring maps that message
        onto its feeder's, so it also stands for the arrival at the run's first position (``receiver``)."""
        m = on.size
        step = 1 if forward else -1
        positions = np.flatnonzero(kept).tolist()
        index = {q: k for k, q in enumerate(positions)}
        feeders, stands = [], []
        for q in positions:
            end = q  # the last position of q's run, in the direction of travel
            while kept[(end + step) % m]:
                end = (end + step) % m
            start = q  # the first
            while kept[(start - step) % m]:
                start = (start - step) % m
            feeders.append(index[(q - step) % m] if kept[(q - step) % m] else index[end])
            stands.append((q + step) % m if kept[(q + step) % m] else start)
        dst = on.ranks[np.array(stands)]
        receivers = np.array([self.emb.members[rank] for rank in dst.tolist()])
        chosen = np.array(positions)
        routes = (on.fwd if forward else on.bwd)[chosen]
        previous: np.ndarray | None = None
        for s in range(steps):
            pred = np.full(len(chosen), -1) if previous is None else previous[np.array(feeders)]
            previous = self._add_block(on.ranks[chosen], dst, routes, sizes[s], pred, receivers)
        self.folded_out += (m - len(chosen)) * steps

    def ring_both_ways(self, steps: int, unit: float, path: Path | None = None) -> None:
        """``steps`` ring steps of ``unit`` bytes: halves both ways (bidirectional) or whole ones forward."""
        if self.ring is Ring.UNIDIRECTIONAL:
            self.ring_steps(steps, [unit] * steps, True, path)
            return
        self.ring_steps(steps, [unit / 2] * steps, True, path)
        self.ring_steps(steps, [unit / 2] * steps, False, path)

    def line_relay(self, size_of: Callable[[np.ndarray], np.ndarray], forward: bool, path: Path | None = None
                   ) -> None:
        """Line steps: at step s, position p forwards what p-1 (p+1) sent at step s-1; size_of(p) bytes."""
        on = path or self.whole
        m = on.size
        by_position = np.full(m, -1)
        for s in range(1, m):
            senders = np.arange(s - 1, m - 1) if forward else np.arange(m - s, 0, -1)
            feeder = senders - 1 if forward else senders + 1
            pred = by_position[np.clip(feeder, 0, m - 1)] if s > 1 else np.full(len(senders), -1)
            there = senders + 1 if forward else senders - 1
            routes = on.fwd[senders] if forward else on.bwd[senders]
            index = self._add_block(on.ranks[senders], on.ranks[there], routes, size_of(senders), pred)
            by_position = np.full(m, -1)
            by_position[senders] = index

    def gather_all(self, unit: float, path: Path | None = None) -> None:
        """An all-gather of ``unit`` bytes per position: round the ring, or relayed both ways along a line."""
        on = path or self.whole
        if on.closed:
            self.ring_both_ways(on.size - 1, unit, on)
        else:
            self.line_relay(lambda p: np.full(len(p), unit), True, on)
            self.line_relay(lambda p: np.full(len(p), unit), False, on)

    def chain(self, positions: list[int], nbytes: float, path: Path | None = None) -> None:
        """One message passed along consecutive positions (broadcast, reduce, line reduce-scatter)."""
        on = path or self.whole
        m = on.size
        pred = -1
        for a, b in itertools.pairwise(positions):
            rid = on.fwd[a % m] if b > a else on.bwd[a % m]
            pred = self._add(int(on.ranks[a % m]), int(on.ranks[b % m]), self.routes[rid], nbytes, pred)

    def scatter_reduce(self, unit: float, path: Path | None = None) -> None:
        """A reduce-scatter leaving ``unit`` bytes at each position: round the ring, or on a line chains that
        reduce toward every position from both ends (they queue on the end links)."""
        on = path or self.whole
        m = on.size
        if on.closed:
            self.ring_both_ways(m - 1, unit, on)
            return
        for dest in range(m - 1, 0, -1):
            self.chain(list(range(0, dest + 1)), unit, on)
        for dest in range(0, m - 1):
            self.chain(list(range(m - 1, dest - 1, -1)), unit, on)

    def rooted(self, root: int, piece: float, *, outward: bool) -> None:
        """A scatter of one ``piece`` from ``root`` to every other rank (``outward``), or the gather of one piece
        from every rank to the root: each piece along its own chain, both ways round a closed ring, the farthest
        piece first on every link."""
        n = self.size
        if self.closed:
            ahead = n - 1 if self.uni else n // 2
            behind = n - 1 - ahead
        else:
            ahead, behind = n - 1 - root, root
        for direction, reach in ((1, ahead), (-1, behind)):
            for distance in range(reach, 0, -1):
                path = [root + direction * q for q in range(distance + 1)]
                self.chain(path if outward else path[::-1], piece)

    def finish(self, chunks: int) -> Plan:
        """The messages as a plan, each split into ``chunks`` chunks that pipeline across hops."""
        return _finish(self, self.size, chunks)


def _finish(builder: PlanBuilder, n: int, chunks: int) -> Plan:
    if builder.blocks:
        src, dst, rid, nbytes, pred, receiver = (np.concatenate(parts) for parts in zip(*builder.blocks, strict=True))
    else:
        src = dst = rid = pred = receiver = np.zeros(0, dtype=np.int64)
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
        src, dst, nbytes, route, hops, receiver = (src[rep], dst[rep], nbytes[rep], route[rep], hops[rep],
                                                   receiver[rep])
        base = pred[rep]
        pred = np.where(base >= 0, base * chunks + j, -1)
    m = len(src)
    itype = index_type(m, n, int(table.max(initial=0)) + 1)  # route holds link ids
    src, dst, route, hops, pred = (column.astype(itype, copy=False) for column in (src, dst, route, hops, pred))
    succ = np.full(m, -1, dtype=itype)
    has = pred >= 0
    succ[pred[has]] = np.flatnonzero(has)
    incoming = np.bincount(dst, minlength=n).astype(itype) if m else np.zeros(n, dtype=itype)
    folded = builder.folded_out > 0
    return Plan(n, src, dst, nbytes, route, hops, pred, succ, incoming, builder.adds,
                receiver if folded else None, builder.folded_out * chunks)
