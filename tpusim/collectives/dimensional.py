"""Ring collectives over a logical axis laid across several whole physical axes, using the links of all of them.

A snake ring through a y,z plane moves data over two of each chip's four links. The dimensional schedule
(docs/network.md#collectives-over-several-physical-axes) cuts every shard into k equal parts, one per physical
axis of the logical axis; part j crosses the physical axes in the rotated order j, j + 1, ..., so in every
phase each part runs on a different physical axis and no two parts share a link. In phase p of an all-gather,
part j is all-gathered along the rings (or lines) of the group that run along its p-th axis, carrying the
part times the lengths of the axes it has already crossed. A reduce-scatter runs the same phases in reverse;
an all-reduce is a reduce-scatter then an all-gather. Every phase ends when its slowest part does, so the twin
is the launch overhead plus, per phase, the slowest part's ring or line time.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from tpusim.collectives.call import CollectiveCall, PhysicalCosts, RingShape
from tpusim.collectives.operations import RING_OPERATIONS
from tpusim.collectives.plans import Plan, PlanBuilder
from tpusim.topology import AxisMapping, AxisPiece, PhysicalTopology, RingEmbedding
from tpusim.vocabulary import CollectiveOp, Ring

__all__ = ["DIMENSIONAL_OPS", "Dimensional"]

DIMENSIONAL_OPS = frozenset({CollectiveOp.ALL_GATHER, CollectiveOp.REDUCE_SCATTER, CollectiveOp.ALL_REDUCE})
"""The operations that take the dimensional schedule; the others run on the snake ring."""

Phase = tuple[CollectiveOp, tuple[tuple[int, float], ...]]  # the ring operation; per part (piece, unit bytes)


@dataclass(frozen=True)
class Dimensional:
    """The dimensional schedule of one logical axis made of whole physical axes ``pieces``."""

    topology: PhysicalTopology
    pieces: tuple[AxisPiece, ...]

    @classmethod
    def of(cls, axis: AxisMapping, topology: PhysicalTopology) -> Dimensional | None:
        """The schedule of ``axis``, or None unless it is a snake through several whole physical axes."""
        if axis.embedding != "snake" or len(axis.pieces) < 2:
            return None
        return cls(topology, axis.pieces)

    def rings(self) -> tuple[RingShape, ...]:
        """The ring (or line) shape of each piece."""
        return tuple(RingShape(p.length, p.is_cyclic(self.topology)) for p in self.pieces)

    def orders(self) -> tuple[tuple[int, ...], ...]:
        """Part j crosses the pieces j, j + 1, ... (cyclically)."""
        k = len(self.pieces)
        return tuple(tuple((j + p) % k for p in range(k)) for j in range(k))

    def phases(self, call: CollectiveCall) -> list[Phase]:
        """Every phase: the ring operation and, per part, the piece it runs on and its unit bytes."""
        k, lengths = len(self.pieces), [p.length for p in self.pieces]
        size = 1
        for length in lengths:
            size *= length
        if call.op is CollectiveOp.ALL_GATHER:
            return self._gathers(call.nbytes / k, lengths)
        if call.op is CollectiveOp.REDUCE_SCATTER:
            return self._scatters(call.nbytes / k, lengths)
        if call.op is CollectiveOp.ALL_REDUCE:
            return self._scatters(call.nbytes / k, lengths) + self._gathers(call.nbytes / size / k, lengths)
        raise AssertionError(f"{call.op} has no dimensional schedule")

    def _gathers(self, part: float, lengths: list[int]) -> list[Phase]:
        phases: list[Phase] = []
        held = [part] * len(lengths)  # what each part holds per rank before the phase
        for p in range(len(lengths)):
            pieces = tuple((order[p], held[j]) for j, order in enumerate(self.orders()))
            phases.append((CollectiveOp.ALL_GATHER, pieces))
            held = [held[j] * lengths[order[p]] for j, order in enumerate(self.orders())]
        return phases

    def _scatters(self, part: float, lengths: list[int]) -> list[Phase]:
        phases: list[Phase] = []
        held = [part] * len(lengths)
        k = len(lengths)
        for p in range(k):
            pieces = tuple((order[k - 1 - p], held[j] / lengths[order[k - 1 - p]])
                           for j, order in enumerate(self.orders()))
            phases.append((CollectiveOp.REDUCE_SCATTER, pieces))
            held = [unit for _, unit in pieces]
        return phases

    def time(self, call: CollectiveCall, costs: PhysicalCosts) -> float:
        """The closed form: launch plus, per phase, the slowest part."""
        rings = self.rings()
        total = costs.launch.of(call.op)
        for op, parts in self.phases(call):
            ring_op = RING_OPERATIONS[op]
            total += max(
                ring_op.move_time(unit, rings[piece], call.chunks,
                                  call.ring is Ring.UNIDIRECTIONAL and rings[piece].closed, costs)
                for piece, unit in parts
            )
        return total

    def plans(self, call: CollectiveCall, emb: RingEmbedding, keep: frozenset[int] | None = None) -> list[Plan]:
        """One plan per phase: every part's rings or lines of the group ``emb``; with ``keep``, only the lines
        that hold one of those ranks (``tpusim.engine.lines``: the others run alike and are left out)."""
        paths = {piece: [line for line in self._lines(emb, piece) if keep is None or not keep.isdisjoint(line[0])]
                 for piece in range(len(self.pieces))}
        plans = []
        for op, parts in self.phases(call):
            ring_op = RING_OPERATIONS[op]
            # the lines kept are folded too: the positions of one ring move alike (``PlanBuilder``'s ``fold``)
            builder = PlanBuilder(emb, call.ring, adds=ring_op.adds, fold=keep)
            for piece, unit in parts:
                for ranks, closed in paths[piece]:
                    self._build(builder, emb, ranks, closed, op, unit)
            plans.append(builder.finish(call.chunks))
        return plans

    def left_out_transfers(self, call: CollectiveCall, emb: RingEmbedding, keep: frozenset[int]) -> int:
        """The transfers of the lines ``plans`` leaves out with ``keep``: every line of a piece moves the same
        messages over as many hops (whole physical axes of a plain torus or mesh), so those of one line times the
        lines left out."""
        total = 0
        for op, parts in self.phases(call):
            ring_op = RING_OPERATIONS[op]
            for piece, unit in parts:
                lines = list(self._lines(emb, piece))
                left = sum(keep.isdisjoint(ranks) for ranks, _ in lines)
                if left:
                    builder = PlanBuilder(emb, call.ring, adds=ring_op.adds)
                    ranks, closed = lines[0]
                    self._build(builder, emb, ranks, closed, op, unit)
                    total += left * builder.finish(call.chunks).transfers
        return total

    def _build(self, builder: PlanBuilder, emb: RingEmbedding, ranks: list[int], closed: bool, op: CollectiveOp,
               unit: float) -> None:
        """One line's messages of a phase part."""
        chips = [emb.members[r] for r in ranks]
        hops = len(chips) if closed else len(chips) - 1
        pairs = [(chips[q], chips[(q + 1) % len(chips)]) for q in range(hops)]
        path = builder.path(ranks, [self.topology.route(a, b) for a, b in pairs],
                            [self.topology.route(b, a) for a, b in pairs], closed)
        RING_OPERATIONS[op].build_on(unit, builder, path)

    def _lines(self, emb: RingEmbedding, piece: int) -> Iterator[tuple[list[int], bool]]:
        """The ranks of ``emb`` along each line of physical axis ``pieces[piece]``, in axis order."""
        axis = self.pieces[piece].phys_axis
        lines: dict[tuple[int, ...], list[tuple[int, int]]] = {}
        for rank, chip in enumerate(emb.members):
            coord = self.topology.coord(chip)
            lines.setdefault(coord[:axis] + coord[axis + 1:], []).append((coord[axis], rank))
        closed = self.pieces[piece].is_cyclic(self.topology)
        for members in lines.values():
            yield [rank for _, rank in sorted(members)], closed

    def describe(self, call: CollectiveCall) -> str:
        """The schedule's name for results."""
        names = [p.label(self.topology.axis_names) for p in self.pieces]
        kind = "whole parts one way" if call.ring is Ring.UNIDIRECTIONAL else "halves both ways"
        return f"dimensional over {'*'.join(names)}: {len(names)} parts in rotated axis orders, {kind}"

