"""The physical network: directed ICI links, per-link collective plans, and the physical closed forms.

A logical mesh is placed on a TPUv4 slice or a generic torus or mesh (docs/network.md#tpuv4-slices-and-mapping).
A group collective waits out the launch overhead, then runs the per-link plan of each of its phases (an
all-reduce has two) through the executor: serialization holds a link, latency is pipelined after it
(docs/network.md#links). Plans depend only on the call and the group's embedding and are memoised on the
context. The twin is the operation's physical closed form where every ring step is one hop; multi-hop
embeddings (split axes, odd snakes) share links between groups and have none. All-gathers, reduce-scatters
and all-reduces over an axis of several whole physical axes take the dimensional schedule (module
:mod:`tpusim.collectives.dimensional`) unless the profile asks for the snake ring.

The model holds each link's bandwidth and latency (overrides applied), the closed forms' costs and the
dimensional schedules; the links' state of one run is the ``Simulation``'s (``idle_links`` builds it).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import simpy

from tpusim.collectives.batch import Program, merge_phases
from tpusim.collectives.call import CollectiveCall, PhysicalCosts, RingShape
from tpusim.collectives.dimensional import DIMENSIONAL_OPS, Dimensional
from tpusim.collectives.executor import HbmCharges, execute_program
from tpusim.collectives.network import Network, Placement, RankDone
from tpusim.collectives.operations import operation
from tpusim.collectives.plans import Plan
from tpusim.config import HardwareProfile, PhysicalProfile
from tpusim.engine.links import LinkArray
from tpusim.engine.simulation import Simulation
from tpusim.hardware.chip import ChipModel
from tpusim.topology import MeshMapping, default_slice, map_mesh, parse_topology
from tpusim.topology.pod import map_pod
from tpusim.topology.slices import TPUV4_RULES
from tpusim.units import dtype_bytes
from tpusim.vocabulary import MultiAxis

__all__ = ["PhysicalNetwork"]

# Collectives carry bytes, not dtypes; every reduced payload of the shipped workloads is a bf16 activation or
# gradient, so a reduction adds one element per 2 bytes.
REDUCED_ELEMENT_BYTES = dtype_bytes("bf16")
_MEMO_LIMIT = 20_000  # plans kept per context before the memo starts over


class PhysicalNetwork(Network):
    """Directed links with per-link accounting; see the module docstring."""

    rank_independent = False
    fixed_durations = False
    data_axis = True
    charges_dma = True

    def __init__(self, placement: Placement) -> None:
        super().__init__(placement)
        hardware, mapping = placement.hardware, placement.mapping
        assert isinstance(hardware, PhysicalProfile)
        self.profile: PhysicalProfile = hardware
        topology = mapping.topology
        assert topology is not None
        self.topology = topology
        ici = hardware.ici
        count = topology.num_links
        self.link_bandwidth = np.full(count, ici.achievable_bandwidth)  # one direction of each link, B/s
        self.link_latency = np.full(count, ici.hop_latency)
        for link, override in self.link_overrides.items():
            self.link_bandwidth[link] *= override.bandwidth_factor
            self.link_latency[link] *= override.latency_factor
        # what the closed forms charge on this network (every collective call resolves against it)
        self.costs = PhysicalCosts(
            bandwidth=ici.achievable_bandwidth, latency=ici.hop_latency, step=ici.step_overhead,
            launch=ici.launch_overhead, reduce_per_byte=self._reduction_per_byte(), max_chunks=ici.max_chunks,
        )
        # the dimensional schedule of each logical axis, where the profile asks for them
        self.schedules: dict[int, Dimensional | None] = (
            {axis.axis: Dimensional.of(axis, topology) for axis in mapping.axes}
            if hardware.multi_axis is MultiAxis.DIMENSIONAL else {})

    @classmethod
    def place(cls, hardware: HardwareProfile, rows: int, cols: int, *, topology: str | None = None,
              axis_map: str | None = None, data: int = 1, data_axes: str | None = None) -> MeshMapping:
        assert isinstance(hardware, PhysicalProfile)
        rules = hardware.slices or TPUV4_RULES
        chips = data * rows * cols
        physical = parse_topology(topology, rules) if topology is not None else default_slice(chips, rules)
        if data == 1 and data_axes is None:
            return map_mesh(physical, rows, cols, axis_map)
        return map_pod(physical, data, rows, cols, axis_map=axis_map, data_axes=data_axes).mesh

    def idle_links(self) -> LinkArray:
        """Every directed link idle, for one run."""
        return LinkArray(self.link_bandwidth.copy(), self.link_latency.copy(), self.profile.ici.step_overhead)

    def _reduction_per_byte(self) -> float:
        """Seconds a reduce-scatter or reduce step spends adding each received byte into the local buffer: the HBM
        passes or the vector unit, whichever is slower, for bf16 payloads; none where the profile charges no
        reductions (docs/network.md#software-costs)."""
        passes = self.profile.ici.reduction_passes
        return ChipModel(self.profile.chip).reduction_seconds_per_byte(passes, REDUCED_ELEMENT_BYTES) if passes else 0.0

    def resolve(self, call: CollectiveCall) -> CollectiveCall:
        """The call with the choices this network makes for it filled in (chunks, broadcast schedule)."""
        memo = self.context.memo
        key = ("resolved", call, self.ring(call.axis), self.costs)
        found = memo.get(key)
        if found is None:
            found = memo[key] = operation(call.op).resolve(call, self.ring(call.axis), self.costs)
        resolved: CollectiveCall = found
        return resolved

    def schedule(self, call: CollectiveCall) -> str:
        dimensional = self.dimensional(call)
        if dimensional is not None:
            return dimensional.describe(call)
        return operation(call.op).schedule(self.resolve(call), self.ring(call.axis))

    def dimensional(self, call: CollectiveCall) -> Dimensional | None:
        """The dimensional schedule ``call`` takes, or None where it runs on the axis's ring
        (docs/network.md#collectives-over-several-physical-axes)."""
        if self.profile.multi_axis is not MultiAxis.DIMENSIONAL or call.op not in DIMENSIONAL_OPS:
            return None
        return self.schedules[call.axis]

    def ring(self, axis: int) -> RingShape:
        """The shape the closed forms see of one group of ``axis``."""
        placed = self.mapping.axes[axis]
        return RingShape(placed.size, placed.closed, placed.max_hops)

    def twin(self, call: CollectiveCall) -> float | None:
        ring = self.ring(call.axis)
        if ring.size == 1:
            return 0.0
        dimensional = self.dimensional(call)
        if dimensional is not None:
            return dimensional.time(self.resolve(call), self.costs)
        if ring.max_hops > 1:
            return None  # multi-hop embeddings mix route lengths and share links between groups
        return operation(call.op).physical_time(self.resolve(call), ring, self.costs)

    def asymmetry(self, *, overrides: bool) -> str | None:
        if overrides:
            return "per-chip or per-link overrides break the symmetry between chips"
        topology = self.topology
        for axis in self.mapping.axes:
            if axis.size == 1:
                continue
            if (self.profile.multi_axis is MultiAxis.DIMENSIONAL and Dimensional.of(axis, topology) is not None
                    and any(p.length > 2 and not p.is_cyclic(topology) for p in axis.pieces)):
                return f"logical axis {axis.axis} crosses a physical axis without wraparound: ranks finish apart"
            if not axis.closed:
                return f"logical axis {axis.axis} is a line (no wraparound): ranks finish at different times"
            if axis.max_hops != 1 or axis.embedding == "split":
                return f"logical axis {axis.axis} is embedded with multi-hop steps; groups may share links"
        return None

    def start(self, sim: Simulation, call: CollectiveCall, group: int, ranks: Sequence[int],
              done: RankDone) -> None:
        batch = sim.starting.get(call)
        if batch is None:
            # groups that start the same call at this instant run as one program (module ``batch``)
            batch = sim.starting[call] = []
            sim.env.timeout(0).callbacks.append(lambda _: self._launch(sim, call))
        batch.append((group, done, tuple(ranks)))  # the ranks that joined: what a symmetric run keeps

    def _launch(self, sim: Simulation, call: CollectiveCall) -> None:
        batch = sim.starting.pop(call)
        dones = [done for _, done, _ in batch]
        groups = tuple(group for group, _, _ in batch)
        program = self.program(call, groups, tuple(self._kept(sim, call, ranks) for _, _, ranks in batch))
        sim.env.link_launches += 1
        sim.env.process(self._run(sim, call, program, dones))

    def _kept(self, sim: Simulation, call: CollectiveCall, ranks: tuple[int, ...]) -> frozenset[int] | None:
        """The ranks of a group a run that may leave lines out and fold rings keeps of ``call`` (those that joined,
        ``tpusim.engine.lines``), or None: every rank's messages run."""
        lines = sim.lines
        if lines is None or self.topology.twisted:
            return None  # lines and rings wrap onto others on a twisted torus
        if call.op not in DIMENSIONAL_OPS:  # a ring operation whose ranks do not move alike
            lines.ringing(call.axis)
            return None
        axis = self.mapping.axes[call.axis]
        if len(ranks) >= axis.size:
            return None
        if self.dimensional(call) is None and (not axis.closed or axis.max_hops != 1 or axis.embedding == "split"):
            return None  # a line, or a ring whose steps share links: positions do not move alike
        return frozenset(ranks) if lines.leaving_out(call.axis) else None

    def _run(self, sim: Simulation, call: CollectiveCall, program: Program, dones: list[RankDone]
             ) -> Generator[simpy.Event, Any, None]:
        env = sim.env
        overhead = self.profile.ici.launch_overhead.of(call.op)
        if overhead > 0 and not program.empty:  # nothing to move (a shift by 0): no launch
            yield env.timeout(overhead)
        size = program.size

        def done(rank: int, when: float) -> None:
            dones[rank // size](rank % size, when)

        links = sim.links
        assert links is not None  # the collective runtime set the idle links
        # the DMA shares HBM wherever the runtime set the simulation's HBM ledger up (charges_dma)
        hbm = (None if sim.hbm is None else
               HbmCharges(sim.hbm.ledger, self.topology, self.profile.ici.reduction_passes))
        body = execute_program(env, links, program, done, self.costs.reduce_per_byte, hbm,
                               background=call.background)
        tracer = sim.tracer
        yield env.process(body if tracer is None else tracer.link_program(body, call.axis, str(call.op)))

    def program(self, call: CollectiveCall, groups: tuple[int, ...],
                kept: tuple[frozenset[int] | None, ...] | None = None) -> Program:
        """The merged program of ``call`` on ``groups``, memoised on the context; of each group only the lines
        holding its ``kept`` ranks where given (``tpusim.engine.lines``), the others' transfers counted."""
        kept = kept if kept is not None else (None,) * len(groups)
        embeddings = tuple(self.mapping.axes[call.axis].groups[group] for group in groups)
        memo = self.context.memo
        key = ("program", tuple(id(e) for e in embeddings), call, kept)
        hit = memo.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], embeddings, strict=True)):
            return hit[1]  # type: ignore[no-any-return]
        if len(memo) > _MEMO_LIMIT:
            memo.clear()
        per_group = [self.plans(call, group, keep) for group, keep in zip(groups, kept, strict=True)]
        program = merge_phases(per_group, self.mapping.size(call.axis))
        dimensional = self.dimensional(call)
        left_out = 0 if dimensional is None else sum(
            dimensional.left_out_transfers(self.resolve(call), self.mapping.axes[call.axis].groups[group], keep)
            for group, keep in zip(groups, kept, strict=True) if keep is not None)
        left_out += sum(plan.folded_out for plans in per_group for plan in plans)
        if left_out:
            size = self.mapping.size(call.axis)
            members = np.zeros(size * len(groups), dtype=bool)
            members[program.src] = members[program.dst] = True
            for slot, keep in enumerate(kept):
                if keep is None:
                    members[slot * size:(slot + 1) * size] = True
            program = replace(program, elsewhere_transfers=left_out,
                              idle_reported=np.flatnonzero(members & (program.incoming == 0)))
        memo[key] = (embeddings, program)
        return program

    def plans(self, call: CollectiveCall, group: int, keep: frozenset[int] | None = None) -> list[Plan]:
        """The per-link plan of each phase of ``call`` on ``group`` (of a dimensional schedule, only the lines
        holding a rank of ``keep`` where given), memoised on the context."""
        embedding = self.mapping.axes[call.axis].groups[group]
        memo = self.context.memo
        key = ("plans", id(embedding), call, keep)
        hit = memo.get(key)
        if hit is not None and hit[0] is embedding:  # the stored embedding keeps its id from being reused
            return hit[1]  # type: ignore[no-any-return]
        if len(memo) > _MEMO_LIMIT:
            memo.clear()
        dimensional = self.dimensional(call)
        resolved = self.resolve(call)
        plans = (operation(call.op).plans(resolved, embedding, keep) if dimensional is None
                 else dimensional.plans(resolved, embedding, keep))
        memo[key] = (embedding, plans)
        return plans

    def trace_links(self, sim: Simulation) -> None:
        """Record every link transfer on its source chip's port track (``ICI +x`` ...), named by its collective."""
        topology = self.topology
        tracer, links = sim.tracer, sim.links
        assert tracer is not None and links is not None
        names = [
            f"ICI {'+' if topology.link_sign[link] > 0 else '-'}{topology.axis_names[topology.link_axis[link]]}"
            for link in range(topology.num_links)
        ]
        tracer.watch_links(links, names, topology.link_src, topology.link_dst)

    def busy_of(self, call: CollectiveCall, group: int) -> np.ndarray:
        # the executor sends every message whole over each hop of its route, holding the link as
        # LinkArray.hold does
        busy = np.zeros(len(self.link_bandwidth))
        overhead = self.profile.ici.step_overhead
        for plan in self.plans(call, group):
            on_route = np.arange(plan.route.shape[1]) < plan.hops[:, None]
            route = plan.route[on_route]
            nbytes = np.broadcast_to(plan.nbytes[:, None], plan.route.shape)[on_route]
            np.add.at(busy, route, nbytes / self.link_bandwidth[route] + overhead)
        return busy
