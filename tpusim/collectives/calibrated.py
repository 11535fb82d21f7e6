"""The calibrated network: the MeshSlice authors' abstract ring per logical axis and its fitted costs.

Every logical axis of every group is one abstract ring without physical links (docs/network.md#the-calibrated-network).
A collective holds its ring's channels for the operation's calibrated closed form; a one-way send holds only
its direction, so two opposite shifts run together while an all-gather excludes both. Reservations are made at
the simulated instant the collective is issued (first come, first served), so the twin is exact wherever
collectives do not queue, and every member of a group finishes together.
"""

from __future__ import annotations

from collections.abc import Sequence

import simpy

from tpusim.collectives.call import CollectiveCall
from tpusim.collectives.network import Network, RankDone
from tpusim.collectives.operations import operation
from tpusim.config import CalibratedProfile, HardwareProfile
from tpusim.engine.channels import ChannelArray
from tpusim.errors import TopologyError
from tpusim.topology import MeshMapping, abstract_mesh

__all__ = ["CalibratedNetwork"]

Keys = list[tuple[int, int, str]]


class CalibratedNetwork(Network):
    """Abstract per-axis rings with the authors' fitted costs; see the module docstring."""

    rank_independent = True
    fixed_durations = True
    data_axis = False

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

    @property
    def profile(self) -> CalibratedProfile:
        assert isinstance(self.hardware, CalibratedProfile)
        return self.hardware

    def twin(self, call: CollectiveCall) -> float:
        size = self.mapping.size(call.axis)
        if size == 1:
            return 0.0
        return operation(call.op).calibrated_time(call, size, self.profile.calibration)

    def asymmetry(self, *, overrides: bool) -> str | None:
        # every member of a group finishes a collective together, by construction
        return "per-chip or per-link overrides break the symmetry between chips" if overrides else None

    @property
    def channels(self) -> ChannelArray:
        found: ChannelArray | None = getattr(self, "_channels", None)
        if found is None:
            found = self._channels = ChannelArray()
            self._durations: dict[tuple[CollectiveCall, int], tuple[float, Keys]] = {}
        return found

    def reserve(self, call: CollectiveCall, group: int, now: float) -> float:
        channels = self.channels
        known = self._durations.get((call, group))
        if known is None:
            size = self.mapping.size(call.axis)
            keys = [(call.axis, group, d) for d in operation(call.op).channels(call, size)]
            known = self._durations[(call, group)] = (self.twin(call), keys)
        duration, keys = known
        return channels.reserve(keys, now, duration)[1]

    def start(self, env: simpy.Environment, call: CollectiveCall, group: int, ranks: Sequence[int],
              done: RankDone) -> None:
        end = self.reserve(call, group, env.now)
        for rank in ranks:
            done(rank, end)
