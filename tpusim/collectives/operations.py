"""One class per collective operation: its data semantics, its per-link plan, and its two closed forms.

Every operation says what each rank holds afterwards (``apply``, from every rank's input in rank order; shapes
follow the same rules with or without data), how its data moves over one group's ring or line (``build``,
messages for a ``PlanBuilder``), how long that takes uncontended on a physical ring of directed links
(``physical_time``, docs/network.md#physical-closed-forms) and under the MeshSlice authors' calibrated
per-axis model (``calibrated_time``, docs/network.md#the-calibrated-network), and which directions of the
abstract axis ring it holds there (``channels``).

Bytes follow ``unit_bytes``: the per-rank shard for all-gather, the output shard for reduce-scatter and
all-reduce, one part for all-to-all, the message for the rest.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import ClassVar

import numpy as np

from tpusim.collectives.call import CollectiveCall, RingShape
from tpusim.collectives.plans import PlanBuilder
from tpusim.config import Calibration, IciSpec, OpCalibration
from tpusim.engine.tensor import Tensor, add, concat
from tpusim.topology import ring_way
from tpusim.vocabulary import CollectiveOp, Ring

__all__ = ["OPERATIONS", "Operation", "operation"]


def _uni(call: CollectiveCall, ring: RingShape) -> bool:
    """Whether the call runs one way only: a unidirectional variant on a closed ring (lines go both ways)."""
    return call.ring is Ring.UNIDIRECTIONAL and ring.closed


def _chain(nbytes: float, hops: int, chunks: int, bandwidth: float, latency: float) -> float:
    """One message through ``hops`` store-and-forward links in ``chunks`` pipelined chunks."""
    if hops == 0:
        return 0.0
    return (nbytes / bandwidth) * (1 + (hops - 1) / chunks) + hops * latency


def _ring_steps(steps: int, nbytes: float, chunks: int, bandwidth: float, latency: float) -> float:
    """``steps`` one-hop ring steps of ``nbytes``, each chunk forwarded as soon as it arrives."""
    if steps == 0:
        return 0.0
    t = nbytes / chunks / bandwidth
    return (steps - 1) * max(t + latency, chunks * t) + chunks * t + latency


def _fit_steps(fit: OpCalibration, axis: int, steps: int, nbytes: float) -> float:
    """The authors' ring: alpha + steps (s / beta[axis] + lambda)."""
    return fit.launch_overhead + steps * (nbytes / fit.bandwidth[axis] + fit.step_latency)


def _fit_pipelined(fit: OpCalibration, axis: int, steps: int, nbytes: float) -> float:
    """The authors' cut-through broadcast and reduce: alpha + s / beta[axis] + steps lambda."""
    return fit.launch_overhead + nbytes / fit.bandwidth[axis] + steps * fit.step_latency


class Operation(ABC):
    """A collective operation (see the module docstring)."""

    op: ClassVar[CollectiveOp]

    def unit_bytes(self, call: CollectiveCall, size: int) -> float:
        """The size the cost formulas use; the message for most operations."""
        del size
        return float(call.nbytes)

    def result_shape(self, call: CollectiveCall, tensor: Tensor, size: int) -> Tensor:
        """The shape (no data) a member's handle delivers, from its own input alone; cheap, for timing."""
        del call, size
        return Tensor(tensor.shape, tensor.dtype)

    def phases(self, call: CollectiveCall, size: int) -> list[CollectiveCall]:
        """The calls run one after another on the links (two for an all-reduce)."""
        del size
        return [call]

    def channels(self, call: CollectiveCall, size: int) -> tuple[str, ...]:
        """Directions of the abstract axis ring the operation holds on the calibrated network."""
        del call, size
        return ("+", "-")

    @abstractmethod
    def apply(self, call: CollectiveCall, inputs: Sequence[Tensor]) -> list[Tensor | None]:
        """The tensor each rank holds afterwards, given every rank's input in rank order."""

    @abstractmethod
    def build(self, call: CollectiveCall, plan: PlanBuilder) -> None:
        """Add the messages of one group (one phase) to ``plan``."""

    @abstractmethod
    def physical_time(self, call: CollectiveCall, ring: RingShape, ici: IciSpec) -> float | None:
        """Uncontended time on a ring of one-hop steps (``ring.size`` > 1), or None where no form is claimed."""

    @abstractmethod
    def calibrated_time(self, call: CollectiveCall, size: int, calibration: Calibration) -> float:
        """The authors' closed form on a logical axis of ``size`` > 1 chips."""


