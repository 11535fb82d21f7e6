"""Matching the members' calls into group collectives and running them on the network.

Every chip's k-th collective on logical axis d joins instance k of its group on that axis. When the last
member joins, the instance starts (a collective launch is a rendezvous) on the network, which reports when
each rank's data is complete. Each member's handle fires then, carrying the tensor the operation's semantics
give it. Instances whose members disagree on the operation are schedule bugs.

A chip keeps at most the profile's overlap limit of collectives of each operation in flight
(docs/network.md#overlap-limits): the k-th call of an operation joins its instance only when the chip's
(k - limit)-th call of that operation has completed. Instances are matched in program order, whenever the
joins happen. A collective on a one-member group (a 1-wide axis) moves nothing and completes as it is issued;
it takes no slot, so it never waits behind the chip's other collectives of its operation.

In symmetric fidelity only representative chips run; a collective starts once its group's representatives
have joined, every other member presumed to have joined no later (they behave alike). A lone representative
on a network with fixed durations needs no rendezvous at all: its handle is a plain timeout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import simpy

from tpusim.collectives.call import CollectiveCall
from tpusim.collectives.dcn import DcnFabric
from tpusim.collectives.handles import Pending, PendingTimeout
from tpusim.collectives.network import Network
from tpusim.collectives.operations import operation
from tpusim.engine.hbm import SharedHbm
from tpusim.engine.simulation import Simulation
from tpusim.engine.tensor import Tensor
from tpusim.errors import SimulationError
from tpusim.topology.mapping import DATA_AXIS
from tpusim.vocabulary import CollectiveOp, Ring

__all__ = ["CollectiveRecord", "CollectiveRuntime"]


@dataclass
class CollectiveRecord:
    """One finished group collective, for breakdowns and tests."""

    call: CollectiveCall
    group: int
    size: int
    start: float
    end: float = 0.0


@dataclass
class _Instance:
    call: CollectiveCall
    group: int
    size: int
    inputs: dict[int, Tensor] = field(default_factory=dict)
    handles: dict[int, Pending] = field(default_factory=dict)
    chips: dict[int, int] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)  # by rank: the traced name, with the op that issued it
    joined: dict[int, float] = field(default_factory=dict)  # by rank, in a traced run: when the chip joined


class CollectiveRuntime:
    """The collectives of one simulation, on ``network``, the request's model the simulation was built on.

    ``share_hbm``: charge the DMA to the chips' HBM where the profile asks for contention
    (docs/chip.md#hbm-contention); a run without compute has nothing for it to slow and may skip the accounting."""

    def __init__(self, sim: Simulation, network: Network, *, ring: Ring = Ring.BIDIRECTIONAL,
                 chunks: int = 0, representatives: Sequence[tuple[int, ...]] | None = None,
                 share_hbm: bool = True) -> None:
        self.sim = sim
        self.network = network
        self.representatives = None if representatives is None else tuple(dict.fromkeys(representatives))
        self.representative = self.representatives is not None
        self._expected: dict[tuple[int, int], int] = {}
        self._direct = (self.representatives is not None and network.fixed_durations and sim.tracer is None
                        and sim.hardware.overlap_slowdown == 1.0)
        self.limits = sim.hardware.overlap_limits
        # the last calls, by chip and op (a tuple: one per host-mate a chip's DCN collective stands in for)
        self._issued: dict[tuple[int, CollectiveOp], list[simpy.Event | tuple[simpy.Event, ...]]] = {}
        self._ends: dict[tuple[int, CollectiveOp], list[float]] = {}  # the same on the direct path
        for index in self.representatives or ():
            chip = sim.mapping.chip(*index)
            for axis in range(len(sim.mapping.axes)):
                group = sim.mapping.group_of(axis, chip)[0]
                self._expected[(axis, group)] = self._expected.get((axis, group), 0) + 1
        self.ring = ring
        self.chunks = chunks
        self._seq: dict[tuple[int, int], int] = {}
        self._open: dict[tuple[int, int, int], _Instance] = {}
        self.records: list[CollectiveRecord] = []
        self.in_flight: dict[int, int] = {}
        self.comm_spans: dict[int, list[tuple[float, float]]] = {}
        self.data_spans: dict[int, list[tuple[float, float]]] = {}  # those of the data axis, a subset
        self.dcn_spans: dict[int, list[tuple[float, float]]] = {}  # those across slices over DCN, a subset of both
        self.dcn: DcnFabric | None = None  # the host links between slices, in a run with DCN axes
        if sim.links is None:  # the run's links start idle, from the model
            sim.links = network.idle_links()
        if sim.tracer is not None:
            network.trace_links(sim)
        spec = sim.hardware.chip
        if share_hbm and spec.dma_hbm_traffic > 0 and sim.hbm is None and network.charges_dma:
            sim.hbm = SharedHbm(sim.env, spec.achievable_hbm_bandwidth, spec.op_overhead, spec.dma_hbm_traffic)

    def submit(self, chip: int, call: CollectiveCall, tensor: Tensor) -> simpy.Event:
        """Chip ``chip`` joins its group's next collective on ``call.axis``; returns its handle."""
        sim = self.sim
        axis = call.axis
        group, rank = sim.mapping.group_of(axis, chip)
        size = sim.mapping.axes[axis].size
        if self._direct and self._expected.get((axis, group)) == 1 and size > 1:
            return self._submit_alone(chip, call, tensor, group, size)
        handle = Pending(sim.env, operation(call.op).result_shape(call, tensor, size))
        seq = self._seq.get((chip, axis), 0)
        self._seq[(chip, axis)] = seq + 1
        key = (axis, group, seq)
        instance = self._open.get(key)
        if instance is None:
            instance = self._open[key] = _Instance(call, group, size)
        elif instance.call != call:
            raise SimulationError(
                f"collective mismatch on axis {axis}, group {group}, call #{seq}: chip {chip} issued "
                f"{call.op} of {call.nbytes} B but the group started {instance.call.op} of {instance.call.nbytes} B"
            )
        if sim.tracer is not None:
            instance.names[rank] = sim.tracer.label(chip, str(call.op))
        # a one-member group moves nothing: like XLA, which drops it, it holds none of the chip's overlap slots
        gate = self._gate(chip, call.op, handle) if size > 1 else None
        if gate is None or gate.processed:
            self._join(instance, key, chip, rank, call, tensor, handle)
        else:
            sim.waiting[chip] = lambda: f"{call.op} on axis {axis}: waiting for an earlier {call.op} (overlap limit)"
            gate.callbacks.append(lambda _: self._join(instance, key, chip, rank, call, tensor, handle))
        return handle

    def _gate(self, chip: int, op: CollectiveOp, handle: simpy.Event) -> simpy.Event | None:
        """The earlier call of ``op`` on ``chip`` whose completion lets this one join, if the limit binds (a call
        stood in for mate by mate: once every mate's is complete, as the group of an ICI call waits for all)."""
        earlier = self._earlier(chip, op, (handle,))
        return simpy.AllOf(self.sim.env, earlier) if isinstance(earlier, tuple) else earlier

    def _gates(self, chip: int, op: CollectiveOp, handles: tuple[simpy.Event, ...]) -> list[simpy.Event | None]:
        """Per host-mate a DCN call stands in for, the earlier call whose completion lets its transfers start:
        the mate's own for a call stood in for mate by mate, the shared one for an ICI call."""
        earlier = self._earlier(chip, op, handles)
        return list(earlier) if isinstance(earlier, tuple) else [earlier] * len(handles)

    def _earlier(self, chip: int, op: CollectiveOp, handles: tuple[simpy.Event, ...]
                 ) -> simpy.Event | tuple[simpy.Event, ...] | None:
        """Record this call of ``op`` (one handle, or one per host-mate) and return the call ``limit`` before it."""
        limit = self.limits.of(op)
        if limit is None:
            return None
        issued = self._issued.setdefault((chip, op), [])
        earlier = issued[-limit] if len(issued) >= limit else None
        issued.append(handles if len(handles) > 1 else handles[0])
        del issued[:-limit]
        return earlier

    def _join(self, instance: _Instance, key: tuple[int, int, int], chip: int, rank: int, call: CollectiveCall,
              tensor: Tensor, handle: Pending) -> None:
        sim = self.sim
        axis, group, _ = key
        joined_at = sim.env.now
        handle.callbacks.append(lambda _: self._spent(chip, axis, joined_at, sim.env.now))
        if sim.tracer is not None:
            instance.joined[rank] = joined_at
        instance.inputs[rank] = tensor
        instance.handles[rank] = handle
        instance.chips[rank] = chip
        sim.waiting[chip] = lambda: (f"{call.op} on axis {axis} (group {group}, "
                                     f"{len(instance.inputs)}/{instance.size} joined)")
        members = self._expected.get((axis, group), 0) if self.representative else instance.size
        if len(instance.inputs) == members:
            del self._open[key]
            self._start(instance)

    def _submit_alone(self, chip: int, call: CollectiveCall, tensor: Tensor, group: int, size: int
                      ) -> simpy.Event:
        """The symmetric fast path: the fixed duration on the group's resources, no per-member events."""
        env = self.sim.env
        now = env.now
        start = now
        limit = self.limits.of(call.op)
        if limit is not None:
            ends = self._ends.setdefault((chip, call.op), [])
            if len(ends) >= limit:
                start = max(now, ends[-limit])
        end = self.network.reserve(self.sim, call, group, start)
        if limit is not None:
            ends.append(end)
            del ends[:-limit]
        self._spent(chip, call.axis, now, end)
        return PendingTimeout(env, end - now, operation(call.op).result_shape(call, tensor, size))

    def _spent(self, chip: int, axis: int, start: float, end: float) -> None:
        """Chip ``chip`` waited on a collective of ``axis`` from ``start`` to ``end``."""
        self.comm_spans.setdefault(chip, []).append((start, end))
        if axis == DATA_AXIS:
            self.data_spans.setdefault(chip, []).append((start, end))

    def dcn_collective(self, chip: int, op: CollectiveOp, nbytes: float, after: simpy.Event | None) -> simpy.Event:
        """Chip ``chip`` runs ``op`` across the slices over DCN once ``after`` has fired, under the chip's overlap
        limit for ``op`` (shared with the ICI collectives of the same operation); returns its handle."""
        if self.dcn is None:
            raise SimulationError("a DCN collective in a run without DCN axes")
        env = self.sim.env
        handles = tuple(env.event() for _ in range(self.dcn.mates))
        gates = self._gates(chip, op, handles)
        afters = [self._after(after, gate) for gate in gates]
        every, mates = self.dcn.collective(chip, op, nbytes, afters)
        for mate, finished in zip(mates, handles, strict=True):  # each mate's later calls wait for its own
            mate.callbacks.append(_succeeds(finished))
        return every

    def _after(self, *events: simpy.Event | None) -> simpy.Event | None:
        waits = [event for event in events if event is not None]
        return simpy.AllOf(self.sim.env, waits) if waits else None

    def dcn_spent(self, chip: int, start: float, end: float) -> None:
        """Chip ``chip``'s DCN collective ran from ``start`` to ``end`` (data-parallel communication too)."""
        self.comm_spans.setdefault(chip, []).append((start, end))
        self.data_spans.setdefault(chip, []).append((start, end))
        self.dcn_spans.setdefault(chip, []).append((start, end))

    def pending(self) -> list[str]:
        """Instances still waiting for members (a stalled schedule)."""
        return [
            f"{inst.call.op} on axis {axis} group {group} #{seq}: {len(inst.inputs)}/{inst.size} joined"
            for (axis, group, seq), inst in self._open.items()
        ]

    def _start(self, instance: _Instance) -> None:
        """All members have joined (or, in symmetric fidelity, are presumed to): run the collective."""
        sim = self.sim
        env = sim.env
        call, n = instance.call, instance.size
        semantics = operation(call.op)
        outputs: dict[int, Tensor | None]
        if self.representative:
            # every presumed member passed the same shape; only the representative's result is needed
            outputs = {rank: semantics.result_shape(call, tensor, n) for rank, tensor in instance.inputs.items()}
        else:
            outputs = dict(enumerate(semantics.apply(call, [instance.inputs[r] for r in range(n)])))
        record = CollectiveRecord(call, instance.group, n, env.now)
        self.records.append(record)
        if sim.tracer is not None and instance.names:
            sim.tracer.starting(call.axis, str(call.op), next(iter(instance.names.values())))
        for chip in instance.chips.values():
            self.in_flight[chip] = self.in_flight.get(chip, 0) + 1

        def finish(rank: int, when: float) -> None:
            chip = instance.chips.get(rank)
            if chip is None:  # a member only presumed, in symmetric fidelity
                return
            record.end = max(record.end, when)

            def fire(_: simpy.Event) -> None:
                self.in_flight[chip] -= 1
                sim.waiting.pop(chip, None)
                if sim.tracer is not None:
                    sim.tracer.collective(chip, call.axis, str(call.op), instance.names.get(rank, str(call.op)),
                                          record.start, when, call.nbytes, instance.group,
                                          record.start - instance.joined.get(rank, record.start))
                instance.handles[rank].succeed(outputs[rank])

            env.timeout(max(when - env.now, 0.0)).callbacks.append(fire)

        if n == 1:
            finish(0, env.now)
        else:
            self.network.start(sim, call, instance.group, list(instance.chips), finish)


def _succeeds(event: simpy.Event) -> Callable[[simpy.Event], None]:
    """A callback that triggers ``event``."""
    def trigger(_: simpy.Event) -> None:
        event.succeed()
    return trigger
