"""One simulated run: a SimPy environment, the chips, the tracer and the programs the chips run.

A ``Simulation`` is built on the request's network model (``Placement``: the hardware profile and the logical-mesh
mapping it holds). It owns every piece of state one run
changes: the chips, the tracer, the HBM the DMA shares, each chip's host link (``host``), and the network's run
state: the directed links (``links``, idle ones built by the network model when the collective runtime starts),
the calibrated network's channels, and the group collectives starting at this instant. The network model itself
(``tpusim.collectives.network``) is frozen and may be shared by any number of runs. Chip programs
are SimPy processes started with ``start``; ``run`` advances time until every program has finished and raises
``DeadlockError`` naming the stuck chips when the event queue empties first. Time advances through
``signals.run_events``, which stops the run between two events once SIGINT or SIGTERM arrived.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Hashable, Mapping
from typing import Any, Protocol

import simpy

from tpusim.config import HardwareProfile
from tpusim.engine.channels import ChannelArray
from tpusim.engine.chip import Chip
from tpusim.engine.hbm import SharedHbm
from tpusim.engine.host import HostLinks
from tpusim.engine.lines import LineSymmetry
from tpusim.engine.links import LinkArray
from tpusim.engine.signals import run_events
from tpusim.engine.trace import Tracer
from tpusim.errors import DeadlockError
from tpusim.hardware import ChipModel
from tpusim.topology import MeshMapping


class Placement(Protocol):
    """What a run needs of the network model it runs on (``tpusim.collectives.network.Network`` is one)."""

    @property
    def hardware(self) -> HardwareProfile: ...

    @property
    def mapping(self) -> MeshMapping: ...


RankDone = Callable[[int, float], None]
"""Called once per rank of a group collective with the simulated time its data is complete."""


LAUNCH_EVENTS = 6
"""Events one link program brings besides its wake-ups: the launch at its instant, the two processes that run it
(started and ended) and the launch overhead's timeout."""


class CountingEnvironment(simpy.Environment):
    """A SimPy environment that counts the events it processes, and among them the wake-ups of link programs
    (``collectives.executor``: one per distinct instant of a program, shared by every group it runs), which the
    cost estimates tell apart from the events each chip brings (``engine.footprint``)."""

    def __init__(self) -> None:
        super().__init__()
        self.events_processed = 0
        self.link_wakeups = 0
        self.link_launches = 0  # link programs started: each is a handful of events of its own (``LAUNCH_EVENTS``)
        # a cost probe's link events had every group of an axis started its collectives at its own instant
        self.link_events_apart = 0

    @property
    def link_events(self) -> int:
        """The events the link programs brought: their wake-ups and launches."""
        return self.link_wakeups + LAUNCH_EVENTS * self.link_launches

    def step(self) -> None:
        self.events_processed += 1
        super().step()


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
        network: Placement,
        *,
        tracer: Tracer | None = None,
        chip_slowdown: Mapping[int, float] | None = None,
        lines: LineSymmetry | None = None,
    ) -> None:
        self.env = CountingEnvironment()
        self.hardware = hardware = network.hardware
        self.chip_model = ChipModel(hardware.chip)
        self.mapping = mapping = network.mapping
        self.topology = mapping.topology
        self.tracer = tracer
        self.chips = ChipTable(mapping.num_chips, dict(chip_slowdown or {}))
        # set where the network charges its DMA to the HBM (``Network.charges_dma``); None: HBM is free for compute
        self.hbm: SharedHbm | None = None
        # each chip's link to host memory, where the profile has one (offloaded activations travel on it)
        host = hardware.host_link
        self.host: HostLinks | None = HostLinks(host.link_bandwidth) if host is not None else None
        # the network's run state: the directed links of a physical network (the collective runtime sets the
        # model's idle links), the channels of a calibrated one, and the groups that start a collective at this
        # instant, by call (they run as one program)
        self.links: LinkArray | None = None
        self.channels = ChannelArray()
        self.starting: dict[Hashable, list[tuple[int, RankDone, tuple[int, ...]]]] = {}
        # in a symmetric run, the dimensional lines left out because a kept one runs like them
        # (``tpusim.engine.lines``); None: every line runs
        self.lines = lines if tracer is None else None
        self._programs: list[tuple[int, simpy.Process]] = []
        # what each chip's program waits on, rendered only when a stall is reported (counts stay current)
        self.waiting: dict[int, Callable[[], str]] = {}

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
        run_events(self.env)
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
