"""The simulation context: a SimPy environment, the chips, the links and the programs they run.

A ``Simulation`` is built from a hardware profile and a logical-mesh mapping. On a physical network it
holds one ``LinkArray`` entry per directed ICI link of the topology; on the abstract calibrated network
it holds per-axis channels instead (see ``channels``). Chip programs are SimPy processes started with
``start``; ``run`` advances time until every program has finished and raises ``DeadlockError`` naming
the stuck chips when the event queue empties first.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from tpusim.config import HardwareProfile
from tpusim.engine.channels import ChannelArray
from tpusim.engine.chip import Chip
from tpusim.engine.links import LinkArray
from tpusim.engine.trace import Tracer
from tpusim.errors import DeadlockError
from tpusim.hardware import ChipModel
from tpusim.topology import MeshMapping


class CountingEnvironment(simpy.Environment):
    """A SimPy environment that counts the events it processes."""

    def __init__(self) -> None:
        super().__init__()
        self.events_processed = 0

    def step(self) -> None:
        self.events_processed += 1
        super().step()


@dataclass(frozen=True)
class LinkOverride:
    """Scale one directed link's bandwidth and latency (a what-if: a slow or degraded link)."""

    bandwidth_factor: float = 1.0
    latency_factor: float = 1.0


class ChipTable(dict[int, Chip]):
    """Chips by id, created on first use: a symmetric run touches only its representatives."""

    def __init__(self, count: int, slowdown: dict[int, float]) -> None:
        super().__init__()
        self.count = count
        self.slowdown = slowdown

    def __missing__(self, chip: int) -> Chip:
        if not 0 <= chip < self.count:
            raise KeyError(chip)
        created = self[chip] = Chip(chip, self.slowdown.get(chip, 1.0))
        return created

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.values())


class Simulation:
    """Everything one simulated run shares."""

    def __init__(
        self,
        hardware: HardwareProfile,
        mapping: MeshMapping,
        *,
        tracer: Tracer | None = None,
        chip_slowdown: Mapping[int, float] | None = None,
        link_overrides: Mapping[int, LinkOverride] | None = None,
    ) -> None:
        self.env = CountingEnvironment()
        self.hardware = hardware
        self.chip_model = ChipModel(hardware.chip)
        self.mapping = mapping
        self.topology = mapping.topology
        self.tracer = tracer
        self.calibrated = hardware.kind == "calibrated"
        num_chips = mapping.shape[0] * mapping.shape[1]
        self.chips = ChipTable(num_chips, dict(chip_slowdown or {}))
        self.links: LinkArray | None = None
        self.channels = ChannelArray()
        if not self.calibrated:
            if self.topology is None:
                raise ValueError("a physical hardware profile needs a physical topology")
            self.links = self._build_links(link_overrides or {})
        self._programs: list[tuple[int, simpy.Process]] = []
        # what each chip's program waits on, rendered only when a stall is reported (counts stay current)
        self.waiting: dict[int, Callable[[], str]] = {}

    def _build_links(self, overrides: Mapping[int, LinkOverride]) -> LinkArray:
        assert self.topology is not None
        count = self.topology.num_links
        bandwidth = np.full(count, self.hardware.ici.link_bandwidth)
        latency = np.full(count, self.hardware.ici.hop_latency)
        for link, override in overrides.items():
            bandwidth[link] *= override.bandwidth_factor
            latency[link] *= override.latency_factor
        return LinkArray(bandwidth, latency)

    @property
    def now(self) -> float:
        return self.env.now

    def start(self, chip: int, program: Generator[Any, Any, Any]) -> simpy.Process:
        """Run ``program`` as chip ``chip``'s process."""
        process = self.env.process(program)
        self._programs.append((chip, process))
        return process

    def run(self) -> float:
        """Advance until every program finished; return the time the last one finished."""
        self.env.run()
        stuck = [(chip, p) for chip, p in self._programs if p.is_alive]
        if stuck:
            chips = sorted({chip for chip, _ in stuck})
            shown = ", ".join(f"chip {c}: {self._describe(c)}" for c in chips[:8])
            more = f" (+{len(chips) - 8} more)" if len(chips) > 8 else ""
            raise DeadlockError(
                f"simulation stalled at t={self.env.now:.9g} s with {len(chips)} chip program(s) still "
                f"waiting: {shown}{more}"
            )
        return self.env.now

    def _describe(self, chip: int) -> str:
        describe = self.waiting.get(chip)
        return describe() if describe is not None else "a local operation"

    @property
    def events(self) -> int:
        return self.env.events_processed
