"""Matching the members' calls into group collectives and running them on the network.

Every chip's k-th collective on logical axis d joins instance k of its group on that axis. When the last
member joins, the instance starts (a collective launch is a rendezvous): on a physical network after the
launch overhead it runs its per-link plan; on the calibrated network it holds its axis channels for the
closed-form duration. Each member's handle fires when its own data is complete, carrying the tensor the
collective semantics give it. Instances whose members disagree on the operation are schedule bugs.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import simpy

from tpusim.collectives.analytic import calibrated_channels, calibrated_time
from tpusim.collectives.executor import execute_plan
from tpusim.collectives.ops import CollectiveCall, apply, result_shape
from tpusim.collectives.plans import Plan, build_plan
from tpusim.engine.simulation import Simulation
from tpusim.engine.tensor import Tensor
from tpusim.errors import SimulationError
from tpusim.vocabulary import Ring


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
    handles: dict[int, simpy.Event] = field(default_factory=dict)
    chips: dict[int, int] = field(default_factory=dict)


class CollectiveRuntime:
    """The collectives of one simulation."""

    def __init__(self, sim: Simulation, *, ring: Ring = Ring.BIDIRECTIONAL, chunks: int = 1,
                 representative: bool = False,
                 representatives: Sequence[tuple[int, int]] | None = None) -> None:
        self.sim = sim
        # symmetric fidelity: only representative chips run; a collective starts once the representatives
        # of its group have joined, every other member presumed to have joined no later (they behave alike)
        if representative and representatives is None:
            representatives = [(0, 0)]
        self.representatives = None if representatives is None else tuple(dict.fromkeys(representatives))
        self.representative = self.representatives is not None
        self._expected: dict[tuple[int, int], int] = {}
        # a lone representative on the calibrated network needs no rendezvous: its handle is a plain timeout
        self._direct = (self.representatives is not None and sim.calibrated and sim.tracer is None
                        and sim.hardware.overlap_slowdown == 1.0)
        self._durations: dict[tuple[CollectiveCall, int], tuple[float, list[tuple[int, int, str]]]] = {}
        for index in self.representatives or ():
            chip = sim.mapping.chip(*index)
            for axis in (0, 1):
                group = sim.mapping.group_of(axis, chip)[0]
                self._expected[(axis, group)] = self._expected.get((axis, group), 0) + 1
        self.ring = ring
        self.chunks = chunks
        self._seq: dict[tuple[int, int], int] = {}
        self._open: dict[tuple[int, int, int], _Instance] = {}
        self.records: list[CollectiveRecord] = []
        self.in_flight: dict[int, int] = {}
        self.comm_spans: dict[int, list[tuple[float, float]]] = {}
        if sim.tracer is not None and sim.links is not None and sim.topology is not None:
            _trace_links(sim)

    def submit(self, chip: int, call: CollectiveCall, tensor: Tensor) -> simpy.Event:
        """Chip ``chip`` joins its group's next collective on ``call.axis``; returns its handle."""
        sim = self.sim
        axis = call.axis
        group, rank = sim.mapping.group_of(axis, chip)
        size = sim.mapping.shape[axis]
        if self._direct and self._expected.get((axis, group)) == 1 and size > 1:
            return self._submit_alone(chip, call, tensor, group, size)
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
        handle = sim.env.event()
        # what the handle will deliver, known now from shapes alone (lets a GeMM start on a pending operand)
        handle.expected = result_shape(call, tensor, size)  # type: ignore[attr-defined]
        joined_at = sim.env.now
        handle.callbacks.append(
            lambda _: self.comm_spans.setdefault(chip, []).append((joined_at, sim.env.now))
        )
        instance.inputs[rank] = tensor
        instance.handles[rank] = handle
        instance.chips[rank] = chip
        sim.waiting[chip] = lambda: f"{call.op} on axis {axis} (group {group}, {len(instance.inputs)}/{size} joined)"
        members = self._expected.get((axis, group), 0) if self.representative else size
        if len(instance.inputs) == members:
            del self._open[key]
            self._start(instance)
        return handle

    def _submit_alone(self, chip: int, call: CollectiveCall, tensor: Tensor, group: int, size: int
                      ) -> simpy.Event:
        """The symmetric fast path: the closed-form duration on the group's channels, no per-member events."""
        sim = self.sim
        env = sim.env
        known = self._durations.get((call, group))
        if known is None:
            calibration = sim.hardware.calibration
            assert calibration is not None
            keys = [(call.axis, group, d) for d in calibrated_channels(call, size)]
            known = self._durations[(call, group)] = (calibrated_time(call, size, calibration), keys)
        duration, keys = known
        now = env.now
        _, end = sim.channels.reserve(keys, now, duration)
        self.comm_spans.setdefault(chip, []).append((now, end))
        value = result_shape(call, tensor, size)
        handle = env.timeout(end - now, value)
        handle.expected = value  # type: ignore[attr-defined]
        return handle

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
        if self.representative:
            # every presumed member passed the same shape; only the representative's result is needed
            outputs = {rank: result_shape(call, tensor, n) for rank, tensor in instance.inputs.items()}
        else:
            outputs = dict(enumerate(apply(call, [instance.inputs[r] for r in range(n)])))
        record = CollectiveRecord(call, instance.group, n, env.now)
        self.records.append(record)
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
                    sim.tracer.record(chip, f"collectives axis {call.axis}", str(call.op), record.start, when,
                                      bytes=call.nbytes, group=instance.group)
                instance.handles[rank].succeed(outputs[rank])

            env.timeout(max(when - env.now, 0.0)).callbacks.append(fire)

        if n == 1:
            finish(0, env.now)
        elif sim.calibrated:
            calibration = sim.hardware.calibration
            assert calibration is not None
            keys = [(call.axis, instance.group, d) for d in calibrated_channels(call, n)]
            _, end = sim.channels.reserve(keys, env.now, calibrated_time(call, n, calibration))
            for rank in list(instance.chips):
                finish(rank, end)
        else:
            env.process(self._run_physical(instance, finish))

    def _run_physical(self, instance: _Instance, finish: Callable[[int, float], None]
                      ) -> Generator[simpy.Event, Any, None]:
        sim = self.sim
        env = sim.env
        assert sim.links is not None
        overhead = sim.hardware.ici.launch_overhead
        if overhead > 0:
            yield env.timeout(overhead)
        phases = self._plans_for(instance.call, instance.group)
        for index, plan in enumerate(phases):
            last = index == len(phases) - 1
            end = yield env.process(execute_plan(env, sim.links, plan, finish if last else _ignore))
            if not last and end > env.now:
                yield env.timeout(end - env.now)

    def _plans_for(self, call: CollectiveCall, group: int) -> list[Plan]:
        embedding = self.sim.mapping.axes[call.axis].groups[group]
        return _plan_cache(call, embedding)