class AllGather(Operation):
    op = CollectiveOp.ALL_GATHER

    def result_shape(self, call: CollectiveCall, tensor: Tensor, size: int) -> Tensor:
        shape = list(tensor.shape)
        shape[call.dim] *= size
        return Tensor(tuple(shape), tensor.dtype)

    def apply(self, call: CollectiveCall, inputs: Sequence[Tensor]) -> list[Tensor | None]:
        return [concat(inputs, call.dim)] * len(inputs)

    def build(self, call: CollectiveCall, plan: PlanBuilder) -> None:
        unit = self.unit_bytes(call, plan.size)
        if plan.closed:
            plan.ring_both_ways(plan.size - 1, unit)
        else:
            plan.line_relay(lambda p: np.full(len(p), unit), True)
            plan.line_relay(lambda p: np.full(len(p), unit), False)

    def physical_time(self, call: CollectiveCall, ring: RingShape, ici: IciSpec) -> float | None:
        s = self.unit_bytes(call, ring.size)
        half = s if _uni(call, ring) or not ring.closed else s / 2
        return ici.launch_overhead + _ring_steps(ring.size - 1, half, call.chunks, ici.link_bandwidth,
                                                 ici.hop_latency)

    def calibrated_time(self, call: CollectiveCall, size: int, calibration: Calibration) -> float:
        return _fit_steps(calibration.all_gather, call.axis, size - 1, self.unit_bytes(call, size))


class ReduceScatter(Operation):
    op = CollectiveOp.REDUCE_SCATTER

    def unit_bytes(self, call: CollectiveCall, size: int) -> float:
        return call.nbytes / size

    def result_shape(self, call: CollectiveCall, tensor: Tensor, size: int) -> Tensor:
        shape = list(tensor.shape)
        shape[call.dim] //= size
        return Tensor(tuple(shape), tensor.dtype)

    def apply(self, call: CollectiveCall, inputs: Sequence[Tensor]) -> list[Tensor | None]:
        return list(add(inputs).split(call.dim, len(inputs)))

    def build(self, call: CollectiveCall, plan: PlanBuilder) -> None:
        unit, n = self.unit_bytes(call, plan.size), plan.size
        if plan.closed:
            plan.ring_both_ways(n - 1, unit)
            return
        # a line reduces toward every rank from both ends: chains that queue on the end links
        for dest in range(n - 1, 0, -1):
            plan.chain(list(range(0, dest + 1)), unit)
        for dest in range(0, n - 1):
            plan.chain(list(range(n - 1, dest - 1, -1)), unit)

    def physical_time(self, call: CollectiveCall, ring: RingShape, ici: IciSpec) -> float | None:
        s, n = self.unit_bytes(call, ring.size), ring.size
        bw, lat, c = ici.link_bandwidth, ici.hop_latency, call.chunks
        if ring.closed:
            return ici.launch_overhead + _ring_steps(n - 1, s if _uni(call, ring) else s / 2, c, bw, lat)
        longest = _chain(s, n - 1, c, bw, lat)
        shortest = (n - 2) * s / bw + _chain(s, 1, c, bw, lat)
        return ici.launch_overhead + max(longest, shortest)

    def calibrated_time(self, call: CollectiveCall, size: int, calibration: Calibration) -> float:
        return _fit_steps(calibration.reduce_scatter, call.axis, size - 1, self.unit_bytes(call, size))


