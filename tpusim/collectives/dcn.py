"""Collectives across slices over the data-centre network (DCN): host links as SimPy resources, and their twins.

S slices of one generation, each an identical ICI slice, are joined by the DCN (docs/network.md#dcn). Each host
has one egress and one ingress link resource (the profile's ``dcn.host_bandwidth`` each way), shared by its
``dcn.chips_per_host`` chips; the fabric between hosts is ASSUMED non-blocking, so a transfer is limited by its
sender's egress and its receiver's ingress only, and holds both for ``bytes / host_bandwidth`` (first come, first
served), then arrives ``dcn.latency`` later without holding either.

Every slice runs the same program, so one slice is simulated; under symmetric fidelity only representative chips
run, and each stands for its whole host: its host-mates run the same program at the same moments, so the fabric
issues their transfers beside the representative's on a host of its own, each mate's waiting for its own earlier
collectives under the overlap limit, and the representative's data is complete when the last mate's is (as a full
run's step waits for its slowest chip). The DCN peer of a chip is the same chip of the next slice (a ring over the
S slices); the host that chip sits on receives, at every moment, exactly the traffic this slice's host of the same
index receives, because the previous slice sends it at the same times. So a transfer to the next slice holds this
slice's host egress, and the transfer arriving from the previous slice this slice's host ingress, for the same
span: exact by symmetry. Slow chips or links (which break the symmetry) are not combined with
DCN axes.

Ring collectives over the S slices of a tensor of ``nbytes`` per chip (the whole tensor of one group):
reduce-scatter and all-gather take S - 1 steps of nbytes / S, all-reduce 2 (S - 1) (reduce-scatter then
all-gather). Reductions cost no time here (they run at HBM rate on the chip, far above a host's share of the DCN).
With h chips of a host in step together, each step's h transfers serialise on the host's links: the closed form
(``dcn_twin``) is launch + h d + (k - 1) max(h d, d + latency) + latency for k steps of d = (nbytes / S) /
host_bandwidth: the first step ends when the host has sent all h chunks, and each later step is paced by the
host's links (h d) or by one chip's own chunk and its latency (d + latency), whichever is longer.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass

import simpy

from tpusim.config import DcnSpec
from tpusim.engine.signals import run_events
from tpusim.errors import UserError
from tpusim.vocabulary import CollectiveOp

__all__ = ["DCN_OPS", "DcnFabric", "DcnRun", "dcn_steps", "dcn_twin", "simulate_dcn"]

DCN_OPS = (CollectiveOp.ALL_REDUCE, CollectiveOp.REDUCE_SCATTER, CollectiveOp.ALL_GATHER)
"""The collectives that run across slices (data-parallel gradients and fsdp weights)."""


def dcn_steps(op: CollectiveOp, slices: int) -> int:
    """Ring steps of ``op`` over ``slices`` slices: S - 1, or 2 (S - 1) for an all-reduce."""
    if op not in DCN_OPS:
        raise UserError(f"collective {op} does not run over DCN; valid: {', '.join(str(o) for o in DCN_OPS)}")
    if slices < 1:
        raise UserError(f"a DCN collective needs at least 1 slice, not {slices}")
    return (2 if op is CollectiveOp.ALL_REDUCE else 1) * (slices - 1)


def dcn_twin(dcn: DcnSpec, op: CollectiveOp, nbytes: float, slices: int, chips_per_host: int | None = None) -> float:
    """The uncontended time of ``op`` on a tensor of ``nbytes`` over ``slices`` slices, every chip of each host
    taking part at once (``chips_per_host``, default the profile's); see the module docstring."""
    steps = dcn_steps(op, slices)
    if steps == 0:
        return 0.0
    h = dcn.chips_per_host if chips_per_host is None else chips_per_host
    chunk = nbytes / slices / dcn.host_bandwidth
    return (dcn.launch_overhead + h * chunk + (steps - 1) * max(h * chunk, chunk + dcn.latency)
            + dcn.latency)


@dataclass(frozen=True)
class DcnRun:
    """A simulated DCN collective: when each chip's data was complete, and the host links' busy seconds."""

    done_s: tuple[float, ...]
    egress_busy_s: tuple[float, ...]
    ingress_busy_s: tuple[float, ...]

    @property
    def elapsed_s(self) -> float:
        """When the last chip's data was complete."""
        return max(self.done_s, default=0.0)


SpanHook = Callable[[int, float, float], None]
"""Called with a chip and the start and end of each of its DCN collectives."""


class DcnFabric:
    """The host links of one simulated slice, and the DCN collectives its chips run on them.

    Chips ``c`` share the host ``c // chips_per_host`` (an ASSUMPTION on which chips share a host: runs of
    consecutive chip ids; by the symmetry of a slice only how many share one matters when all run alike). With
    ``stand_in`` only representative chips run: each has a host of its own, on which its host-mates' identical
    transfers are issued with its own (module docstring).
    """

    def __init__(self, env: simpy.Environment, dcn: DcnSpec, slices: int, *, chips_per_host: int | None = None,
                 on_span: SpanHook | None = None, stand_in: bool = False) -> None:
        self.env = env
        self.dcn = dcn
        self.slices = slices
        self.per_host = dcn.chips_per_host if chips_per_host is None else chips_per_host
        self.on_span = on_span
        self.stand_in = stand_in
        self._links: dict[int, tuple[simpy.Resource, simpy.Resource]] = {}
        self.egress_busy: dict[int, float] = {}
        self.ingress_busy: dict[int, float] = {}

    def host_of(self, chip: int) -> int:
        """The host whose links ``chip`` uses (its own when it stands in for its host-mates)."""
        return chip if self.stand_in else chip // self.per_host

    def _host(self, host: int) -> tuple[simpy.Resource, simpy.Resource]:
        if host not in self._links:
            self._links[host] = (simpy.Resource(self.env, capacity=1), simpy.Resource(self.env, capacity=1))
            self.egress_busy[host] = self.ingress_busy[host] = 0.0
        return self._links[host]

    @property
    def mates(self) -> int:
        """Transfers a chip's collective issues on its host: its own, and its host-mates' where it stands in."""
        return self.per_host if self.stand_in else 1

    def collective(self, chip: int, op: CollectiveOp, nbytes: float,
                   after: Sequence[simpy.Event | None] | None = None) -> tuple[simpy.Event, list[simpy.Event]]:
        """Run ``op`` on ``chip``'s tensor of ``nbytes`` across the slices; the transfers of host-mate ``j`` start
        once ``after[j]`` (if given) has fired (``mates`` entries: a stand-in's mates each wait for their own
        earlier collectives). Returns an event that fires when the data of every mate is complete, and one per
        mate."""
        waits = list(after) if after is not None else [None] * self.mates
        if len(waits) != self.mates:
            raise ValueError(f"{len(waits)} events to wait for, for {self.mates} host-mates")
        spans: list[tuple[float, float]] = []
        runs = [self.env.process(self._run(chip, op, nbytes, wait, spans)) for wait in waits]
        done = simpy.AllOf(self.env, runs)
        if self.on_span is not None:
            hook = self.on_span
            # the chip's span is that of its last-finishing mate, as a full run's critical chip sees its own
            done.callbacks.append(lambda _: hook(chip, *max(spans, key=lambda span: span[1])))
        return done, list(runs)

    def _run(self, chip: int, op: CollectiveOp, nbytes: float, after: simpy.Event | None,
             spans: list[tuple[float, float]]) -> Generator[simpy.Event, object, None]:
        if after is not None:
            yield after
        start = self.env.now
        steps = dcn_steps(op, self.slices)
        if steps:
            yield self.env.process(self._ring(self.host_of(chip), steps, nbytes))
        spans.append((start, self.env.now))

    def _ring(self, host: int, steps: int, nbytes: float) -> Generator[simpy.Event, object, None]:
        egress, ingress = self._host(host)
        hold = nbytes / self.slices / self.dcn.host_bandwidth
        yield self.env.timeout(self.dcn.launch_overhead)
        for _ in range(steps):
            # to the same chip of the next slice: this host's egress; from the previous slice: this host's
            # ingress, loaded identically (the symmetry of the module docstring)
            with egress.request() as sending, ingress.request() as receiving:
                yield sending
                yield receiving
                yield self.env.timeout(hold)
                self.egress_busy[host] += hold
                self.ingress_busy[host] += hold
            yield self.env.timeout(self.dcn.latency)


def simulate_dcn(dcn: DcnSpec, op: CollectiveOp, nbytes: float, slices: int, chips: int,
                 chips_per_host: int | None = None, *, stand_in: bool = False) -> DcnRun:
    """Run ``op`` over ``slices`` slices for ``chips`` chips of one slice (hosts of ``chips_per_host`` chips,
    default the profile's), every chip starting at time 0, as a SimPy simulation of the host links; with
    ``stand_in`` the ``chips`` are representatives, each standing for its host."""
    dcn_steps(op, slices)
    h = dcn.chips_per_host if chips_per_host is None else chips_per_host
    if chips < 1 or (chips % h and not stand_in):
        raise UserError(f"{chips} chips do not fill whole hosts of {h} chips; valid: a multiple of {h}")
    env = simpy.Environment()
    done = [0.0] * chips

    def finished(chip: int, _: float, end: float) -> None:
        done[chip] = end

    fabric = DcnFabric(env, dcn, slices, chips_per_host=h, on_span=finished, stand_in=stand_in)
    for chip in range(chips):
        fabric.collective(chip, op, nbytes)
    run_events(env)
    hosts = sorted(fabric.egress_busy)
    return DcnRun(tuple(done), tuple(fabric.egress_busy[h] for h in hosts),
                  tuple(fabric.ingress_busy[h] for h in hosts))
