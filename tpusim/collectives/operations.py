"""One class per collective operation: its data semantics, its per-link plan, and its physical closed form.

Every operation says what each rank holds afterwards (``apply``, from every rank's input in rank order; shapes
follow the same rules with or without data), how its data moves over one group's ring or line (``plans``:
per-link messages, in phases that run one after another), and how long that takes uncontended on a physical ring
of directed links (``physical_time``, docs/network.md#physical-closed-forms). The calibrated network's closed
forms are its own (``tpusim.collectives.calibrated.closed_forms``).

On a physical network each transfer holds its link for its bytes at the link bandwidth plus the software
handshake of a step; the hop latency follows, pipelined; a reduction adds what arrives at the HBM rate before
the sum moves on; every collective starts with its launch overhead. A broadcast or reduce is a pipelined chain
cut into the chunk count that minimises its closed form, or a scatter and all-gather (reduce-scatter and
gather) where that is faster (``resolve``; the result names the schedule).

Bytes follow ``unit_bytes``: the per-rank shard for all-gather, the output shard for reduce-scatter and
all-reduce, one part for all-to-all, the message for the rest.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import ClassVar

from tpusim.collectives.call import CollectiveCall, PhysicalCosts, RingShape
from tpusim.collectives.plans import Path, Plan, PlanBuilder
from tpusim.engine.tensor import Tensor, add, concat
from tpusim.topology import RingEmbedding, ring_way
from tpusim.vocabulary import CollectiveOp, Ring

__all__ = ["OPERATIONS", "RING_OPERATIONS", "SCATTER_GATHER", "Operation", "PointToPoint", "operation"]

SCATTER_GATHER = "scatter-gather"


def _uni(call: CollectiveCall, ring: RingShape) -> bool:
    """Whether the call runs one way only: a unidirectional variant on a closed ring (lines go both ways)."""
    return call.ring is Ring.UNIDIRECTIONAL and ring.closed


def _chain(nbytes: float, hops: int, chunks: int, costs: PhysicalCosts, adds: bool) -> float:
    """One message through ``hops`` store-and-forward links in ``chunks`` pipelined chunks (added at every hop
    when ``adds``)."""
    if hops == 0:
        return 0.0
    piece = nbytes / chunks
    t = costs.transfer(piece)
    p = piece * costs.reduce_per_byte if adds else 0.0
    return hops * (t + costs.latency + p) + (chunks - 1) * t


def _ring_steps(steps: int, nbytes: float, chunks: int, costs: PhysicalCosts, adds: bool) -> float:
    """``steps`` one-hop ring steps of ``nbytes``, each chunk forwarded (after its addition) as soon as it
    arrives; the last arrival is added too."""
    if steps == 0:
        return 0.0
    piece = nbytes / chunks
    t = costs.transfer(piece)
    p = piece * costs.reduce_per_byte if adds else 0.0
    return (steps - 1) * max(t + costs.latency + p, chunks * t) + chunks * t + costs.latency + p


class Operation(ABC):
    """A collective operation (see the module docstring)."""

    op: ClassVar[CollectiveOp]
    adds: ClassVar[bool] = False
    """Whether the data a rank receives is added into what it holds (a reduction)."""

    def unit_bytes(self, call: CollectiveCall, size: int) -> float:
        """The size the cost formulas use; the message for most operations."""
        del size
        return float(call.nbytes)

    def result_shape(self, call: CollectiveCall, tensor: Tensor, size: int) -> Tensor:
        """The shape (no data) a member's handle delivers, from its own input alone; cheap, for timing."""
        del call, size
        return Tensor(tensor.shape, tensor.dtype)


    def resolve(self, call: CollectiveCall, ring: RingShape, costs: PhysicalCosts) -> CollectiveCall:
        """The call with every choice the physical network makes filled in (one chunk unless asked)."""
        del ring, costs
        return call if call.chunks else replace(call, chunks=1)

    def schedule(self, call: CollectiveCall, ring: RingShape) -> str:
        """How a resolved call moves its data over one group shaped ``ring``, for results."""
        if not ring.closed:
            return "line, whole shards relayed both ways"
        if call.ring is Ring.UNIDIRECTIONAL:
            return "ring, whole shards one way"
        return "ring, halves both ways"

    def plans(self, call: CollectiveCall, emb: RingEmbedding, fold: frozenset[int] | None = None) -> list[Plan]:
        """The per-link plan of each phase of a resolved call on one group; its ring steps keep only the positions
        of the ranks in ``fold`` where given (``PlanBuilder``: only for operations whose ranks all move alike)."""
        builder = PlanBuilder(emb, call.ring, adds=self.adds, fold=fold)
        if builder.size > 1:
            self.build(call, builder)
        return [builder.finish(call.chunks)]

    @abstractmethod
    def apply(self, call: CollectiveCall, inputs: Sequence[Tensor]) -> list[Tensor | None]:
        """The tensor each rank holds afterwards, given every rank's input in rank order."""

    @abstractmethod
    def build(self, call: CollectiveCall, plan: PlanBuilder) -> None:
        """Add the messages of one group (one phase) to ``plan``."""

    @abstractmethod
    def physical_time(self, call: CollectiveCall, ring: RingShape, costs: PhysicalCosts) -> float | None:
        """Uncontended time of a resolved call on a ring of one-hop steps (``ring.size`` > 1), or None where no
        form is claimed."""


