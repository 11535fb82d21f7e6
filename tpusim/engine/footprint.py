"""What a simulated run holds in memory, from measurements (docs/limits.md#memory-estimate).

A process that has loaded tpusim and its libraries holds ``BASE_BYTES`` (peak resident memory of ``tpusim list
hardware``: 48 MB). Above it:

- **a full-fidelity run** grows as chips^1.5 (rings lengthen with the mesh side): full-fidelity ``tpuv4`` steps
  of GPT-3 with the collective algorithm on 8x8, 16x16, 32x16 and 32x32 meshes peaked at 56, 82, 132 and 294 MB,
  7.5 kB x chips^1.5 above the base;
- **a collective** holds its merged per-link program, every transfer of every group that starts it together:
  ``tpusim collective`` all-gathers of 64 MB on ``tpuv4`` peaked 218 MB above the base for a 1024-chip line
  (1,047,552 transfers), 833 MB for a 2048-chip line (4,192,256), 110 MB for axis 0 of a 64x64 torus (516,096)
  and 804 MB for the 1024-chip line in 4 chunks (4,190,208): 192 to 214 bytes per transfer, charged at 215;
- **a run keeps a record of every event it processed** (the chips' compute spans, the collectives' spans, the op
  timelines, the events still queued) until its account is drawn up: full-fidelity ``tpuv4`` steps of a
  1024-wide 16-head decoder with ``--all-layers`` grew by 69 to 100 bytes per processed event (collective on 2x2
  and 4x4 meshes: 95 and 100; MeshSlice with 8 slices on 2x2 and 4x4: 75 and 69), charged at 100.

A step's data-parallel collectives run on every data-axis group at once (one per chip of a replica, whichever
fidelity), so a step is charged the transfers of its data axis's gradient reduce-scatter and weight all-gather
(an all-reduce under ZeRO 0 moves as many), both held at once.

**Wall time** is a property of the simulator on a reference machine, not of what it simulates. On this project's
2-core x86_64 machine (Python 3.11.7, shared with other work: load average about 6), full-fidelity ``tpuv4`` GeMMs
(SUMMA, MeshSlice, Cannon and the collective algorithm on 16x16 and 32x8 meshes) processed the events each chip
brings at about ``CHIP_EVENTS_PER_S`` a second and the link programs' wake-ups, each a numpy batch over every group
of a collective, at about ``LINK_EVENTS_PER_S``; a collective's transfers move at ``TRANSFERS_PER_S``
(``collective_transfers_per_s`` of benchmarks/README.md). docs/limits.md#cost-estimate lists the runs and how far
the estimate is from each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tpusim.limits import check_memory
from tpusim.topology import MeshMapping
from tpusim.topology.mapping import DATA_AXIS
from tpusim.vocabulary import CollectiveOp, Ring

__all__ = ["BASE_BYTES", "BYTES_PER_EVENT", "BYTES_PER_TRANSFER", "CHIP_EVENTS_PER_S", "CHIP_POWER",
           "FULL_BYTES_PER_CHIP_POWER", "LINK_EVENTS_PER_S", "ROOTED_OPS", "TRANSFERS_PER_S", "Estimate",
           "check_events_memory", "collective_transfers", "full_events", "full_fidelity_bytes", "step_footprint"]

BASE_BYTES = 48e6
FULL_BYTES_PER_CHIP_POWER = 7.5e3
CHIP_POWER = 1.5
BYTES_PER_TRANSFER = 215.0
BYTES_PER_EVENT = 100.0
CHIP_EVENTS_PER_S = 2.4e4
LINK_EVENTS_PER_S = 7e3
TRANSFERS_PER_S = 1.46e6
_RING_OPS = frozenset({CollectiveOp.ALL_GATHER, CollectiveOp.REDUCE_SCATTER, CollectiveOp.ALL_TO_ALL})
ROOTED_OPS = frozenset({CollectiveOp.BROADCAST, CollectiveOp.REDUCE})
"""Collectives that relay one message down the group (and may choose their own chunking)."""


def full_fidelity_bytes(chips: int) -> float:
    """The peak memory of a full-fidelity run on ``chips`` chips."""
    return BASE_BYTES + FULL_BYTES_PER_CHIP_POWER * math.pow(chips, CHIP_POWER)


def collective_transfers(op: CollectiveOp, chips: int, group: int, chunks: int, *, closed: bool, ring: Ring) -> int:
    """The transfers a collective of ``op`` makes over every group of ``group`` ranks among ``chips`` chips, each
    message in ``chunks`` chunks: a ring collective moves every rank's shard to every other rank (halves both ways
    on a closed bidirectional ring; an all-reduce is a reduce-scatter and an all-gather), a rooted one relays one
    message down the group, a point-to-point one sends one message per rank."""
    groups = chips // max(group, 1)
    both_ways = 2 if closed and ring is Ring.BIDIRECTIONAL else 1
    if op in _RING_OPS or op is CollectiveOp.ALL_REDUCE:
        per_group = group * (group - 1) * both_ways * (2 if op is CollectiveOp.ALL_REDUCE else 1)
    elif op in ROOTED_OPS:
        per_group = group - 1
    else:
        per_group = group
    return groups * per_group * chunks


def step_footprint(mapping: MeshMapping, full: bool) -> tuple[float, str]:
    """(peak bytes, what dominates) of simulating a step on ``mapping``, ``full`` at full fidelity: the larger
    of the full-fidelity run and the data axis's collectives (none without data parallelism)."""
    needed, what = BASE_BYTES, "a step"
    if full:
        needed, what = full_fidelity_bytes(mapping.num_chips), f"a full-fidelity step on {mapping.num_chips} chips"
    if mapping.data > 1:
        axis = mapping.axes[DATA_AXIS]
        # the reduce-scatter and the all-gather (or the all-reduce, as many transfers) on every group at once
        transfers = 2 * collective_transfers(CollectiveOp.ALL_GATHER, mapping.num_chips, axis.size, 1,
                                             closed=all(group.closed for group in axis.groups[:1]),
                                             ring=Ring.BIDIRECTIONAL)
        synchronised = BASE_BYTES + BYTES_PER_TRANSFER * transfers
        if synchronised > needed:
            needed, what = synchronised, (f"the data-parallel collectives of a step over {mapping.data} replicas "
                                          f"of {mapping.num_chips // mapping.data} chips ({transfers} transfers)")
    return needed, what


