"""The calibrated network: the MeshSlice authors' abstract ring per logical axis and its fitted costs.

Every logical axis of every group is one abstract ring without physical links (docs/network.md#the-calibrated-network).
A collective holds its ring's channels for the operation's calibrated closed form; a one-way send holds only
its direction, so two opposite shifts run together while an all-gather excludes both. Reservations are made at
the simulated instant the collective is issued (first come, first served), so the twin is exact wherever
collectives do not queue, and every member of a group finishes together. The channels of one run are the
``Simulation``'s.
"""

from __future__ import annotations

from collections.abc import Sequence

from tpusim.collectives.calibrated.closed_forms import calibrated_time, channels
from tpusim.collectives.call import CollectiveCall
from tpusim.collectives.network import Network, Placement, RankDone
from tpusim.config import CalibratedProfile, HardwareProfile
from tpusim.engine.simulation import Simulation
from tpusim.errors import TopologyError
from tpusim.topology import MeshMapping, abstract_mesh

__all__ = ["CalibratedNetwork"]

Keys = list[tuple[int, int, str]]


class CalibratedNetwork(Network):
    """Abstract per-axis rings with the authors' fitted costs; see the module docstring."""

    rank_independent = True
    fixed_durations = True
    data_axis = False
    charges_dma = False

    def __init__(self, placement: Placement) -> None:
        super().__init__(placement)
        hardware = placement.hardware
        assert isinstance(hardware, CalibratedProfile)
        self.profile: CalibratedProfile = hardware
        # each call's duration on a group and the channels it holds, as computed (they depend on the model only)
        self._durations: dict[tuple[CollectiveCall, int], tuple[float, Keys]] = {}

    @classmethod
    def place(cls, hardware: HardwareProfile, rows: int, cols: int, *, topology: str | None = None,
              axis_map: str | None = None, data: int = 1, data_axes: str | None = None) -> MeshMapping:
        if data != 1 or data_axes is not None:
            what = f"a D x R x C layout with D = {data}" if data != 1 else f"--data-axes {data_axes!r}"
            raise TopologyError(
                f"data parallelism ({what}) does not apply to calibrated profile "
                f"{hardware.name!r}, whose fitted costs describe one 2D mesh; use a physical profile such as 'tpuv4'"
            )
        if topology is not None or axis_map is not None:
            flag = "--topology" if topology is not None else "--axis-map"
            raise TopologyError(
                f"{flag} {topology if topology is not None else axis_map!r} does not apply to calibrated "
                f"profile {hardware.name!r}, which simulates one abstract ring per logical axis; "
                "use a physical profile such as 'tpuv4'"
            )
        return abstract_mesh(rows, cols)

    def twin(self, call: CollectiveCall) -> float:
        size = self.mapping.size(call.axis)
        if size == 1:
            return 0.0
        return calibrated_time(call, size, self.profile.calibration)

    def asymmetry(self, *, overrides: bool) -> str | None:
        # every member of a group finishes a collective together, by construction
        return "per-chip or per-link overrides break the symmetry between chips" if overrides else None

    def reserve(self, sim: Simulation, call: CollectiveCall, group: int, now: float) -> float:
        known = self._durations.get((call, group))
        if known is None:
            size = self.mapping.size(call.axis)
            keys = [(call.axis, group, d) for d in channels(call, size)]
            known = self._durations[(call, group)] = (self.twin(call), keys)
        duration, keys = known
        return sim.channels.reserve(keys, now, duration)[1]

    def start(self, sim: Simulation, call: CollectiveCall, group: int, ranks: Sequence[int],
              done: RankDone) -> None:
        end = self.reserve(sim, call, group, sim.env.now)
        for rank in ranks:
            done(rank, end)