class _RingCollective(Operation):
    """All-gather and reduce-scatter: n - 1 ring steps (halves both ways on a closed ring)."""

    def ring_time(self, call: CollectiveCall, ring: RingShape, costs: PhysicalCosts) -> float:
        """The data movement alone (no launch overhead)."""
        return self.move_time(self.unit_bytes(call, ring.size), ring, call.chunks, _uni(call, ring), costs)

    def move_time(self, unit: float, ring: RingShape, chunks: int, one_way: bool, costs: PhysicalCosts) -> float:
        """The data movement of ``unit`` bytes per rank (the formulas' unit) over one ring or line."""
        n = ring.size
        if n <= 1:
            return 0.0
        if ring.closed:
            return _ring_steps(n - 1, unit if one_way else unit / 2, chunks, costs, self.adds)
        return self.line_time(unit, n, chunks, costs)

    @abstractmethod
    def line_time(self, s: float, n: int, chunks: int, costs: PhysicalCosts) -> float:
        """The data movement on a line of ``n`` chips (no wraparound)."""

    @abstractmethod
    def build_on(self, unit: float, plan: PlanBuilder, path: Path) -> None:
        """Add the messages of one ring or line of ``path``, ``unit`` bytes per rank (the formulas' unit)."""

    def physical_time(self, call: CollectiveCall, ring: RingShape, costs: PhysicalCosts) -> float | None:
        return costs.launch.of(self.op) + self.ring_time(call, ring, costs)


class AllGather(_RingCollective):
    op = CollectiveOp.ALL_GATHER

    def result_shape(self, call: CollectiveCall, tensor: Tensor, size: int) -> Tensor:
        shape = list(tensor.shape)
        shape[call.dim] *= size
        return Tensor(tuple(shape), tensor.dtype)

    def apply(self, call: CollectiveCall, inputs: Sequence[Tensor]) -> list[Tensor | None]:
        return [concat(inputs, call.dim)] * len(inputs)

    def build(self, call: CollectiveCall, plan: PlanBuilder) -> None:
        plan.gather_all(self.unit_bytes(call, plan.size))

    def build_on(self, unit: float, plan: PlanBuilder, path: Path) -> None:
        plan.gather_all(unit, path)

    def line_time(self, s: float, n: int, chunks: int, costs: PhysicalCosts) -> float:
        return _ring_steps(n - 1, s, chunks, costs, False)


class ReduceScatter(_RingCollective):
    op = CollectiveOp.REDUCE_SCATTER
    adds = True

    def unit_bytes(self, call: CollectiveCall, size: int) -> float:
        return call.nbytes / size

    def result_shape(self, call: CollectiveCall, tensor: Tensor, size: int) -> Tensor:
        shape = list(tensor.shape)
        shape[call.dim] //= size
        return Tensor(tuple(shape), tensor.dtype)

    def apply(self, call: CollectiveCall, inputs: Sequence[Tensor]) -> list[Tensor | None]:
        return list(add(inputs).split(call.dim, len(inputs)))

    def build(self, call: CollectiveCall, plan: PlanBuilder) -> None:
        plan.scatter_reduce(self.unit_bytes(call, plan.size))

    def build_on(self, unit: float, plan: PlanBuilder, path: Path) -> None:
        plan.scatter_reduce(unit, path)

    def line_time(self, s: float, n: int, chunks: int, costs: PhysicalCosts) -> float:
        longest = _chain(s, n - 1, chunks, costs, True)
        shortest = (n - 2) * chunks * costs.transfer(s / chunks) + _chain(s, 1, chunks, costs, True)
        return max(longest, shortest)


