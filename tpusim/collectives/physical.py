"""The physical network: directed ICI links, per-link collective plans, and the physical closed forms.

A logical mesh is placed on a TPUv4 slice or a generic torus or mesh (docs/network.md#tpuv4-slices-and-mapping).
A group collective waits out the launch overhead, then runs the per-link plan of each of its phases (an
all-reduce has two) through the executor: serialization holds a link, latency is pipelined after it
(docs/network.md#links). Plans depend only on the call and the group's embedding and are memoised on the
context. The twin is the operation's physical closed form where every ring step is one hop; multi-hop
embeddings (split axes, odd snakes) share links between groups and have none.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import numpy as np
import simpy

from tpusim.collectives.call import CollectiveCall, RingShape
from tpusim.collectives.executor import execute_plan
from tpusim.collectives.network import LinkTotals, Network, RankDone
from tpusim.collectives.operations import operation
from tpusim.collectives.plans import Plan, PlanBuilder
from tpusim.config import HardwareProfile, PhysicalProfile
from tpusim.engine.links import LinkArray
from tpusim.engine.trace import Tracer
from tpusim.topology import MeshMapping, default_tpuv4_slice, map_mesh, parse_topology

__all__ = ["PhysicalNetwork"]

_MEMO_LIMIT = 20_000  # plans kept per context before the memo starts over


class PhysicalNetwork(Network):
    """Directed links with per-link accounting; see the module docstring."""

    rank_independent = False
    fixed_durations = False

    @classmethod
    def place(cls, hardware: HardwareProfile, rows: int, cols: int, *, topology: str | None = None,
              axis_map: str | None = None) -> MeshMapping:
        physical = parse_topology(topology) if topology is not None else default_tpuv4_slice(rows * cols)
        return map_mesh(physical, rows, cols, axis_map)

    @property
    def profile(self) -> PhysicalProfile:
        assert isinstance(self.hardware, PhysicalProfile)
        return self.hardware

    @property
    def links(self) -> LinkArray:
        """The state of every directed link, built on first use."""
        found: LinkArray | None = getattr(self, "_links", None)
        if found is None:
            topology = self.mapping.topology
            assert topology is not None
            count = topology.num_links
            bandwidth = np.full(count, self.profile.ici.link_bandwidth)
            latency = np.full(count, self.profile.ici.hop_latency)
            for link, override in self.link_overrides.items():
                bandwidth[link] *= override.bandwidth_factor
                latency[link] *= override.latency_factor
            found = self._links = LinkArray(bandwidth, latency)
        return found

    def ring(self, axis: int) -> RingShape:
        """The shape the closed forms see of one group of ``axis``."""
        placed = self.mapping.axes[axis]
        return RingShape(placed.size, placed.closed, placed.max_hops)

    def twin(self, call: CollectiveCall) -> float | None:
        ring = self.ring(call.axis)
        if ring.size == 1:
            return 0.0
        if ring.max_hops > 1:
            return None  # multi-hop embeddings mix route lengths and share links between groups
        return operation(call.op).physical_time(call, ring, self.profile.ici)

    def asymmetry(self, *, overrides: bool) -> str | None:
        if overrides:
            return "per-chip or per-link overrides break the symmetry between chips"
        for axis in self.mapping.axes:
            if axis.size == 1:
                continue
            if not axis.closed:
                return f"logical axis {axis.axis} is a line (no wraparound): ranks finish at different times"
            if axis.max_hops != 1 or axis.embedding == "split":
                return f"logical axis {axis.axis} is embedded with multi-hop steps; groups may share links"
        return None

    def start(self, env: simpy.Environment, call: CollectiveCall, group: int, ranks: Sequence[int],
              done: RankDone) -> None:
        del ranks  # the plan reports every rank of the group
        env.process(self._run(env, call, group, done))

    def _run(self, env: simpy.Environment, call: CollectiveCall, group: int, done: RankDone
             ) -> Generator[simpy.Event, Any, None]:
        overhead = self.profile.ici.launch_overhead
        if overhead > 0:
            yield env.timeout(overhead)
        phases = self.plans(call, group)
        for index, plan in enumerate(phases):
            last = index == len(phases) - 1
            end = yield env.process(execute_plan(env, self.links, plan, done if last else _ignore))
            if not last and end > env.now:
                yield env.timeout(end - env.now)

    def plans(self, call: CollectiveCall, group: int) -> list[Plan]:
        """The per-link plan of each phase of ``call`` on ``group``, memoised on the context."""
        embedding = self.mapping.axes[call.axis].groups[group]
        memo = self.context.memo
        key = ("plans", id(embedding), call)
        hit = memo.get(key)
        if hit is not None and hit[0] is embedding:  # the stored embedding keeps its id from being reused
            return hit[1]  # type: ignore[no-any-return]
        if len(memo) > _MEMO_LIMIT:
            memo.clear()
        size = len(embedding.members)
        plans = []
        for phase in operation(call.op).phases(call, size):
            builder = PlanBuilder(embedding, phase.ring)
            if size > 1:
                operation(phase.op).build(phase, builder)
            plans.append(builder.finish(call.chunks))
        memo[key] = (embedding, plans)
        return plans

    def trace_links(self, tracer: Tracer) -> None:
        """Record every link transfer on its source chip's port track (``ICI +x`` ...)."""
        topology = self.mapping.topology
        assert topology is not None
        names = [
            f"ICI {'+' if topology.link_sign[link] > 0 else '-'}{topology.axis_names[topology.link_axis[link]]}"
            for link in range(topology.num_links)
        ]
        sources = topology.link_src.tolist()

        def record(links: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
            for link, s, e in zip(links.tolist(), start.tolist(), end.tolist(), strict=True):
                tracer.record(sources[link], names[link], "transfer", s, e, link=link)

        self.links.on_transfer = record

    def totals(self, elapsed: float) -> LinkTotals:
        links = self.links
        return LinkTotals(
            bytes_sent=float(links.bytes.sum()),
            max_link_bytes=float(links.bytes.max(initial=0.0)),
            max_link_utilisation=float(links.utilisation(elapsed).max(initial=0.0)),
            transfers=links.transfers,
        )


def _ignore(rank: int, when: float) -> None:
    del rank, when