def check_events_memory(events: int, what: str, instead: str) -> None:
    """Refuse a run expected to process ``events`` events that this process cannot hold."""
    check_memory(int(BASE_BYTES + BYTES_PER_EVENT * events), f"{what} ({events} events)", instead)


@dataclass(frozen=True)
class Estimate:
    """What a run will cost before it starts: the events it will process (``link_events`` of them brought by link
    programs) and the link transfers counted apart (a collective's), with the wall time and peak memory they take
    on the reference machine (module docstring)."""

    events: int
    link_events: int = 0
    transfers: int = 0
    floor_bytes: float = BASE_BYTES
    """The peak memory the run needs whatever its events (``step_footprint``, ``full_fidelity_bytes``)."""
    runs_bytes: float = 0.0
    """Of several runs one after the other, the peak of the largest: each run's records go once it is accounted."""

    @property
    def wall_s(self) -> float:
        return ((self.events - self.link_events) / CHIP_EVENTS_PER_S + self.link_events / LINK_EVENTS_PER_S
                + self.transfers / TRANSFERS_PER_S)

    @property
    def peak_bytes(self) -> float:
        if self.runs_bytes:
            return self.runs_bytes
        return max(self.floor_bytes, BASE_BYTES + BYTES_PER_EVENT * self.events + BYTES_PER_TRANSFER * self.transfers)

    def __add__(self, other: Estimate) -> Estimate:
        """Two runs one after the other: their counts add, their memory is the larger peak."""
        return Estimate(self.events + other.events, self.link_events + other.link_events,
                        self.transfers + other.transfers, runs_bytes=max(self.peak_bytes, other.peak_bytes))

    def times(self, count: int) -> Estimate:
        """``count`` runs of this one, one after the other."""
        return Estimate(self.events * count, self.link_events * count, self.transfers * count,
                        runs_bytes=self.peak_bytes)


def full_events(one: int, two: int, links: tuple[int, int], chips: int, *, alike: bool,
                floor_bytes: float = BASE_BYTES) -> Estimate:
    """The events of a full-fidelity run of ``chips`` chips, from probes that ran one representative chip
    (``one`` events, ``links`` = (those of them brought by link programs, ``CountingEnvironment.link_events``;
    the link events had each group started its collectives apart, ``link_events_apart``)) and two (``two``).

    ``alike``: every chip runs an identically timed schedule and every group of an axis starts each collective at
    the same instant (where symmetric fidelity is exact). Each chip then adds what the second representative
    added, and the link programs, merged over the groups that start together, bring as many events as in the
    probe: the count is exact. Otherwise chips drift apart and the second probe says nothing about the full run;
    each chip is charged the probe's events other than the link programs', which are counted group by group."""
    merged, apart = links
    if alike:
        return Estimate(one + (two - one) * (chips - 1), merged, floor_bytes=floor_bytes)
    return Estimate(apart + (one - merged) * chips, apart, floor_bytes=floor_bytes)