class AllReduce(Operation):
    """A reduce-scatter, then an all-gather of the reduced shards, under one launch."""

    op = CollectiveOp.ALL_REDUCE

    def unit_bytes(self, call: CollectiveCall, size: int) -> float:
        return call.nbytes / size

    def halves(self, call: CollectiveCall, size: int) -> tuple[CollectiveCall, CollectiveCall]:
        """The reduce-scatter and the all-gather it is made of."""
        return (replace(call, op=CollectiveOp.REDUCE_SCATTER),
                replace(call, op=CollectiveOp.ALL_GATHER, nbytes=call.nbytes // size))

    def plans(self, call: CollectiveCall, emb: RingEmbedding, fold: frozenset[int] | None = None) -> list[Plan]:
        return [plan for half in self.halves(call, len(emb.members))
                for plan in OPERATIONS[half.op].plans(half, emb, fold)]

    def apply(self, call: CollectiveCall, inputs: Sequence[Tensor]) -> list[Tensor | None]:
        return [add(inputs)] * len(inputs)

    def build(self, call: CollectiveCall, plan: PlanBuilder) -> None:
        raise AssertionError("an all-reduce is planned as its two halves")

    def physical_time(self, call: CollectiveCall, ring: RingShape, costs: PhysicalCosts) -> float | None:
        scatter, gather = self.halves(call, ring.size)
        return (costs.launch.of(self.op) + RING_OPERATIONS[scatter.op].ring_time(scatter, ring, costs)
                + RING_OPERATIONS[gather.op].ring_time(gather, ring, costs))


class AllToAll(Operation):
    op = CollectiveOp.ALL_TO_ALL

    def unit_bytes(self, call: CollectiveCall, size: int) -> float:
        return call.nbytes / size

    def apply(self, call: CollectiveCall, inputs: Sequence[Tensor]) -> list[Tensor | None]:
        n = len(inputs)
        parts = [t.split(call.dim, n) for t in inputs]
        return [concat([parts[src][dst] for src in range(n)], call.dim) for dst in range(n)]

    def schedule(self, call: CollectiveCall, ring: RingShape) -> str:
        return f"{'ring' if ring.closed else 'line'} relay, the remaining parts forwarded each step"

    def build(self, call: CollectiveCall, plan: PlanBuilder) -> None:
        unit, n = self.unit_bytes(call, plan.size), plan.size
        if plan.closed:
            ahead = n - 1 if plan.uni else n // 2
            behind = 0 if plan.uni else (n - 1) // 2
            plan.ring_steps(ahead, [(ahead - s) * unit for s in range(ahead)], True)
            if behind:
                plan.ring_steps(behind, [(behind - s) * unit for s in range(behind)], False)
        else:
            plan.line_relay(lambda p: (n - 1 - p) * unit, True)
            plan.line_relay(lambda p: p * unit, False)

    def physical_time(self, call: CollectiveCall, ring: RingShape, costs: PhysicalCosts) -> float | None:
        if call.chunks > 1:
            return None  # chunks of different parts interleave on each link
        part, n = self.unit_bytes(call, ring.size), ring.size
        launch, a, step = costs.launch.of(self.op), costs.latency, costs.step
        if ring.closed:
            ahead = n - 1 if _uni(call, ring) else n // 2
            return launch + sum(a + costs.transfer((ahead - k) * part) for k in range(ahead))
        return launch + (n - 1) * (a + step) + n * (n - 1) / 2 * part / costs.bandwidth


class _Rooted(Operation):
    """Broadcast and reduce: a pipelined chain from (to) the root both ways round, or a scatter and an
    all-gather (a reduce-scatter and a gather), whichever the closed forms say is faster."""

    def reach(self, call: CollectiveCall, ring: RingShape) -> int:
        """Hops of the longer of the two chains."""
        n, root = ring.size, call.root % ring.size
        if ring.closed:
            return n - 1 if _uni(call, ring) else n // 2
        return max(root, n - 1 - root)

    def chain_chunks(self, call: CollectiveCall, ring: RingShape, costs: PhysicalCosts) -> int:
        """The chunk count minimising the chain's closed form: its time is a + b / c + c s, s the handshake."""
        hops, nbytes = self.reach(call, ring), self.unit_bytes(call, ring.size)
        if hops <= 1:
            return 1
        spread = (hops - 1) * nbytes / costs.bandwidth + (hops * nbytes * costs.reduce_per_byte if self.adds else 0)
        best = costs.max_chunks if costs.step <= 0 else math.sqrt(spread / costs.step)
        if not best < costs.max_chunks:  # also an infinite or NaN spread (a reduce at 1e-308 x the vector rate)
            best = costs.max_chunks
        candidates = {max(1, min(costs.max_chunks, c)) for c in (math.floor(best), math.ceil(best))}
        return min(candidates, key=lambda c: (_chain(nbytes, hops, c, costs, self.adds), c))

    def resolve(self, call: CollectiveCall, ring: RingShape, costs: PhysicalCosts) -> CollectiveCall:
        if call.chunks or call.variant or ring.size <= 2:
            return replace(call, chunks=call.chunks or 1)
        chained = replace(call, chunks=self.chain_chunks(call, ring, costs))
        split = replace(call, chunks=1, variant=SCATTER_GATHER)
        # the scatter-gather form runs round a closed ring and needs a whole number of bytes per rank
        if call.nbytes % ring.size or not ring.closed:
            return chained
        times = [(self.physical_time(c, ring, costs) or math.inf, index, c) for index, c in enumerate((chained, split))]
        return min(times)[2]

    def schedule(self, call: CollectiveCall, ring: RingShape) -> str:
        del ring
        if call.variant == SCATTER_GATHER:
            return ("scatter, then ring all-gather" if self.op is CollectiveOp.BROADCAST
                    else "ring reduce-scatter, then gather")
        return f"pipelined chain, {call.chunks} chunk{'s' if call.chunks != 1 else ''}"

    def plans(self, call: CollectiveCall, emb: RingEmbedding, fold: frozenset[int] | None = None) -> list[Plan]:
        del fold  # a rooted operation's ranks do not move alike
        if call.variant != SCATTER_GATHER:
            return super().plans(call, emb)
        n = len(emb.members)
        piece = call.nbytes / n
        spread = PlanBuilder(emb, call.ring, adds=False)
        spread.rooted(call.root % n, piece, outward=self.op is CollectiveOp.BROADCAST)
        ring = PlanBuilder(emb, call.ring, adds=self.adds)
        ring.ring_both_ways(n - 1, piece)
        phases = [spread, ring] if self.op is CollectiveOp.BROADCAST else [ring, spread]
        return [phase.finish(call.chunks) for phase in phases]

    def build(self, call: CollectiveCall, plan: PlanBuilder) -> None:
        n, root = plan.size, call.root % plan.size
        if plan.closed:
            ahead = n - 1 if plan.uni else n // 2
            behind = 0 if plan.uni else (n - 1) // 2
            paths = ([root + q for q in range(ahead + 1)], [root - q for q in range(behind + 1)])
        else:
            paths = (list(range(root, n)), list(range(root, -1, -1)))
        for path in paths:
            if len(path) > 1:
                plan.chain(path if self.op is CollectiveOp.BROADCAST else path[::-1], self.unit_bytes(call, n))

    def physical_time(self, call: CollectiveCall, ring: RingShape, costs: PhysicalCosts) -> float | None:
        n = ring.size
        launch = costs.launch.of(self.op)
        if call.variant == SCATTER_GATHER:
            piece = call.nbytes / n
            far = n - 1 if _uni(call, ring) else n // 2
            spread = far * (costs.transfer(piece) + costs.latency)
            around = _ring_steps(n - 1, piece if _uni(call, ring) else piece / 2, 1, costs, self.adds)
            return launch + spread + around
        return launch + _chain(self.unit_bytes(call, n), self.reach(call, ring), call.chunks, costs, self.adds)


class Broadcast(_Rooted):
    op = CollectiveOp.BROADCAST

    def apply(self, call: CollectiveCall, inputs: Sequence[Tensor]) -> list[Tensor | None]:
        return [inputs[call.root]] * len(inputs)


class Reduce(_Rooted):
    op = CollectiveOp.REDUCE
    adds = True

    def apply(self, call: CollectiveCall, inputs: Sequence[Tensor]) -> list[Tensor | None]:
        total = add(inputs)
        return [total if r == call.root else None for r in range(len(inputs))]


class PointToPoint(Operation):
    """Shift and send/recv: messages between ranks along the way ``ring_way`` chooses."""

    @abstractmethod
    def endpoints(self, call: CollectiveCall, size: int) -> tuple[int, int]:
        """(source, destination) rank of the message rank 0 sends (shift) or of the one message."""

    def steps(self, call: CollectiveCall, ring: RingShape) -> int:
        src, dst = self.endpoints(call, ring.size)
        return ring_way(ring.size, src, dst, closed=ring.closed, forward_only=_uni(call, ring))[1]

    def schedule(self, call: CollectiveCall, ring: RingShape) -> str:
        del ring
        return f"direct, {call.chunks} chunk{'s' if call.chunks != 1 else ''} store-and-forward"


class Shift(PointToPoint):
    op = CollectiveOp.SHIFT

    def endpoints(self, call: CollectiveCall, size: int) -> tuple[int, int]:
        return 0, call.offset % size

    def apply(self, call: CollectiveCall, inputs: Sequence[Tensor]) -> list[Tensor | None]:
        n = len(inputs)
        return [inputs[(r - call.offset) % n] for r in range(n)]

    def build(self, call: CollectiveCall, plan: PlanBuilder) -> None:
        n = plan.size
        if call.offset % n:
            for p in range(n):
                plan.direct(p, (p + call.offset) % n, self.unit_bytes(call, n))

    def physical_time(self, call: CollectiveCall, ring: RingShape, costs: PhysicalCosts) -> float | None:
        n, offset = ring.size, call.offset % ring.size
        if offset == 0:
            return 0.0
        if ring.closed:
            reach = self.steps(call, ring)
            shared = reach > 1
        else:
            reach = max(offset, n - offset)
            shared = 1 < offset < n - 1
        if shared and call.chunks > 1:
            return None  # several messages cross each link and their chunks interleave
        return costs.launch.of(self.op) + _chain(self.unit_bytes(call, n), reach, call.chunks, costs, False)


class SendRecv(PointToPoint):
    op = CollectiveOp.SEND_RECV

    def endpoints(self, call: CollectiveCall, size: int) -> tuple[int, int]:
        return call.root % size, call.offset % size

    def apply(self, call: CollectiveCall, inputs: Sequence[Tensor]) -> list[Tensor | None]:
        n = len(inputs)
        return [inputs[call.root] if r == call.offset % n else None for r in range(n)]

    def build(self, call: CollectiveCall, plan: PlanBuilder) -> None:
        src, dst = self.endpoints(call, plan.size)
        if src != dst:
            plan.direct(src, dst, self.unit_bytes(call, plan.size))

    def physical_time(self, call: CollectiveCall, ring: RingShape, costs: PhysicalCosts) -> float | None:
        reach = self.steps(call, ring)
        if reach == 0:
            return 0.0
        return costs.launch.of(self.op) + _chain(self.unit_bytes(call, ring.size), reach, call.chunks, costs, False)


RING_OPERATIONS: MappingProxyType[CollectiveOp, _RingCollective] = MappingProxyType({
    CollectiveOp.ALL_GATHER: AllGather(), CollectiveOp.REDUCE_SCATTER: ReduceScatter(),
})

OPERATIONS: MappingProxyType[CollectiveOp, Operation] = MappingProxyType({
    **RING_OPERATIONS,
    **{operation.op: operation
       for operation in (AllReduce(), AllToAll(), Broadcast(), Reduce(), Shift(), SendRecv())},
})


def operation(op: CollectiveOp) -> Operation:
    """The operation class instance of ``op``."""
    return OPERATIONS[op]
