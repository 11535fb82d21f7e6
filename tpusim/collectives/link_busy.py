"""Per-directed-link busy time of a finished run, complete for every group even where only some were simulated.

A run asked for its link busy times (``--link-map``) passes a :class:`LinkBusy`; the simulation fills it with
seconds per directed link id, the topology they index and the span they cover. A full-fidelity run reads them off
its links. A symmetric run simulates one group per logical axis (the representative chip's); every other group
issues the same collectives (that is what makes symmetric fidelity exact), and a transfer holds its link for the
same time whenever it runs, so the links of the groups not simulated get exactly the busy time their own plans of
those collectives give (``Network.busy_of``), with no simulation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpusim.collectives.call import CollectiveCall
from tpusim.collectives.runtime import CollectiveRuntime
from tpusim.errors import SimulationError
from tpusim.topology.physical import PhysicalTopology

__all__ = ["LinkBusy", "run_link_busy"]


@dataclass
class LinkBusy:
    """What a run asked for its link busy times gets back: ``seconds`` per directed link id of ``topology``
    (None until a run on a network with links fills them) and ``scope``, the span they cover."""

    seconds: np.ndarray | None = None
    topology: PhysicalTopology | None = None
    scope: str = "the whole run"

    def fill(self, runtime: CollectiveRuntime, *, symmetric: bool, scope: str) -> None:
        """Take the busy seconds of the finished run of ``runtime`` (``run_link_busy``), covering ``scope``."""
        self.seconds, self.topology = run_link_busy(runtime, symmetric=symmetric), runtime.network.mapping.topology
        self.scope = scope


def run_link_busy(runtime: CollectiveRuntime, *, symmetric: bool) -> np.ndarray | None:
    """Seconds each directed link was busy in the finished run of ``runtime``, every group included; None on a
    network without links."""
    network = runtime.network
    busy = network.link_busy(runtime.sim)
    if busy is None or not symmetric:
        return busy
    started = [record for record in runtime.records if record.size > 1]
    simulated: dict[int, set[int]] = {}
    for record in started:
        simulated.setdefault(record.call.axis, set()).add(record.group)
    for axis, groups in simulated.items():
        if len(groups) > 1:
            # several simulated groups: nothing says which of them a group left out behaves like
            raise SimulationError(f"symmetric run simulated groups {sorted(groups)} of logical axis {axis}; "
                                  "its other groups' link busy times cannot be filled in")
    filled: dict[CollectiveCall, np.ndarray] = {}
    for record in started:
        extra = filled.get(record.call)
        if extra is None:
            extra = np.zeros(len(busy))
            for group in range(len(network.mapping.axes[record.call.axis].groups)):
                if group != record.group:
                    alike = network.busy_of(record.call, group)
                    assert alike is not None  # a network with link busy times has plans for them
                    extra += alike
            filled[record.call] = extra
        busy += extra
    return busy
