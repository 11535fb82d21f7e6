"""The network model of one request: how a group collective moves, and what it costs in closed form.

Two implementations exist, one per kind of hardware profile: ``PhysicalNetwork`` (directed ICI links,
per-link plans, the physical closed forms) and ``CalibratedNetwork`` (the MeshSlice authors' abstract ring per
logical axis with its fitted per-op, per-axis costs). Everything above this layer talks to the interface:
placing a logical mesh (``place_mesh``), starting a group collective, its uncontended twin, what makes groups
differ (for the symmetric fidelity), and what the links carried. Each implementation lives in its own package
(``tpusim.collectives.physical``, ``tpusim.collectives.calibrated``); ``tpusim.collectives.factory`` builds the
one a profile describes (``network_for``, ``place_mesh``), and nothing else asks which kind a profile is.

A model is frozen once built: every attribute is set in ``__init__`` and never changes (plans are memoised on the
context). What one run changes (the links, the channels, the groups starting a collective at this instant, the
HBM the DMA shares and the tracer) belongs to that run's ``Simulation``, which every method that runs a
collective takes, so one model serves every simulated window of a request.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np

from tpusim.collectives.call import CollectiveCall
from tpusim.config import HardwareProfile
from tpusim.engine.context import Context
from tpusim.engine.links import LinkArray, LinkOverride
from tpusim.engine.simulation import RankDone, Simulation
from tpusim.topology import MeshMapping

__all__ = ["LinkTotals", "Network", "Placement", "RankDone"]


@dataclass(frozen=True)
class Placement:
    """What a network model is built from, as one value: the profile, the logical mesh placed on its network, the
    context its plans are memoised on (None: a fresh one) and per-link overrides. Built by the factory
    (``tpusim.collectives.factory``) and derived by ``Network.over``, so the profile and its placement travel
    together."""

    hardware: HardwareProfile
    mapping: MeshMapping
    context: Context | None = None
    link_overrides: Mapping[int, LinkOverride] = field(default_factory=dict)


@dataclass(frozen=True)
class LinkTotals:
    """What the directed links carried during a run (field meanings: docs/results.md#result-fields)."""

    bytes_sent: float
    max_link_bytes: float
    max_link_utilisation: float
    transfers: int


class Network(ABC):
    """The interconnect of one simulated cluster: a frozen model, shared by every run of a request."""

    rank_independent: ClassVar[bool]
    """Whether a collective takes the same time whatever the root and every member finishes together, so a
    chip's position never changes its schedule's timing (schedules with rotating roots or per-rank skews
    then need only representative chips)."""

    fixed_durations: ClassVar[bool]
    """Whether a collective's duration is known when it is issued (then a lone representative needs no
    rendezvous: ``reserve`` times it directly)."""

    data_axis: ClassVar[bool]
    """Whether a D x R x C layout, with its data axis, can be placed on this kind of network (``takes_data_axis``)."""

    charges_dma: ClassVar[bool]
    """Whether the network's DMA is charged to the chips' HBM (a network without links has no DMA to charge)."""

    def __init__(self, placement: Placement) -> None:
        self.hardware = placement.hardware
        self.mapping = placement.mapping
        self.context = placement.context if placement.context is not None else Context()
        self.link_overrides = dict(placement.link_overrides)

    def over(self, mapping: MeshMapping, *, context: Context | None = None) -> Network:
        """The model of the same profile over another placement (any mapping ``place`` made for this profile, of
        any slice shape), on ``context`` (default: this model's), without link overrides (which name this
        placement's links): one replica's R x C mesh of a pod layout, the one-hop relaxation the tuner bounds
        multi-hop embeddings with, or a candidate mesh of the tuner. This model where it already is that one."""
        context = context if context is not None else self.context
        if mapping is self.mapping and context is self.context and not self.link_overrides:
            return self
        return type(self)(Placement(self.hardware, mapping, context))

    def on(self, context: Context) -> Network:
        """This model on ``context`` (a worker process's, holding its caches), link overrides and all."""
        if context is self.context:
            return self
        return type(self)(Placement(self.hardware, self.mapping, context, self.link_overrides))

    def __reduce__(self) -> tuple[Any, ...]:
        """A model pickles as its placement without the context, which holds one process's caches: a worker process
        rebuilds the model on a fresh context and puts it on its own with ``on``."""
        return type(self), (Placement(self.hardware, self.mapping, None, self.link_overrides),)

    @classmethod
    @abstractmethod
    def place(cls, hardware: HardwareProfile, rows: int, cols: int, *, topology: str | None = None,
              axis_map: str | None = None, data: int = 1, data_axes: str | None = None) -> MeshMapping:
        """The logical ``rows x cols`` mesh (``data`` replicas of it, D x R x C, on the ``data_axes``) placed on
        this kind of network."""

    @abstractmethod
    def twin(self, call: CollectiveCall) -> float | None:
        """Uncontended time of ``call`` on one group of its axis, or None where no closed form is claimed."""

    @abstractmethod
    def asymmetry(self, *, overrides: bool) -> str | None:
        """Why chips or groups of this network may behave differently, or None when they cannot."""

    @abstractmethod
    def start(self, sim: Simulation, call: CollectiveCall, group: int, ranks: Sequence[int],
              done: RankDone) -> None:
        """Run ``call`` on ``group`` of its axis from now in ``sim``; report the completion of at least the
        ``ranks`` that have members running through ``done``."""

    def resolve(self, call: CollectiveCall) -> CollectiveCall:
        """The call with every choice this network makes for it filled in (one chunk unless asked, on an
        abstract ring)."""
        return call if call.chunks else replace(call, chunks=1)

    def schedule(self, call: CollectiveCall) -> str:
        """How ``call`` moves its data on this network, for results."""
        del call
        return "abstract ring (calibrated)"

    def reserve(self, sim: Simulation, call: CollectiveCall, group: int, now: float) -> float:
        """Where ``fixed_durations``: hold the group's resources in ``sim`` for the call from ``now``; return its
        end."""
        raise NotImplementedError(f"{type(self).__name__} has no fixed collective durations")

    def idle_links(self) -> LinkArray | None:
        """A fresh state of every directed link, idle, for one run; None on a network without links."""
        return None

    def trace_links(self, sim: Simulation) -> None:
        """Record every link transfer of ``sim`` into its tracer (a network without links records nothing)."""
        del sim

    def totals(self, sim: Simulation, elapsed: float) -> LinkTotals | None:
        """What the links of ``sim`` carried so far, or None on a network without links."""
        links = sim.links
        if links is None:
            return None
        return LinkTotals(
            bytes_sent=float(links.bytes.sum()),
            max_link_bytes=float(links.bytes.max(initial=0.0)),
            max_link_utilisation=float(links.utilisation(elapsed).max(initial=0.0)),
            transfers=links.transfers,
        )

    def link_busy(self, sim: Simulation) -> np.ndarray | None:
        """Seconds each directed link (by link id) of ``sim`` has been busy so far, or None on a network without
        links."""
        return None if sim.links is None else sim.links.busy.copy()

    def busy_of(self, call: CollectiveCall, group: int) -> np.ndarray | None:
        """Seconds each directed link would be busy running ``call`` on ``group`` of its axis, or None on a
        network without links. A transfer holds its link for the same time whenever it runs, so this needs no
        simulation (it completes the links of groups a symmetric run did not simulate)."""
        del call, group
        return None


def __getattr__(name: str) -> object:
    """The factory's names, still importable from here (``tpusim.collectives.factory`` builds models)."""
    if name in _FACTORY:
        from tpusim.collectives import factory

        return getattr(factory, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_FACTORY = ("network_for", "place_mesh", "takes_data_axis")