_PLANS: dict[tuple[int, CollectiveCall], tuple[object, list[Plan]]] = {}


def _plan_cache(call: CollectiveCall, embedding: object) -> list[Plan]:
    """Plans depend only on the call and the group's embedding; reuse them across simulations of one mapping."""
    key = (id(embedding), call)
    hit = _PLANS.get(key)
    if hit is not None and hit[0] is embedding:  # the stored embedding keeps its id from being reused
        return hit[1]
    if len(_PLANS) > 20_000:
        _PLANS.clear()
    plans = build_plan(call, embedding)  # type: ignore[arg-type]
    _PLANS[key] = (embedding, plans)
    return plans


def _ignore(rank: int, when: float) -> None:
    del rank, when


def _trace_links(sim: Simulation) -> None:
    """Record every link transfer on its source chip's port track (``ICI +x`` ...)."""
    topology = sim.topology
    tracer = sim.tracer
    assert topology is not None and tracer is not None and sim.links is not None
    names = [
        f"ICI {'+' if topology.link_sign[link] > 0 else '-'}{topology.axis_names[topology.link_axis[link]]}"
        for link in range(topology.num_links)
    ]
    sources = topology.link_src.tolist()

    def record(links, start, end) -> None:  # type: ignore[no-untyped-def]
        for link, s, e in zip(links.tolist(), start.tolist(), end.tolist(), strict=True):
            tracer.record(sources[link], names[link], "transfer", s, e, link=link)

    sim.links.on_transfer = record