class AllReduce(Operation):
    """A reduce-scatter, then an all-gather of the reduced shards."""

    op = CollectiveOp.ALL_REDUCE

    def unit_bytes(self, call: CollectiveCall, size: int) -> float:
        return call.nbytes / size

    def phases(self, call: CollectiveCall, size: int) -> list[CollectiveCall]:
        return [replace(call, op=CollectiveOp.REDUCE_SCATTER),
                replace(call, op=CollectiveOp.ALL_GATHER, nbytes=call.nbytes // size)]

    def apply(self, call: CollectiveCall, inputs: Sequence[Tensor]) -> list[Tensor | None]:
        return [add(inputs)] * len(inputs)

    def build(self, call: CollectiveCall, plan: PlanBuilder) -> None:
        raise AssertionError("an all-reduce is planned as its two phases")

    def physical_time(self, call: CollectiveCall, ring: RingShape, ici: IciSpec) -> float | None:
        parts = [OPERATIONS[p.op].physical_time(p, ring, ici) for p in self.phases(call, ring.size)]
        return None if None in parts else sum(p for p in parts if p is not None)

    def calibrated_time(self, call: CollectiveCall, size: int, calibration: Calibration) -> float:
        s = self.unit_bytes(call, size)
        return (_fit_steps(calibration.reduce_scatter, call.axis, size - 1, s)
                + _fit_steps(calibration.all_gather, call.axis, size - 1, s))


class AllToAll(Operation):
    op = CollectiveOp.ALL_TO_ALL

    def unit_bytes(self, call: CollectiveCall, size: int) -> float:
        return call.nbytes / size

    def apply(self, call: CollectiveCall, inputs: Sequence[Tensor]) -> list[Tensor | None]:
        n = len(inputs)
        parts = [t.split(call.dim, n) for t in inputs]
        return [concat([parts[src][dst] for src in range(n)], call.dim) for dst in range(n)]

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

    def physical_time(self, call: CollectiveCall, ring: RingShape, ici: IciSpec) -> float | None:
        if call.chunks > 1:
            return None  # chunks of different parts interleave on each link
        part, n, bw, lat = self.unit_bytes(call, ring.size), ring.size, ici.link_bandwidth, ici.hop_latency
        if ring.closed:
            ahead = n - 1 if _uni(call, ring) else n // 2
            return ici.launch_overhead + sum(lat + (ahead - k) * part / bw for k in range(ahead))
        return ici.launch_overhead + (n - 1) * lat + n * (n - 1) / 2 * part / bw

    def calibrated_time(self, call: CollectiveCall, size: int, calibration: Calibration) -> float:
        # an assumption: the authors fitted no all-to-all; a ring of n-1 steps of one part on the AG fit
        return _fit_steps(calibration.all_gather, call.axis, size - 1, self.unit_bytes(call, size))


class _RootedChain(Operation):
    """Broadcast and reduce: one message along the ring from (or to) the root, both ways where it can."""

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

    def physical_time(self, call: CollectiveCall, ring: RingShape, ici: IciSpec) -> float | None:
        n, root = ring.size, call.root % ring.size
        reach = (n - 1 if _uni(call, ring) else n // 2) if ring.closed else max(root, n - 1 - root)
        return ici.launch_overhead + _chain(self.unit_bytes(call, n), reach, call.chunks, ici.link_bandwidth,
                                            ici.hop_latency)


class Broadcast(_RootedChain):
    op = CollectiveOp.BROADCAST

    def apply(self, call: CollectiveCall, inputs: Sequence[Tensor]) -> list[Tensor | None]:
        return [inputs[call.root]] * len(inputs)

    def calibrated_time(self, call: CollectiveCall, size: int, calibration: Calibration) -> float:
        return _fit_pipelined(calibration.all_gather, call.axis, size - 1, self.unit_bytes(call, size))


class Reduce(_RootedChain):
    op = CollectiveOp.REDUCE

    def apply(self, call: CollectiveCall, inputs: Sequence[Tensor]) -> list[Tensor | None]:
        total = add(inputs)
        return [total if r == call.root else None for r in range(len(inputs))]

    def calibrated_time(self, call: CollectiveCall, size: int, calibration: Calibration) -> float:
        return _fit_pipelined(calibration.reduce_scatter, call.axis, size - 1, self.unit_bytes(call, size))


class _PointToPoint(Operation):
    """Shift and send/recv: messages between ranks along the way ``ring_way`` chooses."""

    @abstractmethod
    def endpoints(self, call: CollectiveCall, size: int) -> tuple[int, int]:
        """(source, destination) rank of the message rank 0 sends (shift) or of the one message."""

    def steps(self, call: CollectiveCall, ring: RingShape) -> int:
        src, dst = self.endpoints(call, ring.size)
        return ring_way(ring.size, src, dst, closed=ring.closed, forward_only=_uni(call, ring))[1]

    def channels(self, call: CollectiveCall, size: int) -> tuple[str, ...]:
        src, dst = self.endpoints(call, size)
        return ("+",) if ring_way(size, src, dst, closed=True)[0] else ("-",)

    def calibrated_time(self, call: CollectiveCall, size: int, calibration: Calibration) -> float:
        src, dst = self.endpoints(call, size)
        steps = ring_way(size, src, dst, closed=True)[1]  # the abstract ring has no one-way variant
        if steps == 0:
            return 0.0
        return _fit_steps(calibration.send_recv, calibration.send_recv_axis, steps, self.unit_bytes(call, size))


class Shift(_PointToPoint):
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

    def physical_time(self, call: CollectiveCall, ring: RingShape, ici: IciSpec) -> float | None:
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
        return ici.launch_overhead + _chain(self.unit_bytes(call, n), reach, call.chunks, ici.link_bandwidth,
                                            ici.hop_latency)


class SendRecv(_PointToPoint):
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

    def physical_time(self, call: CollectiveCall, ring: RingShape, ici: IciSpec) -> float | None:
        reach = self.steps(call, ring)
        if reach == 0:
            return 0.0
        return ici.launch_overhead + _chain(self.unit_bytes(call, ring.size), reach, call.chunks,
                                            ici.link_bandwidth, ici.hop_latency)


OPERATIONS: MappingProxyType[CollectiveOp, Operation] = MappingProxyType({
    operation.op: operation
    for operation in (AllGather(), ReduceScatter(), AllReduce(), AllToAll(), Broadcast(), Reduce(), Shift(),
                      SendRecv())
})


def operation(op: CollectiveOp) -> Operation:
    """The operation class instance of ``op``."""
    return OPERATIONS[op]
