"""A physical network for cost probes: every distinct collective runs once on idle links, then stands in for itself.

A cost probe (``gemm.estimate``, ``model.estimate``) runs chip programs to count the events a run will process.
Most of a probe's own time would go to the link programs, which repeat: the same call on the same group takes the
same time and wakes its link program as often, whenever it runs. ``ProbeNetwork`` therefore simulates each distinct
(call, group) once, alone on idle links, and from then on completes every member at the times that run gave,
adding the events that link program brought to the probe's counts without processing them: once per instant
a call starts (groups that start it together share a link program), and apart, as if every group of the axis
started it at an instant of its own (``CountingEnvironment.link_events_apart``), for runs whose chips drift.
Collectives that overlap in the probe do not contend for links: a probe counts events, it does not time the run.
"""

from __future__ import annotations

from collections.abc import Sequence

from tpusim.collectives.call import CollectiveCall
from tpusim.collectives.network import Network, RankDone
from tpusim.collectives.physical.network import PhysicalNetwork
from tpusim.engine.lines import LineSymmetry
from tpusim.engine.simulation import LAUNCH_EVENTS, Simulation

__all__ = ["ProbeNetwork", "probe_network"]


def probe_network(network: Network) -> Network:
    """The network a probe runs on: a physical one standing in for its collectives, any other as it is (a
    calibrated network's collectives are fixed durations on channels, already cheap). A probe's events are those it
    processed plus the link events its network stood in for (``CountingEnvironment.link_events``)."""
    if isinstance(network, ProbeNetwork) or not isinstance(network, PhysicalNetwork):
        return network
    return ProbeNetwork(network)


class ProbeNetwork(PhysicalNetwork):
    """``network``'s model, its collectives standing in for their first run (module docstring)."""

    def __init__(self, network: PhysicalNetwork) -> None:
        self.__dict__.update(network.__dict__)
        self._alone: dict[tuple[CollectiveCall, int, tuple[int, ...]], tuple[list[float], int, int]] = {}
        self._started: dict[CollectiveCall, tuple[Simulation, float]] = {}  # the last run and instant it started

    def start(self, sim: Simulation, call: CollectiveCall, group: int, ranks: Sequence[int],
              done: RankDone) -> None:
        joined = tuple(sorted(set(ranks)))
        key = (call, group, joined)
        if key not in self._alone:
            self._alone[key] = self._run_alone(call, group, joined)
        durations, wakeups, launches = self._alone[key]
        brought = wakeups + LAUNCH_EVENTS * launches
        last = self._started.get(call)
        if last is None or last[0] is not sim or last[1] != sim.now:  # groups starting together share a program
            self._started[call] = (sim, sim.now)
            sim.env.link_wakeups += wakeups
            sim.env.link_launches += launches
            # where chips drift apart, each group of the axis may start it at an instant of its own
            sim.env.link_events_apart += brought * len(self.mapping.axes[call.axis].groups)
        for rank in joined:  # the ranks that joined: in a symmetric run, the others are only presumed
            done(rank, sim.now + durations[rank])

    def _run_alone(self, call: CollectiveCall, group: int, joined: tuple[int, ...]) -> tuple[list[float], int, int]:
        """(each rank's duration, the link program's wake-ups and launches) of ``call`` on ``group`` alone, the
        ranks ``joined`` running (the dimensional lines of the others left out, ``tpusim.engine.lines``)."""
        alone = Simulation(self, lines=LineSymmetry())
        alone.links = self.idle_links()
        size = self.mapping.size(call.axis)
        ends = [0.0] * size

        def finished(rank: int, when: float) -> None:
            ends[rank] = when

        PhysicalNetwork.start(self, alone, call, group, list(joined), finished)
        alone.env.run()
        return ends, alone.env.link_wakeups, alone.env.link_launches
